#include "model/deepseek_v4_numerics.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "common/check.h"
#include "common/thread_pool.h"
#include "kernels/ops.h"

namespace deepinfer::model::dsv4 {
namespace {

constexpr float kE2M1Values[16] = {0.f,  0.5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                                   -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

struct Luts {
  std::array<float, 256> e4m3;
  std::array<float, 256> e8m0;
  std::array<std::array<float, 2>, 256> fp4_pair;  // byte -> (low nibble, high nibble)
  Luts() {
    for (int c = 0; c < 256; ++c) {
      const int sign = c >> 7, exp = (c >> 3) & 0xf, man = c & 7;
      float v;
      if (exp == 0xf && man == 7) {
        v = 0.f;  // NaN -> 0 (DS4)
      } else if (exp == 0) {
        v = std::ldexp(static_cast<float>(man), -9);
      } else {
        v = std::ldexp(1.f + man / 8.f, exp - 7);
      }
      e4m3[c] = sign ? -v : v;
      e8m0[c] = c == 255 ? std::nanf("") : std::ldexp(1.f, c - 127);
      fp4_pair[c] = {kE2M1Values[c & 0xf], kE2M1Values[c >> 4]};
    }
  }
};

const Luts& GetLuts() {
  static const Luts* luts = new Luts();
  return *luts;
}

// Rounds a >= 0 to a multiple of `quantum` (a power of two), ties to even.
inline float RoundToQuantum(float a, float quantum) {
  return std::nearbyint(a / quantum) * quantum;
}

}  // namespace

// Round to nearest even on e4m3's grid, saturating at 448. Written with bit operations instead
// of frexp / ldexp / nearbyint (those libm calls were ~5 % of DeepSeek-V4.1 decode, which rounds
// every activation); the result is that of RoundToQuantum(a, 2^(e-3)) for every float (checked
// over all 2^32 bit patterns when this was written; DsV4Numerics.RoundE4M3MatchesTheGrid).
float RoundE4M3(float x) {
  const float a = std::fabs(x);
  if (a == 0.f || std::isnan(a)) return x;
  float r;
  if (a < 0.015625f) {
    // Below the smallest normal 2^-6 the step is 2^-9, the ulp of 2^14: adding and removing 2^14
    // rounds a to it, ties to even (both operations exact but the first).
    r = (a + 16384.0f) - 16384.0f;
  } else {
    // Keep 3 mantissa bits, round half to even (a carry into the exponent is the right result;
    // inf stays inf and saturates below).
    uint32_t u = std::bit_cast<uint32_t>(a);
    u += 0x7FFFFu + ((u >> 20) & 1u);
    r = std::bit_cast<float>(u & 0xFFF00000u);
  }
  r = std::min(r, 448.f);
  return std::copysign(r, x);
}

float RoundE2M1(float x) {
  const float a = std::fabs(x);
  if (a == 0.f || std::isnan(a)) return x;
  float r;
  if (a < 2.f) {
    r = RoundToQuantum(a, 0.5f);
  } else if (a < 4.f) {
    r = RoundToQuantum(a, 1.f);
  } else {
    r = RoundToQuantum(a, 2.f);
  }
  r = std::min(r, 6.f);
  return std::copysign(r, x);
}

float E4M3ToF32(uint8_t code) { return GetLuts().e4m3[code]; }

uint8_t F32ToE4M3(float x) {
  const float r = RoundE4M3(std::clamp(x, -448.f, 448.f));
  const uint8_t sign = std::signbit(r) ? 0x80 : 0;
  const float a = std::fabs(r);
  if (a == 0.f) return sign;
  if (a < 0.015625f) return sign | static_cast<uint8_t>(a * 512.f);  // subnormal: m * 2^-9
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int exp_field = e - 1 + 7;
  const int man = static_cast<int>(m * 16.f) - 8;
  return sign | static_cast<uint8_t>(exp_field << 3) | static_cast<uint8_t>(man);
}

float E8M0ToF32(uint8_t code) { return GetLuts().e8m0[code]; }

float Pow2Ceil(float v) {
  int e;
  const float m = std::frexp(v, &e);
  if (m == 0.5f) return v;
  return std::ldexp(1.f, e);
}

void QuantizeE4M3Blocks(const float* x, int64_t n, int block, float* q, float* scales) {
  CHECK_EQ(n % block, 0);
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    float amax = 0.f;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    amax = std::max(amax, 1e-4f);
    const float s = Pow2Ceil(amax * (1.0f / 448.0f));
    const float inv = 1.0f / s;  // exact: s is a power of two
    for (int i = 0; i < block; ++i) {
      q[b * block + i] = RoundE4M3(std::clamp(xb[i] * inv, -448.f, 448.f));
    }
    scales[b] = s;
  }
}

void Fp8SimInPlace(float* x, int64_t n, int block) {
  CHECK_EQ(n % block, 0);
  float q[512];
  for (int64_t off = 0; off < n; off += block) {
    CHECK_LE(block, 512);
    float s;
    QuantizeE4M3Blocks(x + off, block, block, q, &s);
    for (int i = 0; i < block; ++i) x[off + i] = q[i] * s;
  }
}

void Fp4SimInPlace(float* x, int64_t n) {
  CHECK_EQ(n % 32, 0);
  const float floor_amax = 6.0f * std::ldexp(1.0f, -126);
  for (int64_t off = 0; off < n; off += 32) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[off + i]));
    amax = std::max(amax, floor_amax);
    const float s = Pow2Ceil(amax * (1.0f / 6.0f));
    const float inv = 1.0f / s;
    for (int i = 0; i < 32; ++i) {
      x[off + i] = RoundE2M1(std::clamp(x[off + i] * inv, -6.f, 6.f)) * s;
    }
  }
}

