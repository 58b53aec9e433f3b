#include "kernels/linear_fp8_blocks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/linear_driver.h"
#include "kernels/formats.h"

namespace deepinfer::kernels {
namespace {

// Weight rows decoded per panel: small enough for the panel to stay in L2 (64 x 4096 floats =
// 1 MiB at the widest V4.1 test shapes), large enough to amortise the F32 Linear's per-call setup.
constexpr int64_t kPanelRows = 64;

const std::array<float, 256>& E4m3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) {
      const float v = Fp8E4m3ToFloat(static_cast<uint8_t>(c));
      t[c] = std::isnan(v) ? 0.0f : v;  // NaN codes count as 0 (DequantizeWeight, DS4)
    }
    return t;
  }();
  return table;
}

// ForEachThreadRange needs the pool's own partition (one slot per pool thread) when it splits.
int Threads(const ThreadPool* pool, int64_t N) {
  return pool != nullptr && N > kPanelRows ? pool->num_threads() : 1;
}

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

// Whether LinearFp8Blocks streams the FP8 bytes itself (avx2::LinearFp8TilesSmallM) instead of
// running ops.h's F32 Linear on dequantised panels: only where that Linear is the AVX2 one (the
// result must be its bits), for decode-sized M, plain FP32 inputs and 32-column-aligned tiles.
bool StreamsDirectly(int64_t M, const Fp8BlocksView& w, const LinearOptions& opt) {
  return M <= cpu::kStreamMaxM && KernelIsa() == IsaLevel::kAvx2 && w.block_cols % 32 == 0 &&
         !opt.quantize_activations && !opt.input_is_bf16;
}

WeightView PanelView(const float* panel, int64_t rows, int64_t cols) {
  WeightView v;
  v.dtype = WeightDType::kF32;
  v.data = panel;
  v.rows = rows;
  v.cols = cols;
  return v;
}

// Bytes of one thread's slot: the panel, then the F32 Linear's workspace for a full panel.
size_t SlotBytes(int64_t M, int64_t K, const LinearOptions& opt) {
  float dummy = 0;
  const WeightView v = PanelView(&dummy, kPanelRows, K);
  return Align64(static_cast<size_t>(kPanelRows * K) * sizeof(float)) +
         Align64(LinearWorkspaceBytes(M, v, opt, nullptr));
}

}  // namespace

float Fp8BlocksView::Scale(int64_t rb, int64_t cb) const {
  const int64_t i = rb * scale_cols() + cb;
  if (scale_dtype == ScaleDType::kF32) {
    float s;
    std::memcpy(&s, static_cast<const uint8_t*>(scales) + 4 * i, 4);
    return s;
  }
  // Not std::ldexp: the libm call cost more than the decode itself.
  return E8m0ToFloatLdexp(static_cast<const uint8_t*>(scales)[i]);
}

int64_t Fp8BlocksScaleCount(int64_t rows, int64_t cols, int64_t br, int64_t bc) {
  CHECK(br > 0 && bc > 0);
  return ((rows + br - 1) / br) * ((cols + bc - 1) / bc);
}

Fp8BlocksView SliceFp8BlocksRows(const Fp8BlocksView& w, int64_t row_begin, int64_t count) {
  CHECK_EQ(row_begin % w.block_rows, 0) << "FP8 row slices must start on a scale tile";
  CHECK(row_begin >= 0 && count >= 0 && row_begin + count <= w.rows);
  Fp8BlocksView s = w;
  s.data = w.data + row_begin * w.cols;
  const int64_t skip = (row_begin / w.block_rows) * w.scale_cols();
  s.scales =
      static_cast<const uint8_t*>(w.scales) + skip * (w.scale_dtype == ScaleDType::kF32 ? 4 : 1);
  s.rows = count;
  return s;
}

