// AVX2 + FMA kernels. See ops.h for the documented reduction order; the essential invariant is
// that a Linear output element is always produced by the same sequence of FMAs into one 8-lane
// accumulator (lane l takes k = l, l+8, ...), whether the weights are streamed (small M) or
// packed into an FP32 panel (large M), followed by the same horizontal sum.
#include "kernels/cpu/avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/check.h"
#include "common/config.h"
#include "common/cpu_features.h"
#include "kernels/cpu/linear_driver.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"

namespace deepinfer::kernels::avx2 {
namespace {

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)): the fixed lane-combination order of ops.h.
inline float HorizontalSum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  const __m128 s4 = _mm_add_ps(lo, hi);                     // [l0+l4, l1+l5, l2+l6, l3+l7]
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [(04)+(26), (15)+(37), ..]
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// Prefetches the line at base + offset bytes into L1. The address may lie past the end of the
// weights (prefetches never fault), so it is formed as an integer, not by pointer arithmetic.
inline void PrefetchAt(const void* base, int64_t offset) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) + offset),
               _MM_HINT_T0);
}

// MXFP4 rows are read as a few long sequential streams (one per row stream of a tile) at about
// half the speed of a BF16 row, so each demand miss at a 4 KiB page boundary, where the hardware
// prefetchers stop, stalls a compute-bound loop that cannot run far enough ahead to hide it.
// These prefetch each stream cpu::kStreamPrefetchBytes of codes ahead (and the matching scale
// bytes).
// Measured (kernels_bench MXFP4 1/4096/4096, 2 threads, alternating, median of 4 rounds): paired
// read-bandwidth ratio 59.5 % without, 70–71 % at 1, 2 and 4 KiB ahead (docs/performance.md).
constexpr int64_t kMxfp4PrefetchBytes = cpu::kStreamPrefetchBytes;

// Prefetches for an MXFP4 row stream (codes: 2 per byte, scales: 1 byte per 32 columns) about to
// read column `col`; call it for every col that is a multiple of 128 (one 64-byte code line).
inline void PrefetchMxfp4Stream(const uint8_t* codes, const uint8_t* scales, int64_t col) {
  PrefetchAt(codes + col / 2, kMxfp4PrefetchBytes);
  if (col % 2048 == 0) PrefetchAt(scales + col / 32, kMxfp4PrefetchBytes / 16);
}

// Makes the compiler hold v in a register: without it GCC folds a loaded operand into every FMA
// that uses it (a 2x6 tile then issues 12 + 2 loads per 12 FMAs instead of 6 + 2, and Zen 3
// serves only two 256-bit loads per cycle).
inline void KeepInRegister(__m256& v) { asm("" : "+x"(v)); }

// Mask with the first r (0..8) lanes set.
inline __m256i TailMask(int64_t r) {
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - r));
}

float ScaleValue(const WeightView& w, int64_t index) {
  if (w.scale_dtype == ScaleDType::kF32) return static_cast<const float*>(w.scales)[index];
  return E8m0ToFloat(static_cast<const uint8_t*>(w.scales)[index]);
}

// ---------------------------------------------------------------------------------------------
// Row decoders: produce FP32 weight values fl(decoded · scale) exactly as ref::WeightAt does.
// Decode32(k) fills 4 vectors for columns k..k+31 (k % 32 == 0), Decode8(k) one vector
// (k % 8 == 0), DecodeTail(k, r, out) the last r < 8 columns into out[0..8) zero-padded.

struct F32Row {
  const float* p;
  F32Row(const WeightView& w, int64_t n) : p(static_cast<const float*>(w.data) + n * w.cols) {}
  void Decode32(int64_t k, __m256* out) const {
    for (int i = 0; i < 4; ++i) out[i] = _mm256_loadu_ps(p + k + 8 * i);
  }
  __m256 Decode8(int64_t k) const { return _mm256_loadu_ps(p + k); }
  void DecodeTail(int64_t k, int64_t r, float* out) const {
    for (int i = 0; i < 8; ++i) out[i] = i < r ? p[k + i] : 0.0f;
  }
};

struct Bf16Row {
  const uint16_t* p;
  Bf16Row(const WeightView& w, int64_t n) : p(static_cast<const uint16_t*>(w.data) + n * w.cols) {}
  static __m256 Widen(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  void Decode32(int64_t k, __m256* out) const {
    for (int i = 0; i < 4; ++i) {
      out[i] = Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k + 8 * i)));
    }
  }
  __m256 Decode8(int64_t k) const {
    return Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k)));
  }
  void DecodeTail(int64_t k, int64_t r, float* out) const {
    for (int i = 0; i < 8; ++i) out[i] = i < r ? Bf16ToFloat(p[k + i]) : 0.0f;
  }
};

// e4m3 -> fp16 bits by shifting (exact: fp16 has more exponent and mantissa bits); the fp16
// value is the e4m3 value times 2^-8, so the scale is pre-multiplied by 256.
struct Fp8Row {
  const uint8_t* p;
  const WeightView* w;
  int64_t scale_base;  // index of this row's first scale
  bool nan_free;       // WeightView::fp8_nan_free: ZeroNaN would change nothing
  Fp8Row(const WeightView& wv, int64_t n)
      : p(static_cast<const uint8_t*>(wv.data) + n * wv.cols),
        w(&wv),
        scale_base((n / 128 + wv.scale_row_offset) * ((wv.cols + 127) / 128)),
        nan_free(wv.fp8_nan_free) {}
  // fl(e4m3 · s) = (e4m3 · 2^-8) · (s · 256), one rounding, for the values of columns k..; when
  // s · 256 overflows (s >= 2^120: legal, if absurd) the 256 goes on the decoded value first
  // (exact), so the product still rounds once.
  __m256 Scaled(__m256 v, int64_t k) const {
    const float s = ScaleValue(*w, scale_base + k / 128);
    if (std::isinf(s * 256.0f)) {
      return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(256.0f)), _mm256_set1_ps(s));
    }
    return _mm256_mul_ps(v, _mm256_set1_ps(s * 256.0f));
  }
  static __m128i ZeroNaN(__m128i b) {
    // (b | 0x80) == 0xFF  <=>  b is 0x7F or 0xFF (NaN codes) -> decode to 0 like DS4.
    const __m128i nan = _mm_cmpeq_epi8(_mm_or_si128(b, _mm_set1_epi8(static_cast<char>(0x80))),
                                       _mm_set1_epi8(static_cast<char>(0xFF)));
    return _mm_andnot_si128(nan, b);
  }
  static __m256i ToHalfBits16(__m128i b) {
    // Sign-extend: bits 15..7 = sign, 6..0 = exponent/mantissa; << 7 puts e/m at bits 13..7
    // and the sign at bit 15 (bit 14 also gets the sign and is masked off).
    const __m256i h = _mm256_cvtepi8_epi16(b);
    return _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
  }
  void Decode32(int64_t k, __m256* out) const {
    for (int half = 0; half < 2; ++half) {
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k + 16 * half));
      if (!nan_free) b = ZeroNaN(b);
      const __m256i h = ToHalfBits16(b);
      out[2 * half] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
      out[2 * half + 1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    }
    const float s = ScaleValue(*w, scale_base + k / 128);
    if (std::isinf(s * 256.0f)) {
      for (int i = 0; i < 4; ++i) out[i] = Scaled(out[i], k);
      return;
    }
    const __m256 s256 = _mm256_set1_ps(s * 256.0f);
    for (int i = 0; i < 4; ++i) out[i] = _mm256_mul_ps(out[i], s256);
  }
  __m256 Decode8(int64_t k) const {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + k));
    if (!nan_free) b = ZeroNaN(b);
    const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7),
                                    _mm_set1_epi16(static_cast<short>(0xBF80)));
    return Scaled(_mm256_cvtph_ps(h), k);
  }
  void DecodeTail(int64_t k, int64_t r, float* out) const {
    const float s = ScaleValue(*w, scale_base + k / 128);
    for (int i = 0; i < 8; ++i) {
      const uint8_t c = p[k + i < w->cols ? k + i : 0];
      // NaN codes count as 0 times the scale, as in ref::WeightAt and the vector decoders.
      out[i] = i < r ? ((c & 0x7F) == 0x7F ? 0.0f : Fp8E4m3ToFloat(c)) * s : 0.0f;
    }
  }
};

