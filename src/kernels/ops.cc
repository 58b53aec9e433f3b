// Dispatch of the public ops (ops.h) to the scalar reference or the vectorised CPU versions,
// plus the format-independent helpers (weight sizes, slicing, dequantisation, RoPE tables).
#include "kernels/ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>

#include "common/check.h"
#include "common/cpu_features.h"
#include "common/logging.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/reference.h"

namespace deepinfer::kernels {
namespace {

bool UseAvx2() { return ActiveIsa() >= IsaLevel::kAvx2; }
// AVX-512 kernels, once they have passed avx512::SelfCheck on this machine (run once, on first
// use; a failure is logged and the AVX2 kernels are used instead).
bool UseAvx512() {
  if (ActiveIsa() < IsaLevel::kAvx512) return false;
  static const bool passed = [] {
    std::string failure;
    if (avx512::SelfCheck(&failure)) return true;
    LOG(ERROR) << "AVX-512 kernels failed their self-check (" << failure
               << "); using the AVX2 kernels";
    return false;
  }();
  return passed;
}

void CheckWeight(const WeightView& w) {
  CHECK(w.data != nullptr || w.rows * w.cols == 0) << "weight view without data";
  CHECK(w.rows >= 0 && w.cols >= 0);
  if (w.dtype == WeightDType::kMXFP4) {
    CHECK_EQ(w.cols % 32, 0) << "MXFP4 needs K % 32 == 0";
    CHECK(w.scale_dtype == ScaleDType::kE8M0) << "MXFP4 scales are E8M0";
  }
  if (w.dtype == WeightDType::kFP8Block || w.dtype == WeightDType::kMXFP4) {
    CHECK(w.scales != nullptr || w.rows * w.cols == 0) << "quantised weight without scales";
  }
  if (w.dtype == WeightDType::kFP8Block) {
    CHECK(w.fp8_tile_rows == 128 && w.fp8_tile_cols == 128)
        << "Linear takes 128 x 128 FP8 scale tiles; other tiles go through LinearFp8Blocks";
  }
}

}  // namespace

IsaLevel KernelIsa() {
  if (const bf16dot::Kernel* k = bf16dot::ActiveKernel(); k != nullptr) {
    if (*k == bf16dot::Kernel::kAmx) return IsaLevel::kAmx;
    if (*k == bf16dot::Kernel::kAvx512Bf16) return IsaLevel::kAvx512Bf16;
  }
  if (UseAvx512()) return IsaLevel::kAvx512;
  return UseAvx2() ? IsaLevel::kAvx2 : IsaLevel::kScalar;
}

bool UsesMxfp4Lanes() { return KernelIsa() == IsaLevel::kAvx2; }

bool Fp8HasNanCodes(const uint8_t* codes, int64_t n) {
  // (c & 0x7F) == 0x7F for the two NaN codes only; a plain loop the compiler vectorises.
  uint8_t all = 0;
  for (int64_t i = 0; i < n; ++i) all |= static_cast<uint8_t>(((codes[i] | 0x80) == 0xFF));
  return all != 0;
}

bool PackMxfp4Lanes(const WeightView& w, Mxfp4LanePack* out, ThreadPool* pool) {
  CheckWeight(w);
  CHECK(w.dtype == WeightDType::kMXFP4) << "PackMxfp4Lanes takes MXFP4 weights";
  out->codes.clear();
  out->scales.clear();
  const int64_t N = w.rows, K = w.cols, nb = K / 32;
  const auto* scales = static_cast<const uint8_t*>(w.scales);
  for (int64_t i = 0; i < N * nb; ++i) {
    if (scales[i] < 1 || scales[i] > 252) return false;
  }
  const int64_t kp = Mxfp4LanePaddedK(K);
  const auto* data = static_cast<const uint8_t*>(w.data);
  out->codes.assign(static_cast<size_t>(N * kp / 2), 0);
  out->scales.assign(static_cast<size_t>(N * kp / 32), 127);
  auto pack_rows = [&](int64_t n0, int64_t n1) {
    std::vector<uint8_t> tail(kMxfp4LaneGroup / 2);
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* row = data + n * (K / 2);
      uint8_t* dst = out->codes.data() + n * (kp / 2);
      for (int64_t g = 0; g < kp; g += kMxfp4LaneGroup) {
        const uint8_t* src = row + g / 2;
        if (g + kMxfp4LaneGroup > K) {  // the last, partial group: zero codes past K
          std::fill(tail.begin(), tail.end(), 0);
          std::copy(src, row + K / 2, tail.begin());
          src = tail.data();
        }
        // Source bytes 2t, 2t + 1 of block l (t = 2q + j: columns 32l + 8q + 4j + 0..3) become
        // bytes 16(l/4) + 8j + 2(l%4) + o of chunk q, o = 0 taking their low nibbles and o = 1
        // their high ones (Mxfp4LaneColumn): as a 16-bit word (low byte first), nibbles 1 and 2
        // swap places.
        for (int l = 0; l < 8; ++l) {
          for (int t = 0; t < 8; ++t) {
            uint16_t v;
            std::memcpy(&v, src + 16 * l + 2 * t, 2);
            v = static_cast<uint16_t>((v & 0xF00F) | ((v >> 4) & 0x00F0) | ((v << 4) & 0x0F00));
            std::memcpy(dst + g / 2 + 32 * (t / 2) + 16 * (l / 4) + 8 * (t % 2) + 2 * (l % 4), &v,
                        2);
          }
        }
      }
      std::copy(scales + n * nb, scales + (n + 1) * nb, out->scales.begin() + n * (kp / 32));
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(N, 64, pack_rows);
  } else {
    pack_rows(0, N);
  }
  return true;
}

WeightView WithLanes(WeightView w, const Mxfp4LanePack& pack) {
  CHECK(w.dtype == WeightDType::kMXFP4);
  const int64_t kp = Mxfp4LanePaddedK(w.cols);
  CHECK_EQ(static_cast<int64_t>(pack.codes.size()), w.rows * kp / 2)
      << "lane pack of another shape";
  w.lane_codes = pack.codes.data();
  w.lane_scales = pack.scales.data();
  return w;
}

int64_t WeightDataBytes(WeightDType dtype, int64_t rows, int64_t cols) {
  switch (dtype) {
    case WeightDType::kF32:
      return rows * cols * 4;
    case WeightDType::kBF16:
      return rows * cols * 2;
    case WeightDType::kFP8Block:
      return rows * cols;
    case WeightDType::kMXFP4:
      return rows * cols / 2;
  }
  return 0;
}

int64_t WeightScaleCount(WeightDType dtype, int64_t rows, int64_t cols) {
  switch (dtype) {
    case WeightDType::kFP8Block:
      return ((rows + 127) / 128) * ((cols + 127) / 128);
    case WeightDType::kMXFP4:
      return rows * (cols / 32);
    default:
      return 0;
  }
}

WeightView SliceRows(const WeightView& w, int64_t row_begin, int64_t row_count) {
  CHECK(row_begin >= 0 && row_count >= 0 && row_begin + row_count <= w.rows)
      << "rows [" << row_begin << ", " << row_begin + row_count << ") of " << w.rows;
  WeightView s = w;
  s.rows = row_count;
  const auto* base = static_cast<const uint8_t*>(w.data);
  switch (w.dtype) {
    case WeightDType::kF32:
      s.data = base + row_begin * w.cols * 4;
      break;
    case WeightDType::kBF16:
      s.data = base + row_begin * w.cols * 2;
      break;
    case WeightDType::kFP8Block:
      CHECK_EQ(row_begin % 128, 0) << "FP8 row slices must start on a 128-row scale block";
      s.data = base + row_begin * w.cols;
      s.scale_row_offset = w.scale_row_offset + row_begin / 128;
      break;
    case WeightDType::kMXFP4: {
      s.data = base + row_begin * w.cols / 2;
      const int64_t scale_bytes = w.scale_dtype == ScaleDType::kF32 ? 4 : 1;
      s.scales = static_cast<const uint8_t*>(w.scales) + row_begin * (w.cols / 32) * scale_bytes;
      if (w.lane_codes != nullptr) {
        const int64_t kp = Mxfp4LanePaddedK(w.cols);
        s.lane_codes = w.lane_codes + row_begin * kp / 2;
        s.lane_scales = w.lane_scales + row_begin * kp / 32;
      }
      break;
    }
  }
  return s;
}

void DequantizeWeightRows(const WeightView& w, int64_t row_begin, int64_t row_end, float* out) {
  CheckWeight(w);
  CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= w.rows);
  for (int64_t r = row_begin; r < row_end; ++r) {
    ref::DecodeWeightRow(w, r, out + (r - row_begin) * w.cols);
  }
}

