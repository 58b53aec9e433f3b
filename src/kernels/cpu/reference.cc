#include "kernels/cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "common/check.h"
#include "kernels/formats.h"

namespace deepinfer::kernels::ref {
namespace {

float ScaleAt(const WeightView& w, int64_t index) {
  if (w.scale_dtype == ScaleDType::kF32) return static_cast<const float*>(w.scales)[index];
  return E8m0ToFloat(static_cast<const uint8_t*>(w.scales)[index]);
}

// e4m3 decode used for weights: NaN codes become 0 (DS4 `dequant_fp8_weight`).
float Fp8WeightValue(uint8_t code) {
  if ((code & 0x7F) == 0x7F) return 0.0f;
  return Fp8E4m3ToFloat(code);
}

// Rounds x[0..n) to e4m3 with the power-of-two scale of its amax (NaN ignored by the amax).
void QuantizeBlockFp8(float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) amax = a;  // NaN compares false: ignored
  }
  const int e = Pow2ScaleExponent(amax, kActQuantAmaxFloor, kFp8E4m3Max);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    // x / 2^e and the product back are exact (powers of two), so only the e4m3 rounding
    // changes the value.
    x[i] = std::ldexp(RoundFp8E4m3(std::ldexp(x[i], -e)), e);
  }
}

void QuantizeBlockFp4(float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) amax = a;
  }
  const int e = Pow2ScaleExponent(amax, kFp4AmaxFloor, kFp4E2m1Max);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    x[i] = std::ldexp(RoundFp4E2m1(std::ldexp(x[i], -e)), e);
  }
}

}  // namespace

float WeightAt(const WeightView& w, int64_t row, int64_t col) {
  const int64_t K = w.cols;
  switch (w.dtype) {
    case WeightDType::kF32:
      return static_cast<const float*>(w.data)[row * K + col];
    case WeightDType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(w.data)[row * K + col]);
    case WeightDType::kFP8Block: {
      const uint8_t code = static_cast<const uint8_t*>(w.data)[row * K + col];
      const int64_t scale_cols = (K + 127) / 128;
      const int64_t s = (row / 128 + w.scale_row_offset) * scale_cols + col / 128;
      return Fp8WeightValue(code) * ScaleAt(w, s);
    }
    case WeightDType::kMXFP4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[row * (K / 2) + col / 2];
      const uint8_t nibble = (col % 2 == 0) ? (byte & 0xF) : (byte >> 4);
      return Fp4E2m1ToFloat(nibble) * ScaleAt(w, row * (K / 32) + col / 32);
    }
  }
  return 0.0f;
}

void DecodeWeightRow(const WeightView& w, int64_t row, float* out) {
  for (int64_t k = 0; k < w.cols; ++k) out[k] = WeightAt(w, row, k);
}

size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt) {
  const int64_t floats = (opt.quantize_activations ? M * w.cols : 0) + w.cols;
  return static_cast<size_t>(floats) * sizeof(float);
}

void Linear(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
            void* workspace, size_t workspace_bytes) {
  const int64_t N = w.rows, K = w.cols;
  CHECK_GE(workspace_bytes, LinearWorkspaceBytes(M, w, opt));
  const int64_t x_stride = opt.x_stride ? opt.x_stride : K;
  const int64_t y_stride = opt.y_stride ? opt.y_stride : N;
  float* ws = static_cast<float*>(workspace);
  float* w_row = ws;
  const float* xs = x;
  int64_t xs_stride = x_stride;
  if (opt.quantize_activations) {
    float* xq = ws + K;
    for (int64_t m = 0; m < M; ++m) {
      std::copy(x + m * x_stride, x + m * x_stride + K, xq + m * K);
    }
    ActQuantFp8Sim(xq, M, K, 128);
    xs = xq;
    xs_stride = K;
  }
  for (int64_t n = 0; n < N; ++n) {
    DecodeWeightRow(w, n, w_row);
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = xs + m * xs_stride;
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(xr[k]) * w_row[k];
      float out = static_cast<float>(acc);
      if (opt.bias != nullptr) out += opt.bias[n];
      y[m * y_stride + n] = out;
    }
  }
}

void RoundToBf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = RoundBf16(x[i]);
}

void ActQuantFp8Sim(float* x, int64_t rows, int64_t cols, int64_t block) {
  CHECK_GT(block, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += block) {
      QuantizeBlockFp8(x + r * cols + c, std::min(block, cols - c));
    }
  }
}

void KvFp8Sim(float* x, int64_t rows, int64_t dim, int64_t rope_dim, int64_t block) {
  CHECK_GT(block, 0);
  CHECK(rope_dim >= 0 && rope_dim <= dim);
  const int64_t nope = dim - rope_dim;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < nope; c += block) {
      QuantizeBlockFp8(x + r * dim + c, std::min(block, nope - c));
    }
  }
}

void Fp4Sim(float* x, int64_t rows, int64_t cols, int64_t block) {
  CHECK_GT(block, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += block) {
      QuantizeBlockFp4(x + r * cols + c, std::min(block, cols - c));
    }
  }
}

