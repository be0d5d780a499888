"""Run in the pinned torch's environment (no GPU): the bench variants' argument mappings,
on the CPU in float64, against autograd of F.conv1d/F.conv2d, for a shrunken copy of every
kernel size, stride and bias of the layer sets. Prints one JSON line: check -> "pass" | message.

What runs here: the generic passes (what stock, native and routed call) and the cuDNN
variant's gradients, which are transposed convolutions that any backend computes. The
cuDNN forward op and our kernels need a GPU (tests/gpu)."""

import contextlib
import json
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from build_scripts.bench.layers import SETS, TRAINING_PASSES, Problem  # noqa: E402
from build_scripts.bench.variants import ConvArgs, cudnn_passes, cudnn_settings, generic_passes, make_buffers  # noqa: E402


def geometries():
    seen = {}
    for layers in SETS.values():
        for layer in layers:
            seen.setdefault((layer.kernel, layer.stride, layer.conv1d, layer.bias, layer.pad), layer)
    for layer in seen.values():
        for length in (9, 10):  # odd and even: stride 2 needs output_padding 0 or 1
            yield replace(layer, channels=3, length=length, name=f"{layer.name} shrunk to 3@{length}")


def reference(problem, buffers):
    x = buffers.x.detach().clone().requires_grad_()
    w = buffers.w.detach().clone().requires_grad_()
    b = None if buffers.b is None else buffers.b.detach().clone().requires_grad_()
    conv = F.conv1d if problem.layer.conv1d else F.conv2d
    a = ConvArgs.of(problem)
    out = conv(x, w, b, a.stride, a.padding, a.dilation, a.groups)
    out.backward(buffers.go)
    grads = (out.detach(), x.grad, w.grad) + ((b.grad,) if b is not None else ())
    return {"forward": grads[0], "backward_input": grads[1], "backward_weight": grads[2], "step": grads}


def same(got, want):
    if isinstance(want, tuple):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    return got.shape == want.shape and torch.allclose(got, want, rtol=1e-10, atol=1e-10)


def main():
    results = {}
    generator = torch.Generator().manual_seed(0)
    for layer in geometries():
        for layout in ("contiguous", "channels_last"):
            problem = Problem(layer, 2, "float64", layout, TRAINING_PASSES)
            buffers = make_buffers(problem, device="cpu", generator=generator)
            want = reference(problem, buffers)
            key = f"{layer.set} {layer.name} {layout}"
            if layout == "channels_last":
                x4 = ConvArgs.of(problem).as4d(buffers.x)
                results[f"layout/{key}"] = ("pass" if x4.is_contiguous(memory_format=torch.channels_last)
                                            and not x4.is_contiguous() else f"strides {x4.stride()}")
            for passname, fn in generic_passes(problem).items():
                results[f"generic/{passname}/{key}"] = "pass" if same(fn(buffers), want[passname]) else "mismatch"
            cudnn = cudnn_passes(problem)
            for passname in ("backward_input", "backward_weight"):
                try:
                    ok = same(cudnn[passname](buffers), want[passname])
                    results[f"cudnn/{passname}/{key}"] = "pass" if ok else "mismatch"
                except RuntimeError as err:
                    results[f"cudnn/{passname}/{key}"] = str(err).splitlines()[0]
    results.update(checks_on_cpu())
    results.update(cudnn_settings_checks())
    results.update(context_loss_checks())
    results.update(paths_off_checks())
    print(json.dumps(results))


def cudnn_settings_checks():
    """cudnn_settings sets the flags it names and no other, restores them after, and works once
    torch.testing._internal has frozen the flags (disable_global_flags), as in tests/gpu."""
    cudnn = torch.backends.cudnn

    def flags():
        return {"enabled": cudnn.enabled, "benchmark": cudnn.benchmark, "deterministic": cudnn.deterministic,
                "allow_tf32": cudnn.allow_tf32}

    results = {}
    for frozen in (False, True):
        if frozen:
            torch.backends.disable_global_flags()
        key = f"cudnn_settings/{'frozen' if frozen else 'unfrozen'}"
        before = flags()
        try:
            with cudnn_settings(allow_tf32=not before["allow_tf32"], deterministic=not before["deterministic"]):
                inside = flags()
        except RuntimeError as err:
            results[key] = str(err).splitlines()[0]
            continue
        want_inside = {**before, "allow_tf32": not before["allow_tf32"], "deterministic": not before["deterministic"]}
        after = flags()
        results[key] = ("pass" if inside == want_inside and after == before
                        else f"before {before}, inside {inside}, after {after}")
    return results