// FP8 with one scale per fp8_tile_rows x fp8_tile_cols tile (V4.1's 32 x 32), decoded as Fp8Row
// decodes, i.e. to fl(e4m3 · scale) with NaN codes as 0, the value DequantizeFp8BlocksRows
// stores; fp8_tile_cols % 32 == 0, so the 32 columns of Decode32 share one scale.
struct Fp8TileRow {
  const uint8_t* p;
  const WeightView* w;
  int64_t scale_base;  // index of this row's first scale
  int col_shift;       // log2(fp8_tile_cols) when a power of two (V4.1: 5), else -1
  bool nan_free;       // WeightView::fp8_nan_free: ZeroNaN would change nothing
  Fp8TileRow(const WeightView& wv, int64_t n)
      : p(static_cast<const uint8_t*>(wv.data) + n * wv.cols),
        w(&wv),
        scale_base((n / wv.fp8_tile_rows) * ((wv.cols + wv.fp8_tile_cols - 1) / wv.fp8_tile_cols)),
        col_shift(std::has_single_bit(static_cast<uint64_t>(wv.fp8_tile_cols))
                      ? std::countr_zero(static_cast<uint64_t>(wv.fp8_tile_cols))
                      : -1),
        nan_free(wv.fp8_nan_free) {}
  // The scale of column k's tile (a shift instead of a 64-bit division per 32 weights).
  float Scale(int64_t k) const {
    const int64_t i = scale_base + (col_shift >= 0 ? k >> col_shift : k / w->fp8_tile_cols);
    if (w->scale_dtype == ScaleDType::kF32) {
      float v;
      std::memcpy(&v, static_cast<const uint8_t*>(w->scales) + 4 * i, 4);
      return v;
    }
    return E8m0ToFloatLdexp(static_cast<const uint8_t*>(w->scales)[i]);
  }
  // v · s for v = e4m3 · 2^-8 (exact): one rounding, with the 256 applied to v first where
  // s · 256 overflows (as Fp8Row::Scaled).
  static __m256 Times(__m256 v, float s) {
    if (std::isinf(s * 256.0f)) {
      return _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(256.0f)), _mm256_set1_ps(s));
    }
    return _mm256_mul_ps(v, _mm256_set1_ps(s * 256.0f));
  }
  void Decode32(int64_t k, __m256* out) const {
    const float s = Scale(k);
    for (int half = 0; half < 2; ++half) {
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k + 16 * half));
      if (!nan_free) b = Fp8Row::ZeroNaN(b);
      const __m256i h = Fp8Row::ToHalfBits16(b);
      out[2 * half] = Times(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), s);
      out[2 * half + 1] = Times(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), s);
    }
  }
  __m256 Decode8(int64_t k) const {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + k));
    if (!nan_free) b = Fp8Row::ZeroNaN(b);
    const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7),
                                    _mm_set1_epi16(static_cast<short>(0xBF80)));
    return Times(_mm256_cvtph_ps(h), Scale(k));
  }
  void DecodeTail(int64_t k, int64_t r, float* out) const {
    const float s = Scale(k);
    for (int i = 0; i < 8; ++i) {
      const uint8_t c = i < r ? p[k + i] : 0;
      out[i] = i < r ? ((c & 0x7F) == 0x7F ? 0.0f : Fp8E4m3ToFloat(c)) * s : 0.0f;
    }
  }
};

// FP8 without the scale, decoded by bit placement: the e4m3 byte b (s eeee mmm), sign-extended
// to 32 bits and shifted left by 20, has e4m3's exponent at f32 exponent bits 26..23 and its
// mantissa at 22..20; masking with 0x87F00000 keeps those and the sign. The f32 so formed is
// exactly e4m3(b) · 2^-120 for every finite code, e4m3 subnormals included (they become f32
// subnormals, so this needs DAZ off: nothing in deepinfer sets MXCSR). The NaN codes 0x7F/0xFF
// would decode to finite numbers here, so the decoder only reports whether it saw one (the caller
// then recomputes that tile with Fp8Row, which maps them to 0 as DS4 does). 3 uops per 8 weights.
// Used by the decode path with the block scale 2^(e-127) · 2^120 folded into a copy of x (see
// StreamFp8), on AMD cores only: Intel cores take a microcode assist for every FMA with a
// subnormal input (measured on Sapphire Rapids: 4 % of read bandwidth on random codes).
struct Fp8RowBits {
  const uint8_t* p;
  Fp8RowBits(const WeightView& w, int64_t n)
      : p(static_cast<const uint8_t*>(w.data) + n * w.cols) {}
  static __m256 FromSigned(__m256i v) {
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(v, 20),
                                                _mm256_set1_epi32(static_cast<int>(0x87F00000u))));
  }
  // Lanes of `nan` become nonzero where a byte of p[k..k+32) is 0x7F or 0xFF (kCheckNan).
  template <bool kCheckNan = true>
  void Decode32(int64_t k, __m256* out, __m256i& nan) const {
    if constexpr (kCheckNan) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k));
      nan = _mm256_or_si256(
          nan, _mm256_cmpeq_epi8(_mm256_or_si256(b, _mm256_set1_epi8(static_cast<char>(0x80))),
                                 _mm256_set1_epi8(static_cast<char>(0xFF))));
    }
    for (int g = 0; g < 4; ++g) {
      out[g] = FromSigned(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + k + 8 * g))));
    }
  }
  __m256 Decode8(int64_t k, __m256i& nan) const {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + k));
    const __m128i n8 = _mm_cmpeq_epi8(_mm_or_si128(b, _mm_set1_epi8(static_cast<char>(0x80))),
                                      _mm_set1_epi8(static_cast<char>(0xFF)));
    // Only the low 8 bytes were loaded (the rest are 0, never NaN codes).
    nan = _mm256_or_si256(nan, _mm256_castsi128_si256(n8));
    return FromSigned(_mm256_cvtepi8_epi32(b));
  }
  // Scalar form of the same bit placement (exact for all non-NaN codes).
  static float DecodeOne(uint8_t c) {
    const uint32_t v = static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(c)));
    return BitsToFloat((v << 20) & 0x87F00000u);
  }
  bool DecodeTail(int64_t k, int64_t r, float* out) const {
    bool nan = false;
    for (int i = 0; i < 8; ++i) {
      const uint8_t c = i < r ? p[k + i] : 0;
      nan |= (c & 0x7F) == 0x7F;
      out[i] = DecodeOne(c);
    }
    return nan;
  }
};

// MXFP4 tag for LinearTyped: small M goes to StreamFp4 (below), large M to the packed path with
// TileShape<Fp4Row>, which reproduces StreamFp4's summation order.
struct Fp4Row {};

// MXFP4 Linear, small M (the packed path gives the same rows for large M). Columns come in
// superblocks of 64: 32 bytes, whose two 128-bit halves are the two 32-column blocks with their own
// E8M0 scale. The scale is folded into the lookup table, so the decoded weight is the exact product
// fl(e2m1 · 2^(e-127)) (every such value, subnormals, ±inf for e = 254 and NaN for e = 255
// included, is a BF16 number: e2m1 has two significant bits):
// - Mxfp4Bf16Tables() holds, for each E8M0 byte e, the high bytes and the low bytes of the 16
//   BF16 values bf16(e2m1(n) · 2^(e-127)). The table register for a superblock takes the first
//   block's table in its low half and the second block's in its high half (two broadcasts and a
//   blend: no shuffle-port work).
// - vpshufb on the low nibbles and on the high nibbles of the 32 bytes, once with the high-byte
//   table and once with the low-byte table (4 lookups), then vpunpck{l,h}bw pairs them into 64
//   BF16 words (4 unpacks); each 32-bit lane holds two words, whose FP32 values are the lane
//   shifted left by 16 (even word) and the lane masked to its upper half (odd word).
// This is 3 nibble ops + 4 lookups + 4 unpacks + 4 shifts + 4 ands + 8 FMAs per 64 weights and
// x row, about 1.5x fewer port cycles than converting int8 codes with vcvtdq2ps.
// Order (ops.h): vector v = 2u + o of a superblock (u = 0..3 the unpack, o = 0 even word, 1 odd
// word) holds in lane l = 4L + d column 2·(16L + 8(u%2) + 2d + o) + u/2 (L = block, d = 0..3);
// x is permuted once per call to match (PermuteMxfp4Stream). Per x row and weight row, lane l of
// accumulator a_o takes fma(x_v, w_v, a_o) for v = 2u + o, u = 0..3, superblock by superblock
// in increasing k; the result is HorizontalSum(a_0 + a_1). A K tail of 32 columns is a half
// superblock (upper half of weights and x zero; its table is that of e = 127, whose zero is +0).
constexpr int64_t kFp4Super = 64;

inline int64_t Fp4PaddedK(int64_t K) { return (K + kFp4Super - 1) / kFp4Super * kFp4Super; }

// Column (within its superblock) that position i = 8v + l of the permuted superblock holds.
const std::array<uint8_t, kFp4Super>& Mxfp4StreamColumns() {
  static const std::array<uint8_t, kFp4Super> cols = [] {
    std::array<uint8_t, kFp4Super> c{};
    for (int u = 0; u < 4; ++u) {
      for (int o = 0; o < 2; ++o) {
        for (int l = 0; l < 8; ++l) {
          const int byte = 16 * (l / 4) + 8 * (u % 2) + 2 * (l % 4) + o;
          c[8 * (2 * u + o) + l] = static_cast<uint8_t>(2 * byte + u / 2);
        }
      }
    }
    return c;
  }();
  return cols;
}

