// The overlay's registration: turns a stock torch 2.11.0 into the patched one
// by registering the patch set's depthwise kernels for aten's CUDA key, pointing
// conv_depthwise2d_backward_stub at the patch set's kernel, and registering what
// a patched build gets from codegen on the merged yaml (OverlayGenerated.h): the
// CUDA and Meta kernels of the operators our overrides add, and the Autograd kernels
// of every operator whose derivatives they set.
//
// Built with the patch set's sources into libdwconv_overlay.so, linked with
// -Bsymbolic: inside the library, at::native::conv_depthwise2d_cuda(_out) bind
// to the patch set's definitions, not to libtorch_cuda's same-named ones.
//
// The registrations are torch::Library objects owned here rather than static
// TORCH_LIBRARY_IMPLs, so that they can be dropped again: torch.ops.dwconv.set_enabled(False)
// hands the ops back to upstream's kernels and formulas in this process.
// The routing's switches (torch.ops.dwconv.set_routing and friends) come with the
// routing's source, DepthwiseConvRouting.cpp, as in a patched build. (The new
// operators' schemas stay defined; disabled, they have no kernels, as in stock torch.)

#include <ATen/Version.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/native/cuda/DepthwiseConv2d.h>
#include <ATen/ops/_conv_depthwise2d_native.h>
#include "OverlayGenerated.h"
#include <ATen/core/op_registration/adaption.h>
#include <torch/library.h>

#include <iostream>
#include <memory>
#include <mutex>
#include <string>

#ifndef DWCONV_PINNED_COMMIT
#error "compile with -DDWCONV_PINNED_COMMIT=\"<the pinned PyTorch commit>\" (build_scripts does)"
#endif

namespace at::native {
// Upstream's CUDA kernel of the stub: exported by libtorch_cuda, declared by no header.
std::tuple<Tensor, Tensor> conv_depthwise2d_backward_cuda(
    const Tensor& grad_output, const Tensor& self, const Tensor& weight, IntArrayRef kernel_size,
    IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, std::array<bool, 2> output_mask);
} // namespace at::native

