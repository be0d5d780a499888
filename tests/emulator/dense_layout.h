#pragma once
// Whether a dense 4D tensor (N, C, H, W sizes, any strides) is contiguous in torch's sense, for
// the CPU drivers that hand the kernel choice what DepthwiseConv2d.cu reads off real tensors.

#include <array>
#include <cstdint>

namespace dwconv_emu {

// torch's rule: dims of size 1 do not count, nor does anything in an empty tensor. `order`: the
// dims from the innermost out.
inline bool dense_in(const std::array<int64_t, 4>& sizes, const std::array<int64_t, 4>& strides,
                     const std::array<int, 4>& order) {
  if (sizes[0] * sizes[1] * sizes[2] * sizes[3] == 0) return true;
  int64_t expected = 1;
  for (const int d : order) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

inline bool is_contiguous(const std::array<int64_t, 4>& sizes, const std::array<int64_t, 4>& strides) {
  return dense_in(sizes, strides, {3, 2, 1, 0});
}

inline bool is_channels_last_contiguous(const std::array<int64_t, 4>& sizes, const std::array<int64_t, 4>& strides) {
  return dense_in(sizes, strides, {1, 3, 2, 0});
}

}  // namespace dwconv_emu