def checks_on_cpu():
    """The bench's float64 check (run.check) with the variants that run on a CPU, stock and native (the
    generic passes, overlay switching stood in for), and one whose weight gradient is 5 % off: every
    pass of the problem is checked, the training step's outputs included, and the off one fails."""
    import contextlib

    from build_scripts.bench import run

    class NoOverlay:
        def variant(self, name):
            return contextlib.nullcontext()

    real_passes_of = run.passes_of

    def with_an_off_variant(name, problem):
        if name != "off":
            return real_passes_of(name, problem)
        passes = real_passes_of("stock", problem)
        return {**passes, "backward_weight": lambda B: passes["backward_weight"](B) * 1.05}

    run.passes_of = with_an_off_variant
    results = {}
    try:
        for layer in geometries():
            for dtype in ("float32", "bfloat16"):
                problem = Problem(layer, 2, dtype, "contiguous", TRAINING_PASSES)
                checks = run.check(problem, NoOverlay(), ("stock", "native", "off"), device="cpu")
                key = f"check/{layer.set} {layer.name} {dtype}"
                expected_ok = {"stock": True, "native": True, "off": False}
                wrong = [v for v, c in checks.items() if c.get("ok") != expected_ok[v]
                         or sorted(c.get("error", {})) != sorted(TRAINING_PASSES)]
                off = checks["off"]["error"]
                same_as_stock = all(off[p] == checks["stock"]["error"][p] for p in TRAINING_PASSES if p != "backward_weight")
                results[key] = ("pass" if not wrong and off["backward_weight"] > 0.03 and same_as_stock
                                else f"{wrong}: {checks}")
    finally:
        run.passes_of = real_passes_of
    return results


class FakeProps:
    L2_cache_size, multi_processor_count, major, minor = 50 << 20, 132, 9, 0


def fake_overlay_module(paths=(), off=()):
    """What run_bench asks of dwconv_overlay: its patch set, kernel paths, the paths off and the table's origin."""
    return type("FakeModule", (), {
        "PATCHSET_HASH": "abc", "kernel_paths": staticmethod(lambda: list(paths)),
        "disabled_kernels": staticmethod(lambda: list(off)), "routing_measured_on": staticmethod(lambda: "nothing")})


@contextlib.contextmanager
def gpu_stand_ins(module, measure_problem, record_run_launches=lambda *args: None):
    """run_bench on the CPU: the overlay, the GPU's properties and rates, and each problem's measurement
    stood in for; everything put back after."""
    from build_scripts.bench import run
    real = {name: getattr(run, name) for name in ("import_overlay", "Overlay", "copy_bandwidth", "fma_rate",
                                                  "measure_problem", "record_run_launches")}
    real_cuda = {name: getattr(torch.cuda, name) for name in ("get_device_properties", "get_device_name")}
    run.import_overlay = lambda: module
    run.Overlay = lambda module: type("O", (), {"module": module})()
    run.copy_bandwidth = lambda: 3e9
    run.fma_rate = lambda: 25e9
    run.measure_problem = measure_problem
    run.record_run_launches = record_run_launches
    torch.cuda.get_device_properties = lambda index: FakeProps()
    torch.cuda.get_device_name = lambda index: "Synthetic GPU"
    try:
        yield
    finally:
        for name, value in real.items():
            setattr(run, name, value)
        for name, value in real_cuda.items():
            setattr(torch.cuda, name, value)


