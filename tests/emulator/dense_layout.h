#pragma once
// A dense 4D tensor's layout (N, C, H, W sizes, laid out NCHW or channels_last) and whether it is
// contiguous in torch's sense, for the CPU drivers that hand the kernel choice what
// DepthwiseConv2d.cu reads off real tensors.

#include <array>
#include <cstdint>

namespace dwconv_emu {

struct DenseLayout {
  std::array<int64_t, 4> sizes, strides;

  DenseLayout(const std::array<int64_t, 4>& sizes_, bool channels_last) : sizes(sizes_) {
    const auto [n, c, h, w] = sizes;
    strides = channels_last ? std::array<int64_t, 4>{h * w * c, 1, w * c, c}
                            : std::array<int64_t, 4>{c * h * w, h * w, w, 1};
  }

  int64_t numel() const { return sizes[0] * sizes[1] * sizes[2] * sizes[3]; }
  bool is_contiguous() const { return dense_in({3, 2, 1, 0}); }
  bool is_channels_last_contiguous() const { return dense_in({1, 3, 2, 0}); }

 private:
  // torch's rule: dims of size 1 do not count, nor does anything in an empty tensor. `order`: the
  // dims from the innermost out.
  bool dense_in(const std::array<int, 4>& order) const {
    if (numel() == 0) return true;
    int64_t expected = 1;
    for (const int d : order) {
      if (sizes[d] == 1) continue;
      if (strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
};

}  // namespace dwconv_emu
