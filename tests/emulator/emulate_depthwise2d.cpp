// Runs the depthwise 2D kernels (the family headers DepthwiseConv2d{General,RegisterTiled,LargeFilter,Conv1d,
// Stride2,RingGradWeight}.cuh) on the CPU (through cuda_emulation.h), with the launch plans the real host code makes, over a sweep of
// shapes: every kernel, both layouts, 32- and 64-bit indexing, float, double, half and bfloat16,
// against float64 loops; then each pass as DepthwiseConv2d.cu runs it, its kernel chosen
// (DepthwiseConv2dKernelChoice.cuh) and launched (DepthwiseConv2dLaunch.cuh) for an H100. Outputs are poisoned with NaN first, so a value the kernels
// do not write fails. Prints each failure and ends with "N passed, M failed".

#include "emulate_depthwise2d_prelude.h"

#define DWCONV_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  dwconv_emu::launch(grid, block, shared_bytes, kernel, __VA_ARGS__)

#include <ATen/native/cuda/DepthwiseConv2dLaunch.cuh>

using namespace at::native::dwconv;

namespace {

// The kernel headers whose kernels the sweep checks directly. Built with DWCONV_EMULATE_ONLY=<name>
// (a header's name after DepthwiseConv2d: RegisterTiled), the sweep checks that header's kernels
// alone and nothing is dispatched: the rest is never instantiated, and a planted bug in that header
// is caught by a build of a third of the time (tests/test_emulator.py's first build of one).
enum class KernelHeader {
  kAll, kGeneral, kConv1d, kRegisterTiled, kLargeFilter, kChannelsLastStream, kChannelsLastMma, kPixel, kStride2,
  kRingGradWeight, kWindowGradWeight, kWalkGradWeight, kMmaGradWeight, kPlaneStream
};
#ifdef DWCONV_EMULATE_ONLY
#define DWCONV_HEADER_OF(name) DWCONV_HEADER_OF_NAME(name)
#define DWCONV_HEADER_OF_NAME(name) KernelHeader::k##name
constexpr KernelHeader kEmulatedHeader = DWCONV_HEADER_OF(DWCONV_EMULATE_ONLY);
#else
constexpr KernelHeader kEmulatedHeader = KernelHeader::kAll;
#endif

constexpr bool emulates(KernelHeader header) {
  return kEmulatedHeader == KernelHeader::kAll || kEmulatedHeader == header;
}

constexpr int kEmulatedSMs = 3;  // small grids: the grid-stride loops and slices get exercised
// The tiled plans for a small GPU (largest tiles) and for a very large one (tiles shrunk
// for more blocks): both shapes of tile get checked.
constexpr int64_t kMinBlocks[] = {kEmulatedSMs, 4096};

struct Case {
  int n, c, m, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
  bool bias;
  int oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
  std::string str() const {
    char text[200];
    std::snprintf(text, sizeof text, "n%d c%d m%d %dx%d k%dx%d s%d,%d p%d,%d d%d,%d%s", n, c, m, h, w, kh, kw,
                  sh, sw, ph, pw, dh, dw, bias ? " bias" : "");
    return text;
  }
};

// Writes past either end of a Buffer, found when it is freed.
int out_of_bounds_writes = 0;

// 64-byte aligned memory, as device buffers are (the CUDA caching allocator's are 512-byte
// aligned), so that paths chosen by a buffer's address are taken the same way on every run.
// Guard zones of NaN bytes lie on both sides: a kernel reading past an end gets NaN (a failed
// check, not a crash), and one writing there is counted when the buffer is freed.
template <typename T>
struct DeviceAlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};
  static constexpr size_t kGuardBytes = 64 * 1024;
  static constexpr unsigned char kGuardByte = 0xff;
  DeviceAlignedAllocator() = default;
  template <typename U>
  DeviceAlignedAllocator(const DeviceAlignedAllocator<U>&) {}
  T* allocate(size_t n) {
    auto* block = static_cast<unsigned char*>(::operator new(n * sizeof(T) + 2 * kGuardBytes, kAlignment));
    std::memset(block, kGuardByte, kGuardBytes);
    std::memset(block + kGuardBytes + n * sizeof(T), kGuardByte, kGuardBytes);
    dwconv_emu::memory_profile::global_region(block, n * sizeof(T) + 2 * kGuardBytes, true);
    return reinterpret_cast<T*>(block + kGuardBytes);
  }
  void deallocate(T* p, size_t n) {
    auto* block = reinterpret_cast<unsigned char*>(p) - kGuardBytes;
    dwconv_emu::memory_profile::global_region(block, 0, false);
    const unsigned char* after = block + kGuardBytes + n * sizeof(T);
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (block[i] != kGuardByte || after[i] != kGuardByte) {
        ++out_of_bounds_writes;
        break;
      }
    }
    ::operator delete(block, kAlignment);
  }
  bool operator==(const DeviceAlignedAllocator&) const { return true; }
};

template <typename T>
using Buffer = std::vector<T, DeviceAlignedAllocator<T>>;

// The GPUs the plans are made for, with as many SMs as a check wants: an sm_90 SM (H100, H200:
// 2048 threads, 32 blocks, 228 KB of shared memory) and an sm_86 one (RTX 30, A10: 1536 threads,
// 16 blocks, 100 KB), each with 64K registers and 1 KB of shared memory reserved a block.
GpuLimits sm90_gpu(int64_t sms) {
  return {sms, 2048, 32, 64 * 1024, 228 * 1024, 1024, 90};
}

GpuLimits sm86_gpu(int64_t sms) {
  return {sms, 1536, 16, 64 * 1024, 100 * 1024, 1024, 86};
}

// A logical NCHW tensor of doubles; `store` lays it out as the kernels' buffer (aligned as a device's).
struct Tensor4 {
  int n, c, h, w;
  std::vector<double> v;
  // Empty, or where v holds a non-finite value or this one does, the other value a kernel may
  // give instead (grad_weight's sums with the padding's products kept: see Problem).
  std::vector<double> or_else;
  Tensor4(int n_, int c_, int h_, int w_) : n(n_), c(c_), h(h_), w(w_), v(size_t(n_) * c_ * h_ * w_, 0.0) {}
  size_t index(int i, int j, int y, int x) const { return ((size_t(i) * c + j) * h + y) * w + x; }
  double& at(int i, int j, int y, int x) { return v[index(i, j, y, x)]; }
  double at(int i, int j, int y, int x) const { return v[index(i, j, y, x)]; }
  Strides4 strides(bool channels_last) const {
    return channels_last ? Strides4{int64_t(h) * w * c, 1, int64_t(w) * c, c}
                         : Strides4{int64_t(c) * h * w, int64_t(h) * w, w, 1};
  }
  template <typename T>
  Buffer<T> store(bool channels_last) const {
    Buffer<T> out(v.size());
    const auto s = strides(channels_last);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < c; ++j)
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x) out[i * s.n + j * s.c + y * s.h + x * s.w] = T(at(i, j, y, x));
    return out;
  }
};

struct Problem {
  Case k;
  Tensor4 input, weight, grad_output;
  std::vector<double> bias;
  Tensor4 output, grad_input, grad_weight, grad_bias;  // float64 references (grad_bias: (1, C, 1, 1))

  // NonFinite::input: the input holds +inf at each plane's last pixel, -inf at the middle of its
  // last column in every other plane and NaN in the middle of the first plane's first row, where
  // the grad_output columns and rows past a tile's edge (zeros that are not outputs) meet them.
  // NonFinite::grad_output: grad_output holds +inf at each plane's first pixel, -inf at the last in
  // every other plane and NaN in the middle of the first plane's first column, the outputs whose
  // windows reach into the padding. There the weight gradient has two answers: torch's float64 on
  // the CPU multiplies the padding's zeros in (0 x inf = NaN), upstream's CUDA kernel leaves those
  // terms out. A tiled kernel multiplies the zeros it staged, a direct one skips them: either
  // passes, element by element (grad_weight.or_else), and nothing else does.
  enum class NonFinite { none, input, grad_output };
  explicit Problem(const Case& c, std::mt19937& rng, NonFinite non_finite = NonFinite::none)
      : k(c),
        input(c.n, c.c, c.h, c.w),
        weight(c.c * c.m, 1, c.kh, c.kw),
        grad_output(c.n, c.c * c.m, c.oh(), c.ow()),
        bias(size_t(c.c) * c.m),
        output(c.n, c.c * c.m, c.oh(), c.ow()),
        grad_input(c.n, c.c, c.h, c.w),
        grad_weight(c.c * c.m, 1, c.kh, c.kw),
        grad_bias(1, c.c * c.m, 1, 1) {
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (auto* t : {&input, &weight, &grad_output})
      for (auto& x : t->v) x = uniform(rng);
    for (auto& x : bias) x = c.bias ? uniform(rng) : 0.0;
    const double inf = std::numeric_limits<double>::infinity();
    if (non_finite == NonFinite::input) {
      for (int i = 0; i < c.n; ++i)
        for (int ci = 0; ci < c.c; ++ci) {
          input.at(i, ci, c.h - 1, c.w - 1) = inf;
          if (ci % 2 == 1) input.at(i, ci, c.h / 2, c.w - 1) = -inf;
        }
      input.at(0, 0, 0, c.w / 2) = std::numeric_limits<double>::quiet_NaN();
    }
    const bool keeps_padding_terms = non_finite == NonFinite::grad_output;  // grad_weight.or_else's sums
    Tensor4 zero_padded_grad_weight(grad_weight.n, grad_weight.c, grad_weight.h, grad_weight.w);
    if (keeps_padding_terms) {
      for (int i = 0; i < c.n; ++i)
        for (int co = 0; co < c.c * c.m; ++co) {
          grad_output.at(i, co, 0, 0) = inf;
          if (co % 2 == 1) grad_output.at(i, co, c.oh() - 1, c.ow() - 1) = -inf;
        }
      grad_output.at(0, 0, c.oh() / 2, 0) = std::numeric_limits<double>::quiet_NaN();
    }
    for (int i = 0; i < c.n; ++i)
      for (int co = 0; co < c.c * c.m; ++co)
        for (int y = 0; y < c.oh(); ++y)
          for (int x = 0; x < c.ow(); ++x) {
            double sum = bias[co];
            for (int a = 0; a < c.kh; ++a)
              for (int b = 0; b < c.kw; ++b) {
                const int sy = y * c.sh - c.ph + a * c.dh, sx = x * c.sw - c.pw + b * c.dw;
                if (sy < 0 || sy >= c.h || sx < 0 || sx >= c.w) {
                  if (keeps_padding_terms) zero_padded_grad_weight.at(co, 0, a, b) += grad_output.at(i, co, y, x) * 0.0;
                  continue;
                }
                const double in = input.at(i, co / c.m, sy, sx);
                sum += in * weight.at(co, 0, a, b);
                grad_input.at(i, co / c.m, sy, sx) += grad_output.at(i, co, y, x) * weight.at(co, 0, a, b);
                grad_weight.at(co, 0, a, b) += grad_output.at(i, co, y, x) * in;
                if (keeps_padding_terms) zero_padded_grad_weight.at(co, 0, a, b) += grad_output.at(i, co, y, x) * in;
              }
            output.at(i, co, y, x) = sum;
            grad_bias.at(0, co, 0, 0) += grad_output.at(i, co, y, x);
          }
    if (keeps_padding_terms) grad_weight.or_else = std::move(zero_padded_grad_weight.v);
  }

  PassGeometry geometry() const {
    return PassGeometry{k.n, k.c, k.h, k.w, int64_t(k.c) * k.m, k.oh(), k.ow(), k.kh, k.kw,
                        k.sh, k.sw, k.ph, k.pw, k.dh, k.dw, k.m};
  }
};

// An output buffer filled with NaN, so that an element the kernels do not write fails.
template <typename T>
Buffer<T> poisoned(size_t size) {
  return Buffer<T>(size, T(std::numeric_limits<float>::quiet_NaN()));
}

int passed = 0, failed = 0;

template <typename T>
double tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-11;
  if constexpr (std::is_same_v<T, float>) return 2e-5;
  return 2e-2;  // half and bfloat16: the inputs are rounded to them, sums accumulate in float
}

std::map<std::string, int> checks_per_kernel;
// The checks of the kernels whose blocks have thread groups (RegisterTile::groups > 1), by kernel.
std::map<std::string, int> grouped_checks_per_kernel;

// `kernel` names the kernel and layout checked, `detail` the dtype, indexing and plan.
template <typename T>
void expect_close(const std::string& kernel, const std::string& detail, const Case& k, const Buffer<T>& got, const Tensor4& ref,
                  bool channels_last, double reduction_terms) {
  const auto s = ref.strides(channels_last);
  double worst = 0.0;
  int bad = 0;
  for (int i = 0; i < ref.n; ++i)
    for (int j = 0; j < ref.c; ++j)
      for (int y = 0; y < ref.h; ++y)
        for (int x = 0; x < ref.w; ++x) {
          const double value = double(got[i * s.n + j * s.c + y * s.h + x * s.w]);
          const double expected = ref.at(i, j, y, x);
          const auto same = [value](double non_finite) {  // the same inf, or NaN
            return value == non_finite || (std::isnan(value) && std::isnan(non_finite));
          };
          if (!ref.or_else.empty()) {
            const double other = ref.or_else[ref.index(i, j, y, x)];
            if (!std::isfinite(other) && same(other)) continue;
          }
          if (!std::isfinite(expected)) {  // a non-finite input's
            if (!same(expected)) ++bad;
            continue;
          }
          const double error = std::fabs(value - expected);
          const double allowed = tolerance<T>() * std::sqrt(reduction_terms) * (1.0 + std::fabs(expected));
          if (!(error <= allowed)) ++bad;  // NaN (an unwritten element) fails too
          if (!(error <= worst)) worst = error;
        }
  ++checks_per_kernel[kernel];
  const std::string what = kernel + " " + detail;
  if (bad == 0) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAIL %s [%s]: %d elements off, worst error %g\n", what.c_str(), k.str().c_str(), bad, worst);
  }
}

dim3 grid_for(int64_t total) {
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, kEmulatedSMs * 2);
  return dim3(unsigned(std::max<int64_t>(blocks, 1)));
}

std::string vectors_tag(const ChannelsLastLaunch& plan) {
  return " vectors=" + std::to_string(plan.block.x) + " rows=" + std::to_string(plan.block.y / plan.tile.lanes_w) +
         " cols=" + std::to_string(plan.tile.cols_per_thread);
}

// How a kernel compiled for several strides is named in the counts: " stride 2", or nothing at stride 1.
std::string stride_tag(const PassGeometry& g) {
  return g.stride_h == 1 ? "" : " stride " + std::to_string(g.stride_h);
}

std::string register_tag(const RegisterTiledLaunch& plan) {
  return " planes=" + std::to_string(plan.block.x) + " bx=" + std::to_string(plan.block.y) +
         " by=" + std::to_string(plan.block.z / plan.tile.groups) + " pitch=" + std::to_string(plan.tile.pitch) +
         (plan.tile.groups > 1 ? " groups=" + std::to_string(plan.tile.groups) : "") +
         (plan.tile.vector_loads ? " vector loads" : "");
}

// How the register tiles get staged: a value at a time, and from 16-byte vectors where src allows.
std::vector<bool> staging_modes(const PassGeometry& g, const void* src, size_t element_size) {
  if (register_tile_vector_loads(g, src, element_size)) return {false, true};
  return {false};
}

