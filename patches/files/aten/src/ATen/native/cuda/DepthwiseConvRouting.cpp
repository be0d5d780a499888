// The CUDA kernels of aten::convolution and aten::convolution_backward
// (native_functions_overrides/native_functions/routing.yaml): they send the depthwise
// convolutions our kernels are measured to run faster to them, those where upstream would run
// its native depthwise kernel (ours, once patched) and cuDNN was measured faster to cuDNN,
// called as upstream's cuDNN backend calls it, and everything else to upstream's
// implementation (at::native::convolution / convolution_backward), unchanged.
//
// Upstream hands every channels_last depthwise convolution, and many fp16 ones, to cuDNN;
// the rule that takes them back lives in DepthwiseConvRouting.h (plain logic) and its
// measurements in DepthwiseConvRoutingTable.h (generated from `make bench`).
// - Autograd is untouched: these are the CUDA kernels below the Autograd ones.
// - torch.backends.cudnn.enabled=False: upstream decides (its native depthwise kernel,
//   which is ours in the patched build and under the overlay).
// - torch.use_deterministic_algorithms(True): our kernels are deterministic, and so is cuDNN where
//   it stands in for upstream's native kernel (see cudnn_flags).
// - torch.jit.trace records what upstream's convolution calls (aten::_convolution): a call made
//   while the tracer records goes to upstream, so traced graphs and TorchScript ONNX export are
//   stock's.
// - DWCONV_ROUTING=ours|cudnn|upstream (read once), or torch.ops.dwconv.set_routing(
//   "ours"|"cudnn"|"upstream"|"auto") (registered here, so a patched build and the overlay both
//   have it), overrides the measurements.
// - The measurements hold on GPUs of the kind they were taken on (kMeasuredArch): on another,
//   "auto" keeps upstream's choice (mode_on_gpu).
// - DWCONV_ROUTING_TABLE=<file> (read once), or torch.ops.dwconv.load_routing_table(<file>), routes
//   "auto" by a table measured elsewhere (`make routing-table TABLE=<file>`) in place of the
//   compiled-in one; load_routing_table("") goes back to it.
// - The backward our kernels take runs as dwconv::conv_depthwise2d_backward, which also returns
//   the bias gradient: summed by our weight-gradient kernel where that runs, so a biased layer's
//   step reads grad_output once less than upstream's (which sums it in a pass of its own).

#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/Context.h>
#include <ATen/TracerMode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/cuda/DepthwiseConvRouting.h>
#include <ATen/native/cuda/DepthwiseConvRoutingTable.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#ifndef AT_PER_OPERATOR_HEADERS
#include <ATen/Functions.h>
#include <ATen/NativeFunctions.h>
#else
#include <ATen/ops/_conv_depthwise2d.h>
#include <ATen/ops/convolution_backward_native.h>
#include <ATen/ops/cudnn_convolution.h>
#include <ATen/ops/convolution_native.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

namespace at::native {
namespace {

using namespace dwconv::routing;

// The process's routing mode: DWCONV_ROUTING's, read once, until set_routing chooses another. A
// DWCONV_ROUTING that names no mode fails every routed call, saying so, until set_routing does.
class RoutingMode {
 public:
  RoutingMode() {
    const char* text = std::getenv("DWCONV_ROUTING");
    Mode parsed = Mode::Auto;
    if (text == nullptr || *text == '\0' || parse_mode(text, &parsed)) {
      mode_.store(parsed);
    } else {
      invalid_environment_ = text;
      environment_invalid_.store(true);
    }
  }

  Mode get() const {
    TORCH_CHECK(!environment_invalid_.load(), "DWCONV_ROUTING must be auto, ours, cudnn or upstream, got '",
                invalid_environment_, "' (torch.ops.dwconv.set_routing sets the mode in this process)");
    return mode_.load();
  }

  void set(Mode mode) {
    mode_.store(mode);
    environment_invalid_.store(false);
  }

