// The AVX-512 weight decoders of the BF16-dot kernels (bf16_dot.h): a weight row of BF16,
// FP8Block (E8M0) or MXFP4 read in its checkpoint layout and turned into BF16 bits in
// registers, 64 columns (a "step", two vectors of 32 BF16) at a time, with the row's check of
// whether every value is a BF16-exact normal (the rows that take the BF16 products). FP8: two
// VPERMT2B lookups for the low and high bytes of the BF16 value in tables of the block's E8M0
// scale (the scale folded in), the sign put back by VPTERNLOGD, VPUNPCK{L,H}BW to words; MXFP4:
// VPERMW lookups of per-block tables that already hold the scale; BF16: as stored. Two column
// orders: the lane order's (bf16_dot.h LaneColumn: what the instructions give for free) and the
// natural one (the AMX tiles'; one more VPERMB for FP8).
//
// Included by bf16_dot_avx512bf16.cc and bf16_dot_amx.cc after they open a code region compiled
// for AVX-512 F/BW/VL/DQ + BF16 + VBMI (their #pragma target); callers run the code only where
// bf16dot::KernelRuns says the CPU has those instructions.
#ifndef DEEPINFER_KERNELS_CPU_BF16_DOT_DECODE_INL_H_
#define DEEPINFER_KERNELS_CPU_BF16_DOT_DECODE_INL_H_

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/bf16_dot_kernels.h"
#include "kernels/cpu/linear_driver.h"
#include "kernels/formats.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::bf16dot::internal::decode {

constexpr int64_t kStep = kLaneStep;  // columns per step: two zmm of 32 BF16

// The column order of a step's two vectors: kLane = LaneColumn(dtype, q); kNatural = q (vector
// h holds columns 32h .. 32h + 31 in order).
enum class ColumnOrder { kLane, kNatural };

// The VPERMB index that puts a step's 64 FP8 bytes in the order after which VPUNPCK{L,H}BW
// (which interleave within 128-bit lanes) yield columns in their natural order: position
// 16i + r takes byte 8i + r and position 16i + 8 + r byte 32 + 8i + r (i < 4, r < 8).
inline const uint8_t* Fp8NaturalPermutation() {
  struct Index {
    alignas(64) uint8_t v[64];
    Index() {
      for (int i = 0; i < 4; ++i) {
        for (int r = 0; r < 8; ++r) {
          v[16 * i + r] = static_cast<uint8_t>(8 * i + r);
          v[16 * i + 8 + r] = static_cast<uint8_t>(32 + 8 * i + r);
        }
      }
    }
  };
  static const Index index;
  return index.v;
}

// Whether any of the n scale bytes at sc lies outside [lo, hi], 64 at a time (a weight row's
// check; a byte loop here cost a small expert's product a third of its time).
inline uint32_t ScalesOutside(const uint8_t* sc, int64_t n, uint8_t lo, uint8_t hi) {
  __mmask64 bad = 0;
  for (int64_t i = 0; i < n; i += 64) {
    const __m512i v = _mm512_maskz_loadu_epi8(LaneTailMask64(n - i), sc + i);
    // Masked-off lanes read 0: compared only where loaded.
    const __mmask64 m = LaneTailMask64(n - i);
    bad |= _mm512_mask_cmplt_epu8_mask(m, v, _mm512_set1_epi8(static_cast<char>(lo))) |
           _mm512_mask_cmpgt_epu8_mask(m, v, _mm512_set1_epi8(static_cast<char>(hi)));
  }
  return bad != 0 ? 1u : 0u;
}

// FP8Block (E8M0 scales). The BF16 bits of each magnitude code times the block's scale come
// from two 128-entry byte tables of that scale (low and high byte of LaneFp8Bf16 without the
// sign), looked up with the byte itself (VPERMT2B reads its low 7 bits): 256 scales x 256
// bytes. Folding the scale into the tables saves the exponent add, its zero test and the
// scale's broadcast, which all competed for the shuffle port with the lookups (Intel Xeon:
// 10 -> 7 cycles per natural-order step).
inline const uint8_t* Fp8Bf16ScaledByteTables() {  // [s][0, 128): low bytes, [s][128, 256): high
  struct Tables {
    alignas(64) uint8_t v[256][256];
    Tables() {
      for (int e = 0; e < 256; ++e) {
        for (int c = 0; c < 128; ++c) {
          const uint16_t bits = LaneFp8Bf16(static_cast<uint8_t>(c), static_cast<uint8_t>(e));
          v[e][c] = static_cast<uint8_t>(bits & 0xFF);
          v[e][128 + c] = static_cast<uint8_t>(bits >> 8);
        }
      }
    }
  };
  static const Tables tables;
  return &tables.v[0][0];
}