// The register-tiled kernel, where the pass has one (32-bit indexing only, as on the GPU).
template <typename T, typename index_t, bool kBackward>
void check_register_tiled(const std::string& kernel, const std::string& tag, const Problem& p,
                          const PassGeometry& g, const Buffer<T>& src, const T* bias, const Tensor4& ref,
                          double terms) {
  using acc_t = at::acc_type<T, true>;
  if constexpr (std::is_same_v<index_t, int32_t>) {
    for (const int64_t min_blocks : kMinBlocks) {
      auto plan = plan_register_tiled<acc_t>(g, sm90_gpu(min_blocks));
      if (!plan) continue;
      const auto weight = p.weight.store<T>(false);
      for (const bool vector_loads : staging_modes(g, src.data(), sizeof(T))) {
        auto out = poisoned<T>(ref.v.size());
        plan->tile.row_access = register_tile_row_access(g, out.data(), sizeof(T));
        plan->tile.vector_loads = vector_loads;
        dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes,
                           register_tiled_kernel_for<T, index_t, kBackward>(g.kernel_h, g.stride_h), src.data(), weight.data(),
                           bias, out.data(), g, plan->tile);
        expect_close(kernel + stride_tag(g) + (plan->tile.row_access ? " row stores" : ""), tag + register_tag(*plan),
                     p.k, out, ref, false, terms);
        if (plan->tile.groups > 1) ++grouped_checks_per_kernel["register-tiled NCHW"];
      }
    }
  }
}

// The large-filter kernel, where the pass has one (32-bit indexing only, as on the GPU), in
// both layouts: `src` and `ref` are the pass's source and float64 destination.
template <typename T, typename index_t, bool kBackward>
void check_large_filter(const std::string& pass, const std::string& tag, const Problem& p, const PassGeometry& g,
                        const Tensor4& src, const T* bias, const Tensor4& ref, double terms) {
  using acc_t = at::acc_type<T, true>;
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto weight = p.weight.store<T>(false);
    for (const bool channels_last : {false, true}) {
      const auto src_values = src.store<T>(channels_last);
      for (const int64_t min_blocks : kMinBlocks) {
        auto plan = plan_large_filter<acc_t>(g, sm90_gpu(min_blocks));
        if (!plan) continue;
        auto out = poisoned<T>(ref.v.size());
        plan->tile.row_access = !channels_last && register_tile_row_access(g, out.data(), sizeof(T));
        dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes, large_filter_kernel<T, index_t, kBackward>,
                           src_values.data(), weight.data(), bias, out.data(), g, plan->tile,
                           src.strides(channels_last), ref.strides(channels_last));
        expect_close(pass + " large-filter " + (channels_last ? "NHWC" : "NCHW") +
                         (plan->tile.row_access ? " row stores" : ""),
                     tag + register_tag(*plan), p.k, out, ref, channels_last, terms);
        if (plan->tile.groups > 1) ++grouped_checks_per_kernel["large-filter"];
      }
    }
  }
}

// The row kernel, where the pass has one (32-bit indexing only, as on the GPU), planned for a
// one-SM GPU (threads walking several chunks) and a large one.
template <typename T, typename index_t, bool kBackward>
void check_row(const std::string& kernel, const std::string& tag, const Problem& p, const PassGeometry& g,
               const Tensor4& src, const T* bias, const Tensor4& ref, double terms) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    if (!has_row_kernel(g)) return;
    const auto weight = p.weight.store<T>(false);
    const auto aligned_src = src.store<T>(false);
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      const auto plan = plan_row(g, sizeof(T), gpu);
      auto out = poisoned<T>(ref.v.size());
      dwconv_emu::launch(plan.grid, dim3(kThreads), 0, row_kernel_for<T, index_t, kBackward>(g.kernel_w),
                         aligned_src.data(), weight.data(), bias, out.data(), g, plan.chunks_per_row);
      expect_close(kernel, tag + " blocks=" + std::to_string(plan.grid.x), p.k, out, ref, false, terms);
    }
  }
}

// The column kernel, where the pass has one (32-bit indexing only, as on the GPU), in a grid of
// one block (threads walking several segments) and of as many as it needs.
template <typename T, typename index_t, bool kBackward>
void check_column(const std::string& kernel, const std::string& tag, const Problem& p, const PassGeometry& g,
                  const Tensor4& src, const T* bias, const Tensor4& ref, double terms) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    if (!has_column_kernel(g, kVector16<T>)) return;
    const auto weight = p.weight.store<T>(false);
    const auto aligned_src = src.store<T>(true);
    for (const int64_t max_blocks : {int64_t(1), int64_t(1) << 20}) {
      const dim3 grid = plan_column(g, kVector16<T>, max_blocks);
      auto out = poisoned<T>(ref.v.size());
      dwconv_emu::launch(grid, dim3(kThreads), 0, column_kernel_for<T, index_t, kBackward>(g.kernel_w),
                         aligned_src.data(), weight.data(), bias, out.data(), g);
      expect_close(kernel, tag + " blocks=" + std::to_string(grid.x), p.k, out, ref, true, terms);
    }
  }
}

// The register-tiled channels_last kernel, where the pass has one (32-bit indexing only, as on the
// GPU), planned for a small GPU and a very large one.
template <typename T, typename index_t, bool kBackward>
void check_channels_last_register_tiled(const std::string& pass, const std::string& tag, const Problem& p,
                                        const PassGeometry& g, const Tensor4& src, const T* bias,
                                        const Tensor4& ref, double terms) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto weight = p.weight.store<T>(false);
    const auto in = src.store<T>(true);
    for (const int64_t min_blocks : kMinBlocks) {
      const auto plan = plan_channels_last_register_tiled<T>(g, min_blocks);
      if (!plan) continue;
      auto out = poisoned<T>(ref.v.size());
      dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes,
                         channels_last_register_tiled_kernel_for<T, index_t, kBackward>(g.kernel_h, g.stride_h,
                                                                                                plan->three_blocks),
                         in.data(), weight.data(), bias, out.data(), g, plan->tile);
      expect_close(pass + " register-tiled NHWC" + stride_tag(g), tag + vectors_tag(*plan), p.k, out, ref, true,
                   terms);
    }
  }
}

// The streamed channels_last kernel, where the pass has one (32-bit indexing only, as on the GPU),
// planned for a one-SM GPU, and the same strips in bands of a whole plane (the ring of rows goes
// round) and of 3 steps (the first step with copies over rows a step has read).
template <typename T, typename index_t, bool kBackward>
void check_channels_last_stream(const std::string& pass, const std::string& tag, const Problem& p,
                                const PassGeometry& g, const Tensor4& src, const T* bias, const Tensor4& ref,
                                double terms) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto weight = p.weight.store<T>(false);
    const auto in = src.store<T>(true);
    const auto planned = plan_channels_last_stream<T>(g, sm90_gpu(1), true);
    if (!planned) return;
    for (const auto& plan : {planned, with_stream_steps(*planned, g, g.dst_h), with_stream_steps(*planned, g, 3)}) {
      if (!plan) continue;
      auto out = poisoned<T>(ref.v.size());
      dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes,
                         channels_last_stream_kernel_for<T, kBackward>(g.kernel_h, g.stride_h), in.data(),
                         weight.data(), bias, out.data(), g, plan->stream);
      expect_close(pass + " streamed NHWC" + stride_tag(g),
                   tag + " vectors=" + std::to_string(plan->block.x) + " steps=" + std::to_string(plan->stream.steps),
                   p.k, out, ref, true, terms);
    }
  }
}

// The tensor-core channels_last kernel, where the pass has one (bfloat16 and half, 32-bit indexing
// only, as on the GPU), planned for a one-SM GPU with the channels_last_mma_three_blocks path on and,
// at 3x3, off (two blocks' bands, and tasks of two tiles where strips are wider than 16); each plan
// also with the same strips in bands of a whole plane (the ring of rows goes round) and of 3 steps.
template <typename T, typename index_t, bool kBackward>
void check_channels_last_mma(const std::string& pass, const std::string& tag, const Problem& p,
                             const PassGeometry& g, const Tensor4& src, const T* bias, const Tensor4& ref,
                             double terms) {
  if constexpr (std::is_same_v<index_t, int32_t> && sizeof(T) == 2) {
    const auto weight = p.weight.store<T>(false);
    const auto in = src.store<T>(true);
    const auto three_blocks = plan_channels_last_mma<T>(g, sm90_gpu(1), true, true);
    const auto two_blocks = plan_channels_last_mma<T>(g, sm90_gpu(1), false, true);
    if (!three_blocks) return;
    std::vector<std::optional<ChannelsLastMmaLaunch>> plans;
    const auto add_with_its_bands = [&](const ChannelsLastMmaLaunch& planned) {
      plans.insert(plans.end(), {planned, with_mma_steps(planned, g, g.dst_h), with_mma_steps(planned, g, 3)});
    };
    add_with_its_bands(*three_blocks);
    if (two_blocks && (two_blocks->mma.tiles != three_blocks->mma.tiles ||
                       two_blocks->mma.three_blocks != three_blocks->mma.three_blocks)) {
      add_with_its_bands(*two_blocks);
    }
    for (const auto& plan : plans) {
      if (!plan) continue;
      auto out = poisoned<T>(ref.v.size());
      dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes,
                         channels_last_mma_kernel_for<T, kBackward>(g.kernel_h, g.stride_h, plan->mma.tiles,
                                                                    plan->mma.three_blocks),
                         in.data(), weight.data(), bias,
                         out.data(), g, plan->mma);
      expect_close(pass + " tensor-core NHWC" + stride_tag(g),
                   tag + " vectors=" + std::to_string(plan->block.x) + " step rows=" +
                       std::to_string(plan->mma.step_rows) + " steps=" + std::to_string(plan->mma.ring.steps) +
                       " tiles=" + std::to_string(plan->mma.tiles) + (plan->mma.three_blocks ? " three blocks" : ""),
                   p.k, out, ref, true, terms);
    }
  }
}

// The pixel kernel, where the pass has one (32-bit indexing only, as on the GPU), in both layouts,
// planned for a one-SM GPU where that holds the pass (blocks under kThreads threads) and for a
// very large one (blocks of kThreads).
template <typename T, typename index_t, bool kBackward>
void check_pixel(const std::string& pass, const std::string& tag, const Problem& p, const PassGeometry& g,
                 const Tensor4& src, const T* bias, const Tensor4& ref, double terms) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto weight = p.weight.store<T>(false);
    for (const bool channels_last : {false, true}) {
      const auto in = src.store<T>(channels_last);
      for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(int64_t(1) << 20)}) {
        const auto plan = plan_pixel<T>(g, channels_last, gpu);
        if (!plan) continue;
        auto out = poisoned<T>(ref.v.size());
        dwconv_emu::launch(plan->grid, plan->block, 0, pixel_kernel_for<T, kBackward>(g.kernel_h, g.stride_h, channels_last),
                           in.data(), weight.data(), bias, out.data(), g, plan->items);
        expect_close(pass + " pixel " + (channels_last ? "NHWC" : "NCHW") + stride_tag(g),
                     tag + " threads=" + std::to_string(plan->block.x), p.k, out, ref, channels_last, terms);
      }
    }
  }
}

// The plane-streamed NCHW kernel, where the pass has one (float, 32-bit indexing only, as on the
// GPU), planned for a one-SM GPU (a block walks several chunks, each in one of two buffers) and for
// one whose SMs leave a chunk a block, and the one-SM plan again with chunks of fewer planes (a part-filled
// last chunk where the plan's leave none).
template <typename T, typename index_t, bool kBackward>
void check_plane_stream(const std::string& pass, const std::string& tag, const Problem& p, const PassGeometry& g,
                        const Tensor4& src, const T* bias, const Tensor4& ref, double terms) {
  if constexpr (std::is_same_v<index_t, int32_t> && std::is_same_v<T, float>) {
    const auto weight = p.weight.store<T>(false);
    const auto in = src.store<T>(false);
    const auto one_sm = plan_plane_stream<T>(g, sm90_gpu(1));
    if (!one_sm) return;
    std::vector<PlaneStreamLaunch> plans = {*one_sm};
    if (const auto wide = plan_plane_stream<T>(g, sm90_gpu(one_sm->stream.chunks))) plans.push_back(*wide);
    // The most planes under the plan's that keep chunks whole vectors of src and dst.
    const int64_t quantum = plane_stream_quantum(g, sizeof(T));
    const int64_t fewer_planes = (one_sm->stream.planes - 1) / quantum * quantum;
    if (fewer_planes > 0) {
      PlaneStreamLaunch fewer = *one_sm;
      fewer.stream.planes = static_cast<int>(fewer_planes);
      fewer.stream.chunks = (g.batch * g.dst_channels + fewer_planes - 1) / fewer_planes;
      fewer.shared_bytes = plane_stream_shared_bytes(g, fewer_planes, fewer.stream.pitch, sizeof(T));
      plans.push_back(fewer);
    }
    // Where vector rows may read the pass, the plan again as flat planes and as vector rows at the
    // pitch of whole vectors and one vector wider, so that both ways of reading and the pitches the
    // planner may choose are checked on the same pass, whichever it chose.
    if (plane_stream_vector_rows(g)) {
      const int whole = static_cast<int>(plane_stream_whole_pitch(g, sizeof(T)));
      for (const auto& [vector_rows, pitch] : {std::pair{false, static_cast<int>(g.src_w)}, std::pair{true, whole},
                                               std::pair{true, whole + kVector16<T>}}) {
        PlaneStreamLaunch other = *one_sm;
        other.stream.vector_rows = vector_rows;
        other.stream.pitch = pitch;
        other.shared_bytes = plane_stream_shared_bytes(g, other.stream.planes, pitch, sizeof(T));
        if (other.shared_bytes <= kMaxSharedBytes) plans.push_back(other);
      }
    }
    for (const auto& plan : plans) {
      auto out = poisoned<T>(ref.v.size());
      dwconv_emu::launch(plan.grid, plan.block, plan.shared_bytes,
                         plane_stream_kernel_for<T, kBackward>(g.kernel_h, g.stride_h, plan.stream.vector_rows),
                         in.data(), weight.data(), bias, out.data(), g, plan.stream);
      expect_close(pass + " plane-streamed NCHW" + stride_tag(g) + (plan.stream.vector_rows ? " vector rows" : ""),
                   tag + " planes=" + std::to_string(plan.stream.planes) + " chunks=" +
                       std::to_string(plan.stream.chunks) + " blocks=" + std::to_string(plan.grid.x) +
                       " pitch=" + std::to_string(plan.stream.pitch),
                   p.k, out, ref, false, terms);
    }
  }
}

// The stride-2 backward-input kernels, where they take the pass (32-bit indexing only, as on the
// GPU): NCHW, and channels_last where it has a plan, each planned for a one-SM GPU (threads
// walking several blocks) and a large one.
template <typename T, typename index_t>
void check_stride2_grad_input(const std::string& tag, const Problem& p, const PassGeometry& g, double terms) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    if (!has_stride2_grad_input(g)) return;
    const auto weight = p.weight.store<T>(false);
    for (const bool channels_last : {false, true}) {
      const auto go = p.grad_output.store<T>(channels_last);
      for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
        auto gi = poisoned<T>(p.grad_input.v.size());
        std::string kernel = "backward-input stride-2 ";
        dim3 grid;
        if (channels_last) {
          const auto plan = plan_stride2_grad_input_channels_last<T>(g, gpu, true);
          if (!plan) continue;
          grid = plan->grid;
          dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes,
                             stride2_grad_input_channels_last_kernel_for<T, index_t>(g), go.data(), weight.data(),
                             gi.data(), g);
          kernel += "NHWC";
        } else {
          const int access_values = register_tile_access_values(g, gi.data(), sizeof(T));
          grid = plan_stride2_grad_input_nchw(g, gpu);
          dwconv_emu::launch(grid, dim3(kThreads), 0, stride2_grad_input_nchw_kernel_for<T, index_t>(g), go.data(),
                             weight.data(), gi.data(), g, access_values);
          kernel += access_values == kBlockCols ? "NCHW row stores" : access_values == 2 ? "NCHW pair stores" : "NCHW";
        }
        expect_close(kernel, tag + " blocks=" + std::to_string(grid.x) + "x" + std::to_string(grid.y), p.k, gi,
                     p.grad_input, channels_last, terms);
      }
    }
  }
}

