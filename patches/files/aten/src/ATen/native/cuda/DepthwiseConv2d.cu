// Depthwise 2D convolution on CUDA: forward, backward-input and backward-weight.
//
// Project-owned replacement of upstream's file of the same path (patches/series).
// It implements the interfaces upstream's file did: at::native::conv_depthwise2d_cuda,
// conv_depthwise2d_cuda_out (ATen/ops/_conv_depthwise2d_native.h) and the CUDA
// kernel of conv_depthwise2d_backward_stub (ATen/native/ConvUtils.h).
//
// - Layouts: NCHW and channels_last are both computed in place, with no copy;
//   the output (and grad_input) takes the input's suggested memory format.
//   Other strided tensors are copied once into the nearer of the two.
// - dtypes: double, float, half, bfloat16; half types accumulate in float.
// - Index math is 32-bit unless a tensor needs 64 bits (2^31 elements or more).
// - No atomics: every value, the weight gradient included, is summed in a fixed
//   order, so results are bitwise reproducible from run to run.
//
// Kernels, each in the header of its family (device code and launch planning, free of ATen
// tensors, so that tests/emulator runs them on a CPU): DepthwiseConv2dGeneral.cuh (tiled, direct,
// the general weight gradients), DepthwiseConv2dRegisterTiled.cuh (3x3/5x5/7x7),
// DepthwiseConv2dLargeFilter.cuh, DepthwiseConv2dConv1d.cuh (row and column), DepthwiseConv2dStride2.cuh,
// DepthwiseConv2dRingGradWeight.cuh and DepthwiseConv2dPixel.cuh; DepthwiseConv2dCommon.cuh holds what
// they share.
// - tiled_nchw_kernel: a block computes a tile of one output plane from an input
//   tile (with halo) staged in shared memory; each thread keeps a row of up to
//   kMaxColsPerThread outputs in registers. Serves the forward pass and the
//   stride-1 backward-input pass (a correlation with the flipped kernel).
// - register_tiled_nchw_kernel: the NCHW tile for square 3x3, 5x5 and 7x7 filters at
//   stride 1 (3x3 and 5x5 forward at stride 2 too) and dilation 1, with the kernel size and
//   stride template arguments: each thread computes a 4x4 block of outputs from 16-byte
//   shared loads of its input rows, weights in registers; blocks on small planes hold
//   several planes. Tiles are staged from 16-byte global loads where src rows are whole
//   vectors. Where the grid fits on the GPU at once (batch 1), extra thread groups stage.
// - plane_stream_kernel (DepthwiseConv2dPlaneStream.cuh): the same 4x4 register tile for float
//   planes of 32x32 or less (multiplier 1), where a pass has a chunk of planes for every SM: a
//   block walks chunks of whole planes, each a contiguous run of src and dst moved as 16-byte
//   vectors, the next chunk's src copied asynchronously (cp.async) while it computes the current.
// - large_filter_kernel: the same register tile for other filters of 16 taps or more at
//   stride 1 and dilation 1 (13x13 to 31x31), NCHW or channels_last: weights in shared
//   memory, window rows walked 4 taps at a time. Bound by multiply-adds, not memory. On
//   small planes a block's thread groups share out the window rows and add their sums.
// - tiled_channels_last_kernel: the same for channels_last, with a tile of pixels
//   for a group of channels; every global load and store is a 16-byte channel
//   vector, staged through shared memory. Needs multiplier 1, channels a multiple
//   of the vector and 16-byte aligned data.
// - channels_last_register_tiled_kernel: that tile for the register-tiled filters and strides,
//   with a thread computing 4 output rows of one column and channel vector, walking its window a
//   column at a time (each input vector converted once, the column's weights in registers).
// - channels_last_stream_kernel (DepthwiseConv2dChannelsLastStream.cuh): the same thread work
//   over a band of rows, where the blocks fill the GPU: a ring of input rows in shared memory,
//   the next step's rows copied asynchronously (cp.async) while the step computes.
// - channels_last_mma_kernel (DepthwiseConv2dChannelsLastMma.cuh): the same band of rows for
//   bfloat16 and half 3x3/5x5 (the forward at stride 1 and 2, backward-input) on the tensor cores
//   (sm_80 and later): a warp computes 16-pixel x 8-channel tiles, each tap an mma.sync of the input
//   vectors under it (ldmatrix from the ring) and the tap's weights on a diagonal.
// - row_kernel: conv1d (planes of one row, NCHW) with a 1 x 2, 3 or 4 filter at stride 1: a
//   thread computes chunks of 32 bytes of output (8 floats, 16 bf16/fp16 values) from the 16-byte
//   vectors that hold their inputs, in registers. grad_weight_row_kernel is its weight gradient.
// - column_kernel: the same conv1d in channels_last (a transposed (N, L, C) tensor), multiplier
//   1: a thread walks 8 outputs of one 16-byte channel vector with its last K inputs in
//   registers. grad_weight_column_kernel is its weight gradient.
// - row_backward_kernel and column_backward_kernel (DepthwiseConv2dConv1d.cuh): both conv1d
//   gradients, grad_input and the weight's (and bias's) sums, from one read of grad_output and the
//   input, where autograd asks for both (padding below K); column_backward_kernel also serves the
//   channels_last weight gradient alone, 8 bytes of channels a thread, a segment's loads before its sums.
// - stride2_grad_input_*_kernel (DepthwiseConv2dStride2.cuh): backward-input at stride 2 for
//   square 3x3 and 5x5 filters at dilation 1, NCHW (any multiplier) or channels_last (16-byte
//   vectors, multiplier 1): a thread computes one grad_input pixel of each stride phase (a 2 x 4
//   or 2 x 2 block) from one window of grad_output, so no tap is tested at run time.
// - pixel_kernel (DepthwiseConv2dPixel.cuh): for square 3x3 and 5x5 at stride 1 or 2 (multiplier
//   1), where the GPU holds every thread of the pass at once (batch-1 inference, small layers):
//   a thread computes one output pixel of one channel (NCHW) or one 16-byte channel vector
//   (channels_last), its window's inputs and its weights all loaded before the first multiply-add,
//   so the pass takes one chain of loads rather than a tile's staging, barrier and compute.
// - direct_kernel: one output element per thread, any strides, threads ordered
//   as the output is laid out (channels fastest for channels_last, so loads are
//   coalesced across channels). Serves what the tiled kernels cannot: other
//   multipliers and channel counts, small NCHW planes, and the strided
//   backward-input passes the stride-2 kernels do not take.
// - grad_weight_*_kernel: each block reduces one slice of the batch x output
//   positions for its channels, taps in registers, then across the block in a
//   fixed order (warp shuffles, or a tree); grad_weight_finish_kernel adds the
//   slices in a fixed order (eight lanes of slices, then the lanes). Each also
//   sums the grad_output values it reads for the bias gradient where it is asked
//   for.
//   grad_weight_register_tiled_kernel serves NCHW with the register-tiled filters and
//   strides (its input tiles and 4x4 blocks of grad_output are the forward kernel's; on
//   planes one tile covers whose rows have no 16-byte access, 14x14 and 7x7, an instance that
//   copies grad_output whole into shared memory first);
//   plane_stream_grad_weight_kernel (DepthwiseConv2dPlaneStream.cuh) serves the plane stream's
//   passes ahead of it where a pass has a chunk for every SM: a block owns a group of channels and a
//   slice of the batch, and walks the slice's entries, each its group's planes of input and
//   grad_output as two contiguous runs copied asynchronously while it sums the entry before;
//   grad_weight_walk_kernel (DepthwiseConv2dWalkGradWeight.cuh) serves channels_last 3x3 at
//   stride 1 and 2 (multiplier 1, float and the half types, whole 16-byte channel vectors): a
//   thread's two channels of one column walk down a band, its window and sums in registers, the
//   next steps' loads in flight, no shared memory until the end;
//   grad_weight_window_kernel (DepthwiseConv2dWindowGradWeight.cuh) serves channels_last square
//   5x5 and 7x7 filters at stride 1, 5x5 at stride 2 and 3x3 where the walk kernel is off
//   (multiplier 1, float and the half types, whole 16-byte channel vectors): 32 channels a
//   block, all K^2 sums a thread, each input row read once from shared memory into registers
//   and met with every grad_output row it pairs with; grad_weight_ring_kernel (DepthwiseConv2dRingGradWeight.cuh) serves the same
//   filters and 7x7 at stride 2: a ring of input rows staged once in shared memory, a kernel
//   row's sums a thread; grad_weight_register_channels_last_kernel serves the
//   same filters where the ring cannot (double, odd channel counts, data off 16 bytes): a
//   thread's channels, 4-column strips of grad_output and all the tap sums in registers.
//   grad_weight_large_filter_kernel
//   serves the large-filter kernel's filters in either layout: its tile with the roles
//   exchanged (grad_output as the filter, a 4x4 block of taps a thread).
// Each specialised kernel above can be switched off at run time (DepthwiseConv2dKernelPaths.h);
// its passes then take the kernel they take where it does not apply.