template <ColumnOrder kOrder>
struct Fp8Decoder {
  // Weight rows the streamed (small-M) kernel decodes side by side for up to two activation
  // rows (8 ran slower on Zen 5: the tables' and accumulators' registers).
  static constexpr int kStreamRows = 4;
  // Weight bytes a row's step reads, and how far ahead in its stream the streamed kernel
  // prefetches (StreamPrefetch).
  static constexpr int64_t kStepBytes = kStep;
  static constexpr int64_t kPrefetchAhead = cpu::kStreamPrefetchBytes;
  const uint8_t* data;
  const uint8_t* scales;
  int64_t K, scale_cols, scale_row_offset;
  const uint8_t* tables;
  __m512i natural;
  explicit Fp8Decoder(const WeightView& w)
      : data(static_cast<const uint8_t*>(w.data)),
        scales(static_cast<const uint8_t*>(w.scales)),
        K(w.cols),
        scale_cols((w.cols + 127) / 128),
        scale_row_offset(w.scale_row_offset),
        tables(Fp8Bf16ScaledByteTables()),
        natural(_mm512_load_si512(Fp8NaturalPermutation())) {}
  struct Row {
    const uint8_t* p;
    const uint8_t* sc;
    uint32_t bad;
  };
  // The row's scales are checked here, once, not per step (the scalar work per step slowed
  // the vector decode down).
  Row MakeRow(int64_t n) const {
    const uint8_t* sc = scales + (n / 128 + scale_row_offset) * scale_cols;
    return Row{data + n * K, sc, ScalesOutside(sc, scale_cols, kLaneFp8ScaleMin, kLaneFp8ScaleMax)};
  }
  const uint8_t* ColumnAddress(int64_t n, int64_t k) const { return data + n * K + k; }
  __attribute__((always_inline)) void Step(Row& r, int64_t s, __m512i* w0, __m512i* w1) const {
    const int64_t k = s * kStep;
    __m512i b = k + kStep <= K ? _mm512_loadu_si512(r.p + k)
                               : _mm512_maskz_loadu_epi8(LaneTailMask64(K - k), r.p + k);
    if constexpr (kOrder == ColumnOrder::kNatural) b = _mm512_permutexvar_epi8(natural, b);
    const uint8_t* t = tables + 256 * static_cast<int64_t>(r.sc[k / 128]);
    const __m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(t), b, _mm512_load_si512(t + 64));
    __m512i hi =
        _mm512_permutex2var_epi8(_mm512_load_si512(t + 128), b, _mm512_load_si512(t + 192));
    hi = _mm512_ternarylogic_epi32(hi, b, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
    *w0 = _mm512_unpacklo_epi8(lo, hi);
    *w1 = _mm512_unpackhi_epi8(lo, hi);
  }
  static bool Bad(const Row& r) { return r.bad != 0; }
};

// MXFP4 (E8M0 scale per 32 columns): a step is two blocks (16 bytes and a scale each); the
// 16-entry tables of their scales come from Mxfp4Bf16Tables (a GPR-to-vector broadcast of the
// scale per 16 weight bytes was the bottleneck).
inline const uint16_t* Mxfp4Bf16Tables() {
  struct Tables {
    alignas(64) uint16_t v[256][32];
    Tables() {
      for (int e = 0; e < 256; ++e) {
        for (int i = 0; i < 32; ++i) {
          v[e][i] = LaneFp4Bf16(static_cast<uint8_t>(i & 15), static_cast<uint8_t>(e));
        }
      }
    }
  };
  static const Tables tables;
  return &tables.v[0][0];
}