// out (row stride K rounded up to kBlock) = rows of x (row stride x_stride) with the columns of
// each kBlock-column block permuted: out[b + i] = x[b + cols[i]], zero past K. out may equal x
// for one row, or when x_stride is the padded K (each block is staged first).
template <size_t kBlock>
void PermuteColumnsByBlock(const float* x, int64_t rows, int64_t K, int64_t x_stride,
                           const std::array<uint8_t, kBlock>& cols, float* out) {
  constexpr int64_t kB = static_cast<int64_t>(kBlock);
  const int64_t kp = (K + kB - 1) / kB * kB;
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * x_stride;
    float* dst = out + r * kp;
    for (int64_t b = 0; b < kp; b += kB) {
      float tmp[kBlock];
      const int64_t n = std::min(kB, K - b);
      std::memcpy(tmp, src + b, n * sizeof(float));
      std::fill(tmp + n, tmp + kB, 0.0f);
      for (int64_t i = 0; i < kB; ++i) dst[b + i] = tmp[cols[i]];
    }
  }
}

// x in the superblock order above (row stride Fp4PaddedK(K)); see PermuteColumnsByBlock.
void PermuteMxfp4Stream(const float* x, int64_t rows, int64_t K, int64_t x_stride, float* out) {
  PermuteColumnsByBlock(x, rows, K, x_stride, Mxfp4StreamColumns(), out);
}

// For each E8M0 byte e, 32 bytes: the high bytes, then the low bytes, of the BF16 encodings of
// e2m1(n) · E8m0ToFloat(e) for n = 0..15 (exact products, see above).
const uint8_t* Mxfp4Bf16Tables() {
  struct Tables {
    alignas(64) uint8_t b[256][32];
    Tables() {
      for (int e = 0; e < 256; ++e) {
        for (int n = 0; n < 16; ++n) {
          const uint16_t v = FloatToBf16(Fp4E2m1ToFloat(static_cast<uint8_t>(n)) *
                                         E8m0ToFloat(static_cast<uint8_t>(e)));
          b[e][n] = static_cast<uint8_t>(v >> 8);
          b[e][16 + n] = static_cast<uint8_t>(v & 0xFF);
        }
      }
    }
  };
  static const Tables tables;
  return &tables.b[0][0];
}

// The 4 BF16 word vectors of 32 bytes b of e2m1 codes through the tables th/tl (high/low bytes,
// one 16-entry table per 128-bit half): vpshufb on the low and the high nibbles, paired into
// words by vpunpck{l,h}bw (order: see StreamTileFp4 and the lane layout).
__attribute__((always_inline)) inline void Fp4LookupWords(__m256i b, __m256i th, __m256i tl,
                                                          __m256i* words) {
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i il = _mm256_and_si256(b, nib);
  const __m256i ih = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
  const __m256i lh = _mm256_shuffle_epi8(th, il), ll = _mm256_shuffle_epi8(tl, il);
  const __m256i hh = _mm256_shuffle_epi8(th, ih), hl = _mm256_shuffle_epi8(tl, ih);
  words[0] = _mm256_unpacklo_epi8(ll, lh);
  words[1] = _mm256_unpackhi_epi8(ll, lh);
  words[2] = _mm256_unpacklo_epi8(hl, hh);
  words[3] = _mm256_unpackhi_epi8(hl, hh);
}

// The 4 BF16 word vectors of one superblock of an MXFP4 row (p: the row's bytes, sc: its scale
// bytes; full: 64 columns, else the 32-column K tail): vector v = 2u + o of the permuted order is
// Fp4Even(words[u]) for o = 0 and Fp4Odd(words[u]) for o = 1.
template <bool kFull>
__attribute__((always_inline)) inline void DecodeFp4Words(const uint8_t* p, const uint8_t* sc,
                                                          int64_t k, const uint8_t* tables,
                                                          __m256i* words) {
  const __m256i b =
      kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k / 2))
            : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k / 2)));
  const uint8_t* ta = tables + 32 * size_t{sc[k / 32]};
  const uint8_t* tb = tables + 32 * size_t{kFull ? sc[k / 32 + 1] : uint8_t{127}};
  auto half = [](const uint8_t* t) {
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
  };
  const __m256i th = _mm256_blend_epi32(half(ta), half(tb), 0xF0);
  const __m256i tl = _mm256_blend_epi32(half(ta + 16), half(tb + 16), 0xF0);
  Fp4LookupWords(b, th, tl, words);
}
inline __m256 Fp4Even(__m256i words) { return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16)); }
inline __m256 Fp4Odd(__m256i words) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(words, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// NS weight rows rows[0..NS) (any rows: the caller picks rows far apart, so that each is a long
// sequential stream) against MR rows of permuted x.
template <int MR, int NS>
void StreamTileFp4(const float* const* xp, const WeightView& w, const int64_t* rows,
                   const float* bias, float* const* yr, const uint8_t* tables) {
  const int64_t K = w.cols;
  const uint8_t* p[NS];
  const uint8_t* sc[NS];
  for (int j = 0; j < NS; ++j) {
    p[j] = static_cast<const uint8_t*>(w.data) + rows[j] * (K / 2);
    sc[j] = static_cast<const uint8_t*>(w.scales) + rows[j] * (K / 32);
  }
  __m256 acc[MR][NS][2];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NS; ++j) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  }
  // One superblock (full: 64 columns; else the 32-column K tail).
  auto step = [&](int64_t k, auto full_tag) __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int j = 0; j < NS; ++j) {
      __m256i words[4];
      DecodeFp4Words<decltype(full_tag)::value>(p[j], sc[j], k, tables, words);
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m256 even = Fp4Even(words[u]);
        const __m256 odd = Fp4Odd(words[u]);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
          const float* xv = xp[i] + k + 16 * u;
          acc[i][j][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xv), even, acc[i][j][0]);
          acc[i][j][1] = _mm256_fmadd_ps(_mm256_loadu_ps(xv + 8), odd, acc[i][j][1]);
        }
      }
    }
  };
  int64_t k = 0;
  for (; k + kFp4Super <= K; k += kFp4Super) {
    if (k % 128 == 0) {
      for (int j = 0; j < NS; ++j) PrefetchMxfp4Stream(p[j], sc[j], k);
    }
    step(k, std::true_type());
  }
  if (k < K) step(k, std::false_type());
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NS; ++j) {
      float v = HorizontalSum(_mm256_add_ps(acc[i][j][0], acc[i][j][1]));
      if (bias != nullptr) v += bias[rows[j]];
      yr[i][rows[j]] = v;
    }
  }
}

// Rows [n0, n1): NS interleaved streams over consecutive quarters (halves) of the range, so the
// memory system sees NS long sequential reads (measured: ~1.3x over NS adjacent rows at once,
// whose 2 KiB rows are too short for the hardware prefetchers), then the leftover rows singly.
template <int MR>
void StreamRowsFp4MR(const float* const* xp, const WeightView& w, int64_t n0, int64_t n1,
                     const float* bias, float* const* yr) {
  constexpr int kNS = MR == 1 ? 4 : MR == 2 ? 2 : 1;
  const uint8_t* tables = Mxfp4Bf16Tables();
  cpu::ForEachRowStream<kNS>(
      n0, n1, [&](const int64_t* rows) { StreamTileFp4<MR, kNS>(xp, w, rows, bias, yr, tables); },
      [&](const int64_t* rows) { StreamTileFp4<MR, 1>(xp, w, rows, bias, yr, tables); });
}

// x: permuted by PermuteMxfp4Stream (row stride x_stride >= Fp4PaddedK(K)).
void StreamFp4(const float* x, int64_t x_stride, int64_t M, const WeightView& w, int64_t n0,
               int64_t n1, const float* bias, float* y, int64_t y_stride);

// ---------------------------------------------------------------------------------------------
// Linear, small M: weights streamed once, MR x rows against NR weight rows at a time.

using cpu::kStreamMaxM;

// Row decoders for weight rows row_index[0..NR).
template <class Row, int NR>
std::array<Row, NR> MakeRows(const WeightView& w, const int64_t* row_index) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::array<Row, NR>{Row(w, row_index[I])...};
  }
  (std::make_index_sequence<NR>());
}

// MR x rows against the NR weight rows row_index[0..NR) (any rows).
template <class Row, int MR, int NR>
void StreamTile(const float* const* xr, const WeightView& w, const int64_t* row_index, int64_t K,
                const float* bias, float* const* yr) {
  const std::array<Row, NR> rows = MakeRows<Row, NR>(w, row_index);
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    for (int j = 0; j < NR; ++j) {
      __m256 wv[4];
      rows[j].Decode32(k, wv);
      for (int i = 0; i < MR; ++i) {
        for (int v = 0; v < 4; ++v) {
          acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[i] + k + 8 * v), wv[v], acc[i][j]);
        }
      }
    }
  }
  for (; k + 8 <= K; k += 8) {
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = rows[j].Decode8(k);
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[i] + k), wv, acc[i][j]);
      }
    }
  }
  if (k < K) {
    const int64_t r = K - k;
    const __m256i mask = TailMask(r);
    for (int j = 0; j < NR; ++j) {
      alignas(32) float tmp[8];
      rows[j].DecodeTail(k, r, tmp);
      const __m256 wv = _mm256_load_ps(tmp);
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_maskload_ps(xr[i] + k, mask), wv, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float v = HorizontalSum(acc[i][j]);
      if (bias != nullptr) v += bias[row_index[j]];
      yr[i][row_index[j]] = v;
    }
  }
}