void DequantizeFp8BlocksRows(const Fp8BlocksView& w, int64_t row_begin, int64_t row_end,
                             float* out) {
  CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  const auto& table = E4m3Table();
  const int64_t K = w.cols, bc = w.block_cols, nb = w.scale_cols();
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* src = w.data + r * K;
    float* dst = out + (r - row_begin) * K;
    for (int64_t cb = 0; cb < nb; ++cb) {
      const float s = w.Scale(r / w.block_rows, cb);
      const int64_t k1 = std::min(K, (cb + 1) * bc);
      for (int64_t k = cb * bc; k < k1; ++k) dst[k] = table[src[k]] * s;
    }
  }
}

size_t LinearFp8BlocksWorkspaceBytes(int64_t M, const Fp8BlocksView& w, const LinearOptions& opt,
                                     const ThreadPool* pool) {
  if (M == 0 || w.rows == 0) return 0;
  return static_cast<size_t>(Threads(pool, w.rows)) * SlotBytes(M, w.cols, opt);
}

void LinearFp8Blocks(const float* x, int64_t M, const Fp8BlocksView& w, float* y,
                     const LinearOptions& opt, ThreadPool* pool, void* workspace,
                     size_t workspace_bytes) {
  CHECK(w.block_rows > 0 && w.block_cols > 0);
  CHECK(w.data != nullptr || w.rows * w.cols == 0);
  CHECK(w.scales != nullptr || w.rows * w.cols == 0);
  const int64_t N = w.rows, K = w.cols;
  if (M == 0 || N == 0) return;
  CHECK_GE(workspace_bytes, LinearFp8BlocksWorkspaceBytes(M, w, opt, pool));
  CHECK_EQ(reinterpret_cast<uintptr_t>(workspace) % 64, 0u) << "workspace must be 64-byte aligned";
  if (StreamsDirectly(M, w, opt)) {
    // Decode (M <= 4) on AVX2: the weights streamed once from their FP8 bytes, no FP32 panel;
    // the same decoded values and FMA order as the panel path's F32 Linear, so the same bits.
    WeightView v;
    v.dtype = WeightDType::kFP8Block;
    v.data = w.data;
    v.scales = w.scales;
    v.scale_dtype = w.scale_dtype;
    v.rows = N;
    v.cols = K;
    v.fp8_tile_rows = w.block_rows;
    v.fp8_tile_cols = w.block_cols;
    v.fp8_nan_free = w.nan_free;
    const int64_t x_stride = opt.x_stride > 0 ? opt.x_stride : K;
    avx2::LinearFp8TilesSmallM(x, x_stride, M, v, y, opt.y_stride > 0 ? opt.y_stride : N, opt.bias,
                               pool);
    return;
  }
  const int threads = Threads(pool, N);
  const size_t slot_bytes = SlotBytes(M, K, opt);
  const size_t panel_bytes = Align64(static_cast<size_t>(kPanelRows * K) * sizeof(float));
  const int64_t y_stride = opt.y_stride > 0 ? opt.y_stride : N;
  cpu::ForEachThreadRange(N, kPanelRows, pool, threads, [&](int64_t n0, int64_t n1, int slot) {
    uint8_t* base = static_cast<uint8_t*>(workspace) + static_cast<size_t>(slot) * slot_bytes;
    float* panel = reinterpret_cast<float*>(base);
    uint8_t* ws = base + panel_bytes;
    for (int64_t n = n0; n < n1; n += kPanelRows) {
      const int64_t p = std::min(kPanelRows, n1 - n);
      DequantizeFp8BlocksRows(w, n, n + p, panel);
      const WeightView v = PanelView(panel, p, K);
      LinearOptions o = opt;
      o.bias = opt.bias != nullptr ? opt.bias + n : nullptr;
      o.y_stride = y_stride;
      const size_t need = LinearWorkspaceBytes(M, v, o, nullptr);
      Linear(x, M, v, y + n, o, nullptr, need > 0 ? ws : nullptr, need);
    }
  });
}

}  // namespace deepinfer::kernels
