// AVX-512 (F, BW, VL, DQ) versions of the non-Linear kernel ops: one-to-one ports of the AVX2
// code in avx2.cc with 16 lanes instead of 8.
//
// - Lane-wise ops (RoundToBf16, ActQuantFp8Sim's e4m3 rounding, Silu, SwiGlu, Add, Scale, Axpy)
//   run the same instruction sequence per lane as the AVX2 versions, so every element is
//   bitwise the AVX2 result. Tails use masked vectors (masked-off lanes load as 0 and are never
//   stored), so an element's result does not depend on where it falls. One deliberate
//   difference: an ActQuantFp8Sim block holding ±inf goes to the scalar reference (the AVX2
//   vector lanes do not saturate such a block; see ActQuantFp8Sim below).
// - Reductions (RmsNorm's sum of squares, Softmax's sum, Attention's q·k) use 16-lane partial
//   sums: lane l takes the elements i ≡ l (mod 16) in increasing i, the last partial group
//   zero-padded; HorizontalSum16 then folds lane l with lane l + 8 and combines the 8 results in
//   the AVX2 order ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). Softmax evaluates the vector Exp on
//   every element, tail included (AVX2 uses std::exp for its last n % 8), and lets NaN through.
//
// Compilation model: the project baseline is x86-64-v3, and this file must not leak AVX-512 code
// into anything another translation unit could share. So every #include comes first, then
// avx512_inl.h opens the `#pragma GCC target` region, which avx512_inl_end.h closes at the end
// of the file; everything but
// the functions declared in avx512.h is in an anonymous namespace, and no avx2:: function or
// header template (std::min, std::fill, ...) is called from the AVX-512 code: header inline
// functions used here (RoundBf16, Pow2ScaleExponent, ...) are plain scalar code, parsed before
// the pragma, so any out-of-line copy the compiler emits is baseline code.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/check.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"

// Last, after every other #include: opens the AVX-512 region (avx512_inl.h).
// clang-format off
#include "kernels/cpu/avx512_inl.h"
// clang-format on

namespace deepinfer::kernels::avx512 {

// ---------------------------------------------------------------------------------------------
// Conversions and quantisation

// RNE to BF16 in the integer domain (add 0x7FFF + lsb, clear the low half); NaN lanes are
// quietened and truncated instead, as FloatToBf16 does, so every lane equals RoundBf16.
void RoundToBf16(float* x, int64_t n) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i bias = _mm512_set1_epi32(0x7FFF);
  const __m512i keep = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LanesLeft(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), keep);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i qn = _mm512_and_si512(_mm512_or_si512(u, quiet), keep);
    r = _mm512_mask_blend_epi32(nan, r, qn);
    _mm512_mask_storeu_ps(x + i, m, _mm512_castsi512_ps(r));
  }
}

namespace {

// e4m3 rounding (RNE) of y as FP32, valid for |y| <= 448 (NaN lanes are replaced by the
// caller): normal lanes round the FP32 mantissa to 3 bits in the integer domain, lanes below
// 2^-6 round to a multiple of the subnormal quantum 2^-9. Same lane arithmetic as avx2.
inline __m512 RoundE4m3(__m512 y) {
  const __m512i u = _mm512_castps_si512(y);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(1));
  const __m512i rn =
      _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFFF), lsb)),
                       _mm512_set1_epi32(static_cast<int>(0xFFF00000u)));
  const __m512 normal = _mm512_castsi512_ps(rn);
  // roundscale with M = 0 and _MM_FROUND_TO_NEAREST_INT is vroundps' round-to-nearest-even.
  const __m512 sub =
      _mm512_mul_ps(_mm512_roundscale_ps(_mm512_mul_ps(y, _mm512_set1_ps(512.0f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                    _mm512_set1_ps(1.0f / 512.0f));
  const __m512 absy = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), y);
  const __mmask16 is_sub = _mm512_cmp_ps_mask(absy, _mm512_set1_ps(0.015625f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(is_sub, normal, sub);
}

// max |x[i]| over the non-NaN elements of x[0..n) (0 when there are none). Max is exact, so
// the order does not matter; NaN is skipped because max_ps returns its second operand (the
// running maximum) when either operand is NaN. Zero-padded tail lanes cannot raise the max.
inline float BlockAmax(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LanesLeft(n - i);
    m = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_maskz_loadu_ps(k, x + i)), m);
  }
  alignas(64) float t[16];
  _mm512_store_ps(t, m);
  float amax = 0.0f;
  for (float v : t) amax = v > amax ? v : amax;
  return amax;
}

}  // namespace