// Rows [n0, n1) as kNR interleaved streams over consecutive parts of the range (each a long
// sequential read, which the hardware prefetchers serve better than kNR adjacent rows), then
// the leftover rows singly.
template <class Row, int MR>
void StreamRowsMR(const float* const* xr, const WeightView& w, int64_t n0, int64_t n1,
                  const float* bias, float* const* yr) {
  constexpr int kNR = MR <= 2 ? 4 : 2;
  cpu::ForEachRowStream<kNR>(
      n0, n1, [&](const int64_t* rows) { StreamTile<Row, MR, kNR>(xr, w, rows, w.cols, bias, yr); },
      [&](const int64_t* rows) { StreamTile<Row, MR, 1>(xr, w, rows, w.cols, bias, yr); });
}

template <class Row>
void StreamRows(const float* x, int64_t x_stride, int64_t M, const WeightView& w, int64_t n0,
                int64_t n1, const float* bias, float* y, int64_t y_stride) {
  cpu::ForEachRowGroup(x, x_stride, M, y, y_stride,
                       [&]<int MR>(const float* const* xr, float* const* yr) {
                         StreamRowsMR<Row, MR>(xr, w, n0, n1, bias, yr);
                       });
}

void StreamFp4(const float* x, int64_t x_stride, int64_t M, const WeightView& w, int64_t n0,
               int64_t n1, const float* bias, float* y, int64_t y_stride) {
  cpu::ForEachRowGroup(x, x_stride, M, y, y_stride,
                       [&]<int MR>(const float* const* xr, float* const* yr) {
                         StreamRowsFp4MR<MR>(xr, w, n0, n1, bias, yr);
                       });
}

// One MR x NR tile of the FP8 fast path: same FMA sequence as StreamTile (lane l, k = l, l+8, ..),
// on xs (x with the block scale · 2^120 folded in) and Fp8RowBits weights. Returns false, having
// written nothing, when a weight of the tile is a NaN code.
// kCheckNan false (the view is fp8_nan_free): the NaN-code test is skipped.
template <int MR, int NR, bool kCheckNan>
bool StreamTileFp8Bits(const float* const* xs, const WeightView& w, const int64_t* row_index,
                       int64_t K, const float* bias, float* const* yr) {
  const std::array<Fp8RowBits, NR> rows = MakeRows<Fp8RowBits, NR>(w, row_index);
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  __m256i nan = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    if (k % 64 == 0) {  // one 64-byte line per stream every other step
      for (int j = 0; j < NR; ++j) PrefetchAt(rows[j].p + k, cpu::kStreamPrefetchBytes);
    }
    for (int j = 0; j < NR; ++j) {
      __m256 wv[4];
      rows[j].template Decode32<kCheckNan>(k, wv, nan);
      for (int i = 0; i < MR; ++i) {
        for (int v = 0; v < 4; ++v) {
          acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[i] + k + 8 * v), wv[v], acc[i][j]);
        }
      }
    }
  }
  for (; k + 8 <= K; k += 8) {
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = rows[j].Decode8(k, nan);
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[i] + k), wv, acc[i][j]);
      }
    }
  }
  bool tail_nan = false;
  if (k < K) {
    const int64_t r = K - k;
    const __m256i mask = TailMask(r);
    for (int j = 0; j < NR; ++j) {
      alignas(32) float tmp[8];
      tail_nan |= rows[j].DecodeTail(k, r, tmp);
      const __m256 wv = _mm256_load_ps(tmp);
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_maskload_ps(xs[i] + k, mask), wv, acc[i][j]);
      }
    }
  }
  if (kCheckNan && (tail_nan || !_mm256_testz_si256(nan, nan))) return false;
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float v = HorizontalSum(acc[i][j]);
      if (bias != nullptr) v += bias[row_index[j]];
      yr[i][row_index[j]] = v;
    }
  }
  return true;
}

// Rows [n0, n1) (inside one 128-row scale block) by the FP8 fast path, as kNR interleaved
// streams over consecutive parts of the range (each a long sequential read, which the memory
// system serves better than kNR adjacent rows; see StreamRowsFp4MR), then the leftover rows
// singly. A tile holding a NaN code is redone row by row by the generic decoder on the unscaled
// x (bitwise the same result for its other weights, see StreamFp8).
template <int MR, class Row = Fp8Row>
void StreamRowsFp8Bits(const float* const* xs, const float* const* xr, const WeightView& w,
                       int64_t n0, int64_t n1, const float* bias, float* const* yr) {
  constexpr int kNR = MR <= 2 ? 4 : 2;
  const int64_t K = w.cols;
  if (w.fp8_nan_free) {
    cpu::ForEachRowStream<kNR>(
        n0, n1,
        [&](const int64_t* rows) { StreamTileFp8Bits<MR, kNR, false>(xs, w, rows, K, bias, yr); },
        [&](const int64_t* rows) { StreamTileFp8Bits<MR, 1, false>(xs, w, rows, K, bias, yr); });
    return;
  }
  cpu::ForEachRowStream<kNR>(
      n0, n1,
      [&](const int64_t* rows) {
        if (!StreamTileFp8Bits<MR, kNR, true>(xs, w, rows, K, bias, yr)) {
          for (int j = 0; j < kNR; ++j) StreamTile<Row, MR, 1>(xr, w, &rows[j], K, bias, yr);
        }
      },
      [&](const int64_t* rows) {
        if (!StreamTileFp8Bits<MR, 1, true>(xs, w, rows, K, bias, yr)) {
          StreamTile<Row, MR, 1>(xr, w, rows, K, bias, yr);
        }
      });
}