template <typename T, typename index_t>
void check_forward(const Problem& p, const char* dtype) {
  using acc_t = at::acc_type<T, true>;
  const auto g = p.geometry();
  const auto weight = p.weight.store<T>(false);
  std::vector<T> bias(p.bias.begin(), p.bias.end());
  const T* bias_ptr = p.k.bias ? bias.data() : nullptr;
  const double terms = p.k.kh * p.k.kw;
  const std::string tag = std::string(dtype) + (sizeof(index_t) == 8 ? " i64" : " i32");
  if constexpr (emulates(KernelHeader::kGeneral)) {
    if (const auto plan = plan_tiled<acc_t>(g)) {
      const auto in = p.input.store<T>(false);
      auto out = poisoned<T>(p.output.v.size());
      dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes, tiled_nchw_kernel<T, index_t, false>,
                         in.data(), weight.data(), bias_ptr, out.data(), g, plan->cols_per_thread, plan->tile_in_h,
                         plan->tile_in_w);
      expect_close("forward tiled NCHW", tag, p.k, out, p.output, false, terms);
    }
    for (const int64_t min_blocks : kMinBlocks) {
      if (const auto plan = plan_tiled_channels_last<T>(g, min_blocks)) {
        const auto in = p.input.store<T>(true);
        auto out = poisoned<T>(p.output.v.size());
        dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes, tiled_channels_last_kernel<T, index_t, false>,
                           in.data(), weight.data(), bias_ptr, out.data(), g, plan->tile);
        expect_close("forward tiled NHWC", tag + vectors_tag(*plan), p.k, out, p.output, true, terms);
      }
    }
    for (bool channels_last : {false, true}) {
      const auto in = p.input.store<T>(channels_last);
      auto out = poisoned<T>(p.output.v.size());
      const int64_t total = out.size();
      dwconv_emu::launch(grid_for(total), dim3(kThreads), 0, direct_kernel<T, index_t, false>, in.data(),
                         weight.data(), bias_ptr, out.data(), g, p.input.strides(channels_last),
                         p.output.strides(channels_last), channels_last && p.output.c > 1, index_t(total));
      expect_close(std::string("forward direct ") + (channels_last ? "NHWC" : "NCHW"), tag, p.k, out, p.output,
                   channels_last, terms);
    }
  }
  if constexpr (emulates(KernelHeader::kRegisterTiled)) {
    check_register_tiled<T, index_t, false>("forward register-tiled NCHW", tag, p, g, p.input.store<T>(false),
                                            bias_ptr, p.output, terms);
    check_channels_last_register_tiled<T, index_t, false>("forward", tag, p, g, p.input, bias_ptr, p.output, terms);
  }
  if constexpr (emulates(KernelHeader::kConv1d)) {
    check_row<T, index_t, false>("forward row NCHW", tag, p, g, p.input, bias_ptr, p.output, terms);
    check_column<T, index_t, false>("forward column NHWC", tag, p, g, p.input, bias_ptr, p.output, terms);
  }
  if constexpr (emulates(KernelHeader::kLargeFilter)) {
    check_large_filter<T, index_t, false>("forward", tag, p, g, p.input, bias_ptr, p.output, terms);
  }
  if constexpr (emulates(KernelHeader::kChannelsLastStream)) {
    check_channels_last_stream<T, index_t, false>("forward", tag, p, g, p.input, bias_ptr, p.output, terms);
  }
  if constexpr (emulates(KernelHeader::kChannelsLastMma)) {
    check_channels_last_mma<T, index_t, false>("forward", tag, p, g, p.input, bias_ptr, p.output, terms);
  }
  if constexpr (emulates(KernelHeader::kPixel)) {
    check_pixel<T, index_t, false>("forward", tag, p, g, p.input, bias_ptr, p.output, terms);
  }
  if constexpr (emulates(KernelHeader::kPlaneStream)) {
    check_plane_stream<T, index_t, false>("forward", tag, p, g, p.input, bias_ptr, p.output, terms);
  }
}

template <typename T, typename index_t>
void check_backward_input(const Problem& p, const char* dtype) {
  using acc_t = at::acc_type<T, true>;
  const auto fwd = p.geometry();
  const auto weight = p.weight.store<T>(false);
  const double terms = p.k.kh * p.k.kw * p.k.m;
  const std::string tag = std::string(dtype) + (sizeof(index_t) == 8 ? " i64" : " i32");
  if (const auto correlation = backward_input_as_correlation(fwd)) {
    if constexpr (emulates(KernelHeader::kGeneral)) {
      if (const auto plan = plan_tiled<acc_t>(*correlation)) {
        const auto go = p.grad_output.store<T>(false);
        auto gi = poisoned<T>(p.grad_input.v.size());
        dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes, tiled_nchw_kernel<T, index_t, true>,
                           go.data(), weight.data(), static_cast<const T*>(nullptr), gi.data(), *correlation,
                           plan->cols_per_thread, plan->tile_in_h, plan->tile_in_w);
        expect_close("backward-input tiled NCHW", tag, p.k, gi, p.grad_input, false, terms);
      }
      for (const int64_t min_blocks : kMinBlocks) {
        if (const auto plan = plan_tiled_channels_last<T>(*correlation, min_blocks)) {
          const auto go = p.grad_output.store<T>(true);
          auto gi = poisoned<T>(p.grad_input.v.size());
          dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes,
                             tiled_channels_last_kernel<T, index_t, true>, go.data(), weight.data(),
                             static_cast<const T*>(nullptr), gi.data(), *correlation, plan->tile);
          expect_close("backward-input tiled NHWC", tag + vectors_tag(*plan), p.k, gi, p.grad_input, true, terms);
        }
      }
    }
    if constexpr (emulates(KernelHeader::kRegisterTiled)) {
      check_register_tiled<T, index_t, true>("backward-input register-tiled NCHW", tag, p, *correlation,
                                             p.grad_output.store<T>(false), nullptr, p.grad_input, terms);
      check_channels_last_register_tiled<T, index_t, true>("backward-input", tag, p, *correlation, p.grad_output,
                                                           nullptr, p.grad_input, terms);
    }
    if constexpr (emulates(KernelHeader::kConv1d)) {
      check_row<T, index_t, true>("backward-input row NCHW", tag, p, *correlation, p.grad_output, nullptr,
                                  p.grad_input, terms);
      check_column<T, index_t, true>("backward-input column NHWC", tag, p, *correlation, p.grad_output, nullptr,
                                     p.grad_input, terms);
    }
    if constexpr (emulates(KernelHeader::kLargeFilter)) {
      check_large_filter<T, index_t, true>("backward-input", tag, p, *correlation, p.grad_output, nullptr,
                                           p.grad_input, terms);
    }
    if constexpr (emulates(KernelHeader::kChannelsLastStream)) {
      check_channels_last_stream<T, index_t, true>("backward-input", tag, p, *correlation, p.grad_output, nullptr,
                                                   p.grad_input, terms);
    }
    if constexpr (emulates(KernelHeader::kChannelsLastMma)) {
      check_channels_last_mma<T, index_t, true>("backward-input", tag, p, *correlation, p.grad_output, nullptr,
                                                p.grad_input, terms);
    }
    if constexpr (emulates(KernelHeader::kPixel)) {
      check_pixel<T, index_t, true>("backward-input", tag, p, *correlation, p.grad_output, nullptr, p.grad_input,
                                    terms);
    }
    if constexpr (emulates(KernelHeader::kPlaneStream)) {
      check_plane_stream<T, index_t, true>("backward-input", tag, p, *correlation, p.grad_output, nullptr,
                                           p.grad_input, terms);
    }
  }
  const auto direct = backward_input_direct(fwd);
  if constexpr (emulates(KernelHeader::kStride2)) {
    check_stride2_grad_input<T, index_t>(tag, p, direct, terms);
  }
  if constexpr (emulates(KernelHeader::kGeneral)) {
    for (bool channels_last : {false, true}) {
      const auto go = p.grad_output.store<T>(channels_last);
      auto gi = poisoned<T>(p.grad_input.v.size());
      const int64_t total = gi.size();
      dwconv_emu::launch(grid_for(total), dim3(kThreads), 0, direct_kernel<T, index_t, true>, go.data(),
                         weight.data(), static_cast<const T*>(nullptr), gi.data(), direct,
                         p.grad_output.strides(channels_last), p.grad_input.strides(channels_last),
                         channels_last && p.grad_input.c > 1, index_t(total));
      expect_close(std::string("backward-input direct ") + (channels_last ? "NHWC" : "NCHW"), tag, p.k, gi,
                   p.grad_input, channels_last, terms);
    }
  }
}

// The weight-gradient kernels' sums of a launch: of the taps, and of grad_output for the bias.
template <typename T>
struct GradWeightSums {
  Buffer<at::acc_type<T, true>> partial, partial_bias;
  GradWeightSums(const Problem& p, int64_t slices)
      : partial(poisoned<at::acc_type<T, true>>(size_t(slices) * p.grad_weight.v.size())),
        partial_bias(poisoned<at::acc_type<T, true>>(size_t(slices) * p.grad_bias.v.size())) {}
};

// grad_weight_finish_kernel over the slices' sums, grad_weight and (with_bias) grad_bias checked
// against the references.
template <typename T>
void check_finished_grad_weight(const std::string& kernel, const std::string& tag, const Problem& p,
                                const GradWeightSums<T>& sums, int64_t slices, bool with_bias = true) {
  const int64_t values = p.grad_weight.v.size();
  const int64_t channels = p.grad_bias.v.size();
  auto gw = poisoned<T>(values);
  auto gb = poisoned<T>(channels);
  dwconv_emu::launch(finish_grid(values + channels, sm90_gpu(kEmulatedSMs)), finish_block(), 0,
                     grad_weight_finish_kernel<T>,
                     sums.partial.data(), gw.data(), slices, values, with_bias ? sums.partial_bias.data() : nullptr,
                     with_bias ? gb.data() : nullptr, channels);
  const double terms = double(p.k.n) * p.k.oh() * p.k.ow();
  expect_close(kernel, tag + " slices=" + std::to_string(slices), p.k, gw, p.grad_weight, false, terms);
  if (with_bias) {
    expect_close(kernel + " bias", tag + " slices=" + std::to_string(slices), p.k, gb, p.grad_bias, false, terms);
  }
}

// The register-tiled weight gradient (NCHW, 32-bit indexing only, as on the GPU), planned for
// a one-SM GPU (several items a block) and a large one (an item or two a block); where its
// grad_output planes are staged whole in shared memory, also with that path off; and with its
// slices cut for the fewest waves (at the launch bound's registers: the emulator has no compiled
// code to ask) and without, where the two cuts differ.
template <typename T, typename index_t>
void check_register_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    const auto go = p.grad_output.store<T>(false);
    const auto in = p.input.store<T>(false);
    const bool row_access = register_tile_row_access(g, go.data(), sizeof(T));
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      for (const auto [stage_grad_output, wave_cut] : {std::pair{true, true}, std::pair{false, true},
                                                       std::pair{true, false}}) {
        auto plan = plan_register_grad_weight<T>(g, gpu, row_access, stage_grad_output, wave_cut);
        // Staging off plans as staging on does where staging on does not stage, and the eight-blocks
        // cut as the waves' where it gives the same slices: run that plan once.
        const auto planned_with = [&](bool staged, bool waves) {
          return plan_register_grad_weight<T>(g, gpu, row_access, staged, waves);
        };
        if (!plan ||
            (!stage_grad_output && planned_with(true, true)->work.go_stride == 0) ||
            (!wave_cut && planned_with(true, true)->grid.y == plan->grid.y)) {
          continue;
        }
        for (const bool vector_loads : staging_modes(g, in.data(), sizeof(T))) {
          plan->tile.vector_loads = vector_loads;
          GradWeightSums<T> sums(p, plan->grid.y);
          dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes,
                             grad_weight_register_tiled_kernel_for<T, index_t>(g.kernel_h, g.stride_h,
                                                                              plan->work.go_stride > 0),
                             go.data(),
                             in.data(), sums.partial.data(), sums.partial_bias.data(), g, plan->tile, plan->work);
          const std::string kernel = "grad-weight register-tiled NCHW" + stride_tag(g) +
                                     (plan->tile.row_access ? " row loads" : "") +
                                     (plan->work.go_stride > 0 ? " staged grad_output" : "");
          check_finished_grad_weight<T>(
              kernel,
              tag + register_tag(RegisterTiledLaunch{plan->grid, plan->block, plan->tile, 0}) +
                  " items/slice=" + std::to_string(plan->work.items_per_slice),
              p, sums, plan->grid.y);
        }
      }
    }
  }
}

// The channels_last register-blocked weight gradient, where it takes the pass (32-bit
// indexing only, as on the GPU), planned for a one-SM GPU and a large one.
template <typename T, typename index_t>
void check_channels_last_register_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    const auto go = p.grad_output.store<T>(true);
    const auto in = p.input.store<T>(true);
    if (!has_channels_last_register_grad_weight(g, go.data(), in.data(), sizeof(T))) return;
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      const auto plan = plan_channels_last_register_grad_weight<T>(g, gpu);
      GradWeightSums<T> sums(p, plan.grid.y);
      dwconv_emu::launch(plan.grid, plan.block, plan.shared_bytes,
                         grad_weight_register_channels_last_kernel_for<T, index_t>(g.kernel_h, g.stride_h), go.data(),
                         in.data(), sums.partial.data(), sums.partial_bias.data(), g, plan.work);
      check_finished_grad_weight<T>("grad-weight register NHWC",
                                    tag + " lanes=" + std::to_string(plan.block.x) +
                                        " strips/slice=" + std::to_string(plan.work.strips_per_slice),
                                    p, sums, plan.grid.y);
    }
  }
}

// The channels_last ring weight gradient, where it takes the pass (32-bit indexing, 16-byte
// aligned data, as on the GPU), planned for a one-SM GPU (several items a slice) and a large one
// (bands down the planes where the batch alone leaves SMs idle), with and without the bias row.
template <typename T, typename index_t>
void check_ring_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    if (!has_ring_grad_weight(g, sizeof(T))) return;
    const auto go = p.grad_output.store<T>(true);
    const auto in = p.input.store<T>(true);
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      for (const bool with_bias : {false, true}) {
        const auto plan = plan_ring_grad_weight<T>(g, gpu, with_bias);
        if (!plan) continue;
        GradWeightSums<T> sums(p, plan->grid.y);
        dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes,
                           grad_weight_ring_kernel_for<T>(g.kernel_h, g.stride_h), go.data(), in.data(),
                           sums.partial.data(), with_bias ? sums.partial_bias.data() : nullptr, g, plan->work);
        check_finished_grad_weight<T>("grad-weight ring NHWC",
                                      tag + " chunks=" + std::to_string(plan->work.chunks_w) +
                                          " bands=" + std::to_string(plan->work.bands) +
                                          " items/slice=" + std::to_string(plan->work.items_per_slice) +
                                          (with_bias ? " bias row" : ""),
                                      p, sums, plan->grid.y, with_bias);
      }
    }
  }
}

