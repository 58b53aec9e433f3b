// AVX-512 Linear (F, BW, VL, DQ). Same structure as the AVX2 kernels in avx2.cc (streamed weights
// for small M, a packed FP32 panel for large M), 16 lanes wide. The invariant is the one of the
// AVX2 version: a Linear output element is always produced by the same sequence of FMAs into one
// 16-lane accumulator (lane l takes k = l, l+16, ...; MXFP4: two accumulators over the permuted
// columns), whether the weights are streamed or packed, followed by the same horizontal sum
// (ops.h, "AVX-512 order").
//
// Everything after the #include of avx512_inl.h (which opens the region with `#pragma GCC
// target`) is compiled for AVX-512; every other #include comes before it, so no inline function
// of a header is emitted with AVX-512 instructions (avx512.h).
#include "kernels/cpu/avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "common/check.h"
#include "common/config.h"
#include "kernels/cpu/linear_driver.h"
#include "kernels/formats.h"

// Last, after every other #include: opens the AVX-512 region (avx512_inl.h).
// clang-format off
#include "kernels/cpu/avx512_inl.h"
// clang-format on

namespace deepinfer::kernels::avx512 {
namespace {

// See avx2.cc: the address may lie past the end of the data (prefetches never fault).
inline void PrefetchAt(const void* base, int64_t offset) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) + offset),
               _MM_HINT_T0);
}

// Holds v in a register (GCC otherwise folds a loaded operand into every FMA that uses it; see
// avx2.cc). "v": any of zmm0..31.
#ifdef DEEPINFER_AVX512_EMULATION
inline void KeepInRegister(__m512&) {}
#else
inline void KeepInRegister(__m512& v) { asm("" : "+v"(v)); }
#endif

float ScaleValue(const WeightView& w, int64_t index) {
  if (w.scale_dtype == ScaleDType::kF32) return static_cast<const float*>(w.scales)[index];
  return E8m0ToFloat(static_cast<const uint8_t*>(w.scales)[index]);
}

size_t AlignUp(size_t v) { return (v + 63) / 64 * 64; }

// ---------------------------------------------------------------------------------------------
// Row decoders: FP32 weights fl(decoded · scale), exactly as ref::WeightAt. Decode64(k) fills 4
// vectors for columns k..k+63 (k % 64 == 0), Decode16(k) one (k % 16 == 0), DecodeMasked(k, m)
// the lanes of m (the others are +0; the masked loads never touch memory past the row).

struct F32Row {
  static constexpr int64_t kPrefetchAhead = 0;  // as Bf16Row
  const float* p;
  F32Row(const WeightView& w, int64_t n) : p(static_cast<const float*>(w.data) + n * w.cols) {}
  void Decode64(int64_t k, __m512* out) const {
    for (int i = 0; i < 4; ++i) out[i] = _mm512_loadu_ps(p + k + 16 * i);
  }
  __m512 Decode16(int64_t k) const { return _mm512_loadu_ps(p + k); }
  __m512 DecodeMasked(int64_t k, __mmask16 m) const { return _mm512_maskz_loadu_ps(m, p + k); }
};

struct Bf16Row {
  // How far ahead StreamTile prefetches the row's stream (0: the hardware prefetchers suffice;
  // BF16 streams run at ~90 % of the read bandwidth without).
  static constexpr int64_t kPrefetchAhead = 0;
  const uint16_t* p;
  Bf16Row(const WeightView& w, int64_t n) : p(static_cast<const uint16_t*>(w.data) + n * w.cols) {}
  void Decode64(int64_t k, __m512* out) const {
    for (int i = 0; i < 4; ++i) out[i] = Decode16(k + 16 * i);
  }
  __m512 Decode16(int64_t k) const {
    return WidenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k)));
  }
  __m512 DecodeMasked(int64_t k, __mmask16 m) const {
    return WidenBf16(_mm256_maskz_loadu_epi16(m, p + k));
  }
};