#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CanUse32BitIndexMath.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/DepthwiseConvChecks.h>
#include <ATen/native/Resize.h>
#include <ATen/native/cuda/DepthwiseConv2d.h>
#include <ATen/native/cuda/DepthwiseConv2dKernelChoice.cuh>
#include <ATen/native/cuda/DepthwiseConv2dKernelPaths.h>
#include <ATen/native/cuda/DepthwiseConv2dLaunch.cuh>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAMacros.h>

#ifndef AT_PER_OPERATOR_HEADERS
#include <ATen/Functions.h>
#include <ATen/NativeFunctions.h>
#else
#include <ATen/ops/_conv_depthwise2d_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace at::native {
namespace {

using namespace dwconv;

Strides4 strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// The PTX arch of the code this file's kernels run as on each device (cudaFuncGetAttributes'
// ptxVersion of the probe below, compiled with them), 0 until check_kernels_run_on, which every
// entry calls first, has found the probe's code there and read it: the device's own arch where the build holds it, an older one
// where the runtime compiles that arch's PTX for the device (TORCH_CUDA_ARCH_LIST="7.5+PTX" on an
// H100 runs compute_75 code, which has no warp matrix products).
std::array<std::atomic<int>, C10_COMPILE_TIME_MAX_GPUS>& code_archs() {
  static std::array<std::atomic<int>, C10_COMPILE_TIME_MAX_GPUS> archs{};
  return archs;
}

// The registers a thread of `kernel` takes in the code the current device runs (cudaFuncGetAttributes'
// numRegs), asked once a kernel and device: GpuLimits::compiled_registers.
int runtime_registers(const void* kernel) {
  static std::mutex mutex;
  static std::map<std::pair<c10::DeviceIndex, const void*>, int> known;
  const auto key = std::make_pair(c10::cuda::current_device(), kernel);
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto found = known.find(key); found != known.end()) return found->second;
  cudaFuncAttributes attributes;
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return known[key] = attributes.numRegs;
}