// " bands=B items/slice=I": how a ring-style plan cut the planes and the items, for a check's tag.
std::string ring_work_tag(const RingGradWeightWork& w) {
  return " bands=" + std::to_string(w.bands) + " items/slice=" + std::to_string(w.items_per_slice);
}

// The channels_last window weight gradient, where it takes the pass (as the ring kernel), planned
// for a one-SM GPU (several items a slice) and a large one (bands down the planes), with and
// without the bias sums, and on a GPU of many SMs with items cut narrower than the planner would
// (lanes past the plane's last column, several chunks a lane).
template <typename T, typename index_t>
void check_window_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    if (!has_window_grad_weight(g, sizeof(T))) return;
    const auto go = p.grad_output.store<T>(true);
    const auto in = p.input.store<T>(true);
    const auto kernel = grad_weight_window_kernel_for<T>(g.kernel_h, g.stride_h);
    // The planners' GPUs are all sm_90 SMs, whose blocks may take opt_in_shared_bytes.
    DWCONV_OPT_IN_SHARED_BYTES(kernel, opt_in_shared_bytes(sm90_gpu(1)));
    const auto run = [&](const RingGradWeightLaunch& plan, bool with_bias, const std::string& what) {
      GradWeightSums<T> sums(p, plan.grid.y);
      dwconv_emu::launch(plan.grid, plan.block, plan.shared_bytes, kernel, go.data(), in.data(), sums.partial.data(),
                         with_bias ? sums.partial_bias.data() : nullptr, g, plan.work);
      check_finished_grad_weight<T>("grad-weight window NHWC",
                                    tag + " lanes=" + std::to_string(plan.block.y) +
                                        " chunks=" + std::to_string(plan.work.chunks_w) +
                                        ring_work_tag(plan.work) +
                                        (with_bias ? " bias" : "") + what,
                                    p, sums, plan.grid.y, with_bias);
    };
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      for (const bool with_bias : {false, true}) {
        const auto plan = plan_window_grad_weight<T>(g, gpu, true);
        if (plan) run(*plan, with_bias, "");
      }
    }
    // Within 48 KB (window_shared_opt_in off), where the plan opts in past it.
    if (auto plan = plan_window_grad_weight<T>(g, sm90_gpu(512), false);
        plan && plan_window_grad_weight<T>(g, sm90_gpu(512), true)->shared_bytes > kMaxSharedBytes) {
      run(*plan, true, " (within 48 KB)");
    }
    // One lane over items two chunks wide: a lane takes a second chunk, and the last item may
    // hold fewer columns than its chunks.
    if (auto plan = plan_window_grad_weight<T>(g, sm90_gpu(512), true); plan && g.dst_w > kWindowChunk) {
      RingGradWeightWork& w = plan->work;
      w.tile_w = w.staged_w = 2 * kWindowChunk;
      w.in_w = (w.staged_w - 1) * g.stride_h + g.kernel_h;
      w.chunks_w = static_cast<int>((g.dst_w + w.tile_w - 1) / w.tile_w);
      w.items = g.batch * w.bands * w.chunks_w;
      w.items_per_slice = 2;
      plan->grid.y = static_cast<unsigned>((w.items + 1) / 2);
      plan->block.y = 1;
      plan->shared_bytes = window_shared_bytes<T>(g.kernel_h, g.stride_h, w.in_w, w.staged_w, 1);
      run(*plan, true, " (a lane, two chunks)");
    }
  }
}

// The channels_last walk weight gradient (3x3), where it takes the pass (as the ring kernel),
// planned for a one-SM GPU (several items a slice) and a large one (bands down the planes), with
// and without the bias sums; and, on a GPU of many SMs, strips cut narrower than the planner
// would (a strip of 3 columns: the last one part-filled, lanes meeting across every strip edge)
// with blocks of fewer channels (pairs past the last channel in the last block).
template <typename T, typename index_t>
void check_walk_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    if (!has_walk_grad_weight(g, sizeof(T))) return;
    const auto go = p.grad_output.store<T>(true);
    const auto in = p.input.store<T>(true);
    const auto run = [&](const RingGradWeightLaunch& plan, bool with_bias, const std::string& what) {
      GradWeightSums<T> sums(p, plan.grid.y);
      dwconv_emu::launch(plan.grid, plan.block, plan.shared_bytes, grad_weight_walk_kernel_for<T>(g.stride_h),
                         go.data(), in.data(), sums.partial.data(), with_bias ? sums.partial_bias.data() : nullptr, g,
                         plan.work);
      check_finished_grad_weight<T>("grad-weight walk NHWC",
                                    tag + " pairs=" + std::to_string(plan.block.x) +
                                        " lanes=" + std::to_string(plan.block.y) +
                                        " strips=" + std::to_string(plan.work.chunks_w) +
                                        ring_work_tag(plan.work) +
                                        (with_bias ? " bias" : "") + what,
                                    p, sums, plan.grid.y, with_bias);
    };
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      for (const bool with_bias : {false, true}) {
        if (const auto plan = plan_walk_grad_weight<T>(g, gpu)) run(*plan, with_bias, "");
      }
    }
    const int tile_w = 3 * walk_columns(g.stride_h);  // 3 lanes
    if (auto plan = plan_walk_grad_weight<T>(g, sm90_gpu(512)); plan && g.dst_w > tile_w) {
      const int pairs = static_cast<int>(g.dst_channels / kWalkChannels);
      const int vectors = pairs > 1 ? pairs / 2 + 1 : 1;  // two blocks, the second part-filled
      RingGradWeightWork& w = plan->work;
      w.tile_w = w.staged_w = tile_w;
      w.in_w = (tile_w - 1) * g.stride_h + kWalkKernel;
      w.chunks_w = static_cast<int>((g.dst_w + tile_w - 1) / tile_w);
      w.items = g.batch * w.bands * w.chunks_w;
      w.items_per_slice = 2;
      plan->grid = dim3(static_cast<unsigned>((pairs + vectors - 1) / vectors), static_cast<unsigned>((w.items + 1) / 2));
      plan->block = dim3(static_cast<unsigned>(vectors), 3);
      plan->shared_bytes = walk_shared_bytes<at::acc_type<T, true>>(vectors * 3);
      run(*plan, true, " (strips of 3 lanes, channels in two blocks)");
    }
  }
}

// The tensor-core weight gradient (bfloat16 and half, 5x5 and 7x7), where it takes the pass (as the
// ring kernel), planned for a one-SM GPU (several items a slice) and a large one (bands down the
// planes), with and without the bias sums; and in blocks of fewer warps than the planner's, the
// last part-filled (warps past the last channel), two items a slice.
template <typename T, typename index_t>
void check_mma_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t> && kWarpMatrixType<T>) {
    const auto g = p.geometry();
    if (!has_mma_grad_weight(g, sizeof(T), kWarpMatrixCapability)) return;
    const auto go = p.grad_output.store<T>(true);
    const auto in = p.input.store<T>(true);
    // With finite data no warp may fall back to its one-by-one sums: they would hide a bug that
    // makes a NaN (a slot read before it is written holds the emulator's NaN poison).
    const auto finite = [](const Tensor4& t) {
      return std::all_of(t.v.begin(), t.v.end(), [](double x) { return std::isfinite(x); });
    };
    const bool finite_data = finite(p.input) && finite(p.grad_output);
    const auto run = [&](const RingGradWeightLaunch& plan, bool with_bias, const std::string& what) {
      GradWeightSums<T> sums(p, plan.grid.y);
      dwconv_emu::nan_fallbacks = 0;
      dwconv_emu::launch(plan.grid, plan.block, plan.shared_bytes, grad_weight_mma_kernel_for<T>(g.kernel_h),
                         go.data(), in.data(), sums.partial.data(), with_bias ? sums.partial_bias.data() : nullptr, g,
                         plan.work);
      if (finite_data && dwconv_emu::nan_fallbacks != 0) {
        ++failed;
        std::printf("FAIL grad-weight tensor-core NHWC %s%s [%s]: %ld warps fell back to one-by-one sums on finite data\n",
                    tag.c_str(), what.c_str(), p.k.str().c_str(), dwconv_emu::nan_fallbacks);
      }
      check_finished_grad_weight<T>("grad-weight tensor-core NHWC",
                                    tag + " warps=" + std::to_string(plan.block.y) +
                                        " columns=" + std::to_string(plan.work.tile_w) +
                                        " chunks=" + std::to_string(plan.work.chunks_w) +
                                        ring_work_tag(plan.work) +
                                        (with_bias ? " bias" : "") + what,
                                    p, sums, plan.grid.y, with_bias);
    };
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      for (const bool with_bias : {false, true}) {
        if (const auto plan = plan_mma_grad_weight<T>(g, gpu)) run(*plan, with_bias, "");
      }
    }
    if (auto plan = plan_mma_grad_weight<T>(g, sm90_gpu(512)); plan && g.dst_channels > kMmaChannels) {
      const int all_vectors = static_cast<int>(g.dst_channels / kMmaChannels);
      const int vectors = all_vectors / 2 + 1;  // two blocks, the second part-filled
      RingGradWeightWork& w = plan->work;
      w.tile_w = w.staged_w = kMmaGradWeightColumns;  // a chunk an item
      w.in_w = kMmaGradWeightColumns + g.kernel_h - 1;
      w.chunks_w = static_cast<int>((g.dst_w + kMmaGradWeightColumns - 1) / kMmaGradWeightColumns);
      w.items = g.batch * w.bands * w.chunks_w;
      w.items_per_slice = 2;
      plan->grid = dim3(static_cast<unsigned>((all_vectors + vectors - 1) / vectors),
                        static_cast<unsigned>((w.items + 1) / 2));
      plan->block = dim3(32, static_cast<unsigned>(vectors));
      plan->shared_bytes = mma_grad_weight_shared_bytes(g.kernel_h, vectors, 1);
      run(*plan, true, " (channels in two blocks, a chunk an item, two items a slice)");
    }
  }
}

// The large-filter weight gradient, where it takes the pass (32-bit indexing only, as on the
// GPU), in both layouts, planned for a one-SM GPU (several items a slice) and a large one.
template <typename T, typename index_t>
void check_large_filter_grad_weight(const Problem& p, const std::string& tag) {
  using acc_t = at::acc_type<T, true>;
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    for (const bool channels_last : {false, true}) {
      const auto go = p.grad_output.store<T>(channels_last);
      const auto in = p.input.store<T>(channels_last);
      for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
        const auto plan = plan_large_filter_grad_weight<acc_t>(g, gpu);
        if (!plan) continue;
        GradWeightSums<T> sums(p, plan->grid.y);
        dwconv_emu::launch(plan->grid, plan->block, plan->shared_bytes, grad_weight_large_filter_kernel<T, index_t>,
                           go.data(), in.data(), sums.partial.data(), sums.partial_bias.data(), g, plan->tile, plan->work,
                           p.grad_output.strides(channels_last), p.input.strides(channels_last));
        check_finished_grad_weight<T>(std::string("grad-weight large-filter ") + (channels_last ? "NHWC" : "NCHW"),
                                      tag + " slots=" + std::to_string(plan->block.x) +
                                          " band=" + std::to_string(plan->work.band_rows) +
                                          " items/slice=" + std::to_string(plan->work.items_per_slice),
                                      p, sums, plan->grid.y);
      }
    }
  }
}

// The row weight gradient, where it takes the pass (32-bit indexing only, as on the GPU),
// planned for a one-SM GPU (one slice a channel) and a large one.
template <typename T, typename index_t>
void check_row_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    if (!has_row_kernel(g)) return;
    const auto go = p.grad_output.store<T>(false);
    const auto in = p.input.store<T>(false);
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      const auto plan = plan_row_grad_weight(g, sizeof(T), gpu);
      GradWeightSums<T> sums(p, plan.grid.y);
      dwconv_emu::launch(plan.grid, dim3(kThreads), 0, grad_weight_row_kernel_for<T, index_t>(g.kernel_w), go.data(),
                         in.data(), sums.partial.data(), sums.partial_bias.data(), g, plan.chunks_per_row,
                         plan.chunks_per_slice);
      check_finished_grad_weight<T>("grad-weight row NCHW", tag + " chunks/slice=" + std::to_string(plan.chunks_per_slice),
                                    p, sums, plan.grid.y);
    }
  }
}

// Both gradients from the row kernels' one kernel, where it takes the pass (32-bit indexing only, as
// on the GPU), with and without the bias sums, planned for a one-SM GPU (the fewest slices a channel,
// each one pass of its block) and a large one (slices ending inside rows).
template <typename T, typename index_t>
void check_row_backward(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    if (!has_row_backward(g)) return;
    const auto go = p.grad_output.store<T>(false);
    const auto in = p.input.store<T>(false);
    const auto weight = p.weight.store<T>(false);
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      for (const bool with_bias : {false, true}) {
        const auto plan = plan_row_backward(g, sizeof(T), gpu);
        auto grad_input = poisoned<T>(p.grad_input.v.size());
        GradWeightSums<T> sums(p, plan.grid.y);
        dwconv_emu::launch(plan.grid, dim3(kThreads), 0, row_backward_kernel_for<T, index_t>(g.kernel_w), go.data(),
                           in.data(), weight.data(), grad_input.data(), sums.partial.data(),
                           with_bias ? sums.partial_bias.data() : nullptr, g, plan.chunks_per_row,
                           plan.chunks_per_slice);
        const std::string detail = tag + " chunks/slice=" + std::to_string(plan.chunks_per_slice) +
                                   (with_bias ? " bias" : "");
        expect_close("backward row NCHW grad-input", detail, p.k, grad_input, p.grad_input, false, p.k.kw);
        check_finished_grad_weight<T>("backward row NCHW grad-weight", detail, p, sums, plan.grid.y, with_bias);
      }
    }
  }
}

// The column weight gradient, where it takes the pass (32-bit indexing only, as on the GPU),
// planned for a one-SM GPU and a large one.
template <typename T, typename index_t>
void check_column_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    if (!has_column_kernel(g, kVector16<T>)) return;
    const auto go = p.grad_output.store<T>(true);
    const auto in = p.input.store<T>(true);
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      const auto plan = plan_column_grad_weight(g, kVector16<T>, gpu);
      GradWeightSums<T> sums(p, plan.grid.y);
      dwconv_emu::launch(plan.grid, plan.block, 0, grad_weight_column_kernel_for<T, index_t>(g.kernel_w), go.data(),
                         in.data(), sums.partial.data(), sums.partial_bias.data(), g, plan.items_per_slice);
      check_finished_grad_weight<T>("grad-weight column NHWC",
                                    tag + " items/slice=" + std::to_string(plan.items_per_slice), p, sums,
                                    plan.grid.y);
    }
  }
}