// e4m3 -> fp16 bits by shifting (exact; the fp16 value is e4m3 · 2^-8, so the scale is
// pre-multiplied by 256) -> vcvtph2ps. Unlike the AVX2 decode path (bit placement into FP32 at
// 2^-120), no weight is ever an FP32 subnormal, which Intel cores multiply through a microcode
// assist (measured on Sapphire Rapids: the AVX2 bit-placement path ran at 4 % of read
// bandwidth on random codes). NaN codes 0x7F/0xFF decode to +0 as DS4 does.
struct Fp8Row {
  // How far ahead StreamTile prefetches the row's stream.
  static constexpr int64_t kPrefetchAhead = cpu::kStreamPrefetchBytes;
  const uint8_t* p;
  const WeightView* w;
  int64_t scale_base;  // index of this row's first scale
  Fp8Row(const WeightView& wv, int64_t n)
      : p(static_cast<const uint8_t*>(wv.data) + n * wv.cols),
        w(&wv),
        scale_base((n / 128 + wv.scale_row_offset) * ((wv.cols + 127) / 128)) {}
  // fl(e4m3 · s) = (e4m3 · 2^-8) · (s · 256), one rounding, for the (masked) lanes of columns
  // k..; when s · 256 overflows (s >= 2^120: legal, if absurd) the 256 goes on the decoded value
  // first (exact), so the product still rounds once.
  float ScaleAt(int64_t k) const { return ScaleValue(*w, scale_base + k / 128); }
  static __m512 Scaled(__m512 v, float s, __mmask16 m = 0xFFFF) {
    if (std::isinf(s * 256.0f)) {
      return _mm512_maskz_mul_ps(m, _mm512_mul_ps(v, _mm512_set1_ps(256.0f)), _mm512_set1_ps(s));
    }
    return _mm512_maskz_mul_ps(m, v, _mm512_set1_ps(s * 256.0f));
  }
  static __mmask16 NanCodes(__m128i b) {
    return _mm_cmpeq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8(static_cast<char>(0x80))),
                               _mm_set1_epi8(static_cast<char>(0xFF)));
  }
  // The 16 codes of b as e4m3 · 2^-8, the lanes not in `keep` (NaN codes) as +0.
  static __m512 Unscaled(__m128i b, __mmask16 keep = 0xFFFF) {
    // Sign-extend: bits 15..7 = sign, 6..0 = exponent/mantissa; << 7 puts e/m at bits 13..7 and
    // the sign at bit 15 (bit 14 also gets the sign and is masked off).
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                                       _mm256_set1_epi16(static_cast<short>(0xBF80)));
    return _mm512_maskz_cvtph_ps(keep, h);
  }
  // NaN codes count as the value 0 times the scale, as in ref::WeightAt (so an absurd NaN or
  // infinite scale gives NaN there too); lanes outside m (past the row's end) are +0.
  void Decode64(int64_t k, __m512* out) const {
    const float s = ScaleAt(k);  // k % 64 == 0: the 64 columns share one scale block
    const __m512i all = _mm512_loadu_si512(p + k);
    const __mmask64 nan =
        _mm512_cmpeq_epi8_mask(_mm512_or_si512(all, _mm512_set1_epi8(static_cast<char>(0x80))),
                               _mm512_set1_epi8(static_cast<char>(0xFF)));
    auto bytes = [&](int i) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k + 16 * i));
    };
    if (nan == 0) {  // real checkpoints hold no NaN codes: no mask work
      for (int i = 0; i < 4; ++i) out[i] = Scaled(Unscaled(bytes(i)), s);
      return;
    }
    for (int i = 0; i < 4; ++i) {
      out[i] = Scaled(Unscaled(bytes(i), static_cast<__mmask16>(~(nan >> (16 * i)))), s);
    }
  }
  __m512 Decode16(int64_t k) const {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k));
    return Scaled(Unscaled(b, static_cast<__mmask16>(~NanCodes(b))), ScaleAt(k));
  }
  __m512 DecodeMasked(int64_t k, __mmask16 m) const {
    const __m128i b = _mm_maskz_loadu_epi8(m, p + k);
    return Scaled(Unscaled(b, static_cast<__mmask16>(~NanCodes(b))), ScaleAt(k), m);
  }
};