void Hadamard128InPlace(float* x) {
  for (int h = 1; h < 128; h *= 2) {
    for (int i = 0; i < 128; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale = 1.0f / std::sqrt(128.0f);
  for (int i = 0; i < 128; ++i) x[i] *= scale;
}

std::vector<double> RopeFrequencies(int rope_dim, double base, int64_t original_seq_len,
                                    double factor, double beta_fast, double beta_slow) {
  const int half = rope_dim / 2;
  std::vector<double> freqs(half);
  for (int i = 0; i < half; ++i) {
    freqs[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / rope_dim);
  }
  if (original_seq_len > 0) {
    auto corr_dim = [&](double rot) {
      return rope_dim * std::log(static_cast<double>(original_seq_len) / (rot * 2 * M_PI)) /
             (2 * std::log(base));
    };
    double low = std::max(0.0, std::floor(corr_dim(beta_fast)));
    double high = std::min(static_cast<double>(rope_dim - 1), std::ceil(corr_dim(beta_slow)));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double smooth = 1.0 - ramp;
      freqs[i] = freqs[i] / factor * (1.0 - smooth) + freqs[i] * smooth;
    }
  }
  return freqs;
}

void ApplyRope(float* x, int rope_dim, const std::vector<double>& freqs, int64_t pos,
               bool inverse) {
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double angle = static_cast<double>(pos) * freqs[i];
    const float c = static_cast<float>(std::cos(angle));
    const float s = static_cast<float>(inverse ? -std::sin(angle) : std::sin(angle));
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x0 * s + x1 * c;
  }
}

float WeightMatrix::At(int64_t r, int64_t c) const {
  const Luts& luts = GetLuts();
  switch (format) {
    case WeightFormat::kF32:
      return static_cast<const float*>(data)[r * cols + c];
    case WeightFormat::kBf16:
      return Bf16ToF32(static_cast<const uint16_t*>(data)[r * cols + c]);
    case WeightFormat::kFp8Block: {
      const float s = scale_f32 != nullptr ? scale_f32[(r / 128) * scale_cols + c / 128]
                                           : luts.e8m0[scale[(r / 128) * scale_cols + c / 128]];
      return luts.e4m3[static_cast<const uint8_t*>(data)[r * cols + c]] * s;
    }
    case WeightFormat::kMxFp4: {
      const uint8_t byte = static_cast<const uint8_t*>(data)[r * (cols / 2) + c / 2];
      return luts.fp4_pair[byte][c & 1] * luts.e8m0[scale[r * scale_cols + c / 32]];
    }
  }
  return 0.f;
}

int64_t WeightMatrix::Bytes() const {
  switch (format) {
    case WeightFormat::kF32:
      return rows * cols * 4;
    case WeightFormat::kBf16:
      return rows * cols * 2;
    case WeightFormat::kFp8Block:
      return rows * cols + ((rows + 127) / 128) * scale_cols * (scale_f32 ? 4 : 1);
    case WeightFormat::kMxFp4:
      return rows * cols / 2 + rows * scale_cols;
  }
  return 0;
}

namespace {

// Decodes row r of w into dst[0..cols) (dequantised, block scales applied; exact in FP32).
void DecodeRow(const WeightMatrix& w, int64_t r, float* dst) {
  const Luts& luts = GetLuts();
  const int64_t K = w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
      std::memcpy(dst, static_cast<const float*>(w.data) + r * K, K * 4);
      return;
    case WeightFormat::kBf16: {
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + r * K;
      for (int64_t k = 0; k < K; ++k) dst[k] = Bf16ToF32(src[k]);
      return;
    }
    case WeightFormat::kFp8Block: {
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * K;
      for (int64_t kb = 0; kb < K; kb += 128) {
        const int64_t si = (r / 128) * w.scale_cols + kb / 128;
        const float s = w.scale_f32 != nullptr ? w.scale_f32[si] : luts.e8m0[w.scale[si]];
        const int64_t end = std::min(K, kb + 128);
        for (int64_t k = kb; k < end; ++k) dst[k] = luts.e4m3[src[k]] * s;
      }
      return;
    }
    case WeightFormat::kMxFp4: {
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * (K / 2);
      const uint8_t* sc = w.scale + r * w.scale_cols;
      for (int64_t kb = 0; kb < K; kb += 32) {
        const float s = luts.e8m0[sc[kb / 32]];
        for (int64_t k = kb; k < kb + 32; k += 2) {
          const auto& pair = luts.fp4_pair[src[k / 2]];
          dst[k] = pair[0] * s;
          dst[k + 1] = pair[1] * s;
        }
      }
      return;
    }
  }
}