 private:
  std::atomic<Mode> mode_{Mode::Auto};
  std::atomic<bool> environment_invalid_{false};
  std::string invalid_environment_;  // written before any reader runs (a function-local static's constructor)
};

RoutingMode& current_mode() {
  static RoutingMode mode;
  return mode;
}

// DepthwiseConvRoutingTable.h's points, as a table.
std::shared_ptr<const RoutingTable> compiled_in_table() {
  static const std::shared_ptr<const RoutingTable> table = [] {
    auto built_in = std::make_shared<RoutingTable>();
    built_in->source = "built in";
    built_in->measured_on = kMeasuredOn;
    built_in->measured_arch = kMeasuredArch;
    built_in->points.assign(kMeasuredPoints.begin(), kMeasuredPoints.end());
    return std::shared_ptr<const RoutingTable>(std::move(built_in));
  }();
  return table;
}

// The table a file holds, or an error naming the file and what is wrong with it.
std::shared_ptr<const RoutingTable> read_table_file(const std::string& path, std::string* error) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    *error = "the routing table " + path + " is a directory, not a file";
    return nullptr;
  }
  std::ifstream file(path);
  if (!file) {
    *error = "cannot open the routing table " + path;
    return nullptr;
  }
  std::string why;
  std::unique_ptr<RoutingTable> table = parse_routing_table(file, path, &why);
  if (table == nullptr) *error = "the routing table " + path + " is malformed: " + why;
  return std::shared_ptr<const RoutingTable>(std::move(table));
}

// The measurements "auto" routes by: the compiled-in table, or the one DWCONV_ROUTING_TABLE names
// (read at first use), until load_routing_table loads another or ("") goes back. A
// DWCONV_ROUTING_TABLE that cannot be read fails every call "auto" routes, saying why, until
// load_routing_table succeeds: never a silent fallback to a table the user did not ask for. Read
// under a lock (a table loaded while another thread routes is never seen half-made) in "auto" only.
class ActiveTable {
 public:
  ActiveTable() : table_(compiled_in_table()) {
    const char* path = std::getenv("DWCONV_ROUTING_TABLE");
    if (path == nullptr || *path == '\0') return;
    std::string why;
    if (auto loaded = read_table_file(path, &why)) {
      table_ = std::move(loaded);
    } else {
      error_ = "DWCONV_ROUTING_TABLE: " + why +
               " (torch.ops.dwconv.load_routing_table loads another in this process, \"\" the built-in one)";
    }
  }