// Both gradients from the column kernels' one kernel, and the weight gradient alone from it, where it takes
// the pass (32-bit indexing only, as on the GPU), with and without the bias sums, planned for a one-SM GPU
// (the fewest slices) and a large one (slices ending inside rows).
template <typename T, typename index_t>
void check_column_backward(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    const auto g = p.geometry();
    if (!has_column_backward(g, sizeof(T))) return;
    const auto go = p.grad_output.store<T>(true);
    const auto in = p.input.store<T>(true);
    const auto weight = p.weight.store<T>(false);
    for (const GpuLimits& gpu : {sm90_gpu(1), sm90_gpu(512)}) {
      for (const bool with_bias : {false, true}) {
        const auto plan = plan_column_backward(g, sizeof(T), gpu);
        const std::string detail = tag + " items/slice=" + std::to_string(plan.items_per_slice) +
                                   (with_bias ? " bias" : "");
        auto grad_input = poisoned<T>(p.grad_input.v.size());
        GradWeightSums<T> sums(p, plan.grid.y);
        dwconv_emu::launch(plan.grid, plan.block, 0, column_backward_kernel_for<T, index_t, true>(g.kernel_w),
                           go.data(), in.data(), weight.data(), grad_input.data(), sums.partial.data(),
                           with_bias ? sums.partial_bias.data() : nullptr, g, plan.items_per_slice);
        expect_close("backward column NHWC grad-input", detail, p.k, grad_input, p.grad_input, true, p.k.kw);
        check_finished_grad_weight<T>("backward column NHWC grad-weight", detail, p, sums, plan.grid.y, with_bias);
        GradWeightSums<T> alone(p, plan.grid.y);
        dwconv_emu::launch(plan.grid, plan.block, 0, column_backward_kernel_for<T, index_t, false>(g.kernel_w),
                           go.data(), in.data(), nullptr, nullptr, alone.partial.data(),
                           with_bias ? alone.partial_bias.data() : nullptr, g, plan.items_per_slice);
        check_finished_grad_weight<T>("grad-weight column-backward NHWC", detail, p, alone, plan.grid.y, with_bias);
      }
    }
  }
}

// The plane-streamed weight gradient (float NCHW, 32-bit indexing only, as on the GPU), with and
// without the bias sums, planned for a one-SM GPU (a block walks several entries of its slice) and for
// one of an SM a chunk (an entry a slice); the one-SM plan again with groups of fewer channels (a
// part-filled last group) and with an entry a slice (the most slices); and where vector rows may read
// the pass, as flat planes and as vector rows at the pitch of whole vectors and one vector wider (with
// as many planes as fit there).
template <typename T, typename index_t>
void check_plane_stream_grad_weight(const Problem& p, const std::string& tag) {
  if constexpr (std::is_same_v<index_t, int32_t> && std::is_same_v<T, float>) {
    const auto g = p.geometry();
    const auto one_sm = plan_plane_stream_grad_weight<T>(g, sm90_gpu(1));
    if (!one_sm) return;
    const auto go = p.grad_output.store<T>(false);
    const auto in = p.input.store<T>(false);
    std::vector<PlaneStreamGradWeightLaunch> plans = {*one_sm};
    if (const auto wide = plan_plane_stream_grad_weight<T>(g, sm90_gpu(one_sm->work.stream.chunks))) {
      plans.push_back(*wide);
    }
    const auto resized = [&](PlaneStreamGradWeightLaunch plan) {
      PlaneStream& s = plan.work.stream;
      const int threads = plane_stream_threads(s.planes, s.tiles);
      plan.block = dim3(static_cast<unsigned>(threads));
      plan.shared_bytes = plane_stream_grad_weight_shared_bytes(g, s.planes, s.pitch, threads, sizeof(T));
      plan.work.sums_per_round = plane_stream_grad_weight_sums_per_round(g, plan.shared_bytes, threads, sizeof(T));
      plan.grid.x = static_cast<unsigned>((g.dst_channels + s.planes - 1) / s.planes);
      plan.grid.y = static_cast<unsigned>((g.batch + plan.work.batch_per_slice - 1) / plan.work.batch_per_slice);
      return plan;
    };
    const int64_t quantum = plane_stream_quantum(g, sizeof(T));
    if (const int64_t fewer = (one_sm->work.stream.planes - 1) / quantum * quantum; fewer > 0) {
      PlaneStreamGradWeightLaunch plan = *one_sm;
      plan.work.stream.planes = static_cast<int>(fewer);
      plans.push_back(resized(plan));
    }
    if (one_sm->work.batch_per_slice > 1) {
      PlaneStreamGradWeightLaunch plan = *one_sm;
      plan.work.batch_per_slice = 1;
      plans.push_back(resized(plan));
    }
    if (plane_stream_vector_src_rows(g)) {
      const int whole = static_cast<int>(plane_stream_whole_pitch(g, sizeof(T)));
      for (const auto& [vector_rows, pitch] : {std::pair{false, static_cast<int>(g.src_w)}, std::pair{true, whole},
                                               std::pair{true, whole + kVector16<T>}}) {
        PlaneStreamGradWeightLaunch plan = *one_sm;
        plan.work.stream.vector_rows = vector_rows;
        plan.work.stream.pitch = pitch;
        plan = resized(plan);
        while (plan.shared_bytes > opt_in_shared_bytes(sm90_gpu(1)) && plan.work.stream.planes > quantum) {
          plan.work.stream.planes -= static_cast<int>(quantum);  // as the planner's rows of more bytes
          plan = resized(plan);
        }
        if (plan.shared_bytes <= opt_in_shared_bytes(sm90_gpu(1))) plans.push_back(plan);
      }
    }
    for (const bool vector_rows : {false, true}) {
      // The planners' GPUs are all sm_90 SMs, whose blocks may take opt_in_shared_bytes.
      DWCONV_OPT_IN_SHARED_BYTES(plane_stream_grad_weight_kernel_for<T>(g.kernel_h, g.stride_h, vector_rows),
                                 opt_in_shared_bytes(sm90_gpu(1)));
    }
    for (const auto& plan : plans) {
      for (const bool with_bias : {false, true}) {
        const PlaneStream& s = plan.work.stream;
        GradWeightSums<T> sums(p, plan.grid.y);
        dwconv_emu::launch(plan.grid, plan.block, plan.shared_bytes,
                           plane_stream_grad_weight_kernel_for<T>(g.kernel_h, g.stride_h, s.vector_rows), go.data(),
                           in.data(), sums.partial.data(), with_bias ? sums.partial_bias.data() : nullptr, g,
                           plan.work);
        check_finished_grad_weight<T>(
            "grad-weight plane-streamed NCHW" + stride_tag(g) + (s.vector_rows ? " vector rows" : ""),
            tag + " planes=" + std::to_string(s.planes) + " groups=" + std::to_string(plan.grid.x) +
                " entries/slice=" + std::to_string(plan.work.batch_per_slice) + " pitch=" + std::to_string(s.pitch) +
                " sums/round=" + std::to_string(plan.work.sums_per_round) + (with_bias ? " bias" : ""),
            p, sums, plan.grid.y, with_bias);
      }
    }
  }
}

template <typename T, typename index_t>
void check_grad_weight(const Problem& p, const char* dtype) {
  const auto g = p.geometry();
  const int64_t taps = int64_t(p.k.kh) * p.k.kw;
  const std::string tag = std::string(dtype) + (sizeof(index_t) == 8 ? " i64" : " i32");
  if constexpr (emulates(KernelHeader::kConv1d)) {
    check_row_grad_weight<T, index_t>(p, tag);
    check_row_backward<T, index_t>(p, tag);
    check_column_grad_weight<T, index_t>(p, tag);
    check_column_backward<T, index_t>(p, tag);
  }
  if constexpr (emulates(KernelHeader::kRegisterTiled)) {
    check_register_grad_weight<T, index_t>(p, tag);
    check_channels_last_register_grad_weight<T, index_t>(p, tag);
  }
  if constexpr (emulates(KernelHeader::kRingGradWeight)) check_ring_grad_weight<T, index_t>(p, tag);
  if constexpr (emulates(KernelHeader::kWindowGradWeight)) check_window_grad_weight<T, index_t>(p, tag);
  if constexpr (emulates(KernelHeader::kWalkGradWeight)) check_walk_grad_weight<T, index_t>(p, tag);
  if constexpr (emulates(KernelHeader::kMmaGradWeight)) check_mma_grad_weight<T, index_t>(p, tag);
  if constexpr (emulates(KernelHeader::kLargeFilter)) check_large_filter_grad_weight<T, index_t>(p, tag);
  if constexpr (emulates(KernelHeader::kPlaneStream)) check_plane_stream_grad_weight<T, index_t>(p, tag);
  if constexpr (emulates(KernelHeader::kGeneral)) {
    for (bool channels_last : {false, true}) {
      const auto plan = plan_grad_weight(g, !channels_last, sm90_gpu(kEmulatedSMs));
      const auto go = p.grad_output.store<T>(channels_last);
      const auto in = p.input.store<T>(channels_last);
      GradWeightSums<T> sums(p, plan.slices);
      const dim3 grid(unsigned(plan.channel_blocks), unsigned(plan.slices));
      if (plan.channels_last) {
        dwconv_emu::launch(grid, dim3(kChannelLanes, kPositionLanes), 0,
                           grad_weight_channels_last_kernel_for<T, index_t>(int(taps)),
                           go.data(), in.data(), sums.partial.data(), sums.partial_bias.data(), g,
                           p.grad_output.strides(channels_last), p.input.strides(channels_last), plan.rows_per_slice);
      } else {
        dwconv_emu::launch(grid, dim3(kThreads), 0, grad_weight_nchw_kernel_for<T, index_t>(int(taps)), go.data(), in.data(),
                           sums.partial.data(), sums.partial_bias.data(), g, plan.rows_per_slice);
      }
      check_finished_grad_weight<T>(std::string("grad-weight ") + (channels_last ? "strided NHWC" : "NCHW"), tag, p,
                                    sums, plan.slices);
    }
  }
}

// Each pass as DepthwiseConv2d.cu runs it: the choice of kernel and plan for an H100's SMs, on
// buffers of each layout, then the launch code that hands the kernel its arguments; with index_t
// int64_t, as if a tensor had 2^31 elements (the general kernels' 64-bit instances).
const GpuLimits kDispatchGpu = sm90_gpu(132);

std::map<std::string, int> dispatches_per_kernel;

// t as a dense layout, NCHW or channels_last.
dwconv_emu::DenseLayout laid_out(const Tensor4& t, bool channels_last) {
  return dwconv_emu::DenseLayout({t.n, t.c, t.h, t.w}, channels_last);
}

template <typename T>
std::uintptr_t address_of(const Buffer<T>& b) {
  return reinterpret_cast<std::uintptr_t>(b.data());
}

// A weight-gradient pass as DepthwiseConv2d.cu runs it with `choice` on `gpu`, from grad_output `go`
// and input `in` laid out as `cl` says; the bias gradient where the case has a bias, as
// DepthwiseConv2d.cu asks for it (without, the buffers stay null).
template <typename T>
struct GradWeightResult {
  Buffer<T> grad_weight, grad_bias;
};
template <typename T>
GradWeightResult<T> run_grad_weight(const Problem& p, const GradWeightChoice& choice, bool index64, const Buffer<T>& go,
                                    const Buffer<T>& in, bool cl, const GpuLimits& gpu) {
  using acc_t = at::acc_type<T, true>;
  const auto g = p.geometry();
  const int64_t slices = grad_weight_slices(choice);
  const bool with_bias = p.k.bias;
  auto partial = poisoned<acc_t>(size_t(slices) * g.dst_channels * p.k.kh * p.k.kw);
  auto partial_bias = poisoned<acc_t>(with_bias ? size_t(slices) * g.dst_channels : 0);
  GradWeightResult<T> out{poisoned<T>(p.grad_weight.v.size()), poisoned<T>(p.grad_bias.v.size())};
  dwconv_emu::forget_opt_ins();
  launch_grad_weight<T>(choice, index64, g,
                        GradWeightPointers<T>{go.data(), in.data(), partial.data(), out.grad_weight.data(),
                                              p.grad_output.strides(cl), p.input.strides(cl),
                                              with_bias ? partial_bias.data() : nullptr,
                                              with_bias ? out.grad_bias.data() : nullptr},
                        gpu, 0);
  return out;
}

template <typename T, typename index_t>
void check_dispatched(const Problem& p, const char* dtype) {
  const auto g = p.geometry();
  const bool index64 = std::is_same_v<index_t, int64_t>;
  const std::string tag = std::string(dtype) + (index64 ? " i64" : " i32");
  const auto weight = p.weight.store<T>(false);
  std::vector<T> bias(p.bias.begin(), p.bias.end());
  const T* bias_ptr = p.k.bias ? bias.data() : nullptr;
  const int taps = p.k.kh * p.k.kw;
  for (const bool cl : {false, true}) {
    const std::string layout = cl ? " NHWC" : " NCHW";
    const auto input = laid_out(p.input, cl), output = laid_out(p.output, cl);
    const auto in = p.input.store<T>(cl);
    const auto go = p.grad_output.store<T>(cl);
    auto expect = [&](const std::string& pass, const char* kernel, const auto& got, const Tensor4& ref, bool laid_cl,
                      double terms) {
      ++dispatches_per_kernel[kernel];
      expect_close("dispatched " + pass + layout, tag + " " + kernel, p.k, got, ref, laid_cl, terms);
    };

    // A forward (kBackward false) or backward-input pass from src into dst, chosen and launched for
    // kDispatchGpu, then with the pixel path off (it takes the sweep's small grids there), then for
    // a GPU of a single SM and for an RTX 3090's (1536 threads an SM), each where it takes a kernel
    // the others did not (the streamed kernel wants problems that fill the GPU; the sweep's are
    // small).
    auto dispatch_pass = [&](auto backward, const Tensor4& src, const Buffer<T>& src_data, const Tensor4& dst,
                             const T* pass_bias, double terms) {
      constexpr bool kBackward = decltype(backward)::value;
      const auto from = laid_out(src, cl), to = laid_out(dst, cl);
      const KernelPathMask pixel_off = KernelPathMask{1} << static_cast<int>(KernelPath::Pixel);
      std::vector<PassKernel> taken;
      for (const auto& [gpu, disabled] : {std::pair{kDispatchGpu, KernelPathMask{0}}, std::pair{kDispatchGpu, pixel_off},
                                          std::pair{sm90_gpu(1), KernelPathMask{0}},
                                          std::pair{sm86_gpu(82), KernelPathMask{0}}}) {
        auto dst_data = poisoned<T>(dst.v.size());
        const PassOperands operands{from.is_contiguous() && to.is_contiguous(),
                                    from.is_channels_last_contiguous() && to.is_channels_last_contiguous(),
                                    address_of(src_data), address_of(dst_data), address_of(weight), int(sizeof(T)),
                                    index64};
        const PassChoice choice = kBackward ? choose_backward_input<T>(g, operands, disabled, gpu)
                                            : choose_forward<T>(g, operands, disabled, gpu);
        if (std::find(taken.begin(), taken.end(), choice.kernel) != taken.end()) continue;
        taken.push_back(choice.kernel);
        launch_pass<T, kBackward>(choice, index64,
                                  PassPointers<T>{src_data.data(), weight.data(), pass_bias, dst_data.data(),
                                                  src.strides(cl), dst.strides(cl)},
                                  gpu, 0);
        expect(kBackward ? "backward-input" : "forward", kernel_name(choice.kernel), dst_data, dst, cl, terms);
      }
    };
    dispatch_pass(std::false_type{}, p.input, in, p.output, bias_ptr, taps);
    dispatch_pass(std::true_type{}, p.grad_output, go, p.grad_input, nullptr, taps * p.k.m);

    const GradWeightOperands grad_weight{output.is_contiguous() && input.is_contiguous(),
                                         output.is_channels_last_contiguous() && input.is_channels_last_contiguous(),
                                         address_of(go), address_of(in), int(sizeof(T)), index64, p.k.bias};
    // Both gradients from one kernel, as DepthwiseConv2d.cu runs them where one takes the pass.
    {
      auto grad_input_data = poisoned<T>(p.grad_input.v.size());
      const BackwardOperands operands{output.is_contiguous() && input.is_contiguous(),
                                      output.is_channels_last_contiguous() && input.is_channels_last_contiguous(),
                                      address_of(go), address_of(in), address_of(grad_input_data), int(sizeof(T)),
                                      index64};
      if (const auto choice = choose_both_gradients<T>(g, operands, 0, kDispatchGpu)) {
        using acc_t = at::acc_type<T, true>;
        const size_t slices = grad_weight_slices(*choice);
        auto partial = poisoned<acc_t>(slices * g.dst_channels * taps);
        auto partial_bias = poisoned<acc_t>(p.k.bias ? slices * g.dst_channels : 0);
        auto gw = poisoned<T>(p.grad_weight.v.size()), gb = poisoned<T>(p.grad_bias.v.size());
        const char* kernel = kernel_name(choice->kernel);
        launch_both_gradients<T>(*choice, g,
                               BackwardPointers<T>{go.data(), in.data(), weight.data(), grad_input_data.data(),
                                                   partial.data(), gw.data(),
                                                   p.k.bias ? partial_bias.data() : nullptr,
                                                   p.k.bias ? gb.data() : nullptr},
                               kDispatchGpu, 0);
        const double terms = double(p.k.n) * p.k.oh() * p.k.ow();
        expect("backward grad-input", kernel, grad_input_data, p.grad_input, cl, taps * p.k.m);
        expect("backward grad-weight", kernel, gw, p.grad_weight, false, terms);
        if (p.k.bias) expect("backward grad-bias", kernel, gb, p.grad_bias, false, terms);
      }
    }

    // The weight gradient for kDispatchGpu, then for a GPU of a single SM where that takes another
    // kernel (the plane-streamed one wants problems that fill the GPU; the sweep's are small).
    std::vector<GradWeightKernel> taken;
    for (const GpuLimits& gpu : {kDispatchGpu, sm90_gpu(1)}) {
      const GradWeightChoice grad_weight_choice = choose_grad_weight<T>(g, grad_weight, 0, gpu);
      if (std::find(taken.begin(), taken.end(), grad_weight_choice.kernel) != taken.end()) continue;
      taken.push_back(grad_weight_choice.kernel);
      const auto [gw, gb] = run_grad_weight<T>(p, grad_weight_choice, index64, go, in, cl, gpu);
      const double terms = double(p.k.n) * p.k.oh() * p.k.ow();
      expect("grad-weight", kernel_name(grad_weight_choice.kernel), gw, p.grad_weight, false, terms);
      if (p.k.bias) expect("grad-bias", kernel_name(grad_weight_choice.kernel), gb, p.grad_bias, false, terms);
    }
  }
}

