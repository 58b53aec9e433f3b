// AVX-512 weight decode for the BF16-dot GEMM's B tiles (bf16_dot.h): rows of a BF16, FP8Block
// or MXFP4 weight straight to BF16 bits, with the exactness test of PackB, 16 or 32 columns per
// step instead of one ref::WeightAt call per weight (the scalar decode was ~60 % of an FP8
// prefill Linear through the tiles on Zen 4). The values are those of ref::WeightAt: FP8 as
// (e4m3 · 2^-8, exact in FP16) · (s · 256) with one rounding, as avx512.cc's Fp8Row; MXFP4 as
// e2m1 · s per lane of a 16-entry table; so a tile this packs equals PackB's bit for bit
// whenever it is exact (bf16_dot_test checks it). Only the function below carries the AVX-512
// target attribute; callers check the CPU first.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_dot_kernels.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"

#ifndef __clang__
// GCC 12's AVX-512 intrinsics build their unused pass-through operand from a self-initialised
// variable, which the uninitialised-use warnings report at every inlined use (avx512_inl.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace deepinfer::kernels::bf16dot::internal {
namespace {

#define DEEPINFER_AVX512_PACK __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))

// ref::ScaleAt: the scale of block `index` (E8M0 byte or FP32).
inline float ScaleOf(const WeightView& w, int64_t index) {
  if (w.scale_dtype == ScaleDType::kF32) return static_cast<const float*>(w.scales)[index];
  return E8m0ToFloat(static_cast<const uint8_t*>(w.scales)[index]);
}

// PackB's predicate on FP32 bits: the value is a BF16 number (low half zero) and, unless zero,
// a normal number or an infinity (NaN fails, as Bf16ToFloat(h) == v does there).
DEEPINFER_AVX512_PACK inline __mmask16 ExactLanes(__m512i bits) {
  const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 bf16 = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0xFFFF));
  const __mmask16 zero = _mm512_testn_epi32_mask(mag, mag);
  const __mmask16 normal_or_inf = _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(0x00800000)) &
                                  _mm512_cmple_epu32_mask(mag, _mm512_set1_epi32(0x7F800000));
  return bf16 & (zero | normal_or_inf);
}

// The scalar form of the same test, for the columns past the last whole vector.
inline bool ExactValue(float v) {
  return Bf16ToFloat(FloatToBf16(v)) == v && (v == 0.0f || std::fabs(v) >= 1.17549435e-38f);
}

DEEPINFER_AVX512_PACK bool DecodeFp8Row(const WeightView& w, int64_t row, uint16_t* out) {
  const int64_t K = w.cols;
  const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * K;
  const int64_t scale_base = (row / 128 + w.scale_row_offset) * ((K + 127) / 128);
  __mmask16 exact = 0xFFFF;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const float s = ScaleOf(w, scale_base + k / 128);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k));
    const __mmask16 nan =
        _mm_cmpeq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8(static_cast<char>(0x80))),
                            _mm_set1_epi8(static_cast<char>(0xFF)));
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                                       _mm256_set1_epi16(static_cast<short>(0xBF80)));
    __m512 v = _mm512_maskz_cvtph_ps(static_cast<__mmask16>(~nan), h);
    // One rounding of e4m3 · s; when s · 256 overflows, the 256 goes on first (exact).
    if (std::isinf(s * 256.0f)) {
      v = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(256.0f)), _mm512_set1_ps(s));
    } else {
      v = _mm512_mul_ps(v, _mm512_set1_ps(s * 256.0f));
    }
    const __m512i bits = _mm512_castps_si512(v);
    exact &= ExactLanes(bits);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
  }
  bool tail_exact = true;
  for (; k < K; ++k) {
    const float v = ref::WeightAt(w, row, k);
    tail_exact = tail_exact && ExactValue(v);
    out[k] = FloatToBf16(v);
  }
  return exact == 0xFFFF && tail_exact;
}

DEEPINFER_AVX512_PACK bool DecodeBf16Row(const WeightView& w, int64_t row, uint16_t* out) {
  const int64_t K = w.cols;
  const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * K;
  // A BF16 weight fails only as a denormal or a NaN (non-zero mantissa under a zero or an
  // all-ones exponent).
  __mmask16 bad = 0;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k));
    const __m256i e = _mm256_and_si256(h, _mm256_set1_epi16(0x7F80));
    const __mmask16 mant = _mm256_test_epi16_mask(h, _mm256_set1_epi16(0x007F));
    const __mmask16 edge = _mm256_cmpeq_epi16_mask(e, _mm256_setzero_si256()) |
                           _mm256_cmpeq_epi16_mask(e, _mm256_set1_epi16(0x7F80));
    bad |= mant & edge;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), h);
  }
  bool tail_exact = true;
  for (; k < K; ++k) {
    tail_exact = tail_exact && ExactValue(Bf16ToFloat(p[k]));
    out[k] = p[k];
  }
  return bad == 0 && tail_exact;
}

DEEPINFER_AVX512_PACK bool DecodeMxfp4Row(const WeightView& w, int64_t row, uint16_t* out) {
  const int64_t K = w.cols;  // a multiple of 32 (the format's block)
  const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * (K / 2);
  const int64_t scale_base = row * (K / 32);
  const __m512 e2m1 = _mm512_loadu_ps(kFp4E2m1Table);
  bool exact = true;
  for (int64_t k = 0; k < K; k += 32) {
    // The block's 16 values e2m1(n) · s; byte i holds columns 2i (low nibble) and 2i + 1, which
    // are the two BF16 of dword i in column order.
    const __m512i table =
        _mm512_castps_si512(_mm512_mul_ps(e2m1, _mm512_set1_ps(ScaleOf(w, scale_base + k / 32))));
    const __mmask16 good = ExactLanes(table);
    const __m512i tb = _mm512_srli_epi32(table, 16);
    const __m512i b =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k / 2)));
    const __m512i hi_idx = _mm512_srli_epi32(b, 4);  // vpermd reads only the low 4 bits
    const __m512i lo = _mm512_permutexvar_epi32(b, tb);
    const __m512i hi = _mm512_permutexvar_epi32(hi_idx, tb);
    _mm512_storeu_si512(out + k, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    if (good != 0xFFFF) {  // only the entries the block uses count
      const __m512i bad = _mm512_maskz_set1_epi32(static_cast<__mmask16>(~good), 1);
      const __m512i used =
          _mm512_or_si512(_mm512_permutexvar_epi32(b, bad), _mm512_permutexvar_epi32(hi_idx, bad));
      exact = exact && _mm512_test_epi32_mask(used, used) == 0;
    }
  }
  return exact;
}

}  // namespace

bool Avx512DecodeRowBf16(const WeightView& w, int64_t row, uint16_t* out) {
  switch (w.dtype) {
    case WeightDType::kFP8Block:
      return DecodeFp8Row(w, row, out);
    case WeightDType::kBF16:
      return DecodeBf16Row(w, row, out);
    case WeightDType::kMXFP4:
      return DecodeMxfp4Row(w, row, out);
    default:
      return false;
  }
}

}  // namespace deepinfer::kernels::bf16dot::internal

#ifndef __clang__
#pragma GCC diagnostic pop
#endif
