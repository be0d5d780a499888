"""Run inside an environment with the pinned torch installed (no GPU needed):
load the overlay from a staging directory and report, as JSON on stdout, which
aten ops have their kernel for each dispatch key registered by the overlay,
before loading, after loading, after disable() and after enable() again.

Usage: python load_probe.py <staging dir holding dwconv_overlay/> '{"CUDA": [ops], "Autograd": [ops]}'
Stdlib and torch only: it runs in the pinned torch's environment, not the harness's.
"""

import json
import sys
import warnings

OVERLAY_MARK = "RegisterOverlay.cpp"


def overlay_ops(torch, claimed):
    """Dispatch key -> the ops whose active kernel for it comes from the overlay's registration.
    (An op the overlay adds has no entry before it is loaded.)"""
    active = {}
    for key, ops in claimed.items():
        active[key] = []
        for op in ops:
            for line in torch._C._dispatch_dump(op).splitlines():
                head = line.split(":", 1)[0]  # e.g. "CUDA", "Autograd[alias]", "Autograd[alias] (inactive)"
                if head.split("[", 1)[0].strip() == key and "(inactive)" not in head and OVERLAY_MARK in line:
                    active[key].append(op)
    return active


def main() -> None:
    staging, claimed = sys.argv[1], json.loads(sys.argv[2])
    warnings.simplefilter("ignore")
    import torch

    report = {"torch": torch.__version__, "commit": torch.version.git_version,
              "before": overlay_ops(torch, claimed)}
    sys.path.insert(0, staging)
    import dwconv_overlay

    report["loaded"] = overlay_ops(torch, claimed)
    report["enabled_after_load"] = dwconv_overlay.enabled()
    dwconv_overlay.disable()
    report["disabled"] = overlay_ops(torch, claimed)
    dwconv_overlay.enable()
    report["enabled_again"] = overlay_ops(torch, claimed)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