// Per block: the scale exponent from the NaN-ignoring amax, then x·2^-e rounded to e4m3 and
// scaled back (both scalings exact), NaN lanes kept. Blocks whose scale is outside the normal
// range, or holding ±inf (then frexp gives e = 0 and the finite elements exceed RoundE4m3's
// ±448 domain), go to the exact scalar reference, which saturates as FloatToFp8E4m3 does.
void ActQuantFp8Sim(float* x, int64_t rows, int64_t cols, int64_t block) {
  CHECK_GT(block, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += block) {
      float* v = x + r * cols + c;
      const int64_t n = block < cols - c ? block : cols - c;
      const float amax = BlockAmax(v, n);
      const int e = Pow2ScaleExponent(amax, kActQuantAmaxFloor, kFp8E4m3Max);
      if (e < -126 || e > 127 || std::isinf(amax)) {
        ref::ActQuantFp8Sim(v, 1, n, n);
        continue;
      }
      const __m512 down = _mm512_set1_ps(std::ldexp(1.0f, -e));
      const __m512 up = _mm512_set1_ps(std::ldexp(1.0f, e));
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = LanesLeft(n - i);
        const __m512 xv = _mm512_maskz_loadu_ps(k, v + i);
        __m512 q = _mm512_mul_ps(RoundE4m3(_mm512_mul_ps(xv, down)), up);
        q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q), q, xv);
        _mm512_mask_storeu_ps(v + i, k, q);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Norms and elementwise

// Sum of squares with FMAs in 16 lanes (zero-padded tail) and HorizontalSum16; then
// x·(1/sqrt(mean + eps)) (· weight) per lane, the same products as avx2.
void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, const float* weight_f32,
             const uint16_t* weight_bf16, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < dim; i += 16) {
      const __mmask16 k = LanesLeft(dim - i);
      const __m512 v = _mm512_maskz_loadu_ps(k, xr + i);
      acc = _mm512_fmadd_ps(v, v, acc);
    }
    const float mean = HorizontalSum16(acc) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean + eps);
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t i = 0; i < dim; i += 16) {
      const __mmask16 k = LanesLeft(dim - i);
      __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, xr + i), vinv);
      if (weight_f32 != nullptr) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, weight_f32 + i));
      if (weight_bf16 != nullptr) {
        v = _mm512_mul_ps(v, WidenBf16(_mm256_maskz_loadu_epi16(k, weight_bf16 + i)));
      }
      _mm512_mask_storeu_ps(yr + i, k, v);
    }
  }
}

// out = a + b per lane (exact IEEE add: the same as avx2's vector and scalar paths).
void Add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LanesLeft(n - i);
    _mm512_mask_storeu_ps(
        out + i, k,
        _mm512_add_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i)));
  }
}

// x *= s per lane (one IEEE multiply, as avx2).
void Scale(float* x, float s, int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LanesLeft(n - i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vs));
  }
}

// y = fma(a, x, y) per lane (one rounding, as avx2's _mm256_fmadd_ps and std::fma tail).
void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LanesLeft(n - i);
    _mm512_mask_storeu_ps(
        y + i, k,
        _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i)));
  }
}

// ---------------------------------------------------------------------------------------------
// exp and the activations built on it

namespace {

// exp(x) per lane, instruction for instruction avx2's Exp (so bitwise the same for every
// non-NaN lane): x = n·ln2 + r with the two-part ln2 reduction, the degree-6 Cephes polynomial,
// 2^n applied in two halves; lanes below -87.3 give +0.
// NaN lanes return the input NaN, as avx2's Exp does.
inline __m512 Exp(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.7f), lo = _mm512_set1_ps(-87.3f);
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // 2^n in two halves so that n = 128 (x near 88.7) does not overflow the exponent field.
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512 s1 =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23));
  const __m512 s2 =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, _mm512_set1_epi32(127)), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());  // avx2: andnot(under, y)
  return _mm512_mask_blend_ps(is_nan, y, x);
}

// g·sigmoid(g) = g / (1 + exp(0 - g)), as avx2's SiluVec (0 - g, not a sign flip).
inline __m512 SiluVec(__m512 g) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_div_ps(g, _mm512_add_ps(one, e));
}

}  // namespace