// MXFP4 (AVX-512 order, ops.h). Columns come in the 32-column blocks of the format (16 bytes and
// one E8M0 scale). Mxfp4F32Tables() holds, per E8M0 byte e, the 16 FP32 values
// e2m1(n) · 2^(e-127) (exact products), i.e. one zmm register; vpmovzxbd puts byte i of the block
// in dword i, and vpermps, which reads only the low 4 bits of each index, looks up the low nibble
// (column 2i) directly and the high nibble (column 2i + 1) after a shift by 4: 2 lookups, 1 shift
// and 1 widening per 32 weights. x is permuted once per call to match (PermuteMxfp4Blocks):
// within each block, the 16 even columns, then the 16 odd ones. Per x row and weight row,
// accumulator a_0 takes the even vector and a_1 the odd one, block by block in increasing k; the
// result is HorizontalSum16(a_0 + a_1).
struct Fp4Row {};

constexpr int64_t kFp4Block = 32;

const float* Mxfp4F32Tables() {
  struct Tables {
    alignas(64) float v[256][16];
    Tables() {
      for (int e = 0; e < 256; ++e) {
        for (int n = 0; n < 16; ++n) {
          v[e][n] = Fp4E2m1ToFloat(static_cast<uint8_t>(n)) * E8m0ToFloat(static_cast<uint8_t>(e));
        }
      }
    }
  };
  static const Tables tables;
  return &tables.v[0][0];
}

// The even-column and odd-column vectors of the block at column k (k % 32 == 0) of an MXFP4 row
// (p: the row's bytes, sc: its scale bytes).
__attribute__((always_inline)) inline void DecodeFp4Block(const uint8_t* p, const uint8_t* sc,
                                                          int64_t k, const float* tables,
                                                          __m512* even, __m512* odd) {
  const __m512i b =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k / 2)));
  const __m512 t = _mm512_load_ps(tables + 16 * size_t{sc[k / kFp4Block]});
  *even = _mm512_permutexvar_ps(b, t);
  *odd = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), t);
}

// dst[r] = x[r] with each 32-column block reordered as even columns, then odd ones (K % 32 == 0).
// dst may equal x (each block is staged first).
void PermuteMxfp4Blocks(const float* x, int64_t K, float* dst) {
  for (int64_t b = 0; b < K; b += kFp4Block) {
    float tmp[kFp4Block];
    std::memcpy(tmp, x + b, sizeof(tmp));
    for (int j = 0; j < 16; ++j) {
      dst[b + j] = tmp[2 * j];
      dst[b + 16 + j] = tmp[2 * j + 1];
    }
  }
}