void DequantizeWeight(const WeightView& w, float* out) { DequantizeWeightRows(w, 0, w.rows, out); }

void DequantizeWeightToBf16(const WeightView& w, uint16_t* out) {
  CheckWeight(w);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      out[r * w.cols + c] = FloatToBf16(ref::WeightAt(w, r, c));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Linear

size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            const ThreadPool* pool) {
  // Exact BF16 x BF16 products (FP8 / MXFP4 / BF16 weights, quantised activations) take the
  // BF16-dot GEMM for every M where a kernel for it is active (cpu/bf16_dot.h).
  if (bf16dot::ActiveKernel() != nullptr && bf16dot::Applies(w, opt)) {
    return bf16dot::LinearWorkspaceBytes(M, w, opt, pool ? pool->num_threads() : 1);
  }
  if (UseAvx512()) {
    return avx512::LinearWorkspaceBytes(M, w, opt, pool ? pool->num_threads() : 1);
  }
  if (UseAvx2()) {
    return avx2::LinearWorkspaceBytes(M, w, opt, pool ? pool->num_threads() : 1);
  }
  return ref::LinearWorkspaceBytes(M, w, opt);
}

void Linear(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
            ThreadPool* pool, void* workspace, size_t workspace_bytes) {
  CheckWeight(w);
  CHECK_GE(M, 0);
  CHECK_GE(workspace_bytes, LinearWorkspaceBytes(M, w, opt, pool)) << "Linear workspace too small";
  CHECK(workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 64 == 0)
      << "Linear workspace must be 64-byte aligned";
  if (M == 0 || w.rows == 0) return;
  if (const bf16dot::Kernel* k = bf16dot::ActiveKernel();
      k != nullptr && bf16dot::Applies(w, opt)) {
    bf16dot::Linear(*k, x, M, w, y, opt, pool, workspace, workspace_bytes);
    return;
  }
  if (UseAvx512()) {
    avx512::Linear(x, M, w, y, opt, pool, workspace, workspace_bytes);
    return;
  }
  if (UseAvx2()) {
    avx2::Linear(x, M, w, y, opt, pool, workspace, workspace_bytes);
    return;
  }
  ref::Linear(x, M, w, y, opt, workspace, workspace_bytes);
}

