"""Self-test of a patched torch: `docker run --gpus all <image> selftest`.

Prints the torch version, the patch-set hash and the GPU, then checks, with the
routing in mode 'ours', that nn.Conv2d(groups=C) runs the patch set's kernels
(namespace at::native::dwconv) forward and backward, with results that match a
float64 CPU reference, and that a channels_last bf16 one reaches them too. (Mode
'auto' may send either to cuDNN where its table measured cuDNN faster.) Exits 1,
naming what is wrong, if any of that fails. `--overlay` tests stock torch with
the dwconv_overlay package loaded instead of a patched build.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

OUR_KERNELS = "at::native::dwconv::"


class SelfTestFailure(Exception):
    pass


def patch_set_hash(use_overlay: bool) -> str:
    if use_overlay:
        try:
            import dwconv_overlay
        except ImportError as err:
            raise SelfTestFailure(f"--overlay: dwconv_overlay does not load: {err}") from None
        return dwconv_overlay.PATCHSET_HASH
    try:
        from torch import _dwconv_patchset
    except ImportError:
        raise SelfTestFailure(
            "this torch carries no patch set (torch._dwconv_patchset is missing): it is not a "
            "`make build` wheel; use --overlay to test the overlay on stock torch"
        ) from None
    return _dwconv_patchset.PATCHSET_HASH


def cuda_kernel_names(fn) -> list[str]:
    """Names of the CUDA kernels that fn() launches, from the profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


@contextlib.contextmanager
def routing_mode(mode: str):
    """The routing in `mode` within, and back to what it was after."""
    import torch

    previous = torch.ops.dwconv.routing()
    torch.ops.dwconv.set_routing(mode)
    try:
        yield
    finally:
        torch.ops.dwconv.set_routing(previous)


def check_kernels_and_values() -> list[str]:
    """Run a depthwise nn.Conv2d forward and backward; return lines to report."""
    import torch

    torch.manual_seed(0)
    channels = 32
    conv = torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels, device="cuda")
    x = torch.randn(4, channels, 28, 28, device="cuda", requires_grad=True)
    grad = torch.randn(4, channels, 28, 28, device="cuda")
    # Stock torch sends fp32 NCHW depthwise work to its native kernels; in mode 'auto' the
    # routing may send this shape to cuDNN instead (the table is per device), so 'ours' is set.
    backend = torch._C._select_conv_backend(x, conv.weight, conv.bias, [1, 1], [1, 1], [1, 1], False, [0, 0], channels)
    out = None

    def forward():
        nonlocal out
        out = conv(x)

    def backward():
        out.backward(grad)

    lines = [f"upstream's conv backend for it: {backend}"]
    for what, fn in (("forward", forward), ("backward", backward)):
        with routing_mode("ours"):
            names = cuda_kernel_names(fn)
        ours = [n for n in names if OUR_KERNELS in n]
        if not ours:
            raise SelfTestFailure(f"routing 'ours': the {what} of nn.Conv2d(groups={channels}) ran none of our "
                                  "kernels; it ran: " + "; ".join(names))
        lines.append(f"{what}: {len(ours)} of our kernels ran ({', '.join(sorted({_short(n) for n in ours}))})")

    x64, w64, b64 = (t.detach().cpu().double().requires_grad_() for t in (x, conv.weight, conv.bias))
    ref = torch.nn.functional.conv2d(x64, w64, b64, padding=1, groups=channels)
    ref.backward(grad.cpu().double())
    for name, got, want in (("output", out, ref), ("grad input", x.grad, x64.grad),
                            ("grad weight", conv.weight.grad, w64.grad)):
        error = (got.detach().cpu().double() - want.detach()).abs().max().item()
        if error > 1e-3:
            raise SelfTestFailure(f"{name} differs from the float64 reference by {error:.3g}")
        lines.append(f"{name}: max abs error {error:.2e} against float64")
    return lines


def routing_state() -> str:
    """The routing's mode and where its table's measurements come from."""
    import torch
    try:
        return f"routing: {torch.ops.dwconv.routing()}; table measured on: {torch.ops.dwconv.routing_measured_on()}"
    except (AttributeError, RuntimeError):
        raise SelfTestFailure("the routing's operators (torch.ops.dwconv.routing) are missing: "
                              "this torch lacks DepthwiseConvRouting.cpp") from None


def check_channels_last_routing() -> str:
    """With routing 'ours', a channels_last bf16 depthwise nn.Conv2d must run our kernels both ways."""
    import torch

    channels = 64
    conv = torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels, device="cuda", dtype=torch.bfloat16)
    conv = conv.to(memory_format=torch.channels_last)
    x = torch.randn(4, channels, 28, 28, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last).requires_grad_()
    with routing_mode("ours"):
        names = cuda_kernel_names(lambda: conv(x).sum().backward())
    ours = sorted({_short(n) for n in names if OUR_KERNELS in n})
    if len(ours) < 2:
        raise SelfTestFailure("routing 'ours': a channels_last bf16 nn.Conv2d(groups=C) did not run our kernels "
                              "forward and backward; it ran: " + "; ".join(names))
    return f"routing 'ours', channels_last bf16: our kernels ran ({', '.join(ours)})"


def _short(kernel_name: str) -> str:
    """'void at::native::dwconv::tiled_nchw_kernel<float, ...>(...)' -> 'tiled_nchw_kernel'."""
    return kernel_name.split(OUR_KERNELS, 1)[1].split("<", 1)[0].split("(", 1)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--overlay", action="store_true", help="load dwconv_overlay into stock torch first")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError as err:
        print(f"selftest: FAIL: torch does not import: {err}", file=sys.stderr)
        return 1
    print(f"torch {torch.__version__} (commit {torch.version.git_version}), CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}")
    try:
        print(f"patch set {patch_set_hash(args.overlay)}" + (" (overlay)" if args.overlay else ""))
        print(routing_state())
        if not torch.cuda.is_available():
            raise SelfTestFailure("no CUDA device is visible: " + (
                "run it on a machine with an NVIDIA GPU" if args.overlay else "run the image with `docker run --gpus all`"))
        print(f"GPU: {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))})")
        for line in check_kernels_and_values():
            print(line)
        print(check_channels_last_routing())
    except SelfTestFailure as failure:
        print(f"selftest: FAIL: {failure}", file=sys.stderr)
        return 1
    print("selftest: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