// FP8 decode with E8M0 scales. Within one 128-row block every row shares the scale of each
// 128-column block, so x is copied once per row block as xs = x · 2^(e-127) · 2^120 and the
// weights are decoded unscaled by bit placement (Fp8RowBits: e4m3 · 2^-120): per term
// fma(xs, w', acc). When xs is exact (no underflow or overflow; checked) and e >= 20 (so that
// fl(e4m3 · 2^(e-127)) is exact too), xs·w' = x·(e4m3·2^(e-127)) exactly, so this is bitwise the
// same FMA sequence as the generic path fma(x, fl(e4m3·2^(e-127)), acc) and the packed prefill
// path. Otherwise that row block falls back to the generic decoder (as does any tile holding a
// NaN code).
// Row: the generic decoder of the fallback (Fp8Row for V4's 128 x 128 tiles, Fp8TileRow for
// other tile sizes, w.fp8_tile_rows x w.fp8_tile_cols; the tile columns a multiple of 32).
template <class Row = Fp8Row>
void StreamFp8(const float* x, int64_t x_stride, int64_t M, const WeightView& w, int64_t n0,
               int64_t n1, const float* bias, float* y, int64_t y_stride, float* xs_buf) {
  const int64_t K = w.cols;
  const int64_t tr = w.fp8_tile_rows, tc = w.fp8_tile_cols;
  const int64_t kblocks = (K + tc - 1) / tc;
  const auto* scales = static_cast<const uint8_t*>(w.scales);
  const bool fast_subnormals = DetectedCpuFeatures().fast_subnormal_fma;
  for (int64_t m = 0; m < M; m += kStreamMaxM) {
    const int64_t mr = std::min(kStreamMaxM, M - m);
    const float* xr[4];
    const float* xsr[4];
    float* yr[4];
    for (int64_t i = 0; i < mr; ++i) {
      xr[i] = x + (m + i) * x_stride;
      xsr[i] = xs_buf + i * K;
      yr[i] = y + (m + i) * y_stride;
    }
    for (int64_t rb0 = n0; rb0 < n1;) {
      const int64_t rb = rb0 / tr;
      const int64_t rb1 = std::min(n1, (rb + 1) * tr);
      const uint8_t* srow = scales + (rb + w.scale_row_offset) * kblocks;
      // Build xs and check that every nonzero product stayed a normal float.
      __m256 bad = _mm256_setzero_ps();
      const __m256 sign = _mm256_set1_ps(-0.0f);
      const __m256 tiny = _mm256_set1_ps(std::numeric_limits<float>::min());
      const __m256 huge = _mm256_set1_ps(std::numeric_limits<float>::max());
      // Weights decoded at e4m3 · 2^-120 include FP32 subnormals (the e4m3 subnormal codes):
      // only cores that multiply them at full speed take this path (CpuFeatures).
      bool exact = fast_subnormals;
      for (int64_t i = 0; i < mr && exact; ++i) {
        float* dst = xs_buf + i * K;
        for (int64_t kb = 0; kb < kblocks; ++kb) {
          const uint8_t e = srow[kb];
          // e < 20: fl(e4m3·scale) may round; e > 134: 2^(e-7) is not a float (and x·2^(e-7)
          // would overflow for ordinary x). Real checkpoints' scales are far inside.
          if (e < 20 || e > 134) {
            exact = false;
            break;
          }
          const float f = BitsToFloat(static_cast<uint32_t>(e + 120) << 23);  // 2^(e-127)·2^120
          const __m256 vf = _mm256_set1_ps(f);
          const int64_t k1 = std::min(K, (kb + 1) * tc);
          int64_t k = kb * tc;
          for (; k + 8 <= k1; k += 8) {
            const __m256 xv = _mm256_loadu_ps(xr[i] + k);
            const __m256 v = _mm256_mul_ps(xv, vf);
            const __m256 a = _mm256_andnot_ps(sign, v);
            // inexact if (0 < |v| < FLT_MIN) or (x != 0 and v == 0) or |v| > FLT_MAX / NaN
            const __m256 sub = _mm256_and_ps(_mm256_cmp_ps(a, tiny, _CMP_LT_OQ),
                                             _mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_NEQ_UQ));
            const __m256 big = _mm256_cmp_ps(a, huge, _CMP_NLE_UQ);
            bad = _mm256_or_ps(bad, _mm256_or_ps(sub, big));
            _mm256_storeu_ps(dst + k, v);
          }
          for (; k < k1; ++k) {
            const float v = xr[i][k] * f;
            const float a = std::fabs(v);
            if ((xr[i][k] != 0.0f && a < std::numeric_limits<float>::min()) ||
                !(a <= std::numeric_limits<float>::max())) {
              exact = false;
            }
            dst[k] = v;
          }
        }
      }
      if (_mm256_movemask_ps(bad) != 0) exact = false;
      float* const* yrp = yr;
      switch (exact ? mr : -mr) {
        case 1:
          StreamRowsFp8Bits<1, Row>(xsr, xr, w, rb0, rb1, bias, yrp);
          break;
        case 2:
          StreamRowsFp8Bits<2, Row>(xsr, xr, w, rb0, rb1, bias, yrp);
          break;
        case 3:
          StreamRowsFp8Bits<3, Row>(xsr, xr, w, rb0, rb1, bias, yrp);
          break;
        case 4:
          StreamRowsFp8Bits<4, Row>(xsr, xr, w, rb0, rb1, bias, yrp);
          break;
        case -1:
          StreamRowsMR<Row, 1>(xr, w, rb0, rb1, bias, yrp);
          break;
        case -2:
          StreamRowsMR<Row, 2>(xr, w, rb0, rb1, bias, yrp);
          break;
        case -3:
          StreamRowsMR<Row, 3>(xr, w, rb0, rb1, bias, yrp);
          break;
        default:
          StreamRowsMR<Row, 4>(xr, w, rb0, rb1, bias, yrp);
          break;
      }
      rb0 = rb1;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Linear, large M: x is packed once per call (PackXPairs); per thread, a panel of kNC weight rows
// x kKC columns is decoded to FP32 (PackPanel) and reused by kMC rows of x; kMR x kNR register
// tiles; partial accumulators kept across K chunks in a per-thread buffer so the lane order is
// exactly that of the streamed path.
// Blocking (measured on Zen 3, 32 KiB L1, 512 KiB L2): a tile's kNR panel rows (12 KiB) stay in
// L1 while the kMC x rows of the block (192 KiB) stream from L2 with a software prefetch of the
// next tile; the panel (96 KiB) and the accumulator block (144 KiB) live in L2. The 2 x 6 tile
// loads 8 vectors per 12 FMAs (97 % of FMA peak with both operands in L1); the dot-product form
// (lane = k) is kept because decode and prefill must give bitwise-identical rows.

constexpr int64_t kNC = 48;   // weight rows per panel (multiple of every TileShape::kNR)
constexpr int64_t kKC = 512;  // columns per panel (multiple of 64)
constexpr int64_t kMC = 96;   // x rows per accumulator block (multiple of kMR)
constexpr int kMR = 2;
// Thread ranges along N start on multiples of this (keeps 4-row stream tiles inside one FP8
// 128-row scale block).
constexpr int64_t kAlignN = 32;

// Register tile per weight format: kNR weight rows, kAcc accumulators per output element (taking
// consecutive 8-column vectors in turn). BF16/F32/FP8: 2 x 6 x 1 (the streamed order: one
// accumulator, lane = k). MXFP4: 2 x 3 x 2, the order of StreamTileFp4 over the permuted
// columns (the even and odd vectors of each superblock go to their own accumulators).
template <class Row>
struct TileShape {
  static constexpr int kNR = 6;
  static constexpr int kAcc = 1;
};
template <>
struct TileShape<Fp4Row> {
  static constexpr int kNR = 3;
  static constexpr int kAcc = 2;
};
template <class Row>
using Blocking =
    cpu::PackedBlocking<kNC, kKC, kMC, kMR, TileShape<Row>::kNR, TileShape<Row>::kAcc, 8>;

constexpr size_t kPanelFloats = kNC * kKC;
constexpr size_t kAccFloats = kMC * kNC * 8 * 2;  // kMR x kNR x kAcc vectors per tile, kAcc <= 2
constexpr size_t kPerThreadBytes = (kPanelFloats + kAccFloats) * sizeof(float);

// Panel layout: kNR-row groups, each interleaved by 8 columns (row j, column k at
// (j / kNR) * kNR * kKC + (k / 8) * kNR * 8 + (j % kNR) * 8 + k % 8), so a register tile reads its
// kNR rows as one sequential stream. Rows nc..kNC and columns kc..kc8 are zero. MXFP4 columns are
// the permuted ones (PermuteMxfp4Stream), kb and kc multiples of 64 (K padded to whole
// superblocks).
template <class Row>
void PackPanel(const WeightView& w, int64_t nb, int64_t nc, int64_t kb, int64_t kc, float* panel) {
  constexpr int kNR = TileShape<Row>::kNR;
  constexpr int64_t kStep = kNR * 8;  // floats between consecutive 8-column slices of a row
  const int64_t kc8 = (kc + 7) / 8 * 8;
  for (int64_t j = 0; j < kNC; ++j) {
    float* dst = panel + (j / kNR) * kNR * kKC + (j % kNR) * 8;
    if (j >= nc) {
      for (int64_t k = 0; k < kc8; k += 8)
        _mm256_store_ps(dst + k / 8 * kStep, _mm256_setzero_ps());
      continue;
    }
    if constexpr (std::is_same_v<Row, Fp4Row>) {
      const uint8_t* tables = Mxfp4Bf16Tables();
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + (nb + j) * (w.cols / 2);
      const uint8_t* sc = static_cast<const uint8_t*>(w.scales) + (nb + j) * (w.cols / 32);
      for (int64_t k = 0; k < kc; k += kFp4Super) {
        __m256i words[4];
        if (kb + k + kFp4Super <= w.cols) {
          DecodeFp4Words<true>(p, sc, kb + k, tables, words);
        } else {
          DecodeFp4Words<false>(p, sc, kb + k, tables, words);
        }
        for (int u = 0; u < 4; ++u) {
          _mm256_store_ps(dst + (k / 8 + 2 * u) * kStep, Fp4Even(words[u]));
          _mm256_store_ps(dst + (k / 8 + 2 * u + 1) * kStep, Fp4Odd(words[u]));
        }
      }
    } else {
      const Row row(w, nb + j);
      // The same row's columns of the next K chunk, which the next panel packs: prefetched now
      // so that they arrive while this panel's tiles compute (kNC rows are too many short
      // streams for the hardware prefetchers; measured on the 1B Llama at M = 16: packing took
      // as long as the tiles). Prefetches never fault, so running past the row end is harmless.
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(row.p) + (kb + kKC) * sizeof(*row.p);
      constexpr int64_t kLinesPer32 = (32 * sizeof(*row.p) + 63) / 64;
      int64_t k = 0;
      for (; k + 32 <= kc; k += 32) {
        if (kb + kKC < w.cols) {
          for (int64_t l = 0; l < kLinesPer32; ++l) {
            _mm_prefetch(reinterpret_cast<const char*>(ahead + k * sizeof(*row.p) + 64 * l),
                         _MM_HINT_T0);
          }
        }
        __m256 v[4];
        row.Decode32(kb + k, v);
        for (int i = 0; i < 4; ++i) _mm256_store_ps(dst + (k / 8 + i) * kStep, v[i]);
      }
      for (; k + 8 <= kc; k += 8) _mm256_store_ps(dst + k / 8 * kStep, row.Decode8(kb + k));
      if (k < kc) row.DecodeTail(kb + k, kc - k, dst + k / 8 * kStep);
    }
  }
}

// x for the packed path: rows in pairs, interleaved by 8 columns, so that a register tile reads
// one sequential stream (16 floats per 8 columns) instead of two rows K floats apart. Element
// (m, k) sits at ((m / 2) * kp + k / 8 * 8) * 2 + (m % 2) * 8 + k % 8, kp = K rounded up to 8;
// the padding (columns K..kp, and row M when M is odd) is zero, which gives the same FMAs as the
// masked tail step of the streamed path (fma(0, 0, acc)).
inline int64_t PackedXCols(int64_t K) { return (K + 7) / 8 * 8; }
inline size_t PackedXBytes(int64_t M, int64_t K) {
  return static_cast<size_t>((M + kMR - 1) / kMR * kMR * PackedXCols(K)) * sizeof(float);
}

void PackXPairs(const float* x, int64_t x_stride, int64_t M, int64_t K, float* out) {
  const int64_t kp = PackedXCols(K);
  for (int64_t m = 0; m < M; m += kMR) {
    float* dst = out + m * kp;
    for (int i = 0; i < kMR; ++i) {
      const float* src = m + i < M ? x + (m + i) * x_stride : nullptr;
      int64_t k = 0;
      if (src != nullptr) {
        for (; k + 8 <= K; k += 8)
          _mm256_storeu_ps(dst + k * kMR + i * 8, _mm256_loadu_ps(src + k));
      }
      for (; k < kp; k += 8) {
        for (int l = 0; l < 8; ++l) {
          dst[k * kMR + i * 8 + l] = src != nullptr && k + l < K ? src[k + l] : 0.0f;
        }
      }
    }
  }
}

// One kMR x kNR register tile over kc8 (a multiple of 8 * kAcc) columns: xt points at the tile's
// first column in the packed x (xt_next at the next tile's, prefetched), the weights are panel
// rows j0.. . Accumulator a of an output element takes the 8-column vectors c with
// (c / 8) % kAcc == a, in increasing c. They start at zero on the first K chunk, else from
// accbuf; on the last chunk the horizontal sums (of the accumulators added in order) go to
// out[i][j], otherwise the accumulators go back to accbuf.
template <int kNR, int kAcc>
void PanelTile(const float* xt, const float* xt_next, int64_t kc8, const float* panel, int64_t j0,
               float* accbuf, bool first, bool last, float (*out)[kNR]) {
  __m256 acc[kMR][kNR][kAcc];
  for (int i = 0; i < kMR; ++i) {
    for (int j = 0; j < kNR; ++j) {
      for (int a = 0; a < kAcc; ++a) {
        acc[i][j][a] =
            first ? _mm256_setzero_ps() : _mm256_load_ps(accbuf + ((i * kNR + j) * kAcc + a) * 8);
      }
    }
  }
  const float* wp = panel + j0 * kKC;  // j0 is a multiple of kNR: one interleaved group
  for (int64_t k0 = 0; k0 < kc8; k0 += 8 * kAcc) {
    PrefetchAt(xt_next, k0 * kMR * sizeof(float));
    for (int a = 0; a < kAcc; ++a) {
      const int64_t k = k0 + 8 * a;
      __m256 xv[kMR];
      for (int i = 0; i < kMR; ++i) {
        xv[i] = _mm256_loadu_ps(xt + k * kMR + i * 8);
        KeepInRegister(xv[i]);
      }
      for (int j = 0; j < kNR; ++j) {
        __m256 wv = _mm256_load_ps(wp + k * kNR + j * 8);
        KeepInRegister(wv);
        for (int i = 0; i < kMR; ++i) acc[i][j][a] = _mm256_fmadd_ps(xv[i], wv, acc[i][j][a]);
      }
    }
  }
  if (!last) {
    for (int i = 0; i < kMR; ++i) {
      for (int j = 0; j < kNR; ++j) {
        for (int a = 0; a < kAcc; ++a) {
          _mm256_store_ps(accbuf + ((i * kNR + j) * kAcc + a) * 8, acc[i][j][a]);
        }
      }
    }
    return;
  }
  for (int i = 0; i < kMR; ++i) {
    for (int j = 0; j < kNR; ++j) {
      __m256 sum = acc[i][j][0];
      for (int a = 1; a < kAcc; ++a) sum = _mm256_add_ps(sum, acc[i][j][a]);
      out[i][j] = HorizontalSum(sum);
    }
  }
}

// The K of the packed path: w.cols, or for MXFP4 the padded K of the permuted x.
template <class Row>
int64_t PackedK(const WeightView& w) {
  return std::is_same_v<Row, Fp4Row> ? Fp4PaddedK(w.cols) : w.cols;
}

// xpk: x packed by PackXPairs (M rows, PackedK(w) columns).
template <class Row>
void PackedRows(const float* xpk, int64_t M, const WeightView& w, int64_t n0, int64_t n1,
                const float* bias, float* y, int64_t y_stride, float* scratch) {
  constexpr int kNR = TileShape<Row>::kNR;
  constexpr int kAcc = TileShape<Row>::kAcc;
  const int64_t K = PackedK<Row>(w);
  const float* panel = scratch;
  cpu::PackedRowsLoop<Blocking<Row>>(
      xpk, PackedXCols(K), M, K, n0, n1, bias, y, y_stride, scratch,
      [&](int64_t nb, int64_t nc, int64_t kb, int64_t kc, float* p) {
        PackPanel<Row>(w, nb, nc, kb, kc, p);
      },
      [&](const float* xt, const float* xt_next, int64_t kc8, int64_t j0, float* accbuf, bool first,
          bool last, float(*out)[kNR]) {
        PanelTile<kNR, kAcc>(xt, xt_next, kc8, panel, j0, accbuf, first, last, out);
      });
}

// ---------------------------------------------------------------------------------------------
// MXFP4 in the lane layout (ops.h: Mxfp4LanePack). Lane l of a 256-column group holds block l, so
// the decode table is one fixed register pair (the BF16 bytes of the unscaled e2m1 values, those
// of Mxfp4Bf16Tables() for e = 127) and the 8 block scales of a group are applied once, to the
// group's partial sums, as one vector built from 8 scale bytes (vpmovzxbd + shift: 2^(e-127) for
// e in [1, 254]; PackMxfp4Lanes admits only [1, 252]). Measured against StreamTileFp4 (/tmp
// microbenchmark, docs/performance.md): the per-superblock table build was ~1/4 of its time.

// out (row stride Mxfp4LanePaddedK(K)) = rows of x in the lane layout's vector order: position
// 64q + 8v + l of a group holds column Mxfp4LaneColumn(q, i, h) of the byte i and nibble h that
// feed lane l of vector v = 2u + o (u = (i%16)/8 + 2h, o = i%2); see PermuteColumnsByBlock.
void PermuteMxfp4Lanes(const float* x, int64_t rows, int64_t K, int64_t x_stride, float* out) {
  static const std::array<uint8_t, kMxfp4LaneGroup> cols = [] {
    std::array<uint8_t, kMxfp4LaneGroup> c{};
    for (int q = 0; q < 4; ++q) {
      for (int i = 0; i < 32; ++i) {
        for (int h = 0; h < 2; ++h) {
          const int lane = 4 * (i / 16) + (i % 8) / 2;
          const int v = 2 * ((i % 16) / 8 + 2 * h) + i % 2;
          c[64 * q + 8 * v + lane] = static_cast<uint8_t>(Mxfp4LaneColumn(q, i, h));
        }
      }
    }
    return c;
  }();
  PermuteColumnsByBlock(x, rows, K, x_stride, cols, out);
}

// NS weight rows rows[0..NS) against MR rows of lane-permuted x (xp, row length kp).
template <int MR, int NS>
void StreamTileLanes(const float* const* xp, const WeightView& w, int64_t kp, const int64_t* rows,
                     const float* bias, float* const* yr) {
  const uint8_t* p[NS];
  const uint8_t* sc[NS];
  for (int j = 0; j < NS; ++j) {
    p[j] = w.lane_codes + rows[j] * (kp / 2);
    sc[j] = w.lane_scales + rows[j] * (kp / 32);
  }
  const uint8_t* unit = Mxfp4Bf16Tables() + 32 * 127;
  const __m256i th =
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(unit)));
  const __m256i tl =
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(unit + 16)));
  // With MR·NS <= 2 the running sums stay in registers. Beyond that the 2·MR·NS partial sums
  // fill the 16 ymm registers, and the running sums (touched once per 256 columns) live in
  // memory: measured a few percent faster for M = 3..4 than leaving them to the spiller.
  constexpr bool kAccInMemory = MR * NS > 2;
  __m256 acc[MR][NS];
  alignas(32) float acc_mem[MR][NS][8];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NS; ++j) {
      acc[i][j] = _mm256_setzero_ps();
      _mm256_store_ps(acc_mem[i][j], acc[i][j]);
    }
  }
  static_assert(kMxfp4LaneGroup == 256);
  for (int64_t g = 0; g < kp; g += kMxfp4LaneGroup) {
    for (int j = 0; j < NS; ++j) {
      PrefetchMxfp4Stream(p[j], sc[j], g);
      PrefetchMxfp4Stream(p[j], sc[j], g + 128);
    }
    __m256 pe[MR][NS], po[MR][NS];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
#pragma GCC unroll 4
      for (int j = 0; j < NS; ++j) {
        const __m256i b =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[j] + g / 2 + 32 * q));
        __m256i words[4];
        Fp4LookupWords(b, th, tl, words);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          const __m256 even = Fp4Even(words[u]);
          const __m256 odd = Fp4Odd(words[u]);