template <typename T, typename index_t>
void check_all(const Problem& p, const char* dtype) {
  check_forward<T, index_t>(p, dtype);
  check_backward_input<T, index_t>(p, dtype);
  check_grad_weight<T, index_t>(p, dtype);
  if constexpr (kEmulatedHeader == KernelHeader::kAll) check_dispatched<T, index_t>(p, dtype);
}

// One pass of one layer, chosen and launched as DepthwiseConv2d.cu does on an sm_90 GPU of `sms` SMs,
// checked against float64: what the memory profile runs (memory_profile.py). Prints the kernel that
// ran and the one an H100 (132 SMs) chooses at `planned_batch`, each with its block and dynamic
// shared memory (its tile's or ring's shape): a profile stands for the H100's pass where they agree.
template <typename T>
void run_layer_pass(const Case& k, bool cl, const std::string& pass, int64_t sms, int planned_batch) {
  std::mt19937 rng(7);
  const Problem p(k, rng);
  const auto g = p.geometry();
  PassGeometry planned_g = g;
  planned_g.batch = planned_batch;
  const GpuLimits gpu = sm90_gpu(sms), h100 = sm90_gpu(132);
  const auto weight = p.weight.store<T>(false);
  std::vector<T> bias(p.bias.begin(), p.bias.end());
  const std::string tag = std::string(" layer ") + (cl ? "NHWC" : "NCHW");
  const char* ran = nullptr;
  const char* h100_choice = nullptr;
  LaunchShape ran_shape{}, h100_shape{};
  if (pass == "forward" || pass == "backward-input") {
    const bool backward = pass == "backward-input";
    const Tensor4& src = backward ? p.grad_output : p.input;
    const Tensor4& dst = backward ? p.grad_input : p.output;
    const auto src_data = src.store<T>(cl);
    auto dst_data = poisoned<T>(dst.v.size());
    const PassOperands operands{!cl, cl, address_of(src_data), address_of(dst_data), address_of(weight), int(sizeof(T)),
                                false};
    auto choose = [&](const PassGeometry& geometry, const GpuLimits& on) {
      return backward ? choose_backward_input<T>(geometry, operands, 0, on) : choose_forward<T>(geometry, operands, 0, on);
    };
    const PassChoice choice = choose(g, gpu);
    const PassPointers<T> pointers{src_data.data(), weight.data(), backward || !k.bias ? nullptr : bias.data(),
                                   dst_data.data(), src.strides(cl), dst.strides(cl)};
    if (backward) {
      launch_pass<T, true>(choice, false, pointers, gpu, 0);
    } else {
      launch_pass<T, false>(choice, false, pointers, gpu, 0);
    }
    const PassChoice h100_pass = choose(planned_g, h100);
    ran = kernel_name(choice.kernel);
    h100_choice = kernel_name(h100_pass.kernel);
    ran_shape = launch_shape(choice, gpu);
    h100_shape = launch_shape(h100_pass, h100);
    expect_close(pass + tag, ran, k, dst_data, dst, cl, double(k.kh) * k.kw * (backward ? k.m : 1));
  } else if (pass == "backward-weight") {
    const auto go = p.grad_output.store<T>(cl);
    const auto in = p.input.store<T>(cl);
    const GradWeightOperands operands{!cl, cl, address_of(go), address_of(in), int(sizeof(T)), false, k.bias};
    const GradWeightChoice choice = choose_grad_weight<T>(g, operands, 0, gpu);
    const Buffer<T> gw = run_grad_weight<T>(p, choice, false, go, in, cl, gpu).grad_weight;
    const GradWeightChoice h100_pass = choose_grad_weight<T>(planned_g, operands, 0, h100);
    ran = kernel_name(choice.kernel);
    h100_choice = kernel_name(h100_pass.kernel);
    ran_shape = launch_shape(choice);
    h100_shape = launch_shape(h100_pass);
    expect_close(pass + tag, ran, k, gw, p.grad_weight, false, double(k.n) * k.oh() * k.ow());
  } else {
    throw std::invalid_argument("--layer: no pass " + pass + " (forward, backward-input or backward-weight)");
  }
  const auto shape = [](const LaunchShape& l) {
    return std::to_string(l.block.x) + "," + std::to_string(l.block.y) + "," + std::to_string(l.block.z) + " shared " +
           std::to_string(l.shared_bytes);
  };
  std::printf("kernel %s block %s\nh100 batch %d kernel %s block %s\n", ran, shape(ran_shape).c_str(), planned_batch,
              h100_choice, shape(h100_shape).c_str());
}