// NS weight rows rows[0..NS) (far apart: each a long sequential stream) against MR rows of
// permuted x.
template <int MR, int NS>
void StreamTileFp4(const float* const* xp, const WeightView& w, const int64_t* rows,
                   const float* bias, float* const* yr, const float* tables) {
  const int64_t K = w.cols;
  const uint8_t* p[NS];
  const uint8_t* sc[NS];
  for (int j = 0; j < NS; ++j) {
    p[j] = static_cast<const uint8_t*>(w.data) + rows[j] * (K / 2);
    sc[j] = static_cast<const uint8_t*>(w.scales) + rows[j] * (K / kFp4Block);
  }
  __m512 acc[MR][NS][2];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NS; ++j) acc[i][j][0] = acc[i][j][1] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; k += kFp4Block) {
    if (k % 128 == 0) {  // one line of codes per stream (a 64-byte line holds 128 columns)
      for (int j = 0; j < NS; ++j) {
        PrefetchAt(p[j] + k / 2, cpu::kStreamPrefetchBytes);
        if (k % 2048 == 0) PrefetchAt(sc[j] + k / kFp4Block, cpu::kStreamPrefetchBytes / 16);
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NS; ++j) {
      __m512 even, odd;
      DecodeFp4Block(p[j], sc[j], k, tables, &even, &odd);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        acc[i][j][0] = _mm512_fmadd_ps(_mm512_loadu_ps(xp[i] + k), even, acc[i][j][0]);
        acc[i][j][1] = _mm512_fmadd_ps(_mm512_loadu_ps(xp[i] + k + 16), odd, acc[i][j][1]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NS; ++j) {
      float v = HorizontalSum16(_mm512_add_ps(acc[i][j][0], acc[i][j][1]));
      if (bias != nullptr) v += bias[rows[j]];
      yr[i][rows[j]] = v;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Linear, small M: weights streamed once, MR x rows against NR weight rows far apart.

// The most x rows the streamed path takes (above it, the packed path). With 32 registers an MR
// of up to 8 fits a tile (8 x 2 accumulators besides the decode), and up to there one decode of
// a weight vector in a register beats the packed path's decode, store and reload of it (Zen 5,
// M = 8: BF16 8/32768/1024, the shape of an 8-sequence step's vocabulary head, 1.24x; FP8
// 8/4096/4096 1.34x; docs/performance.md). Each output keeps the same per-lane sequence either
// way, so a row's result still does not depend on M.
constexpr int64_t kStreamMaxRows = 8;

template <class Row, int NR>
std::array<Row, NR> MakeRows(const WeightView& w, const int64_t* row_index) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::array<Row, NR>{Row(w, row_index[I])...};
  }
  (std::make_index_sequence<NR>());
}

// MR x rows against the NR weight rows row_index[0..NR).
template <class Row, int MR, int NR>
void StreamTile(const float* const* xr, const WeightView& w, const int64_t* row_index,
                const float* bias, float* const* yr) {
  const int64_t K = w.cols;
  const std::array<Row, NR> rows = MakeRows<Row, NR>(w, row_index);
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    if constexpr (Row::kPrefetchAhead > 0) {
      for (int j = 0; j < NR; ++j) PrefetchAt(rows[j].p + k, Row::kPrefetchAhead);
    }
    for (int j = 0; j < NR; ++j) {
      __m512 wv[4];
      rows[j].Decode64(k, wv);
      for (int i = 0; i < MR; ++i) {
        for (int v = 0; v < 4; ++v) {
          acc[i][j] = _mm512_fmadd_ps(_mm512_loadu_ps(xr[i] + k + 16 * v), wv[v], acc[i][j]);
        }
      }
    }
  }
  for (; k + 16 <= K; k += 16) {
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = rows[j].Decode16(k);
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm512_fmadd_ps(_mm512_loadu_ps(xr[i] + k), wv, acc[i][j]);
      }
    }
  }
  if (k < K) {
    const __mmask16 mask = LanesLeft(K - k);
    for (int j = 0; j < NR; ++j) {
      const __m512 wv = rows[j].DecodeMasked(k, mask);
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, xr[i] + k), wv, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float v = HorizontalSum16(acc[i][j]);
      if (bias != nullptr) v += bias[row_index[j]];
      yr[i][row_index[j]] = v;
    }
  }
}

template <class Row>
void StreamRows(const float* x, int64_t x_stride, int64_t M, const WeightView& w, int64_t n0,
                int64_t n1, const float* bias, float* y, int64_t y_stride) {
  cpu::ForEachRowGroup<kStreamMaxRows>(
      x, x_stride, M, y, y_stride, [&]<int MR>(const float* const* xr, float* const* yr) {
        constexpr int kNR = MR <= 2 ? 4 : 2;
        if constexpr (std::is_same_v<Row, Fp4Row>) {
          // Two accumulators per output: one stream beyond 4 rows.
          constexpr int kNS = MR <= 4 ? kNR : 1;
          const float* tables = Mxfp4F32Tables();
          cpu::ForEachRowStream<kNS>(
              n0, n1,
              [&](const int64_t* rows) { StreamTileFp4<MR, kNS>(xr, w, rows, bias, yr, tables); },
              [&](const int64_t* rows) { StreamTileFp4<MR, 1>(xr, w, rows, bias, yr, tables); });
        } else {
          cpu::ForEachRowStream<kNR>(
              n0, n1, [&](const int64_t* rows) { StreamTile<Row, MR, kNR>(xr, w, rows, bias, yr); },
              [&](const int64_t* rows) { StreamTile<Row, MR, 1>(xr, w, rows, bias, yr); });
        }
      });
}

// ---------------------------------------------------------------------------------------------
// Linear, large M: x packed once per call in groups of kMR rows (PackX); per thread, a panel of
// kNC weight rows x kKC columns decoded to FP32 (PackPanel) and reused by kMC rows of x; kMR x kNR
// register tiles; partial accumulators kept across K chunks in a per-thread buffer so that the
// lane order is exactly that of the streamed path.
// Blocking (Sapphire Rapids: 48 KiB L1, 2 MiB L2; 32 zmm registers): a 4 x 4 tile holds 16
// accumulators and loads 8 vectors per 16 FMAs (the FMA ports, not the two 512-bit load ports,
// bound it); a tile's kNR panel rows (8 KiB) stay in L1 while the x block (192 KiB) streams from
// L2 with a software prefetch of the next tile; panel (96 KiB) and accumulators live in L2.

