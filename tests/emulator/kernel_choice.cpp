// Which kernel each pass of a depthwise 2D call takes: DepthwiseConv2dKernelChoice.cuh's functions,
// compiled with g++ and run on a CPU, on the operands DepthwiseConv2d.cu would give them for the
// call. tests/test_kernel_choice.py checks the GPU tests' expectations with it.
//
// Reads one call per line from stdin:
//   <dtype> <pass> <layout> N C H W multiplier kh kw sh sw ph pw dh dw input_offset grad_output_offset
//   gpu disabled
// dtype: double | float | half | bfloat16; pass: forward | backward-input | grad-weight |
// grad-weight+bias (the weight gradient with the bias gradient asked for too) | backward (grad_input
// and grad_weight asked for together: the one kernel that computes both where one does, else the two
// passes' kernels as "<backward-input's>+<grad-weight's>");
// layout: nchw | cl, the input's memory format, which grad_output shares and the output and
// grad_input take; the offsets: how many elements past a 512-byte boundary (where the caching
// allocator's blocks start) the input's and grad_output's data start, every other tensor being
// freshly allocated; gpu: the GPU's GpuLimits, colon-separated (SMs, then an SM's threads, blocks,
// registers, shared bytes and the shared bytes reserved a block, then the compute capability:
// 132:2048:32:65536:233472:1024:90 for an H100 SXM); disabled: the kernel paths switched off, comma-separated, or "-".
// A line "registers <instance> <count>" (the instance as the compiler's report names it demangled,
// `grad_weight_register_tiled_kernel<float, int, 3, 2, false>`) says how many registers a thread of
// that instance takes, for the planners that ask (GpuLimits::compiled_registers); it prints nothing
// and holds for the calls after it. An instance not given one is counted at its launch bound.
// Prints the chosen kernel's name (its __global__ function) a line, or "error: <why>" and exits 2.
// With --plans, each name is followed by its launch's shape (DepthwiseConv2dLaunch.cuh's
// launch_shape): " grid=X,Y,Z block=X,Y,Z shared=BYTES", " bools=B,..." where the instance's
// bool template arguments are the plan's (instance_bools), and " args=A,..." where all of them
// after the element type are (instance_arguments). With --names, prints every name the
// choice can give instead.

#include <ATen/AccumulateType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "cuda_emulation.h"
#include "dense_layout.h"

#define DWCONV_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  dwconv_emu::launch(grid, block, shared_bytes, kernel, __VA_ARGS__)

#include <ATen/native/cuda/DepthwiseConv2dKernelChoice.cuh>
#include <ATen/native/cuda/DepthwiseConv2dLaunch.cuh>

using namespace at::native::dwconv;

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::cout << "error: " << why << std::endl;
  std::exit(2);
}

struct Call {
  std::string dtype, pass, layout;
  int64_t n, c, h, w;
  int multiplier, kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t input_offset, grad_output_offset;
  GpuLimits gpu;
  std::string disabled;
};

// A dense 4D tensor as the choice sees it: its layout, and where its data start.
struct DenseTensor : dwconv_emu::DenseLayout {
  std::uintptr_t address;

  DenseTensor(const std::array<int64_t, 4>& sizes_, bool channels_last, std::uintptr_t address_)
      : DenseLayout(sizes_, channels_last), address(address_) {}

  // canUse32BitIndexMath's negation for a dense tensor.
  bool needs_64bit_indexing() const { return numel() > std::numeric_limits<int32_t>::max(); }
};

// The kernel instances the planners ask the registers of, by address, under the compiler's names
// for them; and the registers the "registers" lines gave, by name.
std::map<const void*, std::string> instance_names;
std::map<std::string, int> registers_by_name;

template <typename scalar_t>
void name_register_grad_weight_instances(const std::string& dtype) {
  for (const int kernel : {3, 5, 7}) {
    for (const int stride : {1, 2}) {
      for (const bool staged : {false, true}) {
        const auto instance = grad_weight_register_tiled_kernel_for<scalar_t, int32_t>(kernel, stride, staged);
        if (instance == nullptr) continue;
        instance_names[reinterpret_cast<const void*>(instance)] =
            "grad_weight_register_tiled_kernel<" + dtype + ", int, " + std::to_string(kernel) + ", " +
            std::to_string(stride) + ", " + (staged ? "true" : "false") + ">";
      }
    }
  }
}