// ---------------------------------------------------------------------------------------------
// Conversions and quantisation simulations

void RoundToBf16(float* x, int64_t n) {
  if (UseAvx512()) return avx512::RoundToBf16(x, n);
  if (UseAvx2()) return avx2::RoundToBf16(x, n);
  ref::RoundToBf16(x, n);
}

void Bf16ToF32(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

void F32ToBf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

void ActQuantFp8Sim(float* x, int64_t rows, int64_t cols, int64_t block) {
  if (UseAvx512()) return avx512::ActQuantFp8Sim(x, rows, cols, block);
  if (UseAvx2()) return avx2::ActQuantFp8Sim(x, rows, cols, block);
  ref::ActQuantFp8Sim(x, rows, cols, block);
}

void KvFp8Sim(float* x, int64_t rows, int64_t dim, int64_t rope_dim, int64_t block) {
  ref::KvFp8Sim(x, rows, dim, rope_dim, block);
}

void Fp4Sim(float* x, int64_t rows, int64_t cols, int64_t block) {
  ref::Fp4Sim(x, rows, cols, block);
}

void HadamardTransform(float* x, int64_t rows, int64_t n) { ref::HadamardTransform(x, rows, n); }

// ---------------------------------------------------------------------------------------------
// Norms

void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, float eps) {
  if (UseAvx512()) return avx512::RmsNorm(x, y, rows, dim, nullptr, nullptr, eps);
  if (UseAvx2()) return avx2::RmsNorm(x, y, rows, dim, nullptr, nullptr, eps);
  ref::RmsNorm(x, y, rows, dim, nullptr, nullptr, eps);
}

void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, const float* weight, float eps) {
  if (UseAvx512()) return avx512::RmsNorm(x, y, rows, dim, weight, nullptr, eps);
  if (UseAvx2()) return avx2::RmsNorm(x, y, rows, dim, weight, nullptr, eps);
  ref::RmsNorm(x, y, rows, dim, weight, nullptr, eps);
}