  std::shared_ptr<const RoutingTable> get() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(error_.empty(), error_);
    return table_;
  }

  // A table that cannot be read is refused, and the table in use stays.
  void load(const std::string& path) {
    std::shared_ptr<const RoutingTable> table = compiled_in_table();
    if (!path.empty()) {
      std::string why;
      table = read_table_file(path, &why);
      TORCH_CHECK(table != nullptr, "dwconv.load_routing_table: ", why);
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    table_ = std::move(table);
    error_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const RoutingTable> table_;
  std::string error_;
};

ActiveTable& active_table() {
  static ActiveTable table;
  return table;
}

DType dtype_of(ScalarType t) {
  switch (t) {
    case kDouble:
      return DType::Float64;
    case kFloat:
      return DType::Float32;
    case kHalf:
      return DType::Float16;
    case kBFloat16:
      return DType::BFloat16;
    default:
      return DType::Other;
  }
}

Layout layout_of(const Tensor& t) {
  return t.suggest_memory_format() == MemoryFormat::ChannelsLast ? Layout::ChannelsLast : Layout::Contiguous;
}

bool strided_on_one_device(const Tensor& input, const Tensor& weight, const Tensor* bias) {
  return weight.device() == input.device() && (bias == nullptr || !bias->defined() || bias->device() == input.device()) &&
         input.layout() == kStrided && weight.layout() == kStrided;
}

ConvCall describe(const Tensor& input, const Tensor& weight, const Tensor* bias, IntArrayRef stride,
                  IntArrayRef padding, IntArrayRef dilation, bool transposed, IntArrayRef output_padding,
                  int64_t groups) {
  ConvCall c;
  c.input_dim = static_cast<int>(input.dim());
  c.weight_dim = static_cast<int>(weight.dim());
  if (c.input_dim > 5 || c.weight_dim > 5) {
    c.input_dim = 0;  // not ours: upstream reports what is wrong
    return c;
  }
  for (int d = 0; d < c.input_dim; ++d) c.input_sizes[d] = input.size(d);
  for (int d = 0; d < c.weight_dim; ++d) c.weight_sizes[d] = weight.size(d);
  const auto take = [](IntArrayRef given, std::array<int64_t, 3>* values) {
    if (given.empty() || given.size() > values->size()) return 0;
    std::copy(given.begin(), given.end(), values->begin());
    return static_cast<int>(given.size());
  };
  c.stride_len = take(stride, &c.stride);
  c.padding_len = take(padding, &c.padding);
  c.dilation_len = take(dilation, &c.dilation);
  c.output_padding_len = take(output_padding, &c.output_padding);
  c.transposed = transposed;
  c.groups = groups;
  const bool with_bias = bias != nullptr && bias->defined();
  c.tensors_on_one_cuda_device = input.is_cuda() && strided_on_one_device(input, weight, bias);
  c.one_dtype = weight.scalar_type() == input.scalar_type() &&
                (!with_bias || bias->scalar_type() == input.scalar_type());
  c.dtype = dtype_of(input.scalar_type());
  c.has_bias = with_bias;
  c.bias_dim = with_bias ? static_cast<int>(bias->dim()) : 0;
  c.bias_numel = with_bias ? bias->numel() : 0;
  // Every CUDA convolution comes through here: the layouts (a stride scan each) are worked
  // out only where the rule reads them, depthwise convolutions (of conv1d, the weight's 4-D view:
  // upstream makes the input contiguous first).
  const bool depthwise = c.input_dim == c.weight_dim && groups > 1 && groups == c.input_sizes[1];
  if (depthwise && c.input_dim == 4) {
    c.input_layout = layout_of(input);
    c.weight_layout = layout_of(weight);
  } else if (depthwise && c.input_dim == 3) {
    c.weight_layout = layout_of(weight.unsqueeze(2));
  }
  // As upstream's use_cudnn: without cuDNN built in, its native kernel takes what cuDNN would.
  c.cudnn_enabled = at::globalContext().userEnabledCuDNN() && at::detail::getCUDAHooks().compiledWithCuDNN();
  return c;
}

// The compute capability of the GPU a call runs on, 90 for sm_90, as the table's kMeasuredArch.
int gpu_arch_of(c10::DeviceIndex device) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device);
  return p->major * 10 + p->minor;
}

// The table is read only in "auto": a mode set by hand, "upstream" (stock's behaviour) among them,
// routes even where DWCONV_ROUTING_TABLE names a file that cannot be read.
Route route_pass(const Problem& p, Pass pass, int gpu_arch) {
  const Mode mode = current_mode().get();
  if (mode != Mode::Auto) return route_of(p, pass, mode, kMeasuredPoints);
  const std::shared_ptr<const RoutingTable> table = active_table().get();
  return route_of(p, pass, mode_on_gpu(mode, gpu_arch, table->measured_arch), table->points);
}

struct Geometry2d {
  std::array<int64_t, 2> kernel, stride, padding, dilation;
};

Geometry2d geometry_of(const Problem& p) {
  return {{p.kernel_h, p.kernel_w}, {p.stride_h, p.stride_w}, {p.pad_h, p.pad_w}, {p.dilation_h, p.dilation_w}};
}

// conv1d runs as the 2D problem with H = 1, as upstream runs it.
Tensor as_4d(const Tensor& t, const Problem& p) {
  return p.conv1d ? t.unsqueeze(2) : t;
}

// An activation (input or grad_output) in the layout upstream computes in, copied as upstream
// copies it (a no-op where it already is), as the 4-D tensor our kernels take.
Tensor in_upstream_layout(const Tensor& t, const Problem& p) {
  return as_4d(t.contiguous(p.layout == Layout::ChannelsLast ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous),
               p);
}

