// The switches of the 2D depthwise kernels' specialised paths (DepthwiseConv2dKernelPaths.h):
// DWCONV_DISABLE_KERNELS (read at first use) and torch.ops.dwconv.disable_kernels /
// disabled_kernels / kernel_paths, registered here so that a patched build and the overlay
// both have them.

#include <ATen/native/cuda/DepthwiseConv2dKernelPaths.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace at::native::dwconv {
namespace {

std::string known_names() {
  std::string text;
  for (const auto name : kKernelPathNames) {
    text += text.empty() ? "" : ", ";
    text += name;
  }
  return text;
}

KernelPathMask mask_or_error(const std::vector<std::string>& names, const char* what) {
  KernelPathMask mask = 0;
  std::string unknown;
  TORCH_CHECK(kernel_path_mask(names, &mask, &unknown), what, ": no depthwise kernel path is called '", unknown,
              "'; the paths are ", known_names());
  return mask;
}

KernelPathMask mask_from_environment() {
  const char* text = std::getenv("DWCONV_DISABLE_KERNELS");
  return text == nullptr ? 0 : mask_or_error(split_kernel_path_list(text), "DWCONV_DISABLE_KERNELS");
}

void disable_kernels_op(const std::vector<std::string>& names) {
  disabled_kernel_paths().store(mask_or_error(names, "dwconv.disable_kernels"));
}

std::vector<std::string> disabled_kernels_op() {
  return kernel_path_names(disabled_kernel_paths().load());
}

std::vector<std::string> kernel_paths_op() {
  return kernel_path_names(~KernelPathMask{0});
}

} // namespace

std::atomic<KernelPathMask>& disabled_kernel_paths() {
  static std::atomic<KernelPathMask> mask{mask_from_environment()};
  return mask;
}

} // namespace at::native::dwconv

TORCH_LIBRARY_FRAGMENT(dwconv, m) {
  m.def("disable_kernels(str[] names) -> ()", &at::native::dwconv::disable_kernels_op);
  m.def("disabled_kernels() -> str[]", &at::native::dwconv::disabled_kernels_op);
  m.def("kernel_paths() -> str[]", &at::native::dwconv::kernel_paths_op);
}