// x = silu(x) per lane; the masked tail computes silu(0) in the unused lanes and drops it.
void Silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LanesLeft(n - i);
    _mm512_mask_storeu_ps(x + i, k, SiluVec(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

// out = silu(min(g, limit)) · max(min(u, limit), -limit) per lane with avx2's operand order
// (the data second, so a NaN gate or up stays NaN, as in the reference).
void SwiGlu(const float* gate, const float* up, float* out, int64_t n, float limit) {
  const bool clamp = limit > 0.0f;
  const __m512 lim = _mm512_set1_ps(limit), neg = _mm512_set1_ps(-limit);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LanesLeft(n - i);
    __m512 g = _mm512_maskz_loadu_ps(k, gate + i), u = _mm512_maskz_loadu_ps(k, up + i);
    if (clamp) {
      g = _mm512_min_ps(lim, g);
      u = _mm512_max_ps(neg, _mm512_min_ps(lim, u));
    }
    _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(SiluVec(g), u));
  }
}

void ExpScaled(const float* x, int64_t n, float shift, float scale, float* out) {
  const __m512 vs = _mm512_set1_ps(shift), vk = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LanesLeft(n - i);
    _mm512_mask_storeu_ps(
        out + i, k, Exp(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vs), vk)));
  }
}

// Per row: the max (exact, NaN skipped as avx2's std::max loop does), e = Exp(x - max) for every
// element (the tail with a masked vector, its unused lanes zeroed before the sum; avx2 uses
// std::exp for its < 8 tail elements instead), the sum in 16 lanes + HorizontalSum16, then one
// multiply by 1/sum.
void Softmax(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = LanesLeft(n - i);
      // max_ps(x, m) keeps m for a NaN x; masked-off lanes keep m.
      vmax = _mm512_mask_max_ps(vmax, k, _mm512_maskz_loadu_ps(k, v + i), vmax);
    }
    alignas(64) float t[16];
    _mm512_store_ps(t, vmax);
    float mx = -std::numeric_limits<float>::infinity();
    for (float m : t) mx = mx < m ? m : mx;
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = LanesLeft(n - i);
      const __m512 e =
          _mm512_maskz_mov_ps(k, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, v + i), vmx)));
      acc = _mm512_add_ps(acc, e);
      _mm512_mask_storeu_ps(v + i, k, e);
    }
    const float inv = 1.0f / HorizontalSum16(acc);
    Scale(v, inv, n);
  }
}

// ---------------------------------------------------------------------------------------------
// Attention: per head, scores with 16-lane dot products, global max, FP32 std::exp, P·V
// accumulated key by key (in key-list order) into the output row, one final multiply by
// 1/denominator: avx2's scalar steps unchanged.

namespace {

// Σ a[i]·b[i] with FMAs in 16 lanes (lane l: i ≡ l mod 16 ascending, tail zero-padded by masked
// loads), combined by HorizontalSum16.
inline float Dot(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = LanesLeft(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), acc);
  }
  return HorizontalSum16(acc);
}

}  // namespace

// Query heads [h_begin, h_end); same contract and scalar softmax steps as avx2::Attention, with
// the Dot above and this file's Axpy/Scale (lane-wise identical to avx2's).
void Attention(const float* q, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
               const float* const* k_rows, const float* const* v_rows, int64_t n_keys,
               const AttentionOptions& opt, float* out, float* workspace, int64_t h_begin,
               int64_t h_end) {
  const int64_t group = n_q_heads / n_kv_heads;
  for (int64_t h = h_begin; h < h_end; ++h) {
    const float* qh = q + h * head_dim;
    float* oh = out + h * head_dim;
    const int64_t off = (h / group) * head_dim;
    float* p = workspace + h * n_keys;
    for (int64_t i = 0; i < head_dim; ++i) oh[i] = 0.0f;
    if (n_keys == 0) continue;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_keys; ++j) {
      p[j] = Dot(qh, k_rows[j] + off, head_dim) * opt.scale;
      if (mx < p[j]) mx = p[j];  // std::max(mx, p[j]) as in avx2
    }
    float denom = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) {
      p[j] = std::exp(p[j] - mx);
      denom += p[j];
      if (opt.round_p_to_bf16) p[j] = RoundBf16(p[j]);
    }
    if (opt.sinks != nullptr) denom += std::exp(opt.sinks[h] - mx);
    for (int64_t j = 0; j < n_keys; ++j) Axpy(p[j], v_rows[j] + off, oh, head_dim);
    Scale(oh, 1.0f / denom, head_dim);
  }
}

}  // namespace deepinfer::kernels::avx512

#include "kernels/cpu/avx512_inl_end.h"