namespace {

// The same signatures as the codegen'd CUDA wrappers of these ops (RegisterCUDA.cpp).
at::Tensor conv_depthwise2d(const at::Tensor& self, const at::Tensor& weight, c10::SymIntArrayRef kernel_size,
                            const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                            c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation) {
  std::optional<c10::Device> common_device = std::nullopt;
  c10::impl::check_and_update_common_device(common_device, self, "dwconv::conv_depthwise2d", "self");
  c10::impl::check_and_update_common_device(common_device, weight, "dwconv::conv_depthwise2d", "weight");
  c10::impl::check_and_update_common_device(common_device, bias, "dwconv::conv_depthwise2d", "bias");
  return at::native::conv_depthwise2d_cuda(
      self, weight, C10_AS_INTARRAYREF_SLOW(kernel_size), bias, C10_AS_INTARRAYREF_SLOW(stride),
      C10_AS_INTARRAYREF_SLOW(padding), C10_AS_INTARRAYREF_SLOW(dilation));
}

at::Tensor& conv_depthwise2d_out(const at::Tensor& self, const at::Tensor& weight, c10::SymIntArrayRef kernel_size,
                                 const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                 c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, at::Tensor& out) {
  std::optional<c10::Device> common_device = std::nullopt;
  c10::impl::check_and_update_common_device(common_device, out, "dwconv::conv_depthwise2d_out", "out");
  c10::impl::check_and_update_common_device(common_device, self, "dwconv::conv_depthwise2d_out", "self");
  c10::impl::check_and_update_common_device(common_device, weight, "dwconv::conv_depthwise2d_out", "weight");
  c10::impl::check_and_update_common_device(common_device, bias, "dwconv::conv_depthwise2d_out", "bias");
  return at::native::conv_depthwise2d_cuda_out(
      self, weight, C10_AS_INTARRAYREF_SLOW(kernel_size), bias, C10_AS_INTARRAYREF_SLOW(stride),
      C10_AS_INTARRAYREF_SLOW(padding), C10_AS_INTARRAYREF_SLOW(dilation), out);
}

// Why this torch is not the one the overlay was built against, or "" when it is.
// (at::show_config() carries the commit libtorch was built from.)
std::string torch_mismatch() {
  const std::string config = at::show_config();
  const std::string key = "COMMIT_SHA=";
  if (config.find(key + DWCONV_PINNED_COMMIT) != std::string::npos) {
    return "";
  }
  const auto at = config.find(key);
  const std::string found =
      at == std::string::npos ? "an unknown commit" : config.substr(at + key.size(), 40);
  return "the dwconv overlay is built for torch commit " DWCONV_PINNED_COMMIT ", but this libtorch is " + found;
}

std::mutex registration_mutex;
std::unique_ptr<torch::Library> aten_cuda_kernels;  // non-null while enabled
std::unique_ptr<torch::Library> aten_meta_kernels;  // likewise
std::unique_ptr<torch::Library> aten_autograd_kernels;  // likewise

void set_enabled(bool enabled) {
  const std::lock_guard<std::mutex> lock(registration_mutex);
  if (enabled == (aten_cuda_kernels != nullptr)) {
    return;
  }
  if (enabled) {
    const std::string problem = torch_mismatch();
    TORCH_CHECK(problem.empty(), problem);
    auto kernels = std::make_unique<torch::Library>(
        torch::Library::IMPL, "aten", c10::DispatchKey::CUDA, __FILE__, __LINE__);
    kernels->impl("_conv_depthwise2d", TORCH_FN(conv_depthwise2d));
    kernels->impl("_conv_depthwise2d.out", TORCH_FN(conv_depthwise2d_out));
    dwconv_overlay::register_CUDA_kernels(*kernels);
    auto meta = std::make_unique<torch::Library>(
        torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
    dwconv_overlay::register_Meta_kernels(*meta);
    auto autograd = std::make_unique<torch::Library>(
        torch::Library::IMPL, "aten", c10::DispatchKey::Autograd, __FILE__, __LINE__);
    dwconv_overlay::register_autograd_kernels(*autograd);
    aten_cuda_kernels = std::move(kernels);
    aten_meta_kernels = std::move(meta);
    aten_autograd_kernels = std::move(autograd);
    at::native::conv_depthwise2d_backward_stub.set_cuda_dispatch_ptr(&at::native::dwconv::depthwise2d_backward_cuda);
  } else {
    aten_cuda_kernels.reset();  // the dispatcher goes back to upstream's kernels
    aten_meta_kernels.reset();
    aten_autograd_kernels.reset();
    at::native::conv_depthwise2d_backward_stub.set_cuda_dispatch_ptr(&at::native::conv_depthwise2d_backward_cuda);
  }
}

bool is_enabled() {
  const std::lock_guard<std::mutex> lock(registration_mutex);
  return aten_cuda_kernels != nullptr;
}

// Loading the library patches torch, unless it is another torch: then it says so and
// leaves torch alone (an exception cannot leave a library's static initialisation).
const bool enabled_on_load = [] {
  const std::string problem = torch_mismatch();
  if (!problem.empty()) {
    std::cerr << problem << "; not patching it" << std::endl;
    return false;
  }
  set_enabled(true);
  return true;
}();

} // namespace

namespace torch::autograd::generated::dwconv::VariableType {
const at::Tensor& unpack(const at::Tensor& t, const char* name, int pos) {
  TORCH_CHECK(t.defined(), "Expected a proper Tensor but got None (or an undefined Tensor in C++) for argument #",
              pos, " '", name, "'");
  return t;
}
} // namespace torch::autograd::generated::dwconv::VariableType

// (DepthwiseConvRouting.cpp adds the routing's switches to the same namespace.)
TORCH_LIBRARY_FRAGMENT(dwconv, m) {
  m.def("set_enabled(bool enabled) -> ()", &set_enabled);
  m.def("enabled() -> bool", &is_enabled);
}