#pragma GCC unroll 4
          for (int i = 0; i < MR; ++i) {
            const float* xv = xp[i] + g + 64 * q + 16 * u;
            if (q == 0 && u == 0) {
              pe[i][j] = _mm256_mul_ps(_mm256_loadu_ps(xv), even);
              po[i][j] = _mm256_mul_ps(_mm256_loadu_ps(xv + 8), odd);
            } else {
              pe[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xv), even, pe[i][j]);
              po[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(xv + 8), odd, po[i][j]);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NS; ++j) {
      const __m256i e8 =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc[j] + g / 32)));
      const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(e8, 23));
      for (int i = 0; i < MR; ++i) {
        if constexpr (kAccInMemory) {
          _mm256_store_ps(acc_mem[i][j], _mm256_fmadd_ps(_mm256_add_ps(pe[i][j], po[i][j]), scale,
                                                         _mm256_load_ps(acc_mem[i][j])));
        } else {
          acc[i][j] = _mm256_fmadd_ps(_mm256_add_ps(pe[i][j], po[i][j]), scale, acc[i][j]);
        }
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NS; ++j) {
      float v = HorizontalSum(kAccInMemory ? _mm256_load_ps(acc_mem[i][j]) : acc[i][j]);
      if (bias != nullptr) v += bias[rows[j]];
      yr[i][rows[j]] = v;
    }
  }
}

