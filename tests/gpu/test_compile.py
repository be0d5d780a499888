"""GPU tests of torch.compile over depthwise layers with the overlay loaded.

A compiled graph holds aten::convolution and aten::convolution_backward (Inductor calls the first
as an extern kernel, with the bias peeled off, and the second as a fallback), so the routing's CUDA
kernels take the calls as in eager mode. What can differ is around them: the strides Inductor
asserts on each output are those fake tensors predict from upstream's backend choice, its graphs
may be replayed as CUDA graphs, and its shapes may be symbolic. With routing "ours" every compiled
step must run our kernels, forward and backward, and give eager's values in eager's layouts.

Run with `make test-gpu`.
"""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU tests need a CUDA device; there is none here", allow_module_level=True)

import torch._dynamo  # noqa: E402
import torch._inductor.config  # noqa: E402
import torch.profiler._utils  # noqa: E402
from torch.testing._internal.common_utils import (  # noqa: E402
    TestCase, instantiate_parametrized_tests, parametrize, run_tests,
)
from torch.utils._triton import has_triton  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conv_modules import (  # noqa: E402
    CUDNN_OPS, OUR_BACKWARD, OUR_FORWARD, OUR_KERNELS, depthwise_module, layout, make_input, train_step,
)
from overlay_loader import dwconv_overlay, routing  # noqa: E402
from profiling import op_names  # noqa: E402

# (module, input) makers: the layouts and dtypes the bench times, and Mamba's conv1d.
CASES = {
    "bf16_channels_last": lambda: _module_and_input(depthwise_module(dtype=torch.bfloat16), length=28),
    "fp32_nchw": lambda: _module_and_input(depthwise_module(dtype=torch.float32, channels_last=False),
                                           length=28, channels_last=False),
    "conv1d_bf16": lambda: _module_and_input(depthwise_module(conv1d=True, channels=256, kernel=4),
                                             length=512, channels_last=False),
}
TOLERANCE = {torch.bfloat16: 2e-2, torch.float32: 1e-4}


def _module_and_input(module, length, channels_last=True):
    return module, make_input(module, batch=4, length=length, channels_last=channels_last)


class TestCompile(TestCase):
    def setUp(self):
        dwconv_overlay.enable()
        torch._dynamo.reset()

    def tearDown(self):
        torch._dynamo.reset()

    def assert_compiled_step_runs_ours_as_eager(self, module, x, compiled, replayed=False, warm_up=0):
        """One compiled training step, after warm_up others, runs our kernels (a weight-gradient kernel
        and a forward or backward-input one) and gives eager's values in eager's layouts. A replayed
        CUDA graph calls no operator: there only its launch and the kernels' names show."""
        grad = torch.randn_like(module(x))
        with routing("ours"):
            eager = train_step(module, x, grad)
            for _ in range(warm_up):
                train_step(compiled, x, grad)
            names = op_names(lambda: train_step(compiled, x, grad))
            got = train_step(compiled, x, grad)
        ours = {name for name in names if OUR_KERNELS in name}
        self.assertTrue({name for name in ours if "grad_weight" in name}, f"no weight gradient of ours: {sorted(names)}")
        self.assertTrue({name for name in ours if "grad_weight" not in name}, f"no forward of ours: {sorted(names)}")
        if replayed:
            self.assertIn("cudaGraphLaunch", names)
            self.assertNotIn(OUR_FORWARD, names)  # the step ran as a graph, not through the dispatcher
        else:
            self.assertIn(OUR_FORWARD, names)
            self.assertIn(OUR_BACKWARD, names)
            self.assertFalse(names & CUDNN_OPS, f"cuDNN ran: {names & CUDNN_OPS}")
        tolerance = TOLERANCE[module.weight.dtype]
        for what, e, g in zip(("output", "grad_input", "grad_weight", "grad_bias"), eager, got):
            self.assertEqual(layout(g), layout(e), msg=f"{what}: compiled strides {g.stride()}, eager {e.stride()}")
            self.assertEqual(g, e, atol=tolerance, rtol=tolerance, msg=what)

    @parametrize("case", sorted(CASES))
    def test_aot_autograd_graph_runs_ours(self, case):
        """AOTAutograd's forward and backward graphs, run op by op (no strides asserted there: the
        Inductor cases hold ours to the fake tensors' layouts)."""
        module, x = CASES[case]()
        self.assert_compiled_step_runs_ours_as_eager(module, x, torch.compile(module, backend="aot_eager",
                                                                              fullgraph=True))

    @parametrize("case", ["bf16_channels_last", "conv1d_bf16"])
    def test_inductor_graph_runs_ours(self, case):
        """Inductor's code: the bias peeled off the forward, strides asserted on every output of ours."""
        if not has_triton():
            self.skipTest("Inductor needs Triton for CUDA code, and it is not installed here")
        module, x = CASES[case]()
        self.assert_compiled_step_runs_ours_as_eager(module, x, torch.compile(module, fullgraph=True))

    def test_inductor_layout_optimisation_runs_ours_in_channels_last(self):
        """Inductor's layout optimisation (here forced; by its own rule in a model whose convolutions
        are not all small) calls an fp32 NCHW module's convolution in channels_last: the configuration
        `make bench CONFIGS=coverage` measures for the routing."""
        if not has_triton():
            self.skipTest("Inductor needs Triton for CUDA code, and it is not installed here")
        module, x = CASES["fp32_nchw"]()
        with torch._inductor.config.patch(force_layout_optimization=True):
            self.assert_compiled_step_runs_ours_as_eager(module, x, torch.compile(module, fullgraph=True))

    def test_cuda_graph_replays_run_ours(self):
        """The cudagraphs backend records the step once warmed up and replays it from then on: our
        launches must be capturable (no synchronisation, no allocation outside torch's pools), and
        their replays must give eager's values."""
        torch.profiler._utils._init_for_cuda_graphs()  # the profiler started before any capture, as it must be
        module, x = CASES["bf16_channels_last"]()
        compiled = torch.compile(module, backend="cudagraphs")
        with torch._inductor.config.patch({"triton.cudagraph_or_error": True}):  # a skipped graph fails
            self.assert_compiled_step_runs_ours_as_eager(module, x, compiled, replayed=True, warm_up=3)

    def test_symbolic_batch_runs_ours_at_each_size(self):
        """One graph for every batch size (dynamic=True; a recompile fails the test): the routing and
        our kernels take sizes that are symbols at compile time."""
        module = depthwise_module(dtype=torch.float32, channels_last=False)
        compiled = torch.compile(module, backend="aot_eager", dynamic=True, fullgraph=True)
        for batch in (3, 5, 8):
            with self.subTest(batch=batch):
                x = make_input(module, batch=batch, length=20, channels_last=False)
                stance = "default" if batch == 3 else "fail_on_recompile"
                with torch.compiler.set_stance(stance):
                    self.assert_compiled_step_runs_ours_as_eager(module, x, compiled)


instantiate_parametrized_tests(TestCompile)

if __name__ == "__main__":
    run_tests()