GpuLimits gpu_limits() {
  const cudaDeviceProp* p = at::cuda::getCurrentDeviceProperties();
  const int code_arch = code_archs()[c10::cuda::current_device()].load(std::memory_order_relaxed);
  return {p->multiProcessorCount, p->maxThreadsPerMultiProcessor, p->maxBlocksPerMultiProcessor,
          p->regsPerMultiprocessor, int64_t(p->sharedMemPerMultiprocessor), int64_t(p->reservedSharedMemPerBlock),
          std::min(p->major * 10 + p->minor, code_arch), &runtime_registers};
}

// A kernel with no work: whether the runtime finds code of it for a device says whether this
// file's kernels, compiled beside it for the same archs, run there.
__global__ void arch_probe_kernel() {}

// The archs this file holds code for, "sm_80, sm_90" (nvcc's __CUDA_ARCH_LIST__, "800,900").
std::string compiled_archs() {
#ifdef __CUDA_ARCH_LIST__
#define DWCONV_STRINGIFY_(...) #__VA_ARGS__
#define DWCONV_STRINGIFY(...) DWCONV_STRINGIFY_(__VA_ARGS__)
  std::istringstream list(DWCONV_STRINGIFY(__CUDA_ARCH_LIST__));
  std::string arch, archs;
  while (std::getline(list, arch, ',')) {
    archs += (archs.empty() ? "sm_" : ", sm_") + std::to_string(std::stoi(arch) / 10);
  }
  return archs;
#else
  return "the archs of TORCH_CUDA_ARCH_LIST";
#endif
}