template <ColumnOrder kOrder>
struct Mxfp4Decoder {
  // Weight rows the streamed kernel decodes side by side for up to two activation rows: 8, so
  // some rows' lookups run while others wait for their table loads, which hang on the scale
  // bytes (Zen 5, one core, weights in L2: 4.3 -> 2.8 TSC cycles per row and 64 columns).
  static constexpr int kStreamRows = 8;
  static constexpr int64_t kStepBytes = kStep / 2;
  static constexpr int64_t kPrefetchAhead = cpu::kStreamPrefetchBytes;
  const uint8_t* data;
  const uint8_t* scales;
  int64_t K;
  const uint16_t* tables;
  explicit Mxfp4Decoder(const WeightView& w)
      : data(static_cast<const uint8_t*>(w.data)),
        scales(static_cast<const uint8_t*>(w.scales)),
        K(w.cols),
        tables(Mxfp4Bf16Tables()) {}
  struct Row {
    const uint8_t* p;
    const uint8_t* sc;
    uint32_t bad;
  };
  Row MakeRow(int64_t n) const {
    const uint8_t* sc = scales + n * (K / 32);
    return Row{data + n * (K / 2), sc,
               ScalesOutside(sc, K / 32, kLaneFp4ScaleMin, kLaneFp4ScaleMax)};
  }
  const uint8_t* ColumnAddress(int64_t n, int64_t k) const { return data + n * (K / 2) + k / 2; }
  // Both blocks of a step at once: word i of the zero-extended bytes is byte i % 16 of block
  // i / 16; VPERMW looks its low nibble (vector 0) and high nibble (vector 1) up in a table
  // whose words 0-15 hold block 2s's values and 16-31 block 2s + 1's (LaneColumn's layout).
  __attribute__((always_inline)) void Step(Row& r, int64_t s, __m512i* w0, __m512i* w1) const {
    const int64_t k = s * kStep;
    const bool two = k + 32 < K;  // K % 32 == 0: the step has one block or two
    const __m256i bytes = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.p + k / 2))
                              : _mm256_zextsi128_si256(
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(r.p + k / 2)));
    if constexpr (kOrder == ColumnOrder::kNatural) {
      // Nibbles in column order (byte 2i: byte i's low nibble, 2i + 1: its high one), then
      // each block's 32 words looked up in its own table.
      const __m512i w = _mm512_cvtepu8_epi16(bytes);
      const __m512i nibbles =
          _mm512_ternarylogic_epi32(w, _mm512_slli_epi16(w, 4), _mm512_set1_epi16(0x0F0F), 0xA8);
      const uint32_t sa = r.sc[k / 32], sb = two ? r.sc[k / 32 + 1] : 127;
      *w0 = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(nibbles)),
                                     _mm512_load_si512(tables + 32 * sa));
      *w1 = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(nibbles, 1)),
                                     _mm512_load_si512(tables + 32 * sb));
      return;
    }
    const __m512i w = _mm512_cvtepu8_epi16(bytes);
    const uint32_t sa = r.sc[k / 32], sb = two ? r.sc[k / 32 + 1] : 127;
    const __m512i table = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_load_si256(reinterpret_cast<const __m256i*>(tables + 32 * sa))),
        _mm256_load_si256(reinterpret_cast<const __m256i*>(tables + 32 * sb)), 1);
    // (nibble & 0xF) | 16 for the second block's words: (A & B) | C.
    const __m512i nib = _mm512_set1_epi16(0xF);
    const __m512i half = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(16), 1);
    const __m512i lo = _mm512_ternarylogic_epi32(w, nib, half, 0xEA);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), nib, half, 0xEA);
    *w0 = _mm512_permutexvar_epi16(lo, table);
    *w1 = _mm512_permutexvar_epi16(hi, table);
  }
  static bool Bad(const Row& r) { return r.bad != 0; }
};

// BF16: the stored bits; a denormal (which the instruction would read as zero) marks the row.
struct Bf16Decoder {
  static constexpr int kStreamRows = 4;  // as the FP32 kernels' BF16 streams
  static constexpr int64_t kStepBytes = 2 * kStep;
  static constexpr int64_t kPrefetchAhead = 0;  // not measured; BF16 streams ran at ~90 %
  const uint16_t* data;
  int64_t K;
  explicit Bf16Decoder(const WeightView& w)
      : data(static_cast<const uint16_t*>(w.data)), K(w.cols) {}
  struct Row {
    const uint16_t* p;
    __mmask32 bad;
  };
  Row MakeRow(int64_t n) const { return Row{data + n * K, 0}; }
  const uint8_t* ColumnAddress(int64_t n, int64_t k) const {
    return reinterpret_cast<const uint8_t*>(data + n * K + k);
  }
  __attribute__((always_inline)) __m512i Load(Row& r, int64_t k) const {
    const __m512i v = k + 32 <= K ? _mm512_loadu_si512(r.p + k)
                                  : _mm512_maskz_loadu_epi16(LaneTailMask32(K - k), r.p + k);
    r.bad |= _mm512_testn_epi16_mask(v, _mm512_set1_epi16(0x7F80)) &
             _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x007F));
    return v;
  }
  __attribute__((always_inline)) void Step(Row& r, int64_t s, __m512i* w0, __m512i* w1) const {
    const int64_t k = s * kStep;
    *w0 = Load(r, k);
    *w1 = k + 32 < K ? Load(r, k + 32) : _mm512_setzero_si512();
  }
  static bool Bad(const Row& r) { return r.bad != 0; }
};

}  // namespace deepinfer::kernels::bf16dot::internal::decode

#endif  // DEEPINFER_KERNELS_CPU_BF16_DOT_DECODE_INL_H_