void HadamardTransform(float* x, int64_t rows, int64_t n) {
  CHECK(n > 0 && (n & (n - 1)) == 0) << "Hadamard size must be a power of two: " << n;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    for (int64_t h = 1; h < n; h *= 2) {
      for (int64_t i = 0; i < n; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) v[i] *= scale;
  }
}

void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, const float* weight_f32,
             const uint16_t* weight_bf16, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float mean = static_cast<float>(ss / static_cast<double>(dim));
    const float inv = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < dim; ++i) {
      float v = xr[i] * inv;
      if (weight_f32 != nullptr) v *= weight_f32[i];
      if (weight_bf16 != nullptr) v *= Bf16ToFloat(weight_bf16[i]);
      yr[i] = v;
    }
  }
}

void ApplyRope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
               const float* cos_tab, const float* sin_tab, RopeStyle style, bool inverse,
               int64_t token_stride) {
  CHECK(rope_dim % 2 == 0 && rope_dim <= head_dim);
  const int64_t half = rope_dim / 2;
  if (token_stride == 0) token_stride = n_heads * head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos_tab + t * half;
    const float* s = sin_tab + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * token_stride + h * head_dim + (head_dim - rope_dim);
      for (int64_t i = 0; i < half; ++i) {
        const int64_t ia = style == RopeStyle::kInterleaved ? 2 * i : i;
        const int64_t ib = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
        const float a = v[ia], b = v[ib];
        const float si = inverse ? -s[i] : s[i];
        v[ia] = a * c[i] - b * si;
        v[ib] = a * si + b * c[i];
      }
    }
  }
}

void ExpScaled(const float* x, int64_t n, float shift, float scale, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp((x[i] - shift) * scale);
}

void Softmax(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      v[i] = std::exp(v[i] - mx);
      sum += v[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) v[i] *= inv;
  }
}

void Silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i], u = up[i];
    if (limit > 0.0f) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    out[i] = g / (1.0f + std::exp(-g)) * u;
  }
}

void Add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void Scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) {
  CHECK(k >= 0 && k <= n);
  // "a ranks before b": larger value first, NaN last, ties by lower index.
  auto before = [x](int32_t a, int32_t b) {
    const float va = x[a], vb = x[b];
    const bool na = std::isnan(va), nb = std::isnan(vb);
    if (na != nb) return nb;
    if (!na && va != vb) return va > vb;
    return a < b;
  };
  // Selection by repeated scans: the j-th pick is the best element ranked strictly after the
  // (j-1)-th pick (the order is total). O(n·k), fine for an oracle and obviously right.
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t c = static_cast<int32_t>(i);
      if (j > 0 && !before(indices[j - 1], c)) continue;
      if (best < 0 || before(c, best)) best = c;
    }
    indices[j] = best;
    values[j] = x[best];
  }
}

void EmbeddingGather(const WeightView& table, const int32_t* ids, int64_t n, float* out) {
  CHECK(table.dtype == WeightDType::kF32 || table.dtype == WeightDType::kBF16)
      << "embedding tables must be F32 or BF16";
  for (int64_t t = 0; t < n; ++t) {
    CHECK(ids[t] >= 0 && ids[t] < table.rows) << "token id " << ids[t] << " out of range";
    DecodeWeightRow(table, ids[t], out + t * table.cols);
  }
}

void Attention(const float* q, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
               const float* const* k_rows, const float* const* v_rows, int64_t n_keys,
               const AttentionOptions& opt, float* out, float* workspace, int64_t h_begin,
               int64_t h_end) {
  CHECK(n_kv_heads > 0 && n_q_heads % n_kv_heads == 0);
  const int64_t group = n_q_heads / n_kv_heads;
  for (int64_t h = h_begin; h < h_end; ++h) {
    const float* qh = q + h * head_dim;
    float* oh = out + h * head_dim;
    const int64_t kvh = h / group;
    float* p = workspace + h * n_keys;
    if (n_keys == 0) {
      std::fill(oh, oh + head_dim, 0.0f);
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_keys; ++j) {
      const float* kj = k_rows[j] + kvh * head_dim;
      double dot = 0.0;
      for (int64_t i = 0; i < head_dim; ++i) dot += static_cast<double>(qh[i]) * kj[i];
      p[j] = static_cast<float>(dot) * opt.scale;
      mx = std::max(mx, p[j]);
    }
    double denom = 0.0;
    for (int64_t j = 0; j < n_keys; ++j) {
      p[j] = std::exp(p[j] - mx);
      denom += p[j];
      if (opt.round_p_to_bf16) p[j] = RoundBf16(p[j]);
    }
    if (opt.sinks != nullptr) denom += std::exp(opt.sinks[h] - mx);
    const float inv = static_cast<float>(1.0 / denom);
    for (int64_t i = 0; i < head_dim; ++i) {
      double acc = 0.0;
      for (int64_t j = 0; j < n_keys; ++j) {
        acc += static_cast<double>(p[j]) * v_rows[j][kvh * head_dim + i];
      }
      oh[i] = static_cast<float>(acc) * inv;
    }
  }
}

}  // namespace deepinfer::kernels::ref