template <typename scalar_t>
void name_stride2_channels_last_instances(const std::string& dtype) {
  for (const int kernel : {3, 5}) {
    for (const int parity : {0, 1}) {
      PassGeometry g{};
      g.kernel_h = g.kernel_w = kernel;
      g.pad_h = g.pad_w = parity;
      const auto instance = stride2_grad_input_channels_last_kernel_for<scalar_t, int32_t>(g);
      instance_names[reinterpret_cast<const void*>(instance)] = "stride2_grad_input_channels_last_kernel<" + dtype +
                                                                ", int, " + std::to_string(kernel) + ", " +
                                                                std::to_string(parity) + ">";
    }
  }
}

void name_instances() {
  name_register_grad_weight_instances<double>("double");
  name_register_grad_weight_instances<float>("float");
  name_register_grad_weight_instances<c10::Half>("Half");
  name_register_grad_weight_instances<c10::BFloat16>("BFloat16");
  name_stride2_channels_last_instances<double>("double");
  name_stride2_channels_last_instances<float>("float");
  name_stride2_channels_last_instances<c10::Half>("Half");
  name_stride2_channels_last_instances<c10::BFloat16>("BFloat16");
}

// GpuLimits::compiled_registers: a "registers" line's count, else 0 (unknown).
int given_registers(const void* kernel) {
  const auto name = instance_names.find(kernel);
  if (name == instance_names.end()) return 0;
  const auto count = registers_by_name.find(name->second);
  return count == registers_by_name.end() ? 0 : count->second;
}

// "registers <instance> <count>": the instance's name runs to the last space.
void read_registers(const std::string& line) {
  const auto last_space = line.find_last_of(' ');
  const std::string name = line.substr(std::string("registers ").size(), last_space - std::string("registers ").size());
  int count = 0;
  std::istringstream in(line.substr(last_space + 1));
  if (last_space <= std::string("registers").size() || name.empty() || !(in >> count) || !(in >> std::ws).eof() ||
      count < 1 || count > 255) {
    fail("a registers line is \"registers <instance> <count of 1 to 255>\", not " + line);
  }
  registers_by_name[name] = count;
}

GpuLimits gpu_limits(const std::string& text) {
  GpuLimits gpu;
  gpu.compiled_registers = &given_registers;
  char c1, c2, c3, c4, c5, c6;
  std::istringstream in(text);
  in >> gpu.sm_count >> c1 >> gpu.threads_per_sm >> c2 >> gpu.blocks_per_sm >> c3 >> gpu.registers_per_sm >> c4 >>
      gpu.shared_bytes_per_sm >> c5 >> gpu.reserved_shared_bytes >> c6 >> gpu.compute_capability;
  if (!in || !(in >> std::ws).eof() || std::string{c1, c2, c3, c4, c5, c6} != "::::::") {
    fail("gpu must be SMs:threads:blocks:registers:shared:reserved:capability, not " + text);
  }
  if (gpu.sm_count < 1 || gpu.threads_per_sm < 32 || gpu.blocks_per_sm < 1 || gpu.registers_per_sm < 1 ||
      gpu.shared_bytes_per_sm < 0 || gpu.reserved_shared_bytes < 0 || gpu.compute_capability < 1) {
    fail("gpu limits must be positive: " + text);
  }
  return gpu;
}

Call read_call(const std::string& line) {
  std::istringstream in(line);
  Call k;
  std::string gpu;
  in >> k.dtype >> k.pass >> k.layout >> k.n >> k.c >> k.h >> k.w >> k.multiplier >> k.kh >> k.kw >> k.sh >> k.sw >>
      k.ph >> k.pw >> k.dh >> k.dw >> k.input_offset >> k.grad_output_offset >> gpu >> k.disabled;
  if (!in) fail("malformed call line: " + line);
  k.gpu = gpu_limits(gpu);
  if (k.layout != "nchw" && k.layout != "cl") fail("layout must be nchw or cl, not " + k.layout);
  return k;
}

KernelPathMask disabled_mask(const std::string& text) {
  KernelPathMask mask = 0;
  std::string unknown;
  if (text != "-" && !kernel_path_mask(split_kernel_path_list(text), &mask, &unknown)) {
    fail("no kernel path is named " + unknown);
  }
  return mask;
}

bool print_plans = false;