std::vector<Case> sweep() {
  std::vector<Case> cases = {
      // n  c  m   h    w  kh kw sh sw ph pw dh dw bias
      {2, 3, 1, 20, 40, 3, 3, 1, 1, 1, 1, 1, 1, true},     // the common 3x3
      {1, 2, 2, 9, 33, 5, 5, 2, 2, 2, 2, 1, 1, false},     // multiplier 2, stride 2
      {2, 4, 1, 1, 300, 1, 4, 1, 1, 0, 3, 1, 1, true},     // conv1d (Mamba): H = 1, k = 4, causal-style pad
      {1, 2, 1, 14, 50, 7, 7, 1, 1, 3, 3, 1, 1, false},    // ConvNeXt 7x7
      {1, 1, 3, 12, 30, 1, 11, 1, 1, 0, 5, 1, 1, true},    // 1x11
      {1, 2, 1, 24, 17, 11, 1, 1, 1, 5, 0, 1, 1, false},   // 11x1
      {2, 2, 1, 10, 20, 3, 3, 1, 1, 2, 2, 2, 2, false},    // dilation 2
      {1, 40, 1, 6, 7, 3, 3, 1, 1, 1, 1, 1, 1, true},      // narrow planes, channels over two lane groups
      {1, 2, 1, 20, 40, 13, 13, 1, 1, 6, 6, 1, 1, false},  // large kernel
      {3, 2, 2, 8, 19, 3, 2, 3, 2, 0, 1, 1, 2, true},      // odd strides, no padding on one axis
      {1, 1, 1, 5, 5, 5, 5, 1, 1, 0, 0, 1, 1, false},      // one output element
      {1, 2, 1, 16, 70, 3, 3, 1, 1, 4, 4, 1, 1, false},    // padding beyond (k-1)*d: direct backward only
      // Channel counts the channels_last tiled kernel takes (multiples of every vector width):
      {2, 16, 1, 12, 20, 3, 3, 1, 1, 1, 1, 1, 1, true},    // 3x3
      {1, 24, 1, 9, 120, 5, 5, 2, 2, 2, 2, 1, 1, false},   // 5x5 stride 2; 3 half vectors, blocks of 1
      {1, 64, 1, 1, 100, 1, 4, 1, 1, 0, 3, 1, 1, true},    // conv1d as a transposed projection output
      {1, 32, 1, 10, 13, 7, 7, 1, 1, 3, 3, 1, 1, false},   // 7x7
      {2, 8, 1, 11, 9, 3, 3, 1, 1, 2, 2, 2, 2, true},      // dilation 2
      {1, 16, 1, 9, 40, 15, 15, 1, 1, 7, 7, 1, 1, false},  // a large kernel: tiles shrink to fit
      // Filters the register-tiled NCHW kernel takes (square 3, 5, 7 at stride 1, dilation 1):
      {1, 3, 1, 70, 130, 3, 3, 1, 1, 1, 1, 1, 1, true},    // wider and taller than one tile
      {2, 5, 2, 28, 28, 5, 5, 1, 1, 2, 2, 1, 1, false},    // multiplier 2: backward sums two planes
      {2, 20, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, true},    // 16 planes a block, the last block part-filled
      {1, 33, 1, 7, 7, 7, 7, 1, 1, 3, 3, 1, 1, true},      // 7x7 planes, 32 planes a block
      {1, 4, 1, 1, 37, 3, 3, 1, 1, 1, 1, 1, 1, false},     // one input row
      {1, 2, 1, 11, 9, 5, 5, 1, 1, 1, 0, 1, 1, true},      // uneven padding, a narrow plane
      {2, 8, 1, 300, 4, 3, 3, 1, 1, 1, 1, 1, 1, false},    // one thread a row: 64 rows of threads at most
      {1, 8, 1, 12, 16, 5, 5, 1, 1, 2, 2, 1, 1, true},     // rows of whole 4-column stores, both ways
      // The register-tiled weight gradient: 4 batch entries a block, the second group part-filled,
      // the block's sums reduced in chunks (48 + 1 taps in float, 24 + 24 + 1 in double):
      {5, 2, 1, 32, 32, 7, 7, 1, 1, 3, 3, 1, 1, false},
      {3, 2, 1, 150, 20, 3, 3, 1, 1, 1, 1, 1, 1, true},    // two tiles down the plane, items across slices
      // The large-filter kernel (cases 8 and 17 above reach it too):
      {2, 3, 1, 16, 16, 27, 27, 1, 1, 13, 13, 1, 1, true},  // RepLKNet-like: whole steps and a 3-tap rest, two planes a block
      {1, 8, 2, 7, 7, 13, 13, 1, 1, 6, 6, 1, 1, false},     // 7x7 planes, 8 a block; multiplier 2: backward sums two planes
      {1, 8, 1, 30, 45, 9, 31, 1, 1, 4, 15, 1, 1, true},    // 9x31: 12 threads across, rows of 9 thread blocks
      {1, 2, 1, 60, 13, 51, 5, 1, 1, 25, 2, 1, 1, false},   // 51x5 (SLaK): a one-tap rest, a tall tile
      {3, 4, 1, 6, 139, 4, 8, 1, 1, 0, 4, 1, 1, true},      // 4x8: no rest; two tiles across, 3 output rows
      {1, 1, 1, 41, 41, 41, 41, 1, 1, 20, 20, 1, 1, false}, // double's tile fits only 2 rows of threads
      {2, 8, 1, 24, 24, 17, 17, 1, 1, 8, 8, 1, 1, true},    // rows of whole 4-column stores, both ways
      {20, 1, 1, 10, 10, 4, 6, 1, 1, 1, 2, 1, 1, false},    // 4x6; the weight gradient's slices hold two items
      // The row kernels (conv1d, 1 x 2..4 at stride 1; cases 2 and 14 above reach them too):
      {3, 5, 1, 1, 203, 1, 3, 1, 1, 0, 1, 1, 1, true},      // rows of 203: each row's window at another offset
      {2, 3, 2, 1, 150, 1, 2, 1, 1, 0, 1, 1, 1, false},     // multiplier 2: forward only (backward sums two rows)
      {1, 3, 1, 1, 64, 1, 4, 1, 1, 0, 0, 1, 1, true},       // no padding: 61 outputs, forward too narrow
      {1, 2, 1, 1, 63, 1, 4, 1, 1, 0, 3, 1, 1, false},      // 66 outputs; backward's 63 too narrow
      {2, 8, 1, 1, 1000, 1, 4, 1, 1, 0, 2, 1, 1, true},     // many chunks a thread
      {1, 4, 1, 1, 90, 1, 4, 1, 1, 0, 5, 1, 1, false},      // padding past k - 1: forward only
      // The column kernels (conv1d in channels_last, 16 channel vectors or more; case 14 above too):
      {2, 128, 1, 1, 47, 1, 4, 1, 1, 0, 3, 1, 1, true},     // 50 outputs: segments past both ends
      {1, 256, 1, 1, 37, 1, 3, 1, 1, 0, 1, 1, 1, false},    // whole and part vector groups
      {3, 136, 1, 1, 20, 1, 2, 1, 1, 0, 1, 1, 1, true},     // 17 half vectors: a group part-filled
      // The stride-2 backward-input kernels (square 3 and 5, dilation 1; cases 1 and 13 above too):
      {2, 16, 1, 20, 24, 3, 3, 2, 2, 1, 1, 1, 1, false},    // the common 3x3, rows of whole 4-column stores
      {1, 8, 1, 13, 27, 3, 3, 2, 2, 0, 0, 1, 1, true},      // no padding (even parity), odd sizes
      {1, 8, 2, 15, 21, 3, 3, 2, 2, 2, 2, 1, 1, false},     // even padding past a phase; multiplier 2 (NCHW)
      {2, 40, 1, 14, 16, 5, 5, 2, 2, 3, 3, 1, 1, false},    // 5x5 odd padding; 5 half vectors, a group part-filled
      {1, 8, 1, 29, 60, 5, 5, 2, 2, 1, 1, 1, 1, true},      // threads walking several blocks
      {1, 4, 1, 6, 7, 3, 3, 2, 2, 3, 3, 1, 1, false},       // padding past the filter: rows of zeros
      {1, 8, 1, 12, 12, 3, 3, 2, 2, 1, 0, 1, 1, false},     // padding parities differ: direct only
      // The register-tiled kernels at stride 2 (forward and weight gradient; cases 1, 13, 45-50 above too):
      {1, 2, 1, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, true},    // a 56x56 output: the tile splits its rows to fit
      {2, 3, 2, 21, 270, 5, 5, 2, 2, 2, 2, 1, 1, false},    // 5x5, multiplier 2: two tiles across, part-filled
      // The register-tiled channels_last kernel (channels whole 16-byte vectors; cases 12-14, 19 and 45-53 too):
      {1, 64, 1, 40, 70, 7, 7, 1, 1, 3, 3, 1, 1, true},     // 8 vectors a block (half), two channel blocks (float)
      {2, 40, 1, 14, 14, 7, 7, 1, 1, 3, 3, 1, 1, false},    // a part-filled channel group; lanes past the edge
      {1, 16, 1, 57, 41, 3, 3, 2, 2, 1, 1, 1, 1, true},     // stride 2, odd sizes: rows of lanes past the edge
      {2, 8, 1, 23, 30, 5, 5, 2, 2, 0, 0, 1, 1, false},     // 5x5 at stride 2 without padding
      {2, 16, 1, 9, 30, 3, 3, 1, 1, 0, 2, 1, 1, true},      // uneven padding: 7 output rows
      // The ring weight gradient (channels_last, whole 16-byte channel vectors; cases 12-15, 19 and 53-58 too):
      {1, 40, 1, 60, 20, 3, 3, 1, 1, 1, 1, 1, 1, false},    // a part-filled channel block; bands down the plane
      {2, 32, 1, 11, 150, 5, 5, 2, 2, 2, 2, 1, 1, true},    // stride 2, a row in chunks, odd rows
      // The register tiles staged and stored by the whole block (many small planes a block):
      {2, 6, 2, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, true},        // multiplier 2: forward staged a plane at a time
      // The streamed channels_last kernel (whole 16-byte channel vectors, 8 output rows or more; 53-59 too):
      {2, 16, 1, 30, 20, 3, 3, 1, 1, 1, 1, 1, 1, true},     // 8 steps down the plane: the ring goes round
      {1, 40, 1, 26, 18, 7, 7, 1, 1, 3, 3, 1, 1, false},    // 7x7, a part-filled channel group, a short last step
      {1, 16, 1, 57, 64, 5, 5, 2, 2, 2, 2, 1, 1, true},     // 5x5 at stride 2, two channel groups, a last step of 1 row
      {2, 32, 1, 61, 44, 3, 3, 2, 2, 1, 1, 1, 1, false},    // 3x3 at stride 2: 31 output rows, bands across two images
      // The window weight gradient (channels_last, whole 16-byte channel vectors; 12-15, 19, 53-65 too):
      {1, 16, 1, 17, 30, 7, 7, 2, 2, 3, 3, 1, 1, true},     // 7x7 at stride 2: the ring kernel's alone
      {2, 24, 1, 20, 9, 7, 7, 2, 2, 3, 3, 1, 1, true},      // ... a part-filled channel block, 5 columns
      {2, 8, 1, 3, 20, 7, 7, 1, 1, 3, 3, 1, 1, false},      // 3 rows: steps that meet fewer kernel rows than they reach
      {1, 48, 1, 12, 70, 5, 5, 2, 2, 2, 2, 1, 1, true},     // 5x5 at stride 2, 35 columns: a part-filled channel block
      // The tensor-core channels_last kernel (bfloat16 and half, 3x3 at stride 1; 12, 24, 59 and 63 too),
      // its tasks of one tile (strips of 16 columns or fewer) and two:
      {1, 64, 1, 33, 37, 3, 3, 1, 1, 1, 1, 1, 1, true},     // 8 vectors a block, three strips, a short last step
      {2, 24, 1, 20, 18, 3, 3, 1, 1, 1, 1, 1, 1, false},    // 3 vectors: a part-filled channel group
      {2, 16, 1, 16, 100, 3, 3, 1, 1, 1, 1, 1, 1, false},   // tasks of two tiles, four a row, the last part-filled
      {1, 32, 1, 33, 37, 3, 3, 1, 1, 1, 1, 1, 1, true},     // tasks of two tiles (a strip of 37), inf and NaN too
      {2, 16, 1, 20, 40, 5, 5, 1, 1, 2, 2, 1, 1, false},    // 5x5
      {1, 8, 1, 14, 14, 5, 5, 1, 1, 2, 2, 1, 1, true},      // 5x5, tasks of one tile, a last step of 2 rows
      {1, 32, 1, 26, 37, 5, 5, 1, 1, 2, 2, 1, 1, true},     // 5x5, tasks of two tiles, inf and NaN too
  };
  std::mt19937 rng(12345);
  auto pick = [&](std::initializer_list<int> values) {
    return *(values.begin() + std::uniform_int_distribution<int>(0, int(values.size()) - 1)(rng));
  };
  while (cases.size() < 87) {  // 10 random cases
    Case k{};
    k.n = pick({1, 2, 3}); k.c = pick({1, 2, 5, 33, 8, 40}); k.m = pick({1, 1, 2});
    k.kh = pick({1, 2, 3, 5}); k.kw = pick({1, 3, 4, 7});
    k.sh = pick({1, 1, 2, 3}); k.sw = pick({1, 1, 2});
    k.dh = pick({1, 1, 2}); k.dw = pick({1, 2});
    k.ph = std::uniform_int_distribution<int>(0, k.kh)(rng); k.pw = std::uniform_int_distribution<int>(0, k.kw)(rng);
    k.h = std::uniform_int_distribution<int>(1, 18)(rng); k.w = std::uniform_int_distribution<int>(1, 60)(rng);
    k.bias = pick({0, 1});
    if (k.oh() > 0 && k.ow() > 0 && k.h + 2 * k.ph >= k.dh * (k.kh - 1) + 1 && k.w + 2 * k.pw >= k.dw * (k.kw - 1) + 1)
      cases.push_back(k);
  }
  // Batches of 8 and more on small planes, where the register-tiled weight gradient's blocks hold 8
  // or more batch entries and copy grad_output into shared memory (v34):
  cases.push_back({8, 3, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, true});    // 87: 14x14, 8 planes a block
  cases.push_back({9, 2, 1, 13, 13, 3, 3, 2, 2, 1, 1, 1, 1, true});    // 88: stride 2 to 7x7, 16 a block, 9 live
  cases.push_back({12, 2, 1, 7, 7, 5, 5, 1, 1, 2, 2, 1, 1, false});    // 89: 7x7 5x5, 16 a block, 12 live
  cases.push_back({8, 2, 1, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, false});     // 90: 3x3 planes, blocks of 8 threads
  cases.push_back({8, 2, 1, 14, 14, 7, 7, 1, 1, 3, 3, 1, 1, false});   // 91: 14x14 7x7
  cases.push_back({8, 2, 1, 14, 14, 5, 5, 2, 2, 2, 2, 1, 1, false});   // 92: 5x5 stride 2 to 7x7
  // Conv1d rows long enough that the row weight gradient cuts a channel's chunks into slices, which
  // end inside a row (v46):
  cases.push_back({3, 2, 1, 1, 1500, 1, 4, 1, 1, 0, 3, 1, 1, true});   // 93: float's 2 slices of 284 chunks, rows of 189
  // The plane-streamed NCHW kernel (float planes of 32x32 or less; 0, 20, 87, 88, 91 and 92 too), its
  // blocks walking several chunks on a one-SM GPU:
  cases.push_back({5, 20, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, true});   // 94: 16 planes a chunk, the last of 4 in a used buffer
  cases.push_back({8, 24, 1, 7, 7, 7, 7, 1, 1, 3, 3, 1, 1, false});    // 95: 7x7 planes, 64 a chunk, the last of 64
  cases.push_back({2, 12, 1, 14, 15, 5, 5, 2, 2, 2, 2, 1, 1, true});   // 96: stride 2, planes of 840 bytes in pairs
  cases.push_back({1, 40, 1, 28, 28, 5, 5, 1, 1, 2, 2, 1, 1, false});  // 97: 28x28, 5 planes a chunk, 8 chunks
  cases.push_back({4, 5, 1, 9, 11, 3, 3, 1, 1, 0, 1, 1, 1, true});     // 98: 7x11 outputs, no row padding, planes in fours
  // Its vector rows (v50; 20, 87, 91, 92, 94 and 97 too):
  cases.push_back({3, 20, 1, 28, 28, 3, 3, 2, 2, 1, 1, 1, 1, true});   // 99: stride 2 from rows of 7 vectors, pair stores
  cases.push_back({7, 19, 1, 6, 6, 5, 5, 1, 1, 2, 2, 1, 1, false});    // 100: rows of 6 in pitches of 8, tails zeroed
  cases.push_back({4, 6, 1, 10, 12, 3, 3, 1, 1, 1, 0, 1, 1, true});    // 101: even rows, padding 0 across: flat planes
  cases.push_back({2, 8, 1, 28, 28, 5, 5, 2, 2, 2, 2, 1, 1, false});   // 102: 5x5 stride 2 from vector rows, 4 vectors a row
  cases.push_back({3, 10, 1, 20, 24, 3, 3, 2, 2, 1, 1, 1, 1, true});   // 103: stride 2 to rows of 12, inf and NaN inputs
  // The plane-streamed weight gradient (v51; 0, 20, 87, 91 and 94-103 too): planes of one value, whose
  // block's sums take more shared memory than its buffers; groups of 16 channels, the last of 4, 7x7 at a
  // pitch of whole vectors:
  cases.push_back({8, 4, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, true});      // 104: 1x1 planes, 4 a group
  cases.push_back({3, 36, 1, 14, 14, 7, 7, 1, 1, 3, 3, 1, 1, false});  // 105: three groups, entries in slices
  // Both conv1d gradients from one kernel (v52; 2, 14, 36, 40 and 93 too): no padding, so that grad_output's
  // rows are shorter and the values past their ends meet the input's last inf and NaN; a filter of 2 on odd
  // rows; padding K - 1 on both sides, so that grad_output's rows are longer, on rows of 207 (at every offset
  // in a chunk): with 3 taps a row's last chunk, at offset C - 1, ends at its last grad_output value, and with
  // 4 a chunk fewer would not reach it:
  cases.push_back({2, 8, 1, 1, 200, 1, 4, 1, 1, 0, 0, 1, 1, true});    // 106: 197 outputs
  cases.push_back({3, 2, 1, 1, 131, 1, 2, 1, 1, 0, 1, 1, 1, false});   // 107: rows of 131, 132 outputs
  cases.push_back({2, 8, 1, 1, 207, 1, 4, 1, 1, 0, 3, 1, 1, true});    // 108: 210 outputs
  cases.push_back({2, 8, 1, 1, 207, 1, 3, 1, 1, 0, 2, 1, 1, false});   // 109: 209 outputs
  // Both conv1d gradients in channels_last from one kernel, and its weight gradient alone (v53; 14 and 42-44
  // too): padding K - 1 on rows of 207, whose last segment holds grad_output's last value alone; rows of 1000
  // whose slices end inside rows; no padding on rows of 64, where a row's last segment's grad_output window,
  // not its inputs, passes the row's end; a filter of 2 with 48 8-byte vectors of bf16, a second vector group
  // half-filled; padding K (two cases), which takes the two passes; padding 1 at K = 4 with the input's inf
  // and NaN, where the segments past grad_output's row meet the input's last values:
  cases.push_back({3, 256, 1, 1, 207, 1, 3, 1, 1, 0, 2, 1, 1, false}); // 110: 209 outputs, 27 segments a row
  cases.push_back({2, 128, 1, 1, 1000, 1, 4, 1, 1, 0, 3, 1, 1, true}); // 111: 1003 outputs, 126 segments a row
  cases.push_back({2, 128, 1, 1, 64, 1, 4, 1, 1, 0, 0, 1, 1, true});   // 112: 61 outputs
  cases.push_back({2, 192, 1, 1, 100, 1, 2, 1, 1, 0, 0, 1, 1, true});  // 113: 99 outputs
  cases.push_back({1, 128, 1, 1, 70, 1, 3, 1, 1, 0, 3, 1, 1, true});   // 114: padding 3 past a filter of 3
  cases.push_back({2, 128, 1, 1, 61, 1, 4, 1, 1, 0, 1, 1, 1, true});   // 115: 60 outputs, 8 segments a row
  cases.push_back({2, 136, 1, 1, 50, 1, 2, 1, 1, 0, 2, 1, 1, true});   // 116: padding 2 past a filter of 2
  // The plane stream's large planes (v54): past 32x32 floats up to 64x64, 3x3 and 5x5 at stride 1, one to
  // three planes a chunk, in all three passes; on a one-SM GPU each block walks two chunks or more (the
  // weight gradient's 64x64 entries pass its shared memory: the register tiles'):
  cases.push_back({2, 5, 1, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1, true});     // 117: MobileNetV2's 56x56, vector rows
  cases.push_back({2, 4, 1, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, false});    // 118: the largest, 256 tiles, 48 KB
  cases.push_back({3, 5, 1, 40, 44, 5, 5, 1, 1, 2, 2, 1, 1, true});     // 119: 5x5 on rows of 11 vectors, 2 a chunk
  cases.push_back({3, 4, 1, 48, 45, 3, 3, 1, 1, 1, 1, 1, 1, false});    // 120: odd rows: flat planes
  cases.push_back({3, 8, 1, 36, 36, 5, 5, 1, 1, 1, 1, 1, 1, true});     // 121: 5x5 at padding 1: flat planes, 3 a chunk
  return cases;
}

// The 2D layers with filters of 7x7 or less of every set of build_scripts/bench/layers.py, as it
// has them (channels, size, kernel, stride); tests/test_emulator.py checks that the two lists agree.
struct BenchLayer { int channels, size, kernel, stride; };
constexpr BenchLayer kTiledBenchLayers[] = {
    {32, 112, 3, 1}, {96, 112, 3, 2}, {144, 56, 3, 1}, {144, 56, 3, 2}, {192, 28, 3, 1},  // MobileNetV2
    {192, 28, 3, 2}, {384, 14, 3, 1}, {576, 14, 3, 1}, {576, 14, 3, 2}, {960, 7, 3, 1},
    {32, 112, 3, 1}, {96, 112, 3, 2}, {144, 56, 5, 2}, {240, 28, 5, 1}, {240, 28, 3, 2},  // EfficientNet-B0
    {480, 14, 3, 1}, {672, 14, 5, 1}, {672, 14, 5, 2}, {1152, 7, 5, 1},
    {96, 56, 7, 1}, {192, 28, 7, 1}, {384, 14, 7, 1}, {768, 7, 7, 1},  // ConvNeXt-T
    {16, 112, 3, 1}, {64, 112, 3, 2}, {72, 56, 3, 1}, {72, 56, 5, 2}, {120, 28, 5, 1},  // MobileNetV3-Large
    {240, 28, 3, 2}, {200, 14, 3, 1}, {184, 14, 3, 1}, {480, 14, 3, 1}, {672, 14, 3, 1},
    {672, 14, 5, 2}, {960, 7, 5, 1},
    {32, 112, 3, 1}, {48, 112, 3, 2}, {72, 56, 3, 1}, {72, 56, 5, 2}, {120, 28, 5, 1},  // MnasNet-B1
    {240, 28, 5, 2}, {480, 14, 5, 1}, {480, 14, 3, 1}, {576, 14, 3, 1}, {576, 14, 5, 2},
    {1152, 7, 5, 1}, {1152, 7, 3, 1},
    {80, 56, 3, 1}, {320, 14, 3, 1},  // UniRepLKNet-T's 3x3 (its 13x13 go to the large-filter kernels)
};

PassGeometry bench_layer_geometry(const BenchLayer& l, int batch) {
  const int pad = l.kernel / 2, out = (l.size + 2 * pad - l.kernel) / l.stride + 1;
  return PassGeometry{batch, l.channels, l.size, l.size, l.channels, out, out, l.kernel, l.kernel, l.stride, l.stride,
                      pad, pad, 1, 1, 1};
}