// Sum of a[i]*b[i] for i < n in a fixed 8-lane order (vectorisable, deterministic).
inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  const size_t n8 = n > 0 ? static_cast<size_t>(n) / 8 * 8 : 0;
  // Unsigned bounds: with int64_t ones GCC 12 warns of overflow UB once this is inlined.
  for (size_t u = 0; u < n8; u += 8) {
    for (size_t j = 0; j < 8; ++j) acc[j] += a[u + j] * b[u + j];
  }
  i = static_cast<int64_t>(n8);
  float tail = 0.f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

inline double DotPrecise(const float* a, const float* b, int64_t n) {
  double acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  const size_t n4 = n > 0 ? static_cast<size_t>(n) / 4 * 4 : 0;
  for (size_t u = 0; u < n4; u += 4) {
    for (size_t j = 0; j < 4; ++j) acc[j] += static_cast<double>(a[u + j]) * b[u + j];
  }
  i = static_cast<int64_t>(n4);
  for (; i < n; ++i) acc[0] += static_cast<double>(a[i]) * b[i];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

}  // namespace

namespace {

kernels::WeightView ToView(const WeightMatrix& w) {
  kernels::WeightView v;
  v.rows = w.rows;
  v.cols = w.cols;
  v.data = w.data;
  switch (w.format) {
    case WeightFormat::kF32:
      v.dtype = kernels::WeightDType::kF32;
      break;
    case WeightFormat::kBf16:
      v.dtype = kernels::WeightDType::kBF16;
      break;
    case WeightFormat::kFp8Block:
      v.dtype = kernels::WeightDType::kFP8Block;
      v.scales = w.scale_f32 != nullptr ? static_cast<const void*>(w.scale_f32) : w.scale;
      v.scale_dtype =
          w.scale_f32 != nullptr ? kernels::ScaleDType::kF32 : kernels::ScaleDType::kE8M0;
      v.fp8_nan_free = w.fp8_nan_free;
      break;
    case WeightFormat::kMxFp4:
      v.dtype = kernels::WeightDType::kMXFP4;
      v.scales = w.scale;
      v.lane_codes = w.lane_codes;
      v.lane_scales = w.lane_scales;
      break;
  }
  return v;
}

}  // namespace

void Linear(const WeightMatrix& w, const float* x, int64_t M, float* y, bool quantize_act,
            bool precise, bool input_is_bf16) {
  const int64_t K = w.cols, N = w.rows;
  if (M == 0 || N == 0) return;
  if (!precise) {
    // The kernels library's SIMD Linear (same math: exact products, FP32 sums).
    const kernels::WeightView view = ToView(w);
    kernels::LinearOptions opt;
    opt.quantize_activations = quantize_act;
    opt.input_is_bf16 = input_is_bf16 && !quantize_act;
    ThreadPool* pool = ThreadPool::Default();
    const size_t bytes = kernels::LinearWorkspaceBytes(M, view, opt, pool);
    thread_local std::vector<uint8_t> workspace;
    if (workspace.size() < bytes + 64) workspace.resize(bytes + 64);
    uint8_t* ws = workspace.data();
    ws += (64 - reinterpret_cast<uintptr_t>(ws) % 64) % 64;
    kernels::Linear(x, M, view, y, opt, pool, bytes > 0 ? ws : nullptr, bytes);
    return;
  }
  std::vector<float> xq;
  std::vector<float> xs;
  const float* xin = x;
  int64_t nblocks = 1;
  if (quantize_act) {
    CHECK_EQ(K % 128, 0) << "activation quantisation needs K % 128 == 0";
    nblocks = K / 128;
    xq.resize(M * K);
    xs.resize(M * nblocks);
    for (int64_t m = 0; m < M; ++m) {
      QuantizeE4M3Blocks(x + m * K, K, 128, xq.data() + m * K, xs.data() + m * nblocks);
    }
    xin = xq.data();
  }
  ThreadPool::Default()->ParallelFor(N, [&](int64_t begin, int64_t end) {
    std::vector<float> row(K);
    for (int64_t n = begin; n < end; ++n) {
      DecodeRow(w, n, row.data());
      for (int64_t m = 0; m < M; ++m) {
        const float* xm = xin + m * K;
        if (precise) {
          double acc = 0;
          if (quantize_act) {
            for (int64_t b = 0; b < nblocks; ++b) {
              acc += DotPrecise(xm + b * 128, row.data() + b * 128, 128) * xs[m * nblocks + b];
            }
          } else {
            acc = DotPrecise(xm, row.data(), K);
          }
          y[m * N + n] = static_cast<float>(acc);
          continue;
        }
        float acc = 0.f;
        if (quantize_act) {
          for (int64_t b = 0; b < nblocks; ++b) {
            acc += Dot(xm + b * 128, row.data() + b * 128, 128) * xs[m * nblocks + b];
          }
        } else {
          acc = Dot(xm, row.data(), K);
        }
        y[m * N + n] = acc;
      }
    }
  });
}

}  // namespace deepinfer::model::dsv4