Tensor from_4d(const Tensor& t, const Problem& p) {
  return (p.conv1d && t.defined()) ? t.squeeze(2) : t;
}

// dwconv::conv_depthwise2d_backward (DepthwiseConvBackwardOps.cpp), called through the
// dispatcher like an aten operator, so that the profiler records it.
std::tuple<Tensor, Tensor, Tensor> depthwise2d_backward_with_bias(const Tensor& grad_output, const Tensor& input,
                                                                  const Tensor& weight, const Geometry2d& g,
                                                                  std::array<bool, 3> output_mask) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("dwconv::conv_depthwise2d_backward", "")
          .typed<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, IntArrayRef,
                                                    IntArrayRef, IntArrayRef, IntArrayRef, std::array<bool, 3>)>();
  return op.call(grad_output, input, weight, g.kernel, g.stride, g.padding, g.dilation, output_mask);
}

// cuDNN, called as upstream's Cudnn backend calls it (Convolution.cpp), with its benchmark flag.
// The cuDNN route stands in for upstream's native depthwise kernel (in auto, it is taken only
// where upstream runs that), which is deterministic and computes float32 exactly: so cuDNN is
// asked for deterministic algorithms and no TF32 there. Where upstream itself would run cuDNN
// (channels_last, in mode cudnn), it gets upstream's deterministic and TF32 settings.
struct CudnnFlags {
  bool benchmark, deterministic, allow_tf32;
};

CudnnFlags cudnn_flags(const Problem& p) {
  auto& ctx = at::globalContext();
  const bool upstream_runs_cudnn = p.layout == Layout::ChannelsLast;
  if (!upstream_runs_cudnn) return {ctx.benchmarkCuDNN(), true, false};
  return {ctx.benchmarkCuDNN(), ctx.deterministicCuDNN() || ctx.deterministicAlgorithms(),
          ctx.allowTF32CuDNN(at::Float32Op::CONV)};
}

Tensor cudnn_forward(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, const Problem& p) {
  const auto g = geometry_of(p);
  const auto flags = cudnn_flags(p);
  Tensor output = at::cudnn_convolution(in_upstream_layout(input, p), as_4d(weight, p), g.padding, g.stride,
                                        g.dilation, p.channels, flags.benchmark, flags.deterministic, flags.allow_tf32);
  if (bias.has_value() && bias->defined()) output.add_(bias->reshape({1, -1, 1, 1}));
  return from_4d(output, p);
}

std::tuple<Tensor, Tensor> cudnn_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                          const Problem& p, std::array<bool, 2> output_mask) {
  const auto g = geometry_of(p);
  const auto flags = cudnn_flags(p);
  // The input copied only where the weight gradient reads it, as upstream does, but conv1d's always
  // (upstream makes it contiguous before its 4-D view, which fixes grad_input's layout).
  auto [grad_input, grad_weight] = cudnn_convolution_backward_stub(
      kCUDA, output_mask[1] || p.conv1d ? in_upstream_layout(input, p) : input, as_4d(grad_output, p),
      as_4d(weight, p), g.padding, g.stride, g.dilation, p.channels, flags.benchmark, flags.deterministic,
      flags.allow_tf32, output_mask);
  return {from_4d(grad_input, p), from_4d(grad_weight, p)};
}

// grad_output is what the problem's output would be: else upstream reports the mismatch.
bool grad_output_matches(const Tensor& grad_output, const Tensor& input, const Problem& p) {
  if (!grad_output.is_cuda() || grad_output.device() != input.device() ||
      grad_output.scalar_type() != input.scalar_type() || grad_output.layout() != kStrided) {
    return false;
  }
  const std::array<int64_t, 4> expected = {p.batch, p.channels * p.multiplier, p.out_height, p.out_width};
  if (p.conv1d) {
    return grad_output.sizes() == IntArrayRef{expected[0], expected[1], expected[3]};
  }
  return grad_output.sizes() == IntArrayRef(expected);
}