def context_loss_checks():
    """Where a variant's failure leaves the CUDA context unusable (CUDA's sticky errors: every later call
    of the process fails), the float64 check raises ContextLost naming it, and run_bench stops there with
    the problems before it whole, the lost one named in cut_short with the reason, and no launches
    recorded; a failure that leaves the context working is recorded and the check goes on. The GPU's
    state is stood in for: context_lost() answers as a lost context would once the crash has run."""
    from build_scripts.bench import run

    class NoOverlay:
        def variant(self, name):
            return contextlib.nullcontext()

    lost = []
    real = {name: getattr(run, name) for name in ("passes_of", "context_lost")}

    def passes_of(name, problem):
        passes = real["passes_of"]("stock", problem)
        if name in ("crash", "boom"):
            def fail(buffers, name=name):
                if name == "crash":
                    lost.append(True)
                raise RuntimeError("CUDA error: an illegal memory access was encountered" if name == "crash" else "boom")
            return {p: fail for p in passes}
        return passes

    results = {}
    layer = next(geometries())
    problem = Problem(layer, 2, "float32", "contiguous", TRAINING_PASSES)
    run.passes_of = passes_of
    try:
        # the real probe: a run on the CPU has no CUDA context to lose, whatever a variant raised
        checks = run.check(problem, NoOverlay(), ("stock", "crash", "native"), device="cpu")
        results["context/a run on the cpu has no context to lose"] = (
            "pass" if checks["crash"]["ok"] is False and "illegal memory access" in checks["crash"]["failed"]
            and checks["native"]["ok"] else str(checks))
        lost.clear()
        run.context_lost = lambda device="cuda": ("AcceleratorError: CUDA error: an illegal memory access was encountered"
                                                  if lost else None)
        checks = run.check(problem, NoOverlay(), ("stock", "boom", "native"), device="cpu")
        results["context/a failure that leaves the context goes on"] = (
            "pass" if checks["boom"] == {"failed": "RuntimeError: forward: boom", "ok": False}
            and checks["native"]["ok"] and checks["stock"]["ok"] else str(checks))
        try:
            run.check(problem, NoOverlay(), ("stock", "crash", "native"), device="cpu")
            results["context/a lost context stops the check"] = "no ContextLost raised"
        except run.ContextLost as err:
            results["context/a lost context stops the check"] = (
                "pass" if str(err).startswith("the CUDA context was lost: crash raised RuntimeError: forward: CUDA error: "
                                              "an illegal memory access") else str(err))
    finally:
        for name, value in real.items():
            setattr(run, name, value)

    # run_bench: the second of three problems loses the context
    measured_labels = []

    def measure_problem(problem, *args, **kwargs):
        measured_labels.append(problem.label)
        if len(measured_labels) == 2:
            raise run.ContextLost("ours", "RuntimeError: CUDA error: an illegal memory access", "AcceleratorError")
        return [{"set": problem.layer.set, "layer": problem.layer.name, "pass": "forward"}], {}

    recorded = []
    with gpu_stand_ins(fake_overlay_module(), measure_problem, lambda *args: recorded.append(True)), \
            tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "bench.json"
        report = run.run_bench(out, ["MobileNetV2"], "stock", configs_2d=(("float32", "contiguous"),), launches=True)
        written = json.loads(out.read_text())
    cut = report.get("cut_short", {})
    results["context/run_bench stops at a lost context"] = (
        "pass" if len(measured_labels) == 2 and len(report["rows"]) == 1 and written == report
        and cut.get("next") == measured_labels[1] and cut.get("problems_done") == 1
        and cut.get("reason", "").startswith(f"{measured_labels[1]}: the CUDA context was lost: ours raised")
        and not recorded else f"{measured_labels} {cut} {len(report['rows'])} recorded={recorded}")
    return results


def paths_off_checks():
    """A process with kernel paths off (DWCONV_DISABLE_KERNELS): run_bench records them (and every path the
    overlay has), its look-back leaves them out, and it refuses an ours-without-<path> of one before measuring anything."""
    from build_scripts.bench import run

    timed = []

    def measure_problem(problem, overlay, variants, *args, **kwargs):
        timed.append(variants)
        return [{"set": problem.layer.set, "layer": problem.layer.name, "pass": "forward"}], {}

    results = {}
    module = fake_overlay_module(paths=("row", "column", "pixel"), off=("column",))
    with gpu_stand_ins(module, measure_problem), tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "bench.json"
        report = run.run_bench(out, ["Mamba conv1d"], "stock,look-back", match="1536 L=2048 b8 bfloat16 contiguous")
        written = json.loads(out.read_text())
        results["paths_off/recorded, and look-back leaves them out"] = (
            "pass" if report["kernel_paths_off"] == ["column"] == written["kernel_paths_off"] and timed
            and written.get("kernel_paths") == ["row", "column", "pixel"]  # the overlay's, off or not
            and all(v == ("stock", "ours", "ours-without-row", "ours-without-pixel") for v in timed)
            and report["settings"]["variants"] == list(timed[0]) else f"{report.get('kernel_paths_off')} {timed}")
        timed.clear()
        try:
            run.run_bench(out, ["Mamba conv1d"], "ours,ours-without-pixel+column", match="1536 L=2048 b8 bfloat16 contiguous")
            results["paths_off/an ours-without of a path already off is refused"] = "not refused"
        except ValueError as err:
            results["paths_off/an ours-without of a path already off is refused"] = (
                "pass" if not timed and "'ours-without-pixel+column': column is already off in this process "
                "(DWCONV_DISABLE_KERNELS=column)" in str(err) else str(err))
    return results


if __name__ == "__main__":
    main()