// Every M: groups of up to kStreamMaxM x rows, each row's arithmetic independent of the others.
void LinearMxfp4Lanes(const float* xp, int64_t M, const WeightView& w, float* y, int64_t y_stride,
                      const float* bias, ThreadPool* pool) {
  const int64_t N = w.rows, kp = Mxfp4LanePaddedK(w.cols);
  const int threads = pool != nullptr && N > kAlignN ? pool->num_threads() : 1;
  cpu::ForEachThreadRange(N, kAlignN, pool, threads, [&](int64_t n0, int64_t n1, int) {
    cpu::ForEachRowGroup(
        xp, kp, M, y, y_stride, [&]<int MR>(const float* const* xr, float* const* yr) {
          // Two weight rows per tile while the 2·MR·NS partial sums fit in registers with the
          // decode: for MR = 2 that is 8 FMA chains instead of 4, which FMA latency otherwise
          // bounds (measured, MXFP4 2/4096/4096, 2 threads: paired 38–40 % -> 44.5–48 %).
          constexpr int kNS = MR <= 2 ? 2 : 1;
          cpu::ForEachRowStream<kNS>(
              n0, n1,
              [&](const int64_t* rows) { StreamTileLanes<MR, kNS>(xr, w, kp, rows, bias, yr); },
              [&](const int64_t* rows) { StreamTileLanes<MR, 1>(xr, w, kp, rows, bias, yr); });
        });
  });
}

size_t AlignUp(size_t v) { return (v + 63) / 64 * 64; }

// Per-thread scratch bytes of one Linear call.
size_t PerThreadBytes(int64_t M, const WeightView& w) {
  // Packed path (M > kStreamMaxM) and, in batch-invariant mode, the streaming path in groups of
  // kStreamMaxM rows: reserve what either needs.
  size_t bytes = M > kStreamMaxM ? AlignUp(kPerThreadBytes) : 0;
  if (w.dtype == WeightDType::kFP8Block && w.scale_dtype == ScaleDType::kE8M0) {
    bytes = std::max(bytes, AlignUp(static_cast<size_t>(kStreamMaxM * w.cols) * sizeof(float)));
  }
  return bytes;
}

template <class Row>
void LinearTyped(const float* x, int64_t x_stride, int64_t M, const WeightView& w, float* y,
                 int64_t y_stride, const float* bias, ThreadPool* pool, char* ws) {
  const int64_t N = w.rows;
  const int threads = pool != nullptr && N > kAlignN ? pool->num_threads() : 1;
  const size_t per_thread = PerThreadBytes(M, w);
  const bool batch_invariant = Env().batch_invariant;
  const bool packed = M > kStreamMaxM && !batch_invariant;
  float* xpk = reinterpret_cast<float*>(ws);
  if (packed) PackXPairs(x, x_stride, M, PackedK<Row>(w), xpk);
  char* thread_scratch = ws + (M > kStreamMaxM ? AlignUp(PackedXBytes(M, PackedK<Row>(w))) : 0);
  cpu::ForEachThreadRange(N, kAlignN, pool, threads, [&](int64_t n0, int64_t n1, int slot) {
    float* scratch = reinterpret_cast<float*>(thread_scratch + slot * per_thread);
    if (packed) {
      PackedRows<Row>(xpk, M, w, n0, n1, bias, y, y_stride, scratch);
      return;
    }
    if constexpr (std::is_same_v<Row, Fp4Row>) {
      StreamFp4(x, x_stride, M, w, n0, n1, bias, y, y_stride);
    } else {
      // Streaming kernel, up to kStreamMaxM rows at a time (DEEPINFER_BATCH_INVARIANT=1 takes this
      // path for every M).
      // Batch-invariant mode streams one row at a time, so a row's arithmetic can never depend
      // on which rows share its group.
      const int64_t group = batch_invariant ? 1 : kStreamMaxM;
      for (int64_t m0 = 0; m0 < M; m0 += group) {
        const int64_t mc = std::min(group, M - m0);
        const float* xm = x + m0 * x_stride;
        float* ym = y + m0 * y_stride;
        if (std::is_same_v<Row, Fp8Row> && w.scale_dtype == ScaleDType::kE8M0) {
          StreamFp8(xm, x_stride, mc, w, n0, n1, bias, ym, y_stride, scratch);
        } else {
          StreamRows<Row>(xm, x_stride, mc, w, n0, n1, bias, ym, y_stride);
        }
      }
    }
  });
}

}  // namespace

void LinearFp8TilesSmallM(const float* x, int64_t x_stride, int64_t M, const WeightView& w,
                          float* y, int64_t y_stride, const float* bias, ThreadPool* pool) {
  CHECK(w.dtype == WeightDType::kFP8Block && w.fp8_tile_rows > 0 && w.fp8_tile_cols > 0 &&
        w.fp8_tile_cols % 32 == 0);
  CHECK(M >= 0 && M <= kStreamMaxM);
  const int64_t N = w.rows;
  const int threads = pool != nullptr && N > kAlignN ? pool->num_threads() : 1;
  // E8M0 tiles take StreamFp8's block-scaled bit-placement decode where the CPU allows it
  // (bitwise the same values; its scratch is a scaled copy of x), F32 tiles the generic decoder.
  const bool e8m0 = w.scale_dtype == ScaleDType::kE8M0;
  cpu::ForEachThreadRange(N, kAlignN, pool, threads, [&](int64_t n0, int64_t n1, int) {
    if (e8m0) {
      thread_local std::vector<float> xs;  // per thread, kept between calls (no allocation)
      if (xs.size() < static_cast<size_t>(kStreamMaxM * w.cols)) xs.resize(kStreamMaxM * w.cols);
      StreamFp8<Fp8TileRow>(x, x_stride, M, w, n0, n1, bias, y, y_stride, xs.data());
    } else {
      StreamRows<Fp8TileRow>(x, x_stride, M, w, n0, n1, bias, y, y_stride);
    }
  });
}

size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            int num_threads) {
  size_t bytes = 0;
  if (w.dtype == WeightDType::kMXFP4) {
    bytes += AlignUp(static_cast<size_t>(M * (w.lane_codes != nullptr ? Mxfp4LanePaddedK(w.cols)
                                                                      : Fp4PaddedK(w.cols))) *
                     4);
  } else if (opt.quantize_activations) {
    bytes += AlignUp(static_cast<size_t>(M * w.cols) * 4);
  }
  if (w.dtype == WeightDType::kMXFP4 && w.lane_codes != nullptr) {
    return bytes;  // the lane path streams for every M: no packed x, no per-thread scratch
  }
  if (M > kStreamMaxM) {
    bytes += AlignUp(PackedXBytes(M, w.dtype == WeightDType::kMXFP4 ? Fp4PaddedK(w.cols) : w.cols));
  }
  bytes += PerThreadBytes(M, w) * std::max(1, num_threads);
  return bytes;
}

namespace {

// x for an MXFP4 kernel: each row quantised per 128 (ActQuantFp8Sim) when `quantize`, then put
// in the kernel's column order by `permute` into ws (row stride kp; a row is staged in its own
// output row first, which both permutations allow).
float* PrepareMxfp4X(const float* x, int64_t x_stride, int64_t M, int64_t K, bool quantize,
                     int64_t kp, void (*permute)(const float*, int64_t, int64_t, int64_t, float*),
                     char* ws) {
  float* xq = reinterpret_cast<float*>(ws);
  for (int64_t m = 0; m < M; ++m) {
    const float* src = x + m * x_stride;
    float* dst = xq + m * kp;
    if (quantize) {
      std::memcpy(dst, src, K * sizeof(float));
      ActQuantFp8Sim(dst, 1, K, 128);
      src = dst;
    }
    permute(src, 1, K, K, dst);
  }
  return xq;
}

}  // namespace