// The bool template arguments of the kernel instance a choice launches, where the pass and layout
// do not tell them (the register-tiled weight gradient's staged grad_output), else "".
std::string instance_bools(const PassChoice&) { return ""; }
std::string instance_bools(const GradWeightChoice& choice) {
  if (choice.kernel == GradWeightKernel::kColumnBackward) return "false";  // without grad_input
  const auto* plan = std::get_if<RegisterGradWeightLaunch>(&choice.plan);
  return plan == nullptr ? "" : plan->work.go_stride > 0 ? "true" : "false";
}
std::string instance_bools(const BothGradientsChoice& choice) {
  return choice.kernel == BothGradientsKernel::kColumn ? "true" : "";  // with grad_input
}

// All the template arguments after the element type of the instance a choice launches, where the
// plan picks among instances the pass's filter and stride do not tell apart (the tensor-core
// kernel's tiles and register bound, the channels_last register tiles' bound, the plane stream's
// vector rows), else "".
std::string instance_arguments(const PassChoice& choice, bool backward) {
  const auto flag = [](bool value) { return std::string(value ? "true" : "false"); };
  const std::string filter = std::to_string(choice.geometry.kernel_h) + "," + std::to_string(choice.geometry.stride_h);
  if (const auto* plan = std::get_if<ChannelsLastMmaLaunch>(&choice.plan)) {
    return flag(backward) + "," + filter + "," + std::to_string(plan->mma.tiles) + "," + flag(plan->mma.three_blocks);
  }
  if (choice.kernel == PassKernel::kChannelsLastRegisterTiled) {
    return "int," + flag(backward) + "," + filter + "," + flag(std::get<ChannelsLastLaunch>(choice.plan).three_blocks);
  }
  if (const auto* plan = std::get_if<PlaneStreamLaunch>(&choice.plan)) {
    return flag(backward) + "," + filter + "," + flag(plan->stream.vector_rows);
  }
  return "";
}
std::string instance_arguments(const GradWeightChoice& choice, const PassGeometry& g) {
  if (const auto* plan = std::get_if<PlaneStreamGradWeightLaunch>(&choice.plan)) {
    return std::to_string(g.kernel_h) + "," + std::to_string(g.stride_h) + "," +
           (plan->work.stream.vector_rows ? "true" : "false");
  }
  return "";
}

template <typename Choice>
std::string described(const Choice& choice, const LaunchShape& shape, const std::string& arguments) {
  std::string text = kernel_name(choice.kernel);
  if (print_plans) {
    auto triple = [](dim3 d) { return std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z); };
    text += " grid=" + triple(shape.grid) + " block=" + triple(shape.block) +
            " shared=" + std::to_string(shape.shared_bytes);
    const std::string bools = instance_bools(choice);
    if (!bools.empty()) text += " bools=" + bools;
    if (!arguments.empty()) text += " args=" + arguments;
  }
  return text;
}