// torch.ops.dwconv.set_routing / routing / routing_measured_on
void set_routing_op(const std::string& mode) {
  Mode parsed = Mode::Auto;
  TORCH_CHECK(parse_mode(mode.c_str(), &parsed), "dwconv routing must be auto, ours, cudnn or upstream, got '", mode,
              "'");
  current_mode().set(parsed);
}

std::string routing_op() {
  return mode_name(current_mode().get());
}

std::string measured_on(const RoutingTable& table) {
  return table.measured_on + (table.measured_arch == 0 ? "" : " (sm_" + std::to_string(table.measured_arch) + ")") +
         (&table == compiled_in_table().get() ? "" : ", loaded from " + table.source);
}

std::string routing_measured_on_op() {
  return measured_on(*active_table().get());
}

// torch.ops.dwconv.load_routing_table: route "auto" by the table this file holds ("" : the built-in one).
void load_routing_table_op(const std::string& path) {
  active_table().load(path);
}

// torch.ops.dwconv.explain_routing: who would compute each pass of aten::convolution with these
// arguments on a CUDA device, and why, in words. The tensors may live anywhere (meta tensors
// will do): only their sizes, strides, dtypes and devices being one are read. The GPU is theirs,
// else the current one, else (no GPU here) one of the kind the table was measured on.
std::string explain_routing_op(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                               IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                               IntArrayRef output_padding, int64_t groups) {
  const Tensor* bias_ptr = bias.has_value() ? &*bias : nullptr;
  ConvCall call = describe(input, weight, bias_ptr, stride, padding, dilation, transposed, output_padding, groups);
  call.tensors_on_one_cuda_device = strided_on_one_device(input, weight, bias_ptr);
  const Eligibility verdict = depthwise_problem(call);
  if (!verdict.eligible) return std::string("not taken, upstream decides every pass: ") + verdict.reason;
  const Problem& p = verdict.problem;
  const Mode mode = current_mode().get();
  const std::shared_ptr<const RoutingTable> table = active_table().get();
  const bool on_gpu = input.is_cuda() || at::cuda::is_available();
  const int gpu_arch = on_gpu ? gpu_arch_of(input.is_cuda() ? input.device().index() : c10::cuda::current_device())
                              : table->measured_arch;
  std::ostringstream text;
  text << "depthwise conv" << (p.conv1d ? "1d" : "2d") << ": batch " << p.batch << ", " << p.channels
       << " channels, multiplier " << p.multiplier << ", " << p.height << "x" << p.width << ", kernel "
       << p.kernel_h << "x" << p.kernel_w << ", stride " << p.stride_h << "x" << p.stride_w << ", "
       << dtype_name(p.dtype) << " " << layout_name(p.layout)
       << "; routing " << mode_name(mode) << ", table measured on " << measured_on(*table)
       << (on_gpu ? "; this GPU: sm_" : "; no GPU here, routed as on sm_") << gpu_arch;
  for (const Pass pass : kPasses) {
    text << "\n" << pass_name(pass) << ": "
         << explain_route(p, pass, mode, gpu_arch, table->measured_arch, table->points);
  }
  return text.str();
}

} // namespace

Tensor routed_convolution_cuda(
    const Tensor& input,
    const Tensor& weight,
    const std::optional<Tensor>& bias,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    bool transposed,
    IntArrayRef output_padding,
    int64_t groups) {
  const Tensor* bias_ptr = bias.has_value() ? &*bias : nullptr;
  const auto verdict =
      depthwise_problem(describe(input, weight, bias_ptr, stride, padding, dilation, transposed, output_padding, groups));
  const Route route = verdict.eligible && !at::tracer::impl::is_dispatch_enabled()
                          ? route_pass(verdict.problem, Pass::Forward, gpu_arch_of(input.device().index()))
                          : Route::Upstream;
  if (route == Route::Upstream) {
    return at::native::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups);
  }
  const Problem& p = verdict.problem;
  if (route == Route::Cudnn) return cudnn_forward(input, weight, bias, p);
  const auto g = geometry_of(p);
  return from_4d(at::_conv_depthwise2d(in_upstream_layout(input, p), as_4d(weight, p), g.kernel, bias, g.stride,
                                       g.padding, g.dilation),
                 p);
}