void Linear(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
            ThreadPool* pool, void* workspace, size_t workspace_bytes) {
  const int64_t K = w.cols;
  int64_t x_stride = opt.x_stride ? opt.x_stride : K;
  const int64_t y_stride = opt.y_stride ? opt.y_stride : w.rows;
  char* ws = static_cast<char*>(workspace);
  if (w.dtype == WeightDType::kMXFP4 && w.lane_codes != nullptr) {
    float* xq = PrepareMxfp4X(x, x_stride, M, K, opt.quantize_activations, Mxfp4LanePaddedK(K),
                              &PermuteMxfp4Lanes, ws);
    return LinearMxfp4Lanes(xq, M, w, y, y_stride, opt.bias, pool);
  }
  if (w.dtype == WeightDType::kMXFP4) {
    // StreamFp4's column order, zero padded to whole 64-column superblocks.
    const int64_t kx = Fp4PaddedK(K);
    x = PrepareMxfp4X(x, x_stride, M, K, opt.quantize_activations, kx, &PermuteMxfp4Stream, ws);
    x_stride = kx;
    ws += AlignUp(static_cast<size_t>(M * kx) * 4);
  } else if (opt.quantize_activations) {
    float* xq = reinterpret_cast<float*>(ws);
    for (int64_t m = 0; m < M; ++m) {
      std::memcpy(xq + m * K, x + m * x_stride, K * sizeof(float));
    }
    ActQuantFp8Sim(xq, M, K, 128);
    x = xq;
    x_stride = K;
    ws += AlignUp(static_cast<size_t>(M * K) * 4);
  }
  switch (w.dtype) {
    case WeightDType::kF32:
      return LinearTyped<F32Row>(x, x_stride, M, w, y, y_stride, opt.bias, pool, ws);
    case WeightDType::kBF16:
      return LinearTyped<Bf16Row>(x, x_stride, M, w, y, y_stride, opt.bias, pool, ws);
    case WeightDType::kFP8Block:
      return LinearTyped<Fp8Row>(x, x_stride, M, w, y, y_stride, opt.bias, pool, ws);
    case WeightDType::kMXFP4:
      return LinearTyped<Fp4Row>(x, x_stride, M, w, y, y_stride, opt.bias, pool, ws);
  }
}

// ---------------------------------------------------------------------------------------------
// Conversions and quantisation

void RoundToBf16(float* x, int64_t n) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i keep = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), keep);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i qn = _mm256_and_si256(_mm256_or_si256(u, quiet), keep);
    r = _mm256_blendv_epi8(r, qn, nan);
    _mm256_storeu_ps(x + i, _mm256_castsi256_ps(r));
  }
  for (; i < n; ++i) x[i] = RoundBf16(x[i]);
}

namespace {

// e4m3 rounding (RNE) of y (|y| <= 448 or NaN handled by the caller) as FP32.
inline __m256 RoundE4m3(__m256 y) {
  const __m256i u = _mm256_castps_si256(y);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 20), _mm256_set1_epi32(1));
  const __m256i rn =
      _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), lsb)),
                       _mm256_set1_epi32(static_cast<int>(0xFFF00000u)));
  const __m256 normal = _mm256_castsi256_ps(rn);
  const __m256 sub = _mm256_mul_ps(_mm256_round_ps(_mm256_mul_ps(y, _mm256_set1_ps(512.0f)),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                   _mm256_set1_ps(1.0f / 512.0f));
  const __m256 absy = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), y);
  const __m256 is_sub = _mm256_cmp_ps(absy, _mm256_set1_ps(0.015625f), _CMP_LT_OQ);
  return _mm256_blendv_ps(normal, sub, is_sub);
}

inline float BlockAmax(const float* x, int64_t n) {
  __m256 m = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  // max_ps returns its second operand when either is NaN, so NaN elements are ignored.
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
  alignas(32) float t[8];
  _mm256_store_ps(t, m);
  float amax = 0.0f;
  for (float v : t) amax = v > amax ? v : amax;
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) amax = a;
  }
  return amax;
}

}  // namespace

void ActQuantFp8Sim(float* x, int64_t rows, int64_t cols, int64_t block) {
  CHECK_GT(block, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += block) {
      float* v = x + r * cols + c;
      const int64_t n = std::min(block, cols - c);
      const float amax = BlockAmax(v, n);
      const int e = Pow2ScaleExponent(amax, kActQuantAmaxFloor, kFp8E4m3Max);
      // Extreme scales, and blocks holding ±inf (whose scale saturates the whole block, which
      // RoundE4m3's |y| <= 448 domain does not cover): the exact scalar code.
      if (e < -126 || e > 127 || std::isinf(amax)) {
        ref::ActQuantFp8Sim(v, 1, n, n);
        continue;
      }
      const __m256 down = _mm256_set1_ps(std::ldexp(1.0f, -e));
      const __m256 up = _mm256_set1_ps(std::ldexp(1.0f, e));
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256 xv = _mm256_loadu_ps(v + i);
        __m256 q = _mm256_mul_ps(RoundE4m3(_mm256_mul_ps(xv, down)), up);
        q = _mm256_blendv_ps(q, xv, _mm256_cmp_ps(xv, xv, _CMP_UNORD_Q));
        _mm256_storeu_ps(v + i, q);
      }
      for (; i < n; ++i) {
        if (!std::isnan(v[i])) v[i] = std::ldexp(RoundFp8E4m3(std::ldexp(v[i], -e)), e);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Norms and elementwise

void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, const float* weight_f32,
             const uint16_t* weight_bf16, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    if (i < dim) {
      const __m256 v = _mm256_maskload_ps(xr + i, TailMask(dim - i));
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    const float mean = HorizontalSum(acc) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean + eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= dim; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), vinv);
      if (weight_f32 != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(weight_f32 + i));
      if (weight_bf16 != nullptr) {
        v = _mm256_mul_ps(
            v, Bf16Row::Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(weight_bf16 + i))));
      }
      _mm256_storeu_ps(yr + i, v);
    }
    for (; i < dim; ++i) {
      float v = xr[i] * inv;
      if (weight_f32 != nullptr) v *= weight_f32[i];
      if (weight_bf16 != nullptr) v *= Bf16ToFloat(weight_bf16[i]);
      yr[i] = v;
    }
  }
}

void Add(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

void Scale(float* x, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) x[i] *= s;
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

// ---------------------------------------------------------------------------------------------
// exp and the activations built on it

namespace {

// exp(x) for FP32 lanes: x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact
// reduction), a degree-6 polynomial for e^r (Cephes expf coefficients, ~1 ulp), scaled by 2^n
// through the exponent bits. Inputs are clamped to [-87.3, 88.7]: below, the result is 0 (as
// needed for softmax/silu tails); a NaN input is returned as it is.
inline __m256 Exp(__m256 x_in) {
  const __m256 hi = _mm256_set1_ps(88.7f), lo = _mm256_set1_ps(-87.3f);
  const __m256 is_nan = _mm256_cmp_ps(x_in, x_in, _CMP_UNORD_Q);
  const __m256 under = _mm256_cmp_ps(x_in, lo, _CMP_LT_OQ);
  const __m256 x = _mm256_min_ps(_mm256_max_ps(x_in, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n in two halves so that n = 128 (x near 88.7) does not overflow the exponent field.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256 s1 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_andnot_ps(under, y);
  return _mm256_blendv_ps(y, x_in, is_nan);
}

inline __m256 SiluVec(__m256 g) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_div_ps(g, _mm256_add_ps(one, e));
}

}  // namespace

void Silu(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, SiluVec(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n, float limit) {
  const bool clamp = limit > 0.0f;
  const __m256 lim = _mm256_set1_ps(limit), neg = _mm256_set1_ps(-limit);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
    if (clamp) {
      // min/max return their second operand when either is NaN: with the data second, a NaN
      // gate or up stays NaN, as std::min / std::clamp (the reference) leave it.
      g = _mm256_min_ps(lim, g);
      u = _mm256_max_ps(neg, _mm256_min_ps(lim, u));
    }
    _mm256_storeu_ps(out + i, _mm256_mul_ps(SiluVec(g), u));
  }
  for (; i < n; ++i) {
    float g = gate[i], u = up[i];
    if (clamp) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    out[i] = g / (1.0f + std::exp(-g)) * u;
  }
}

// n is a multiple of 8 (ops.cc pads the tail).
void ExpScaled(const float* x, int64_t n, float shift, float scale, float* out) {
  const __m256 vs = _mm256_set1_ps(shift), vk = _mm256_set1_ps(scale);
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, Exp(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), vk)));
  }
}

void Softmax(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    // Eight lanes of maxima: a scalar chain of dependent max ops is latency-bound (the
    // sampler runs this over a 129,280-entry row per sequence per step). max_ps(x, m) keeps m
    // for a NaN x, as std::max(m, x) does.
    __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(_mm256_loadu_ps(v + j), vmax);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float mx = -std::numeric_limits<float>::infinity();
    for (float m : lanes) mx = std::max(mx, m);
    for (; j < n; ++j) mx = std::max(mx, v[j]);
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(v + i), vmx));
      acc = _mm256_add_ps(acc, e);
      _mm256_storeu_ps(v + i, e);
    }
    float tail = 0.0f;
    for (; i < n; ++i) {
      v[i] = std::exp(v[i] - mx);
      tail += v[i];
    }
    const float inv = 1.0f / (HorizontalSum(acc) + tail);
    Scale(v, inv, n);
  }
}

// ---------------------------------------------------------------------------------------------
// Attention: per head, scores with 8-lane dot products, global max, FP32 exp, P·V accumulated
// key by key (in key-list order) into the output row, one final multiply by 1/denominator.

namespace {

inline float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mask), _mm256_maskload_ps(b + i, mask), acc);
  }
  return HorizontalSum(acc);
}

}  // namespace

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
    std::fill(oh, oh + head_dim, 0.0f);
    if (n_keys == 0) continue;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_keys; ++j) {
      p[j] = Dot(qh, k_rows[j] + off, head_dim) * opt.scale;
      mx = std::max(mx, p[j]);
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

}  // namespace deepinfer::kernels::avx2