int64_t output_extent(int64_t in, int kernel, int stride, int pad, int dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

template <typename scalar_t>
std::string choose(const Call& k) {
  constexpr std::uintptr_t kBlockStart = std::uintptr_t{1} << 40;  // a caching allocator block: 512-byte aligned
  const int64_t ho = output_extent(k.h, k.kh, k.sh, k.ph, k.dh), wo = output_extent(k.w, k.kw, k.sw, k.pw, k.dw);
  if (ho <= 0 || wo <= 0) fail("the output would be empty");
  const bool cl = k.layout == "cl";
  const std::uintptr_t input_address = kBlockStart + k.input_offset * sizeof(scalar_t);
  const std::uintptr_t grad_output_address = kBlockStart + k.grad_output_offset * sizeof(scalar_t);
  const int64_t out_channels = k.c * k.multiplier;
  const DenseTensor input({k.n, k.c, k.h, k.w}, cl, input_address);
  const DenseTensor output({k.n, out_channels, ho, wo}, cl, kBlockStart);
  const DenseTensor grad_output({k.n, out_channels, ho, wo}, cl, grad_output_address);
  const DenseTensor grad_input({k.n, k.c, k.h, k.w}, cl, kBlockStart);
  const std::uintptr_t weight_address = kBlockStart;
  const bool weight_needs_64bit = out_channels * k.kh * k.kw > std::numeric_limits<int32_t>::max();

  const PassGeometry fwd{k.n, k.c, k.h, k.w, out_channels, ho, wo, k.kh, k.kw, k.sh, k.sw, k.ph, k.pw, k.dh, k.dw,
                         k.multiplier};
  const KernelPathMask disabled = disabled_mask(k.disabled);
  auto pass_operands = [&](const DenseTensor& src, const DenseTensor& dst) {
    return PassOperands{src.is_contiguous() && dst.is_contiguous(),
                        src.is_channels_last_contiguous() && dst.is_channels_last_contiguous(),
                        src.address,
                        dst.address,
                        weight_address,
                        static_cast<int>(sizeof(scalar_t)),
                        src.needs_64bit_indexing() || dst.needs_64bit_indexing() || weight_needs_64bit};
  };
  if (k.pass == "forward") {
    const auto choice = choose_forward<scalar_t>(fwd, pass_operands(input, output), disabled, k.gpu);
    return described(choice, launch_shape(choice, k.gpu), instance_arguments(choice, false));
  }
  if (k.pass == "backward-input") {
    const auto choice = choose_backward_input<scalar_t>(fwd, pass_operands(grad_output, grad_input), disabled,
                                                        k.gpu);
    return described(choice, launch_shape(choice, k.gpu), instance_arguments(choice, true));
  }
  if (k.pass == "grad-weight" || k.pass == "grad-weight+bias") {
    const GradWeightOperands operands{
        grad_output.is_contiguous() && input.is_contiguous(),
        grad_output.is_channels_last_contiguous() && input.is_channels_last_contiguous(),
        grad_output.address,
        input.address,
        static_cast<int>(sizeof(scalar_t)),
        grad_output.needs_64bit_indexing() || input.needs_64bit_indexing() || weight_needs_64bit,
        k.pass == "grad-weight+bias"};
    const auto choice = choose_grad_weight<scalar_t>(fwd, operands, disabled, k.gpu);
    return described(choice, launch_shape(choice), instance_arguments(choice, fwd));
  }
  if (k.pass == "backward") {
    const BackwardOperands operands{grad_output.is_contiguous() && input.is_contiguous() && grad_input.is_contiguous(),
                                    grad_output.is_channels_last_contiguous() && input.is_channels_last_contiguous() &&
                                        grad_input.is_channels_last_contiguous(),
                                    grad_output.address,
                                    input.address,
                                    grad_input.address,
                                    static_cast<int>(sizeof(scalar_t)),
                                    grad_output.needs_64bit_indexing() || input.needs_64bit_indexing() ||
                                        grad_input.needs_64bit_indexing()};
    if (const auto choice = choose_both_gradients<scalar_t>(fwd, operands, disabled, k.gpu)) {
      return described(*choice, launch_shape(*choice), "");
    }
    Call separate = k;
    separate.pass = "backward-input";
    const std::string backward_input = choose<scalar_t>(separate);
    separate.pass = "grad-weight";
    return backward_input + "+" + choose<scalar_t>(separate);
  }
  fail("pass must be forward, backward-input, grad-weight, grad-weight+bias or backward, not " + k.pass);
}

// Every name kernel_name gives: an enum class's values are ints, the first out of range named "?".
void print_names() {
  for (int k = 0; std::string(kernel_name(static_cast<PassKernel>(k))) != "?"; ++k) {
    std::cout << kernel_name(static_cast<PassKernel>(k)) << "\n";
  }
  for (int k = 0; std::string(kernel_name(static_cast<GradWeightKernel>(k))) != "?"; ++k) {
    std::cout << kernel_name(static_cast<GradWeightKernel>(k)) << "\n";
  }
  for (int k = 0; std::string(kernel_name(static_cast<BothGradientsKernel>(k))) != "?"; ++k) {
    std::cout << kernel_name(static_cast<BothGradientsKernel>(k)) << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--names") {
    print_names();
    return 0;
  }
  print_plans = argc == 2 && std::string(argv[1]) == "--plans";
  name_instances();
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    if (line.rfind("registers ", 0) == 0) {
      read_registers(line);
      continue;
    }
    const Call k = read_call(line);
    if (k.dtype == "double") {
      std::cout << choose<double>(k) << "\n";
    } else if (k.dtype == "float") {
      std::cout << choose<float>(k) << "\n";
    } else if (k.dtype == "half") {
      std::cout << choose<c10::Half>(k) << "\n";
    } else if (k.dtype == "bfloat16") {
      std::cout << choose<c10::BFloat16>(k) << "\n";
    } else {
      fail("dtype must be double, float, half or bfloat16, not " + k.dtype);
    }
  }
  return 0;
}