constexpr int64_t kNC = 48;   // weight rows per panel (multiple of every TileShape::kNR)
constexpr int64_t kKC = 512;  // columns per panel (multiple of 64)
constexpr int64_t kMC = 96;   // x rows per accumulator block (multiple of kMR)
constexpr int kMR = 4;
constexpr int64_t kAlignN = 32;  // thread ranges along N start on multiples of this

// kNR weight rows per tile, kAcc accumulators per output element (taking consecutive 16-column
// vectors in turn). BF16/F32/FP8: one accumulator (lane = k mod 16). MXFP4: two, the even and odd
// vectors of each permuted block (the order of StreamTileFp4).
template <class Row>
struct TileShape {
  static constexpr int kNR = 4;
  static constexpr int kAcc = 1;
};
template <>
struct TileShape<Fp4Row> {
  static constexpr int kNR = 2;
  static constexpr int kAcc = 2;
};
template <class Row>
using Blocking =
    cpu::PackedBlocking<kNC, kKC, kMC, kMR, TileShape<Row>::kNR, TileShape<Row>::kAcc, 16>;

constexpr size_t kPanelFloats = kNC * kKC;
constexpr size_t kAccFloats = kMC * kNC * 16 * 2;  // kAcc <= 2 vectors per output element
constexpr size_t kPerThreadBytes = (kPanelFloats + kAccFloats) * sizeof(float);

// Panel layout: kNR-row groups, each interleaved by 16 columns (row j, column k at
// (j / kNR) * kNR * kKC + (k / 16) * kNR * 16 + (j % kNR) * 16 + k % 16). Rows nc..kNC and
// columns kc..kcv (kc rounded up to 16 · kAcc) are zero. MXFP4 columns are the permuted ones.
template <class Row>
void PackPanel(const WeightView& w, int64_t nb, int64_t nc, int64_t kb, int64_t kc, float* panel) {
  constexpr int kNR = TileShape<Row>::kNR;
  constexpr int kAcc = TileShape<Row>::kAcc;
  constexpr int64_t kStep = kNR * 16;  // floats between consecutive 16-column slices of a row
  const int64_t kcv = (kc + 16 * kAcc - 1) / (16 * kAcc) * (16 * kAcc);
  for (int64_t j = 0; j < kNC; ++j) {
    float* dst = panel + (j / kNR) * kNR * kKC + (j % kNR) * 16;
    if (j >= nc) {
      for (int64_t k = 0; k < kcv; k += 16)
        _mm512_store_ps(dst + k / 16 * kStep, _mm512_setzero_ps());
      continue;
    }
    if constexpr (std::is_same_v<Row, Fp4Row>) {
      const float* tables = Mxfp4F32Tables();
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + (nb + j) * (w.cols / 2);
      const uint8_t* sc = static_cast<const uint8_t*>(w.scales) + (nb + j) * (w.cols / kFp4Block);
      for (int64_t k = 0; k < kc; k += kFp4Block) {
        __m512 even, odd;
        DecodeFp4Block(p, sc, kb + k, tables, &even, &odd);
        _mm512_store_ps(dst + (k / 16) * kStep, even);
        _mm512_store_ps(dst + (k / 16 + 1) * kStep, odd);
      }
    } else {
      const Row row(w, nb + j);
      int64_t k = 0;
      for (; k + 64 <= kc; k += 64) {
        __m512 v[4];
        row.Decode64(kb + k, v);
        for (int i = 0; i < 4; ++i) _mm512_store_ps(dst + (k / 16 + i) * kStep, v[i]);
      }
      for (; k + 16 <= kc; k += 16) _mm512_store_ps(dst + k / 16 * kStep, row.Decode16(kb + k));
      if (k < kc) {
        _mm512_store_ps(dst + k / 16 * kStep, row.DecodeMasked(kb + k, LanesLeft(kc - k)));
      }
    }
  }
}