std::tuple<Tensor, Tensor, Tensor> routed_convolution_backward_cuda(
    const Tensor& grad_output,
    const Tensor& input,
    const Tensor& weight,
    OptionalIntArrayRef bias_sizes,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    bool transposed,
    IntArrayRef output_padding,
    int64_t groups,
    std::array<bool, 3> output_mask) {
  const auto verdict = depthwise_problem(
      describe(input, weight, nullptr, stride, padding, dilation, transposed, output_padding, groups));
  const Problem& p = verdict.problem;
  // (No tracer check: the tracer records convolution_backward itself and is off below it.)
  const bool eligible = verdict.eligible && grad_output_matches(grad_output, input, p);
  const int gpu_arch = eligible ? gpu_arch_of(input.device().index()) : 0;
  const Route input_route = eligible && output_mask[0] ? route_pass(p, Pass::BackwardInput, gpu_arch) : Route::Upstream;
  const Route weight_route =
      eligible && output_mask[1] ? route_pass(p, Pass::BackwardWeight, gpu_arch) : Route::Upstream;
  if (input_route == Route::Upstream && weight_route == Route::Upstream) {
    return at::native::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                                            transposed, output_padding, groups, output_mask);
  }
  // The gradients each route computes, of those asked for.
  const auto routed_to = [&](Route route) -> std::array<bool, 2> {
    return {output_mask[0] && input_route == route, output_mask[1] && weight_route == route};
  };
  const auto upstream_mask = routed_to(Route::Upstream), cudnn_mask = routed_to(Route::Cudnn),
             ours_mask = routed_to(Route::Ours);
  Tensor grad_input, grad_weight, grad_bias;
  const auto keep = [&](Tensor&& routed_input, Tensor&& routed_weight, std::array<bool, 2> mask) {
    if (mask[0]) grad_input = std::move(routed_input);
    if (mask[1]) grad_weight = std::move(routed_weight);
  };
  if (upstream_mask[0] || upstream_mask[1]) {  // from the same arguments
    auto [upstream_input, upstream_weight, unused_bias] = at::native::convolution_backward(
        grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        {upstream_mask[0], upstream_mask[1], false});
    keep(std::move(upstream_input), std::move(upstream_weight), upstream_mask);
  }
  if (cudnn_mask[0] || cudnn_mask[1]) {
    auto [cudnn_input, cudnn_weight] = cudnn_backward(grad_output, input, weight, p, cudnn_mask);
    keep(std::move(cudnn_input), std::move(cudnn_weight), cudnn_mask);
  }
  if (ours_mask[0] || ours_mask[1]) {
    // grad_bias comes with ours: from our weight-gradient kernel where it runs, else summed.
    auto [ours_input, ours_weight, ours_bias] = depthwise2d_backward_with_bias(
        in_upstream_layout(grad_output, p), in_upstream_layout(input, p), as_4d(weight, p), geometry_of(p),
        {ours_mask[0], ours_mask[1], output_mask[2]});
    keep(from_4d(ours_input, p), from_4d(ours_weight, p), ours_mask);
    grad_bias = std::move(ours_bias);
  } else if (output_mask[2]) {
    grad_bias = grad_output.sum(p.conv1d ? IntArrayRef{0, 2} : IntArrayRef{0, 2, 3});
  }
  return std::make_tuple(std::move(grad_input), std::move(grad_weight), std::move(grad_bias));
}

} // namespace at::native

TORCH_LIBRARY_FRAGMENT(dwconv, m) {
  m.def("set_routing(str mode) -> ()", &at::native::set_routing_op);
  m.def("routing() -> str", &at::native::routing_op);
  m.def("routing_measured_on() -> str", &at::native::routing_measured_on_op);
  m.def("load_routing_table(str path) -> ()", &at::native::load_routing_table_op);
  m.def("explain_routing(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
        "bool transposed, int[] output_padding, int groups) -> str",
        &at::native::explain_routing_op);
}