void expect_planned(bool planned, const char* dtype, const BenchLayer& l, int batch, const GpuLimits& gpu,
                    const char* what) {
  if (planned) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAIL %s %d@%d k%d s%d batch %d, %lld SMs of %d threads: no %s plan\n", dtype, l.channels, l.size,
                l.kernel, l.stride, batch, static_cast<long long>(gpu.sm_count), gpu.threads_per_sm, what);
  }
}

// Every benchmark layer must get the register-tiled plans at batch 64 and 1, on an H100 and on an
// RTX 3090 (a third of its shared memory an SM), so that no tile may outgrow shared memory (or idle
// too many lanes) and send a layer back to the general kernels unnoticed: NCHW (forward and weight
// gradient, stride 2 included) in acc_t, and channels_last (forward, and backward-input at stride
// 1) in scalar_t.
template <typename scalar_t>
void check_bench_layers_planned(const char* dtype) {
  using acc_t = at::acc_type<scalar_t, true>;
  for (const BenchLayer& l : kTiledBenchLayers) {
    for (const int batch : {64, 1}) {
      for (const GpuLimits& gpu : {sm90_gpu(132), sm86_gpu(82)}) {
        const PassGeometry g = bench_layer_geometry(l, batch);
        expect_planned(plan_register_tiled<acc_t>(g, gpu).has_value() &&
                           plan_register_grad_weight<scalar_t>(g, gpu, false, true, true).has_value() &&
                           plan_register_grad_weight<scalar_t>(g, gpu, true, true, true).has_value(),
                       dtype, l, batch, gpu, "register-tiled NCHW");
        const auto correlation = backward_input_as_correlation(g);
        expect_planned(plan_channels_last_register_tiled<scalar_t>(g, gpu.sm_count).has_value() &&
                           (!correlation || plan_channels_last_register_tiled<scalar_t>(*correlation, gpu.sm_count).has_value()),
                       dtype, l, batch, gpu, "register-tiled channels_last");
        if (sizeof(acc_t) == 4) {
          expect_planned(plan_ring_grad_weight<scalar_t>(g, gpu, false).has_value() &&
                             plan_ring_grad_weight<scalar_t>(g, gpu, true).has_value(),
                         dtype, l, batch, gpu, "ring weight-gradient");
          expect_planned(plan_window_grad_weight<scalar_t>(g, gpu, true).has_value(), dtype, l, batch, gpu,
                         "window weight-gradient");
          if (is_walk_grad_weight_filter(l.kernel, l.stride)) {
            expect_planned(plan_walk_grad_weight<scalar_t>(g, gpu).has_value(), dtype, l, batch, gpu,
                           "walk weight-gradient");
          }
        }
      }
    }
  }
}

// The direct kernel walks the output by the grid's stride. Near 2^31 elements (still addressable
// with 32-bit indices) its counter's last step would pass INT32_MAX, so it counts in 64 bits there:
// 1 x 2047 x 1024 x 1024 on an H100 (a 7x7 stride-2 backward-input, which only the direct kernel
// takes) is 1,048,575 elements short of 2^31, its grid 1,081,344 threads.
void check_grid_stride_bound() {
  const int64_t max32 = std::numeric_limits<int32_t>::max();
  const auto overflows = [](int64_t total) {
    const GpuLimits gpu = sm90_gpu(132);
    return grid_stride_overflows_int32(total, LaunchShape{elementwise_grid(total, gpu), dim3(kThreads), 0});
  };
  const int64_t grid_threads = int64_t(132) * 32 * kThreads;
  const bool right = overflows(int64_t(2047) << 20) && overflows(max32) && !overflows(max32 + 1 - grid_threads) &&
                     overflows(max32 + 2 - grid_threads) && !overflows(int64_t(1) << 30) && !overflows(1000);
  if (right) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAIL: grid_stride_overflows_int32 misjudges where a 32-bit grid-stride counter passes INT32_MAX\n");
  }
}

#ifndef DWCONV_EMULATE_FLOAT32_ONLY  // its bfloat16 choices' planners name bfloat16 kernels (their registers)
// The tensor-core kernel copies its filters as 16-byte vectors: a weight tensor off a 16-byte
// boundary must send a pass it takes (ConvNeXt-T's 96@56 in bf16, both passes) to another kernel.
void check_tensor_core_filters_aligned() {
  const PassGeometry g = bench_layer_geometry({96, 56, 7, 1}, 64);
  const auto kernel_with_weight_at = [&](std::uintptr_t weight, bool backward) {
    const PassOperands operands{false, true, 4096, 1 << 24, weight, 2, false};
    const auto choice = backward ? choose_backward_input<c10::BFloat16>(g, operands, 0, kDispatchGpu)
                                 : choose_forward<c10::BFloat16>(g, operands, 0, kDispatchGpu);
    return choice.kernel;
  };
  bool right = true;
  for (const bool backward : {false, true}) {
    right = right && kernel_with_weight_at(1 << 20, backward) == PassKernel::kChannelsLastMma &&
            kernel_with_weight_at((1 << 20) + 2, backward) != PassKernel::kChannelsLastMma;
  }
  if (right) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAIL: the tensor-core kernel is chosen, or not, regardless of its weight tensor's alignment\n");
  }
}
#endif

// A kernel built for some element types or one pass only refuses a launch for another, naming
// itself, the pass and the type, before it reads an operand (the operands' pointers here are null).
void check_unbuilt_instances_refused() {
  const GpuLimits gpu = kDispatchGpu;
  [[maybe_unused]] const PassGeometry large_planes = bench_layer_geometry({144, 56, 3, 1}, 64);  // (not in float32)
  const PassGeometry large_planes_s2 = bench_layer_geometry({144, 56, 3, 2}, 64);
  const std::uintptr_t at = 1 << 20;
  const PassOperands nchw{true, false, at, at, at, 4, false};
  [[maybe_unused]] const PassOperands cl{false, true, at, at, at, 2, false};
  const auto refused = [](const char* what, auto expected, auto chosen, const std::string& message, auto&& launch) {
    bool right = chosen == expected;
    std::string error;
    if (right) {
      try {
        launch();
        right = false;
      } catch (const c10::Error& e) {
        error = e.what_without_backtrace();
        right = error.find(message) != std::string::npos;
      }
    }
    if (right) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAIL: %s: chosen %s (expected %s); the launch's error: \"%s\", wanted \"%s\"\n", what,
                  kernel_name(chosen), kernel_name(expected), error.c_str(), message.c_str());
    }
  };
#ifndef DWCONV_EMULATE_FLOAT32_ONLY  // as check_tensor_core_filters_aligned
  const auto mma = choose_forward<c10::BFloat16>(large_planes, cl, 0, gpu);
  refused("a half-type-only kernel launched in float", PassKernel::kChannelsLastMma, mma.kernel,
          "channels_last_mma_kernel was chosen for a forward pass in Float",
          [&] { launch_pass<float, false>(mma, false, PassPointers<float>{}, gpu, 0); });
#endif
  const auto stride2 = choose_backward_input<float>(large_planes_s2, nchw, 0, gpu);
  refused("a backward-input-only kernel launched as a forward", PassKernel::kStride2GradInputNchw, stride2.kernel,
          "stride2_grad_input_nchw_kernel was chosen for a forward pass in Float",
          [&] { launch_pass<float, false>(stride2, false, PassPointers<float>{}, gpu, 0); });
#ifndef DWCONV_EMULATE_FLOAT32_ONLY  // the float32 build holds no double instance
  const PassGeometry small_planes = bench_layer_geometry({384, 14, 3, 1}, 64);
  const auto plane = choose_forward<float>(small_planes, nchw, 0, gpu);
  refused("a float-only forward kernel launched in double", PassKernel::kPlaneStream, plane.kernel,
          "plane_stream_kernel was chosen for a forward pass in Double",
          [&] { launch_pass<double, false>(plane, false, PassPointers<double>{}, gpu, 0); });
  const GradWeightOperands grad_nchw{true, false, at, at, 4, false};
  const auto plane_grad = choose_grad_weight<float>(small_planes, grad_nchw, 0, gpu);
  refused("a float-only weight gradient launched in double", GradWeightKernel::kPlaneStream, plane_grad.kernel,
          "plane_stream_grad_weight_kernel was chosen for a weight gradient in Double", [&] {
            // the finish's buffers real: were the weight gradient to launch nothing, the finish would run
            const int64_t values = small_planes.dst_channels * small_planes.kernel_h * small_planes.kernel_w;
            std::vector<double> partial(grad_weight_slices(plane_grad) * values), grad_weight(values);
            GradWeightPointers<double> pointers{};
            pointers.partial = partial.data();
            pointers.grad_weight = grad_weight.data();
            launch_grad_weight<double>(plane_grad, false, small_planes, pointers, gpu, 0);
          });
#endif
}

// The cases CASES names (the usage above main), in its order.
std::vector<size_t> chosen_cases(const std::string& spec, size_t count) {
  std::vector<size_t> chosen;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, comma - start);
    const auto colon = item.find(':');
    const size_t first = colon == 0 ? 0 : std::stoul(item.substr(0, colon));
    const std::string end = colon == std::string::npos ? "" : item.substr(colon + 1);
    const size_t last = colon == std::string::npos ? first + 1 : end.empty() ? count : std::min(count, size_t(std::stoul(end)));
    if (first >= count && colon == std::string::npos) throw std::out_of_range("no case " + item);
    for (size_t i = first; i < last; ++i) chosen.push_back(i);
    start = comma + 1;
  }
  return chosen;
}

}  // namespace

// emulate_depthwise2d --layer N,C,H,K,S,SMS,BATCH DTYPE LAYOUT PASS: see run_layer_pass (a C-channel
// H x H input, a K x K filter at stride S and padding K / 2, no bias; DTYPE float, double, half or
// bfloat16; LAYOUT nchw or nhwc; PASS forward, backward-input or backward-weight).
int run_layer(int argc, char** argv) {
  int n, c, h, kernel, stride, planned_batch;
  long sms;
  if (argc != 6 || std::sscanf(argv[2], "%d,%d,%d,%d,%d,%ld,%d", &n, &c, &h, &kernel, &stride, &sms, &planned_batch) != 7 ||
      (std::string(argv[4]) != "nchw" && std::string(argv[4]) != "nhwc")) {
    std::fprintf(stderr, "usage: emulate_depthwise2d --layer N,C,H,K,S,SMS,BATCH DTYPE nchw|nhwc PASS\n");
    return 2;
  }
  const Case k{n, c, 1, h, h, kernel, kernel, stride, stride, kernel / 2, kernel / 2, 1, 1, false};
  const bool cl = std::string(argv[4]) == "nhwc";
  const std::string dtype = argv[3], pass = argv[5];
  if (dtype == "float") {
#ifdef DWCONV_EMULATE_ONLY  // a pass chosen and launched as DepthwiseConv2d.cu does may take any kernel
    std::fprintf(stderr, "--layer: this build checks only the kernels of one header\n");
    return 2;
#else
    run_layer_pass<float>(k, cl, pass, sms, planned_batch);
#endif
#ifndef DWCONV_EMULATE_FLOAT32_ONLY  // the other types' kernels are most of the build
  } else if (dtype == "double") {
    run_layer_pass<double>(k, cl, pass, sms, planned_batch);
  } else if (dtype == "half") {
    run_layer_pass<c10::Half>(k, cl, pass, sms, planned_batch);
  } else if (dtype == "bfloat16") {
    run_layer_pass<c10::BFloat16>(k, cl, pass, sms, planned_batch);
#endif
  } else {
    std::fprintf(stderr, "--layer: no dtype %s (float, double, half or bfloat16)\n", dtype.c_str());
    return 2;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

// Usage: emulate_depthwise2d [CASES], the cases of the sweep to run (default: all), comma-separated
// items each a case (7) or a range (3:9, :9 or 3:, 9 not included); emulate_depthwise2d --list, the
// sweep's cases with their indices.
// Built with DWCONV_EMULATE_FLOAT32_ONLY, it checks the kernels in float with 32-bit indices only:
// half the build time, for the planted-bug runs that a float run catches. Built with
// DWCONV_EMULATE_ONLY too (KernelHeader), it checks one header's kernels, called directly.
int main(int argc, char** argv) {
  dwconv_emu::launch_bound_threads = at::native::dwconv::kThreads;  // every kernel's __launch_bounds__ maximum
  if (argc > 1 && std::string(argv[1]) == "--layer") return run_layer(argc, argv);
  const auto cases = sweep();
  if (argc > 1 && std::string(argv[1]) == "--list") {
    for (size_t i = 0; i < cases.size(); ++i) std::printf("%zu [%s]\n", i, cases[i].str().c_str());
    return 0;
  }
  const std::vector<size_t> chosen = chosen_cases(argc > 1 ? argv[1] : ":", cases.size());
#ifndef DWCONV_EMULATE_ONLY  // the choice's checks, no kernel run
  check_bench_layers_planned<float>("float");
#ifndef DWCONV_EMULATE_FLOAT32_ONLY  // a planner names its kernels (their registers), which a type's plans instantiate
  check_bench_layers_planned<c10::Half>("half");  // bf16's sizes are half's
  check_bench_layers_planned<double>("double");
#endif
  check_grid_stride_bound();
#ifndef DWCONV_EMULATE_FLOAT32_ONLY
  check_tensor_core_filters_aligned();
#endif
  check_unbuilt_instances_refused();
#endif
  for (const size_t i : chosen) {
    std::mt19937 rng(7 + i);  // a case's data does not depend on the range run
    const Problem p(cases[i], rng);
    try {
      check_all<float, int32_t>(p, "float");
#ifndef DWCONV_EMULATE_FLOAT32_ONLY
      check_all<double, int32_t>(p, "double");
      if (i % 4 == 0) check_all<float, int64_t>(p, "float");
      if (i % 4 == 0 || cases[i].c % 8 == 0) {  // 8 values: one vector
        check_all<c10::Half, int32_t>(p, "half");
        check_all<c10::BFloat16, int32_t>(p, "bfloat16");
      }
#endif
      if (i % 3 != 0) {  // inf and NaN reach the outputs and taps they reach in float64
        const bool in_input = i % 3 == 1;
        const Problem q(cases[i], rng, in_input ? Problem::NonFinite::input : Problem::NonFinite::grad_output);
        const std::string where = in_input ? ", inf and NaN in the input" : ", inf and NaN in grad_output";
        check_all<float, int32_t>(q, ("float" + where).c_str());
#ifndef DWCONV_EMULATE_FLOAT32_ONLY
        if (cases[i].c % 8 == 0) {
          check_all<c10::BFloat16, int32_t>(q, ("bfloat16" + where).c_str());
          check_all<c10::Half, int32_t>(q, ("half" + where).c_str());
        }
#endif
      }
    } catch (const std::exception& error) {  // a launch no GPU would accept
      ++failed;
      std::printf("FAIL [%s]: %s\n", cases[i].str().c_str(), error.what());
    }
  }
  if (out_of_bounds_writes > 0) {
    ++failed;
    std::printf("FAIL: %d buffers written past an end\n", out_of_bounds_writes);
  }
  for (const auto& [kernel, count] : checks_per_kernel) std::printf("checked %s: %d\n", kernel.c_str(), count);
  for (const auto& [kernel, count] : grouped_checks_per_kernel) {
    std::printf("with thread groups, checked %s: %d\n", kernel.c_str(), count);
  }
  for (const auto& [kernel, count] : dispatches_per_kernel) std::printf("dispatched to %s: %d\n", kernel.c_str(), count);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