// x for the packed path: rows in groups of kMR, interleaved by 16 columns, so a register tile
// reads one sequential stream. Element (m, k) sits at ((m / kMR) * kp + k / 16 * 16) * kMR +
// (m % kMR) * 16 + k % 16, kp = K rounded up to 16; the padding (columns K..kp, rows past M) is
// zero, the same FMAs as the masked tail of the streamed path (fma(0, 0, acc)).
inline int64_t PackedXCols(int64_t K) { return (K + 15) / 16 * 16; }
inline size_t PackedXBytes(int64_t M, int64_t K) {
  return static_cast<size_t>((M + kMR - 1) / kMR * kMR * PackedXCols(K)) * sizeof(float);
}

void PackX(const float* x, int64_t x_stride, int64_t M, int64_t K, float* out) {
  const int64_t kp = PackedXCols(K);
  for (int64_t m = 0; m < M; m += kMR) {
    float* dst = out + m * kp;
    for (int i = 0; i < kMR; ++i) {
      const float* src = m + i < M ? x + (m + i) * x_stride : nullptr;
      for (int64_t k = 0; k < kp; k += 16) {
        const __m512 v =
            src != nullptr ? _mm512_maskz_loadu_ps(LanesLeft(K - k), src + k) : _mm512_setzero_ps();
        _mm512_storeu_ps(dst + k * kMR + i * 16, v);
      }
    }
  }
}

// One kMR x kNR register tile over kcv (a multiple of 16 · kAcc) columns: xt points at the tile's
// first column in the packed x (xt_next at the next tile's, prefetched), the weights are panel
// rows j0... Accumulator a of an output element takes the 16-column vectors c with
// (c / 16) % kAcc == a, in increasing c. They start at zero on the first K chunk, else from
// accbuf; on the last chunk the horizontal sums (of the accumulators added in order) go to
// out[i][j], otherwise the accumulators go back to accbuf.
template <int kNR, int kAcc>
void PanelTile(const float* xt, const float* xt_next, int64_t kcv, const float* panel, int64_t j0,
               float* accbuf, bool first, bool last, float (*out)[kNR]) {
  __m512 acc[kMR][kNR][kAcc];
  for (int i = 0; i < kMR; ++i) {
    for (int j = 0; j < kNR; ++j) {
      for (int a = 0; a < kAcc; ++a) {
        acc[i][j][a] =
            first ? _mm512_setzero_ps() : _mm512_load_ps(accbuf + ((i * kNR + j) * kAcc + a) * 16);
      }
    }
  }
  const float* wp = panel + j0 * kKC;  // j0 is a multiple of kNR: one interleaved group
  for (int64_t k0 = 0; k0 < kcv; k0 += 16 * kAcc) {
    // The step reads kMR · kAcc cache lines of x.
    for (int l = 0; l < kMR * kAcc; ++l) {
      PrefetchAt(xt_next, (k0 * kMR + 16 * l) * static_cast<int64_t>(sizeof(float)));
    }
    for (int a = 0; a < kAcc; ++a) {
      const int64_t k = k0 + 16 * a;
      __m512 xv[kMR];
      for (int i = 0; i < kMR; ++i) {
        xv[i] = _mm512_loadu_ps(xt + k * kMR + i * 16);
        KeepInRegister(xv[i]);
      }
      for (int j = 0; j < kNR; ++j) {
        __m512 wv = _mm512_load_ps(wp + k * kNR + j * 16);
        KeepInRegister(wv);
        for (int i = 0; i < kMR; ++i) acc[i][j][a] = _mm512_fmadd_ps(xv[i], wv, acc[i][j][a]);
      }
    }
  }
  if (!last) {
    for (int i = 0; i < kMR; ++i) {
      for (int j = 0; j < kNR; ++j) {
        for (int a = 0; a < kAcc; ++a) {
          _mm512_store_ps(accbuf + ((i * kNR + j) * kAcc + a) * 16, acc[i][j][a]);
        }
      }
    }
    return;
  }
  for (int i = 0; i < kMR; ++i) {
    for (int j = 0; j < kNR; ++j) {
      __m512 sum = acc[i][j][0];
      for (int a = 1; a < kAcc; ++a) sum = _mm512_add_ps(sum, acc[i][j][a]);
      out[i][j] = HorizontalSum16(sum);
    }
  }
}