// On a GPU that TORCH_CUDA_ARCH_LIST left out (a T4's sm_75, a Blackwell's sm_100 or sm_120
// under the overlay's default sm_80 and sm_90), the first launch would fail with "no kernel
// image is available for execution on the device", which names neither whose kernels nor the
// fix: refuse before it, by name. Checked once a device.
void check_kernels_run_on(c10::DeviceIndex device) {
  if (code_archs()[device].load(std::memory_order_relaxed) != 0) return;  // checked before
  cudaFuncAttributes attributes;
  const cudaError_t found = cudaFuncGetAttributes(&attributes, arch_probe_kernel);
  if (found == cudaSuccess) {
    code_archs()[device].store(attributes.ptxVersion, std::memory_order_relaxed);
    return;
  }
  (void)cudaGetLastError();  // not a sticky error: cleared, so that no later launch check reports it
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device);
  TORCH_CHECK(found != cudaErrorNoKernelImageForDevice && found != cudaErrorInvalidDeviceFunction,
              "conv_depthwise2d: the depthwise kernels of this build hold code for ", compiled_archs(),
              ", none of which runs on cuda:", static_cast<int>(device), " (", p->name, ", compute capability ",
              p->major, ".", p->minor, "). Build them for it with TORCH_CUDA_ARCH_LIST holding ", p->major, ".",
              p->minor, " (`make overlay` for the overlay, `make build` for the patched torch); under the "
              "overlay, dwconv_overlay.disable() runs upstream's kernels meanwhile");
  C10_CUDA_CHECK(found);
}

// ---------------------------------------------------------------------------
// Host side: DepthwiseConv2dKernelChoice.cuh chooses each pass's kernel and plan,
// DepthwiseConv2dLaunch.cuh launches it; this file hands them the tensors.

bool needs_64bit_indexing(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && !canUse32BitIndexMath(*t)) return true;
  }
  return false;
}

std::uintptr_t address_of(const Tensor& t) {
  return reinterpret_cast<std::uintptr_t>(t.const_data_ptr());
}

KernelPathMask disabled_paths() {
  return disabled_kernel_paths().load(std::memory_order_relaxed);
}

bool both_contiguous(const Tensor& a, const Tensor& b, MemoryFormat format) {
  return a.is_contiguous(format) && b.is_contiguous(format);
}

// What a pass from src into dst reads of its tensors.
PassOperands pass_operands(const Tensor& src, const Tensor& weight, const Tensor& dst) {
  return PassOperands{both_contiguous(src, dst, MemoryFormat::Contiguous),
                      both_contiguous(src, dst, MemoryFormat::ChannelsLast),
                      address_of(src),
                      address_of(dst),
                      address_of(weight),
                      static_cast<int>(src.element_size()),
                      needs_64bit_indexing({&src, &dst, &weight})};
}

// One pass (forward, or backward-input when kBackward) from src into dst: its kernel chosen, then launched.
template <typename scalar_t, bool kBackward>
void run_pass(const PassGeometry& fwd, const Tensor& src, const Tensor& weight, const Tensor& bias, const Tensor& dst) {
  const auto operands = pass_operands(src, weight, dst);
  const GpuLimits gpu = gpu_limits();
  const PassChoice choice = kBackward ? choose_backward_input<scalar_t>(fwd, operands, disabled_paths(), gpu)
                                      : choose_forward<scalar_t>(fwd, operands, disabled_paths(), gpu);
  const PassPointers<scalar_t> pointers{src.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
                                        bias.defined() ? bias.const_data_ptr<scalar_t>() : nullptr,
                                        dst.mutable_data_ptr<scalar_t>(), strides_of(src), strides_of(dst)};
  launch_pass<scalar_t, kBackward>(choice, operands.index64, pointers, gpu, at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

struct Conv2dArgs {
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};

// The arguments as the kernels take them, once depthwise_checks has checked them.
Conv2dArgs conv2d_args(IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation) {
  return {static_cast<int>(kernel_size[0]), static_cast<int>(kernel_size[1]),
          static_cast<int>(stride[0]), static_cast<int>(stride[1]),
          static_cast<int>(padding[0]), static_cast<int>(padding[1]),
          static_cast<int>(dilation[0]), static_cast<int>(dilation[1])};
}

PassGeometry forward_geometry(const Tensor& input, const Tensor& weight, const Conv2dArgs& a,
                              IntArrayRef out_sizes) {
  return PassGeometry{input.size(0),
                      input.size(1), input.size(2), input.size(3),
                      weight.size(0), out_sizes[2], out_sizes[3],
                      a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_h, a.pad_w,
                      a.dilation_h, a.dilation_w,
                      static_cast<int>(weight.size(0) / input.size(1))};
}

void forward_into(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& output,
                  const PassGeometry& g) {
  AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, input.scalar_type(), "conv_depthwise2d_forward_cuda", [&] {
    run_pass<scalar_t, false>(g, input, weight, bias, output);
  });
}

void backward_input_into(const Tensor& grad_output, const Tensor& weight, const Tensor& grad_input,
                         const PassGeometry& fwd) {
  AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, grad_output.scalar_type(), "conv_depthwise2d_backward_cuda", [&] {
    run_pass<scalar_t, true>(fwd, grad_output, weight, Tensor(), grad_input);
  });
}

