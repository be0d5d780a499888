#pragma once
// What build_scripts/torchgen_overlay.py generates for the overlay from the merged yaml
// (upstream codegen, run by L0): the registrations a patched build gets from codegen
// and a stock torch lacks. RegisterOverlay.cpp calls them while the overlay is enabled.

#include <torch/library.h>

namespace dwconv_overlay {

// Autograd kernels of every operator whose derivatives our overrides set.
void register_autograd_kernels(torch::Library& autograd);

// CUDA wrappers of every kernel our native_functions overrides name for the CUDA key.
void register_CUDA_kernels(torch::Library& cuda);

// Meta wrappers of every kernel our native_functions overrides name for the Meta key.
void register_Meta_kernels(torch::Library& meta);

} // namespace dwconv_overlay

// The generated Autograd kernels call VariableType::unpack(), which libtorch defines
// but does not export; the overlay defines its own (RegisterOverlay.cpp) in the
// namespace torchgen_overlay.py gives the kernels.
namespace torch::autograd::generated::dwconv::VariableType {
const at::Tensor& unpack(const at::Tensor& t, const char* name, int pos);
} // namespace torch::autograd::generated::dwconv::VariableType