// xpk: x packed by PackX (M rows, w.cols columns; MXFP4: permuted).
template <class Row>
void PackedRows(const float* xpk, int64_t M, const WeightView& w, int64_t n0, int64_t n1,
                const float* bias, float* y, int64_t y_stride, float* scratch) {
  constexpr int kNR = TileShape<Row>::kNR;
  constexpr int kAcc = TileShape<Row>::kAcc;
  const float* panel = scratch;
  cpu::PackedRowsLoop<Blocking<Row>>(
      xpk, PackedXCols(w.cols), M, w.cols, n0, n1, bias, y, y_stride, scratch,
      [&](int64_t nb, int64_t nc, int64_t kb, int64_t kc, float* p) {
        PackPanel<Row>(w, nb, nc, kb, kc, p);
      },
      [&](const float* xt, const float* xt_next, int64_t kcv, int64_t j0, float* accbuf, bool first,
          bool last, float(*out)[kNR]) {
        PanelTile<kNR, kAcc>(xt, xt_next, kcv, panel, j0, accbuf, first, last, out);
      });
}

// Per-thread scratch bytes of one Linear call (the packed path's panel and accumulators).
size_t PerThreadBytes(int64_t M) { return M > kStreamMaxRows ? AlignUp(kPerThreadBytes) : 0; }

template <class Row>
void LinearTyped(const float* x, int64_t x_stride, int64_t M, const WeightView& w, float* y,
                 int64_t y_stride, const float* bias, ThreadPool* pool, char* ws) {
  const int64_t N = w.rows;
  const int threads = pool != nullptr && N > kAlignN ? pool->num_threads() : 1;
  const size_t per_thread = PerThreadBytes(M);
  const bool batch_invariant = Env().batch_invariant;
  const bool packed = M > kStreamMaxRows && !batch_invariant;
  float* xpk = reinterpret_cast<float*>(ws);
  if (packed) PackX(x, x_stride, M, w.cols, xpk);
  char* thread_scratch = ws + (M > kStreamMaxRows ? AlignUp(PackedXBytes(M, w.cols)) : 0);
  cpu::ForEachThreadRange(N, kAlignN, pool, threads, [&](int64_t n0, int64_t n1, int slot) {
    if (packed) {
      float* scratch = reinterpret_cast<float*>(thread_scratch + slot * per_thread);
      PackedRows<Row>(xpk, M, w, n0, n1, bias, y, y_stride, scratch);
      return;
    }
    // Streaming kernel, up to kStreamMaxRows rows at a time; batch-invariant mode streams one row
    // at a time for every M, so a row's arithmetic never depends on which rows share its group.
    const int64_t group = batch_invariant ? 1 : kStreamMaxRows;
    for (int64_t m0 = 0; m0 < M; m0 += group) {
      StreamRows<Row>(x + m0 * x_stride, x_stride, std::min(group, M - m0), w, n0, n1, bias,
                      y + m0 * y_stride, y_stride);
    }
  });
}

}  // namespace

size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            int num_threads) {
  size_t bytes = 0;
  if (w.dtype == WeightDType::kMXFP4 || opt.quantize_activations) {
    bytes += AlignUp(static_cast<size_t>(M * w.cols) * sizeof(float));
  }
  if (M > kStreamMaxRows) bytes += AlignUp(PackedXBytes(M, w.cols));
  bytes += PerThreadBytes(M) * std::max(1, num_threads);
  return bytes;
}

void Linear(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
            ThreadPool* pool, void* workspace, size_t workspace_bytes) {
  const int64_t K = w.cols;
  int64_t x_stride = opt.x_stride ? opt.x_stride : K;
  const int64_t y_stride = opt.y_stride ? opt.y_stride : w.rows;
  char* ws = static_cast<char*>(workspace);
  if (w.dtype == WeightDType::kMXFP4 || opt.quantize_activations) {
    // A private copy of x: quantised (spec §2.5) and/or in the MXFP4 column order.
    float* xq = reinterpret_cast<float*>(ws);
    for (int64_t m = 0; m < M; ++m) {
      float* dst = xq + m * K;
      std::memcpy(dst, x + m * x_stride, K * sizeof(float));
      if (opt.quantize_activations) ActQuantFp8Sim(dst, 1, K, 128);
      if (w.dtype == WeightDType::kMXFP4) PermuteMxfp4Blocks(dst, K, dst);
    }
    x = xq;
    x_stride = K;
    ws += AlignUp(static_cast<size_t>(M * K) * sizeof(float));
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

}  // namespace deepinfer::kernels::avx512

#include "kernels/cpu/avx512_inl_end.h"
