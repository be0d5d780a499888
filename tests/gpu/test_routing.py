"""GPU tests of the routing: which kernels nn.Conv1d/nn.Conv2d run with the overlay loaded.

aten::convolution and aten::convolution_backward have the patch set's CUDA kernels
(DepthwiseConvRouting.cpp). With routing "ours" every depthwise call they can take must run
our kernels, forward and backward, and give stock's results in stock's memory format; other
convolutions must still run cuDNN; cudnn.enabled=False and deterministic mode must behave
as upstream documents. With routing "auto" (the default) the measured table decides: a
layer the table says ours is faster on must run ours, and one it says cuDNN is faster on must not.

Run with `make test-gpu`; the rule itself is tested on the CPU (tests/test_routing_rule.py).
"""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch 2.11.0+cu130, which is not installed here")
if not torch.cuda.is_available():
    pytest.skip("the GPU tests need a CUDA device; there is none here", allow_module_level=True)

from torch.testing._internal.common_utils import (  # noqa: E402
    DeterministicGuard, TestCase, instantiate_parametrized_tests, parametrize, run_tests,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_scripts.bench.variants import cudnn_settings  # noqa: E402
from conv_modules import (  # noqa: E402
    CUDNN_OPS, OUR_BACKWARD, OUR_FORWARD, depthwise_module, layout, make_input, train_step,
)
from overlay_loader import dwconv_overlay, routing, stock_kernels  # noqa: E402
from profiling import op_names  # noqa: E402
import kernel_cases  # noqa: E402


def without_tf32():
    """cuDNN in full float32 (the cuDNN route's own setting), so that stock's cuDNN calls compare exactly."""
    return cudnn_settings(allow_tf32=False)


class TestRouting(TestCase):
    def setUp(self):
        dwconv_overlay.enable()

    def test_routing_ours_runs_our_kernels_forward_and_backward(self):
        module = depthwise_module()
        x = make_input(module)
        with routing("ours"):
            names = op_names(lambda: train_step(module, x))
        self.assertIn(OUR_FORWARD, names)
        self.assertIn(OUR_BACKWARD, names)
        self.assertFalse(names & CUDNN_OPS, f"cuDNN ran: {names & CUDNN_OPS}")

    def test_routing_auto_follows_the_measured_table(self):
        """Two layers the table holds, bf16 channels_last at batch 64: RepLKNet's 256@28 k29, where
        ours measured about 10x faster on every pass, runs ours throughout; MobileNetV2's 32@112,
        whose forward cuDNN ran in 70 % of our time, keeps cuDNN's forward."""
        measured_on = dwconv_overlay.routing_measured_on()
        if measured_on.startswith("nothing yet"):
            self.skipTest("the routing table is not measured yet: run `make bench`, then `make routing-table`")
        props = torch.cuda.get_device_properties(0)
        if not measured_on.endswith(f"(sm_{props.major}{props.minor})"):
            self.skipTest(f"the routing table was measured on {measured_on}, this GPU is sm_{props.major}{props.minor}: "
                          "auto keeps upstream's choice here (measure it: `make bench`, then `make routing-table`)")
        large = depthwise_module(channels=256, kernel=29)
        with routing("auto"):
            names = op_names(lambda: train_step(large, make_input(large, batch=64, length=28)))
            words = dwconv_overlay.explain_routing(make_input(large, batch=64, length=28), large.weight, large.bias,
                                                   large.stride, large.padding, large.dilation, large.groups)
        self.assertIn("\nforward: ours: as the nearest measured, RepLKNet-31B 256@28 k29 batch 64", words)
        self.assertIn(OUR_FORWARD, names, f"table measured on {measured_on}")
        self.assertIn(OUR_BACKWARD, names, f"table measured on {measured_on}")
        self.assertFalse(names & CUDNN_OPS, f"cuDNN ran: {names & CUDNN_OPS}")
        small = depthwise_module(channels=32, kernel=3)
        with routing("auto"):
            names = op_names(lambda: train_step(small, make_input(small, batch=64, length=112)))
        self.assertIn("aten::cudnn_convolution", names, f"table measured on {measured_on}")
        self.assertNotIn(OUR_FORWARD, names)

    def test_a_loaded_table_routes_auto_on_this_gpu(self):
        """A table file measured on this kind of GPU (`make routing-table TABLE=<file>`) takes over from
        the built-in one with no rebuild: bf16 channels_last 32@112 runs its forward and weight
        gradient in ours by the file, and goes back to the built-in table's cuDNN forward without it."""
        import tempfile
        from build_scripts.routing_table import RUNTIME_FORMAT
        props = torch.cuda.get_device_properties(0)
        elements = 64 * 32 * 112 * 112
        points = [f"point\t{name}\tbfloat16\tchannels_last\t3\t3\t1\t1\t{elements}\t{112 * 112}\t{route}\ttest {name}"
                  for name, route in (("forward", "ours"), ("backward_input", "upstream"), ("backward_weight", "ours"))]
        text = "\n".join([RUNTIME_FORMAT, "measured_on\tthis test", f"measured_arch\t{props.major}{props.minor}",
                          *points]) + "\n"
        module = depthwise_module(channels=32, kernel=3)
        x = make_input(module, batch=64, length=112)
        with tempfile.NamedTemporaryFile("w", suffix=".tsv") as table:
            table.write(text)
            table.flush()
            dwconv_overlay.load_routing_table(table.name)
            try:
                self.assertTrue(dwconv_overlay.routing_measured_on().endswith(f", loaded from {table.name}"))
                with routing("auto"):
                    names = op_names(lambda: train_step(module, x))
            finally:
                dwconv_overlay.load_routing_table(None)
        self.assertIn(OUR_FORWARD, names)
        self.assertIn(OUR_BACKWARD, names)  # the weight gradient; upstream (cuDNN) computes grad_input
        self.assertNotIn("aten::cudnn_convolution", names)
        self.assertNotIn("loaded from", dwconv_overlay.routing_measured_on())
        measured_on = dwconv_overlay.routing_measured_on()
        if measured_on.endswith(f"(sm_{props.major}{props.minor})"):  # the built-in table: cuDNN's forward here
            with routing("auto"):
                names = op_names(lambda: train_step(module, x))
            self.assertIn("aten::cudnn_convolution", names)
            self.assertNotIn(OUR_FORWARD, names)

    def test_routing_upstream_is_stock_behaviour(self):
        module = depthwise_module()
        x = make_input(module)
        with routing("upstream"):
            names = op_names(lambda: train_step(module, x))
        self.assertIn("aten::cudnn_convolution", names)
        self.assertNotIn(OUR_BACKWARD, names)

    @parametrize("dtype", [torch.bfloat16, torch.float16])
    def test_a_non_depthwise_convolution_still_runs_cudnn(self, dtype):
        module = torch.nn.Conv2d(64, 64, 3, padding=1).to(device="cuda", dtype=dtype, memory_format=torch.channels_last)
        x = make_input(depthwise_module(dtype=dtype))
        with routing("ours"):
            names = op_names(lambda: train_step(module, x))
        self.assertIn("aten::cudnn_convolution", names)
        self.assertFalse({OUR_FORWARD, OUR_BACKWARD} & names)

    def test_cudnn_disabled_leaves_upstreams_choice(self):
        module = depthwise_module()
        x = make_input(module)
        with routing("ours"), torch.backends.cudnn.flags(enabled=False):
            names = op_names(lambda: train_step(module, x))
            out, grad_input, *_ = train_step(module, x)
        self.assertFalse(names & CUDNN_OPS)
        # upstream's native path: the input made contiguous for the forward, so the output is NCHW;
        # its backward stub gets the channels_last input as it is and gives grad_input contiguous
        with stock_kernels(), torch.backends.cudnn.flags(enabled=False):
            stock_out, stock_grad_input, *_ = train_step(module, x)
        self.assertEqual(out.is_contiguous(), stock_out.is_contiguous())
        self.assertEqual(layout(grad_input), layout(stock_grad_input))
        self.assertEqual(out, stock_out, atol=2e-2, rtol=2e-2)

    def test_a_weight_without_out_channels_gets_upstreams_error(self):
        """nn.Conv2d(C, 0, k, groups=C) builds (0 is a multiple of C); its call is upstream's to refuse."""
        module = torch.nn.Conv2d(8, 0, 3, groups=8, bias=False).to(device="cuda")
        x = torch.randn(2, 8, 10, 10, device="cuda")
        with stock_kernels(), self.assertRaisesRegex(RuntimeError, "expected weight to be at least 8") as stock:
            module(x)
        with routing("ours"), self.assertRaisesRegex(RuntimeError, "expected weight to be at least 8") as ours:
            module(x)
        self.assertEqual(str(ours.exception), str(stock.exception))

    def test_deterministic_mode_gives_bitwise_equal_weight_gradients(self):
        module = depthwise_module(channels=96, kernel=7)
        x = make_input(module, batch=16, length=56)
        grad = torch.randn(16, 96, 56, 56, device="cuda", dtype=torch.bfloat16).contiguous(
            memory_format=torch.channels_last)
        with routing("ours"), DeterministicGuard(True):
            self.assert_weight_gradients_repeat(module, x, grad)

    def test_the_cudnn_route_gives_the_same_bits_every_run_as_stock_does(self):
        """Where the cuDNN route stands in for upstream's native kernel (fp32 NCHW), stock's weight
        gradient is the same every run without deterministic mode asked for, so the route asks cuDNN
        for deterministic algorithms itself. With cudnn.benchmark on, cuDNN times every algorithm it
        is allowed and takes the fastest: those that sum the weight gradient with atomics (often the
        fastest on a reduction this long) are in that race unless the route excludes them."""
        module = depthwise_module(channels=96, kernel=3, dtype=torch.float32, channels_last=False)
        x = make_input(module, batch=64, length=56, channels_last=False)
        grad = torch.randn(64, 96, 56, 56, device="cuda")
        with routing("cudnn"), cudnn_settings(benchmark=True, deterministic=False):
            self.assertIn("aten::cudnn_convolution", op_names(lambda: train_step(module, x)))
            self.assert_weight_gradients_repeat(module, x, grad, runs=5)

    def assert_weight_gradients_repeat(self, module, x, grad, runs=3):
        """The weight gradient of `runs` backward passes, bit for bit the same."""
        grads = []
        for _ in range(runs):
            module.weight.grad = None
            module(x).backward(grad)
            grads.append(module.weight.grad.clone())
        for g in grads[1:]:
            self.assertTrue(torch.equal(g, grads[0]))

    @parametrize("where", ["input_on_cuda", "weight_on_cuda"])
    def test_tensors_on_two_devices_get_stocks_error(self, where):
        """The routing's CUDA kernel of convolution runs without torchgen's device check (stock's
        composite kernel has none): a mix gets the message of stock's own check."""
        x = torch.randn(2, 8, 10, 10, device="cuda" if where == "input_on_cuda" else "cpu")
        w = torch.randn(8, 1, 3, 3, device="cpu" if where == "input_on_cuda" else "cuda")
        with stock_kernels(), self.assertRaises(RuntimeError) as stock:
            torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 8)
        with routing("ours"), self.assertRaises(RuntimeError) as ours:
            torch.nn.functional.conv2d(x, w, None, 1, 1, 1, 8)
        self.assertEqual(str(ours.exception).splitlines()[0], str(stock.exception).splitlines()[0])

    def test_a_traced_graph_holds_upstreams_convolution(self):
        """torch.jit.trace records what upstream's convolution calls (aten::_convolution): a call made
        while it records goes to upstream, so the graph is stock's (and CUDA-independent)."""
        module = depthwise_module(dtype=torch.float32, channels_last=False)
        x = make_input(module, channels_last=False)
        with routing("ours"):
            traced = torch.jit.trace(module, x)
            kinds = {node.kind() for node in traced.graph.nodes()}
            self.assertEqual(traced(x), module(x), atol=1e-4, rtol=1e-4)
        self.assertIn("aten::_convolution", kinds)
        self.assertFalse({"aten::_conv_depthwise2d", "aten::cudnn_convolution"} & kinds, kinds)

    def test_a_parameter_list_upstream_refuses_gets_its_error(self):
        x = torch.randn(2, 8, 10, 10, device="cuda")
        w = torch.randn(8, 1, 3, 3, device="cuda")
        args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [], 8)  # an empty output_padding
        with stock_kernels(), self.assertRaisesRegex(RuntimeError, "output_padding") as stock:
            torch.ops.aten.convolution(*args)
        with routing("ours"), self.assertRaisesRegex(RuntimeError, "output_padding") as ours:
            torch.ops.aten.convolution(*args)
        self.assertEqual(str(ours.exception).splitlines()[0], str(stock.exception).splitlines()[0])

    def test_padding_valid_is_routed(self):
        """F.conv2d(padding="valid") passes padding as one value beside a stride of two: each list
        is expanded on its own, as upstream does, and the call is ours to take."""
        module = torch.nn.Conv2d(64, 64, 3, padding="valid", groups=64).to(device="cuda")
        x = torch.randn(4, 64, 28, 28, device="cuda")
        with routing("ours"):
            names = op_names(lambda: train_step(module, x))
            out = module(x)
        self.assertIn(OUR_FORWARD, names)
        with stock_kernels():
            self.assertEqual(out, module(x), atol=1e-4, rtol=1e-4)

    def test_a_biased_layers_bias_gradient_takes_no_pass_of_its_own(self):
        """Ours: the weight-gradient kernel sums grad_output for the bias as it reads it, so a training
        step launches no reduction; stock sums it in a reduction of its own. The cases
        (kernel_cases.BIASED_LAYER_CASES, checked against the host code's choice on a CPU) take four
        weight-gradient kernels: the window, the channels_last tiles, the general NCHW and the register
        tiles. (The ring's bias row runs in the kernel-choice table's 7x7 stride-2 row and the sanitizer
        subset, both with a bias.)"""
        for dtype, conv1d, call, weight_kernel in kernel_cases.BIASED_LAYER_CASES:
            with self.subTest(call.label):
                module = depthwise_module(conv1d=conv1d, channels=call.c, kernel=call.kernel[1],
                                          dtype=getattr(torch, dtype), channels_last=call.layout == "cl")
                x = make_input(module, batch=call.n, length=call.size[1], channels_last=call.layout == "cl")
                with routing("ours"):
                    ours = op_names(lambda: train_step(module, x))
                with stock_kernels():
                    stock = op_names(lambda: train_step(module, x))
                self.assertIn(OUR_BACKWARD, ours)
                self.assertTrue(any(weight_kernel in n for n in ours), f"{weight_kernel} not among {ours}")
                self.assertEqual({n for n in ours if "reduce_kernel" in n}, set())
                self.assertTrue(any("reduce_kernel" in n for n in stock), "stock's bias gradient is no longer a sum")

    def test_autograd_is_unchanged(self):
        module = depthwise_module()
        with routing("ours"):
            out = module(make_input(module).requires_grad_())
        self.assertEqual(out.grad_fn.name(), "ConvolutionBackward0")

    @parametrize("case", ["conv2d_cl_bf16", "conv2d_nchw_fp32", "conv2d_cl_fp16_s2", "conv2d_k5_m2",
                          "conv2d_nobias_fp64", "conv1d_bf16", "conv1d_transposed_bf16", "conv2d_frozen_weight",
                          "conv2d_cl_weight_nchw_input_fp32"])
    def test_routed_results_and_layouts_match_stock(self, case):
        kwargs = {
            "conv2d_cl_bf16": {},
            "conv2d_nchw_fp32": {"dtype": torch.float32, "channels_last": False},
            "conv2d_cl_fp16_s2": {"dtype": torch.float16, "stride": 2},
            "conv2d_k5_m2": {"kernel": 5, "multiplier": 2, "dtype": torch.float32},
            "conv2d_nobias_fp64": {"bias": False, "dtype": torch.float64},
            "conv1d_bf16": {"conv1d": True, "kernel": 4, "channels_last": False},
            "conv1d_transposed_bf16": {"conv1d": True, "kernel": 4},
            "conv2d_frozen_weight": {"dtype": torch.float32},
            "conv2d_cl_weight_nchw_input_fp32": {"dtype": torch.float32, "input_channels_last": False},
        }[case]
        input_channels_last = kwargs.pop("input_channels_last", kwargs.get("channels_last", True))
        module = depthwise_module(**kwargs)
        if case == "conv2d_frozen_weight":
            module.weight.requires_grad_(False)
        names = self.check_routed_against_stock("ours", module, make_input(module, channels_last=input_channels_last))
        self.assertIn(OUR_FORWARD, names)
        self.assertIn(OUR_BACKWARD, names)

    @parametrize("case", ["conv2d_nchw_fp32", "conv2d_nchw_fp32_s2_nobias", "conv1d_fp32",
                          "conv1d_transposed_fp32_frozen_weight", "conv2d_cl_bf16"])
    def test_routing_cudnn_runs_cudnn_as_upstream_would(self, case):
        """The cuDNN route (the table's where upstream would run its native kernel and cuDNN beat
        ours; every eligible call in mode cudnn): cuDNN's forward and gradients, none of ours, the
        results and layouts of stock (fp32 exactly as far as TF32 goes: the route turns it off)."""
        kwargs = {
            "conv2d_nchw_fp32": {"dtype": torch.float32, "channels_last": False},
            "conv2d_nchw_fp32_s2_nobias": {"dtype": torch.float32, "channels_last": False, "stride": 2, "bias": False},
            "conv1d_fp32": {"conv1d": True, "kernel": 4, "dtype": torch.float32, "channels_last": False},
            # grad_input alone, from a (B, L, D) projection transposed: stock's contiguous layout
            "conv1d_transposed_fp32_frozen_weight": {"conv1d": True, "kernel": 4, "dtype": torch.float32},
            "conv2d_cl_bf16": {},
        }[case]
        module = depthwise_module(**kwargs)
        if case.endswith("frozen_weight"):
            module.weight.requires_grad_(False)
        names = self.check_routed_against_stock("cudnn", module,
                                                make_input(module, channels_last=kwargs.get("channels_last", True)))
        self.assertIn("aten::cudnn_convolution", names)
        self.assertFalse({OUR_FORWARD, OUR_BACKWARD} & names, names)
        if module.bias is not None:
            self.assertTrue(any("reduce_kernel" in n for n in names), "the bias gradient is not a sum")

    def check_routed_against_stock(self, mode, module, x):
        """A training step routed in `mode` against stock's: the output and every gradient equal
        within the dtype's tolerance and in stock's memory format. Returns what the routed step ran."""
        grad = None

        def run():
            nonlocal grad
            module.zero_grad(set_to_none=True)
            xx = x.detach().requires_grad_()
            out = module(xx)
            if grad is None:
                grad = torch.randn_like(out)
            out.backward(grad)
            return out, xx.grad, module.weight.grad, None if module.bias is None else module.bias.grad

        with routing(mode), without_tf32():
            names = op_names(run)
            routed = run()
        with stock_kernels(), without_tf32():
            stock = run()
        tolerance = {torch.bfloat16: 3e-2, torch.float16: 3e-3, torch.float32: 1e-4, torch.float64: 1e-10}[x.dtype]
        for got, want in zip(routed, stock):
            if want is None:
                self.assertIsNone(got)
                continue
            self.assertEqual(layout(got), layout(want), msg="the memory format differs from stock's")
            self.assertEqual(got, want, atol=tolerance * max(1.0, want.abs().max().item()), rtol=tolerance)
        return names


instantiate_parametrized_tests(TestRouting)

if __name__ == "__main__":
    run_tests()