void RmsNormBf16Weight(const float* x, float* y, int64_t rows, int64_t dim, const uint16_t* weight,
                       float eps) {
  if (UseAvx512()) return avx512::RmsNorm(x, y, rows, dim, nullptr, weight, eps);
  if (UseAvx2()) return avx2::RmsNorm(x, y, rows, dim, nullptr, weight, eps);
  ref::RmsNorm(x, y, rows, dim, nullptr, weight, eps);
}

// ---------------------------------------------------------------------------------------------
// RoPE

void RopeFrequencies(int64_t rope_dim, double base, double* freqs) {
  CHECK(rope_dim > 0 && rope_dim % 2 == 0);
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    freqs[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(rope_dim));
  }
}

void RopeFrequenciesYarn(int64_t rope_dim, double base, const YarnParams& yarn, double* freqs) {
  RopeFrequencies(rope_dim, base, freqs);
  const double d = static_cast<double>(rope_dim);
  const double l0 = static_cast<double>(yarn.original_max_position);
  auto corr = [&](double rotations) {
    return d * std::log(l0 / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = std::max(std::floor(corr(yarn.beta_fast)), 0.0);
  double high = std::min(std::ceil(corr(yarn.beta_slow)), d - 1.0);
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    freqs[i] = freqs[i] * (1.0 - ramp) + (freqs[i] / yarn.factor) * ramp;
  }
}

void RopeCosSin(const double* freqs, int64_t rope_dim, const int64_t* positions, int64_t n_pos,
                float* cos_out, float* sin_out) {
  const int64_t half = rope_dim / 2;
  for (int64_t t = 0; t < n_pos; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[t]) * freqs[i];
      cos_out[t * half + i] = static_cast<float>(std::cos(angle));
      sin_out[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void ApplyRope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
               const float* cos_tab, const float* sin_tab, RopeStyle style, bool inverse,
               int64_t token_stride) {
  ref::ApplyRope(x, n_tokens, n_heads, head_dim, rope_dim, cos_tab, sin_tab, style, inverse,
                 token_stride);
}

// ---------------------------------------------------------------------------------------------
// Activations, elementwise, selection, gather

void Softmax(float* x, int64_t rows, int64_t n) {
  if (UseAvx512()) return avx512::Softmax(x, rows, n);
  if (UseAvx2()) return avx2::Softmax(x, rows, n);
  ref::Softmax(x, rows, n);
}
// Elementwise ops run their AVX2 code on every element, including a tail shorter than one
// vector (padded into an 8-lane buffer): an element's result must not depend on whether it
// happens to fall in the tail, i.e. on the batch size (batch invariance, ops.h).
namespace {
constexpr int64_t kLanes = 8;
}  // namespace

void ExpScaled(const float* x, int64_t n, float shift, float scale, float* out) {
  if (UseAvx512()) return avx512::ExpScaled(x, n, shift, scale, out);
  if (UseAvx2()) {
    const int64_t main = n / kLanes * kLanes;
    avx2::ExpScaled(x, main, shift, scale, out);
    if (main < n) {
      float tmp[kLanes] = {};
      std::copy(x + main, x + n, tmp);
      avx2::ExpScaled(tmp, kLanes, shift, scale, tmp);
      std::copy(tmp, tmp + (n - main), out + main);
    }
    return;
  }
  ref::ExpScaled(x, n, shift, scale, out);
}

void Silu(float* x, int64_t n) {
  if (UseAvx512()) return avx512::Silu(x, n);
  if (UseAvx2()) {
    const int64_t main = n / kLanes * kLanes;
    avx2::Silu(x, main);
    if (main < n) {
      float tmp[kLanes] = {};
      std::copy(x + main, x + n, tmp);
      avx2::Silu(tmp, kLanes);
      std::copy(tmp, tmp + (n - main), x + main);
    }
    return;
  }
  ref::Silu(x, n);
}
void SwiGlu(const float* gate, const float* up, float* out, int64_t n, float limit) {
  if (UseAvx512()) return avx512::SwiGlu(gate, up, out, n, limit);
  if (UseAvx2()) {
    const int64_t main = n / kLanes * kLanes;
    avx2::SwiGlu(gate, up, out, main, limit);
    if (main < n) {
      float g[kLanes] = {}, u[kLanes] = {}, o[kLanes];
      std::copy(gate + main, gate + n, g);
      std::copy(up + main, up + n, u);
      avx2::SwiGlu(g, u, o, kLanes, limit);
      std::copy(o, o + (n - main), out + main);
    }
    return;
  }
  ref::SwiGlu(gate, up, out, n, limit);
}

void Add(const float* a, const float* b, float* out, int64_t n) {
  if (UseAvx512()) return avx512::Add(a, b, out, n);
  if (UseAvx2()) return avx2::Add(a, b, out, n);
  ref::Add(a, b, out, n);
}
void Scale(float* x, float s, int64_t n) {
  if (UseAvx512()) return avx512::Scale(x, s, n);
  if (UseAvx2()) return avx2::Scale(x, s, n);
  ref::Scale(x, s, n);
}
void Axpy(float a, const float* x, float* y, int64_t n) {
  if (UseAvx512()) return avx512::Axpy(a, x, y, n);
  if (UseAvx2()) {
    const int64_t main = n / kLanes * kLanes;
    avx2::Axpy(a, x, y, main);
    if (main < n) {
      float xt[kLanes] = {}, yt[kLanes] = {};
      std::copy(x + main, x + n, xt);
      std::copy(y + main, y + n, yt);
      avx2::Axpy(a, xt, yt, kLanes);
      std::copy(yt, yt + (n - main), y + main);
    }
    return;
  }
  ref::Axpy(a, x, y, n);
}

void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) {
  CHECK(k >= 0 && k <= n) << "TopK k=" << k << " n=" << n;
  if (k == 0) return;
  // Same total order as the reference: larger value first, NaN last, ties by lower index.
  auto before = [x](int32_t a, int32_t b) {
    const float va = x[a], vb = x[b];
    const bool na = std::isnan(va), nb = std::isnan(vb);
    if (na != nb) return nb;
    if (!na && va != vb) return va > vb;
    return a < b;
  };
  // A heap of the k best so far in `indices` whose top is the worst of them: O(n log k), no
  // scratch beyond the output.
  int32_t* heap = indices;
  for (int64_t i = 0; i < k; ++i) heap[i] = static_cast<int32_t>(i);
  std::make_heap(heap, heap + k, before);
  for (int64_t i = k; i < n; ++i) {
    if (before(static_cast<int32_t>(i), heap[0])) {
      std::pop_heap(heap, heap + k, before);
      heap[k - 1] = static_cast<int32_t>(i);
      std::push_heap(heap, heap + k, before);
    }
  }
  std::sort_heap(heap, heap + k, before);
  for (int64_t i = 0; i < k; ++i) values[i] = x[indices[i]];
}

void EmbeddingGather(const WeightView& table, const int32_t* ids, int64_t n, float* out) {
  ref::EmbeddingGather(table, ids, n, out);
}

// ---------------------------------------------------------------------------------------------
// Attention

void AttentionGqa(const float* q, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
                  const float* const* k_rows, const float* const* v_rows, int64_t n_keys,
                  const AttentionOptions& opt, float* out, float* workspace, ThreadPool* pool) {
  CHECK(n_kv_heads > 0 && n_q_heads % n_kv_heads == 0)
      << "query heads " << n_q_heads << " not a multiple of kv heads " << n_kv_heads;
  auto run = [&](int64_t h0, int64_t h1) {
    if (UseAvx512()) {
      avx512::Attention(q, n_q_heads, n_kv_heads, head_dim, k_rows, v_rows, n_keys, opt, out,
                        workspace, h0, h1);
    } else if (UseAvx2()) {
      avx2::Attention(q, n_q_heads, n_kv_heads, head_dim, k_rows, v_rows, n_keys, opt, out,
                      workspace, h0, h1);
    } else {
      ref::Attention(q, n_q_heads, n_kv_heads, head_dim, k_rows, v_rows, n_keys, opt, out,
                     workspace, h0, h1);
    }
  };
  if (pool != nullptr && pool->num_threads() > 1 && n_q_heads > 1) {
    pool->ParallelFor(n_q_heads, run);
  } else {
    run(0, n_q_heads);
  }
}

void AttentionLatentMqa(const float* q, int64_t n_heads, int64_t head_dim,
                        const float* const* kv_rows, int64_t n_keys, const AttentionOptions& opt,
                        float* out, float* workspace, ThreadPool* pool) {
  AttentionGqa(q, n_heads, 1, head_dim, kv_rows, kv_rows, n_keys, opt, out, workspace, pool);
}

}  // namespace deepinfer::kernels
