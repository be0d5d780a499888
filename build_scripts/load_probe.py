"""Run inside an environment with the pinned torch installed (no GPU needed):
load the overlay from a staging directory and report, as JSON on stdout, which
aten ops have their CUDA kernel registered by the overlay, before loading, after
loading, after disable() and after enable() again.

Usage: python load_probe.py <staging dir holding dwconv_overlay/> <op> [<op> ...]
Stdlib and torch only: it runs in the pinned torch's environment, not the harness's.
"""

import json
import sys
import warnings

OVERLAY_MARK = "RegisterOverlay.cpp"


def overlay_ops(torch, ops):
    """The ops whose active CUDA kernel comes from the overlay's registration."""
    active = []
    for op in ops:
        for line in torch._C._dispatch_dump(op).splitlines():
            if line.startswith("CUDA:") and OVERLAY_MARK in line:
                active.append(op)
    return active


def main() -> None:
    staging, ops = sys.argv[1], sys.argv[2:]
    warnings.simplefilter("ignore")
    import torch

    report = {"torch": torch.__version__, "commit": torch.version.git_version,
              "before": overlay_ops(torch, ops)}
    sys.path.insert(0, staging)
    import dwconv_overlay

    report["loaded"] = overlay_ops(torch, ops)
    report["enabled_after_load"] = dwconv_overlay.enabled()
    dwconv_overlay.disable()
    report["disabled"] = overlay_ops(torch, ops)
    dwconv_overlay.enable()
    report["enabled_again"] = overlay_ops(torch, ops)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