// A weight-gradient kernel's sums per slice: [slices][channels][taps], added in slice order into
// grad_weight, and with_bias the bias's, [slices][channels], added the same way into grad_bias.
template <typename acc_t>
std::pair<Tensor, Tensor> slice_sums(const Tensor& grad_output, int64_t slices, const PassGeometry& g, bool with_bias) {
  const auto options = grad_output.options().dtype(c10::CppTypeToScalarType<acc_t>::value);
  Tensor partial = at::empty({slices, g.dst_channels, int64_t(g.kernel_h) * g.kernel_w}, options);
  Tensor partial_bias = with_bias ? at::empty({slices, g.dst_channels}, options) : Tensor();
  return {std::move(partial), std::move(partial_bias)};
}

// grad_weight, and grad_bias where it is defined: the weight-gradient kernels sum grad_output for
// the bias as they read it, so the bias gradient costs no pass of its own.
void grad_weight_into(const Tensor& grad_output, const Tensor& input, const Tensor& grad_weight,
                      const Tensor& grad_bias, const PassGeometry& g) {
  const GradWeightOperands operands{
      both_contiguous(grad_output, input, MemoryFormat::Contiguous),
      both_contiguous(grad_output, input, MemoryFormat::ChannelsLast),
      address_of(grad_output),
      address_of(input),
      static_cast<int>(grad_output.element_size()),
      needs_64bit_indexing({&grad_output, &input, &grad_weight}),
      grad_bias.defined()};
  const GpuLimits gpu = gpu_limits();
  AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, grad_output.scalar_type(), "conv_depthwise2d_grad_weight_cuda", [&] {
    using acc_t = at::acc_type<scalar_t, true>;
    const GradWeightChoice choice = choose_grad_weight<scalar_t>(g, operands, disabled_paths(), gpu);
    const bool with_bias = grad_bias.defined();
    const auto [partial, partial_bias] = slice_sums<acc_t>(grad_output, grad_weight_slices(choice), g, with_bias);
    const GradWeightPointers<scalar_t> pointers{
        grad_output.const_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(), partial.mutable_data_ptr<acc_t>(),
        grad_weight.mutable_data_ptr<scalar_t>(), strides_of(grad_output), strides_of(input),
        with_bias ? partial_bias.mutable_data_ptr<acc_t>() : nullptr,
        with_bias ? grad_bias.mutable_data_ptr<scalar_t>() : nullptr};
    launch_grad_weight<scalar_t>(choice, operands.index64, g, pointers, gpu, at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// grad_input and grad_weight (and grad_bias where it is defined) from one kernel, where one takes the
// pass (choose_both_gradients: a conv1d the row or column kernels take); false, with nothing written, where
// none does.
bool both_gradients_into(const Tensor& grad_output, const Tensor& input, const Tensor& weight, const Tensor& grad_input,
                         const Tensor& grad_weight, const Tensor& grad_bias, const PassGeometry& g) {
  const auto all_contiguous = [&](MemoryFormat layout) {
    return both_contiguous(grad_output, input, layout) && grad_input.is_contiguous(layout);
  };
  const BackwardOperands operands{all_contiguous(MemoryFormat::Contiguous), all_contiguous(MemoryFormat::ChannelsLast),
                                  address_of(grad_output), address_of(input), address_of(grad_input),
                                  static_cast<int>(grad_output.element_size()),
                                  needs_64bit_indexing({&grad_output, &input, &grad_input})};
  const GpuLimits gpu = gpu_limits();
  bool launched = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(kHalf, kBFloat16, grad_output.scalar_type(), "conv_depthwise2d_backward_cuda", [&] {
    using acc_t = at::acc_type<scalar_t, true>;
    const auto choice = choose_both_gradients<scalar_t>(g, operands, disabled_paths(), gpu);
    if (!choice) return;
    const bool with_bias = grad_bias.defined();
    const auto [partial, partial_bias] = slice_sums<acc_t>(grad_output, grad_weight_slices(*choice), g, with_bias);
    const BackwardPointers<scalar_t> pointers{
        grad_output.const_data_ptr<scalar_t>(), input.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
        grad_input.mutable_data_ptr<scalar_t>(), partial.mutable_data_ptr<acc_t>(),
        grad_weight.mutable_data_ptr<scalar_t>(), with_bias ? partial_bias.mutable_data_ptr<acc_t>() : nullptr,
        with_bias ? grad_bias.mutable_data_ptr<scalar_t>() : nullptr};
    launch_both_gradients<scalar_t>(*choice, g, pointers, gpu, at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    launched = true;
  });
  return launched;
}

// The shared checks (depthwise_checks, as the Meta kernels make them), then the device: the output's sizes.
std::vector<int64_t> checked_output_sizes(const Tensor& input, const Tensor& weight, IntArrayRef kernel_size,
                                          IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation) {
  auto sizes = depthwise_checks::checked_output_sizes<int64_t>("conv_depthwise2d", 2, input, weight, kernel_size,
                                                              stride, padding, dilation);
  TORCH_CHECK(input.is_cuda() && weight.is_cuda() && input.device() == weight.device(),
              "conv_depthwise2d: input and weight must be on the same CUDA device");
  return sizes;
}

// The forward pass into `out`, its arguments checked and the output's sizes known.
Tensor& forward_out(const Tensor& input_, const Tensor& weight_, const std::optional<Tensor>& bias_opt,
                    const Conv2dArgs& args, IntArrayRef out_sizes, Tensor& out) {
  depthwise_checks::check_bias("conv_depthwise2d", input_, weight_, bias_opt);
  // The kernels read their inputs' neighbours while other blocks write the output.
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, input_);
  at::assert_no_overlap(out, weight_);
  if (bias_opt.has_value() && bias_opt->defined()) at::assert_no_overlap(out, *bias_opt);
  const c10::cuda::CUDAGuard device_guard(input_.device());
  check_kernels_run_on(input_.device().index());
  const Tensor bias = (bias_opt.has_value() && bias_opt->defined()) ? bias_opt->contiguous() : Tensor();
  const auto layout = depthwise_checks::layout_2d(input_);
  const Tensor input = input_.contiguous(layout);
  const Tensor weight = weight_.contiguous();
  resize_output(out, out_sizes);
  if (out.numel() == 0) return out;  // an empty batch
  const auto g = forward_geometry(input, weight, args, out_sizes);
  if (out.is_contiguous(layout)) {
    forward_into(input, weight, bias, out, g);
  } else {
    const Tensor result = at::empty(out_sizes, input.options().memory_format(layout));
    forward_into(input, weight, bias, result, g);
    out.copy_(result);
  }
  return out;
}

}  // namespace

Tensor& conv_depthwise2d_cuda_out(
    const Tensor& input,
    const Tensor& weight,
    IntArrayRef kernel_size,
    const std::optional<Tensor>& bias,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    Tensor& out) {
  const auto out_sizes = checked_output_sizes(input, weight, kernel_size, stride, padding, dilation);
  // As upstream's kernel refuses it (in its accessor's words): an out of another dtype would
  // otherwise take the result through a copy that casts it.
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), "expected scalar type ", input.scalar_type(), " but found ",
              out.scalar_type());
  return forward_out(input, weight, bias, conv2d_args(kernel_size, stride, padding, dilation), out_sizes, out);
}

Tensor conv_depthwise2d_cuda(
    const Tensor& input,
    const Tensor& weight,
    IntArrayRef kernel_size,
    const std::optional<Tensor>& bias,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation) {
  const auto out_sizes = checked_output_sizes(input, weight, kernel_size, stride, padding, dilation);
  // The output takes the input's layout: channels_last in, channels_last out.
  Tensor out = at::empty(out_sizes, input.options().memory_format(depthwise_checks::layout_2d(input)));
  return forward_out(input, weight, bias, conv2d_args(kernel_size, stride, padding, dilation), out_sizes, out);
}

namespace dwconv {
namespace {

// The backward, computed in `layout` (the input's, unless given): its grad_input comes in it.
std::tuple<Tensor, Tensor, Tensor> backward_in(
    const Tensor& grad_output_,
    const Tensor& self_,
    const Tensor& weight_,
    IntArrayRef kernel_size,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    std::array<bool, 3> output_mask,
    std::optional<MemoryFormat> compute_layout) {
  const auto out_sizes = checked_output_sizes(self_, weight_, kernel_size, stride, padding, dilation);
  // dwconv::conv_depthwise2d_backward is registered without the same-device check aten's generated
  // wrappers make: a grad_output elsewhere (the CPU) would reach the kernels as a host pointer.
  TORCH_CHECK(grad_output_.device() == self_.device(), "conv_depthwise2d: grad_output must be on the input's device (",
              self_.device(), "), got ", grad_output_.device());
  depthwise_checks::check_grad_output("conv_depthwise2d", grad_output_, self_, out_sizes);
  const auto args = conv2d_args(kernel_size, stride, padding, dilation);
  const c10::cuda::CUDAGuard device_guard(self_.device());
  check_kernels_run_on(self_.device().index());

  const auto layout = compute_layout.value_or(depthwise_checks::layout_2d(self_));
  const Tensor grad_output = grad_output_.contiguous(layout);
  const auto g = forward_geometry(self_, weight_, args, out_sizes);

  Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) grad_input = at::empty(self_.sizes(), grad_output.options().memory_format(layout));
  if (output_mask[1]) grad_weight = at::empty(weight_.sizes(), grad_output.options());
  if (output_mask[2]) grad_bias = at::empty({weight_.size(0)}, grad_output.options());
  const Tensor input = output_mask[1] ? self_.contiguous(layout) : Tensor();  // the weight gradient's
  // Both gradients asked for (autograd's backward): one kernel, where one computes them together.
  if (output_mask[0] && output_mask[1] && grad_output.numel() > 0 &&
      both_gradients_into(grad_output, input, weight_.contiguous(), grad_input, grad_weight, grad_bias, g)) {
    return std::make_tuple(std::move(grad_input), std::move(grad_weight), std::move(grad_bias));
  }
  if (output_mask[0] && grad_input.numel() > 0) backward_input_into(grad_output, weight_.contiguous(), grad_input, g);
  if (output_mask[1]) {
    if (grad_output.numel() == 0) {
      grad_weight.zero_();  // an empty batch contributes nothing
      if (output_mask[2]) grad_bias.zero_();
    } else {
      grad_weight_into(grad_output, input, grad_weight, grad_bias, g);
    }
  } else if (output_mask[2]) {
    at::sum_out(grad_bias, grad_output, IntArrayRef{0, 2, 3});  // no weight-gradient kernel to sum it on the way
  }
  return std::make_tuple(std::move(grad_input), std::move(grad_weight), std::move(grad_bias));
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> depthwise2d_backward_with_bias_cuda(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    IntArrayRef kernel_size,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    std::array<bool, 3> output_mask) {
  return backward_in(grad_output, self, weight, kernel_size, stride, padding, dilation, output_mask, std::nullopt);
}

std::tuple<Tensor, Tensor> depthwise2d_backward_cuda(
    const Tensor& grad_output,
    const Tensor& self,
    const Tensor& weight,
    IntArrayRef kernel_size,
    IntArrayRef stride,
    IntArrayRef padding,
    IntArrayRef dilation,
    std::array<bool, 2> output_mask) {
  // The stub's caller is upstream's convolution_backward (cuDNN off, or no cuDNN), which hands it a
  // channels_last input as it is and returns grad_input as the stub gives it: upstream's stub computes
  // in NCHW (grad_output made contiguous, the input too for the weight gradient) and gives grad_input
  // contiguous, and so does ours, with the same copies.
  auto [grad_input, grad_weight, grad_bias] =
      backward_in(grad_output, self, weight, kernel_size, stride, padding, dilation,
                  {output_mask[0], output_mask[1], false}, MemoryFormat::Contiguous);
  return std::make_tuple(std::move(grad_input), std::move(grad_weight));
}

}  // namespace dwconv

REGISTER_CUDA_DISPATCH(conv_depthwise2d_backward_stub, &dwconv::depthwise2d_backward_cuda)

}  // namespace at::native
