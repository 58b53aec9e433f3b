// AVX512_BF16 kernels of the BF16-dot Linear in the lane order (bf16_dot.h, Order::kVdp,
// Kernel::kAvx512Bf16): weights read in their checkpoint layout and decoded to BF16 in registers
// (bf16_dot_decode_inl.h, in the lane order's column layout), one VDPBF16PS per 32 weights and
// activation row. Small M streams each weight row once (NR rows far apart, MR activation rows);
// larger M decodes panels of weight rows once and runs 6 x 4 register tiles over them. Both run
// every output through the same steps in the same order, so a row's result does not depend on
// M. The portable emulation in bf16_dot.cc is the oracle (bf16_dot_test compares them bitwise).
//
// Everything after the #pragma is compiled for AVX-512 F/BW/VL/DQ + BF16 + VBMI; callers run
// it only where bf16dot::KernelRuns(Kernel::kAvx512Bf16) holds.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/bf16_dot_kernels.h"
#include "kernels/cpu/linear_driver.h"  // before the #pragma (bf16_dot_decode_inl.h uses it)
#include "kernels/formats.h"

// clang-format off
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")
// GCC 12's AVX-512 intrinsics build their unused pass-through operand from a self-initialised
// variable, which the uninitialised-use warnings report at every inlined use (avx512_inl.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// clang-format on

#include "kernels/cpu/bf16_dot_decode_inl.h"

namespace deepinfer::kernels::bf16dot::internal {
namespace {

using decode::kStep;  // columns per step: two zmm of 16 BF16 pairs
using Fp8Decoder = decode::Fp8Decoder<decode::ColumnOrder::kLane>;
using Mxfp4Decoder = decode::Mxfp4Decoder<decode::ColumnOrder::kLane>;
using decode::Bf16Decoder;

// lanes l and l + 8, then l and l + 4, l and l + 2, l and l + 1 (bf16_dot.h's sum of lanes).
inline float SumLanes(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

inline __m512 Dot(__m512 acc, __m512i x, __m512i w) {
  return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
}

// Prefetches, for each of the NR rows of a streamed tile at step s, the weight lines its stream
// reads Dec::kPrefetchAhead bytes later (cpu::kStreamPrefetchBytes). On Zen 5, two cores, it
// took FP8 1/4096/4096 from ~85 to ~95 % of the read bandwidth, FP8 at four activation rows from
// ~48 to ~78 %, MXFP4 1/4096/4096 from ~70 to ~75-80 % (one core: ~52 to ~74 %).
template <class Dec, int NR>
__attribute__((always_inline)) inline void StreamPrefetch(const Dec& dec, const int64_t* rows,
                                                          int64_t s) {
  if constexpr (Dec::kPrefetchAhead > 0) {
    constexpr int64_t kLine = 64;
    constexpr int64_t kEvery = Dec::kStepBytes >= kLine ? 1 : kLine / Dec::kStepBytes;
    if (s % kEvery != 0) return;
    for (int j = 0; j < NR; ++j) {
      // Past the weights' end for the last rows (prefetches never fault), so the address is
      // formed as an integer, not by pointer arithmetic.
      const uintptr_t a =
          reinterpret_cast<uintptr_t>(dec.ColumnAddress(rows[j], s * kStep)) + Dec::kPrefetchAhead;
      for (int64_t b = 0; b < std::max(Dec::kStepBytes, kLine); b += kLine) {
        _mm_prefetch(reinterpret_cast<const char*>(a + b), _MM_HINT_T0);
      }
    }
  }
}

// MR activation rows against NR weight rows rows[0..NR), each weight row decoded once.
template <class Dec, int MR, int NR>
void StreamTile(const Dec& dec, const uint16_t* xp, int64_t kp, const int64_t* rows, float* y,
                int64_t y_stride, int64_t n0, uint8_t* row_ok) {
  typename Dec::Row r[NR];
  for (int j = 0; j < NR; ++j) r[j] = dec.MakeRow(rows[j]);
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t steps = kp / kStep;
  for (int64_t s = 0; s < steps; ++s) {
    __m512i x0[MR], x1[MR];
    for (int i = 0; i < MR; ++i) {
      x0[i] = _mm512_loadu_si512(xp + i * kp + s * kStep);
      x1[i] = _mm512_loadu_si512(xp + i * kp + s * kStep + 32);
    }
    StreamPrefetch<Dec, NR>(dec, rows, s);
    for (int j = 0; j < NR; ++j) {
      __m512i w0, w1;
      dec.Step(r[j], s, &w0, &w1);
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = Dot(acc[i][j], x0[i], w0);
        acc[i][j] = Dot(acc[i][j], x1[i], w1);
      }
    }
  }
  for (int j = 0; j < NR; ++j) {
    row_ok[rows[j] - n0] = Dec::Bad(r[j]) ? 0 : 1;
    for (int i = 0; i < MR; ++i) y[i * y_stride + rows[j]] = SumLanes(acc[i][j]);
  }
}

// Weight rows [n0, n1) as NR interleaved streams over consecutive parts of the range, then the
// leftover rows singly (cpu::ForEachRowStream: far-apart rows are long sequential reads). NR is
// the decoder's kStreamRows for up to two activation rows, half that beyond (the registers: MR x
// NR accumulators besides the decode's).
template <class Dec, int MR>
void StreamRows(const Dec& dec, const uint16_t* xp, int64_t kp, int64_t n0, int64_t n1, float* y,
                int64_t y_stride, uint8_t* row_ok) {
  constexpr int kNR = MR <= 2 ? Dec::kStreamRows : Dec::kStreamRows / 2;
  const int64_t per_stream = (n1 - n0) / kNR;
  for (int64_t r = 0; r < per_stream; ++r) {
    int64_t rows[kNR];
    for (int j = 0; j < kNR; ++j) rows[j] = n0 + j * per_stream + r;
    StreamTile<Dec, MR, kNR>(dec, xp, kp, rows, y, y_stride, n0, row_ok);
  }
  for (int64_t n = n0 + kNR * per_stream; n < n1; ++n) {
    StreamTile<Dec, MR, 1>(dec, xp, kp, &n, y, y_stride, n0, row_ok);
  }
}

// The decoded panel's layout: rows in groups of kPanelNR (a register tile's panel rows), each
// group kPanelNR x kp BF16 with its rows interleaved per 32 columns, so a tile reads one
// sequential stream from L2 instead of kPanelNR at stride kp. PanelIndex(r, k, kp) is the index
// of row r's column k (k % 32 == 0) from the panel's start; a group starts at
// PanelIndex(r, 0, kp) for r % kPanelNR == 0.
constexpr int kPanelNR = 4;
inline int64_t PanelIndex(int64_t r, int64_t k, int64_t kp) {
  return (r / kPanelNR) * kPanelNR * kp + (k / 32 * kPanelNR + r % kPanelNR) * 32;
}

// MR activation rows against NR (<= kPanelNR) rows of one panel group over the steps of one K
// chunk [k0, k1). The accumulators start at +0 on the first chunk and are otherwise reloaded from
// acc_buf (output (i, j) at acc_buf[i * kLanePanelRowsMax + j], stored there unchanged after
// every chunk but the last, which writes the sums), so each lane takes exactly the streamed
// path's sequence.
template <int MR, int NR>
void PanelTile(const uint16_t* xp, const uint16_t* panel, int64_t kp, int64_t k0, int64_t k1,
               bool first, bool last, __m512* acc_buf, float* y, int64_t y_stride) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(&acc_buf[i * kLanePanelRowsMax + j]);
    }
  }
  for (int64_t k = k0; k < k1; k += kStep) {
    for (int v = 0; v < 2; ++v) {
      __m512i xv[MR];
      for (int i = 0; i < MR; ++i) xv[i] = _mm512_loadu_si512(xp + i * kp + k + 32 * v);
      for (int j = 0; j < NR; ++j) {
        const __m512i wv = _mm512_loadu_si512(panel + PanelIndex(j, k + 32 * v, kp));
        for (int i = 0; i < MR; ++i) acc[i][j] = Dot(acc[i][j], xv[i], wv);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      if (last) {
        y[i * y_stride + j] = SumLanes(acc[i][j]);
      } else {
        _mm512_store_ps(&acc_buf[i * kLanePanelRowsMax + j], acc[i][j]);
      }
    }
  }
}

// The register tile of the panel path: kPanelMR activation rows x kPanelNR panel rows, 24
// accumulators
// (with the 6 x vectors and a panel vector, 31 of the 32 registers). Within a K chunk the x rows
// stay in L1 while the panel rows come from L2, so more x rows per panel vector cut the L2 loads
// per product: on Zen 5, one core, 256 x 4096 x 4096, 6 x 4 ran 1.10x the 4 x 4 tile (two cores
// 1.10-1.26x); 8 x 3 and 3 x 8 were slower, as were K chunks of 512 with either tile.
constexpr int kPanelMR = 6;

static_assert(kPanelNR == 4, "PanelTileRows dispatches NR = 1 .. 4");

template <int MR>
void PanelTileRows(int nr, const uint16_t* xp, const uint16_t* panel, int64_t kp, int64_t k0,
                   int64_t k1, bool first, bool last, __m512* acc_buf, float* y, int64_t y_stride) {
  switch (nr) {
    case 1:
      return PanelTile<MR, 1>(xp, panel, kp, k0, k1, first, last, acc_buf, y, y_stride);
    case 2:
      return PanelTile<MR, 2>(xp, panel, kp, k0, k1, first, last, acc_buf, y, y_stride);
    case 3:
      return PanelTile<MR, 3>(xp, panel, kp, k0, k1, first, last, acc_buf, y, y_stride);
    default:
      return PanelTile<MR, 4>(xp, panel, kp, k0, k1, first, last, acc_buf, y, y_stride);
  }
}

// Blocking of the panel path: per panel (LanePanelRows weight rows, decoded once), blocks of
// kLaneMC activation rows, and per block K chunks of kLaneKC columns (12 KiB of a 6-row x chunk,
// reused by the panel's 8 row groups); the tiles' accumulators wait in acc_buf between chunks
// (kLaneMC x 32 vectors, 128 KiB; output (m, n) at (m - mb) * 32 + n - nb). Measured on Zen 5
// (256 x 4096 x 4096, one thread): chunks of 1024 columns beat 512 by ~15 % and 256 by ~35 %
// (each tile call's fixed cost), and 16-row panels were slower than 32.
template <class Dec>
void PanelRows(const Dec& dec, const uint16_t* xp, int64_t M, int64_t kp, int64_t n0, int64_t n1,
               float* y, int64_t y_stride, uint16_t* panel, __m512* acc_buf, uint8_t* row_ok) {
  const int64_t rows_per_panel = LanePanelRows(kp), steps = kp / kStep;
  for (int64_t nb = n0; nb < n1; nb += rows_per_panel) {
    const int64_t nc = std::min(rows_per_panel, n1 - nb);
    for (int64_t r = 0; r < nc; ++r) {
      typename Dec::Row row = dec.MakeRow(nb + r);
      for (int64_t s = 0; s < steps; ++s) {
        __m512i w0, w1;
        dec.Step(row, s, &w0, &w1);
        _mm512_storeu_si512(panel + PanelIndex(r, s * kStep, kp), w0);
        _mm512_storeu_si512(panel + PanelIndex(r, s * kStep + 32, kp), w1);
      }
      row_ok[nb + r - n0] = Dec::Bad(row) ? 0 : 1;
    }
    const int64_t next_nb = nb + rows_per_panel, next_nc = std::min(rows_per_panel, n1 - next_nb);
    for (int64_t mb = 0; mb < M; mb += kLaneMC) {
      const int64_t mc = std::min(kLaneMC, M - mb);
      // One chunk at least: with K = 0 every output is the empty sum.
      for (int64_t k0 = 0; k0 < std::max<int64_t>(kp, 1); k0 += kLaneKC) {
        const int64_t k1 = std::min(kp, k0 + kLaneKC);
        const bool first = k0 == 0, last = k1 >= kp;
        if (mb == 0) {
          // The next panel's weights, this chunk's columns, towards L2 while the tiles run: a
          // panel's decode would otherwise wait for memory, then the tiles for the decode
          // (batched decode at M = 16 reads the weights about as long as it computes).
          for (int64_t r = 0; r < next_nc; ++r) {
            const uint8_t* a = dec.ColumnAddress(next_nb + r, k0);
            const uint8_t* b = dec.ColumnAddress(next_nb + r, std::min(k1, dec.K));
            for (; a < b; a += 64) _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T1);
          }
        }
        for (int64_t m = mb; m < mb + mc; m += kPanelMR) {
          const int64_t mr = std::min<int64_t>(kPanelMR, mb + mc - m);
          for (int64_t j = 0; j < nc; j += kPanelNR) {
            const int nr = static_cast<int>(std::min<int64_t>(kPanelNR, nc - j));
            const uint16_t* xt = xp + m * kp;
            const uint16_t* pt = panel + PanelIndex(j, 0, kp);  // j's panel group
            __m512* ab = acc_buf + (m - mb) * kLanePanelRowsMax + j;
            float* yt = y + m * y_stride + nb + j;
            switch (mr) {
              case 1:
                PanelTileRows<1>(nr, xt, pt, kp, k0, k1, first, last, ab, yt, y_stride);
                break;
              case 2:
                PanelTileRows<2>(nr, xt, pt, kp, k0, k1, first, last, ab, yt, y_stride);
                break;
              case 3:
                PanelTileRows<3>(nr, xt, pt, kp, k0, k1, first, last, ab, yt, y_stride);
                break;
              case 4:
                PanelTileRows<4>(nr, xt, pt, kp, k0, k1, first, last, ab, yt, y_stride);
                break;
              case 5:
                PanelTileRows<5>(nr, xt, pt, kp, k0, k1, first, last, ab, yt, y_stride);
                break;
              default:
                PanelTileRows<kPanelMR>(nr, xt, pt, kp, k0, k1, first, last, ab, yt, y_stride);
                break;
            }
          }
        }
      }
    }
  }
}

template <class Dec>
void Rows(const WeightView& w, const uint16_t* xp, int64_t M, int64_t kp, int64_t n0, int64_t n1,
          float* y, int64_t y_stride, uint16_t* panel, uint8_t* row_ok) {
  const Dec dec(w);
  if (M > kLaneStreamMaxM) {
    // The accumulators after the panel (LanePanelBytes).
    auto* acc_buf =
        reinterpret_cast<__m512*>(reinterpret_cast<uint8_t*>(panel) +
                                  (LanePanelRows(kp) * kp * sizeof(uint16_t) + 63) / 64 * 64);
    return PanelRows(dec, xp, M, kp, n0, n1, y, y_stride, panel, acc_buf, row_ok);
  }
  switch (M) {
    case 1:
      return StreamRows<Dec, 1>(dec, xp, kp, n0, n1, y, y_stride, row_ok);
    case 2:
      return StreamRows<Dec, 2>(dec, xp, kp, n0, n1, y, y_stride, row_ok);
    case 3:
      return StreamRows<Dec, 3>(dec, xp, kp, n0, n1, y, y_stride, row_ok);
    default:
      return StreamRows<Dec, 4>(dec, xp, kp, n0, n1, y, y_stride, row_ok);
  }
}

}  // namespace

void Avx512Bf16LaneRows(const uint16_t* xp, int64_t M, int64_t kp, const WeightView& w, int64_t n0,
                        int64_t n1, float* y, int64_t y_stride, uint16_t* panel, uint8_t* row_ok) {
  switch (w.dtype) {
    case WeightDType::kFP8Block:
      return Rows<Fp8Decoder>(w, xp, M, kp, n0, n1, y, y_stride, panel, row_ok);
    case WeightDType::kMXFP4:
      return Rows<Mxfp4Decoder>(w, xp, M, kp, n0, n1, y, y_stride, panel, row_ok);
    default:
      return Rows<Bf16Decoder>(w, xp, M, kp, n0, n1, y, y_stride, panel, row_ok);
  }
}

}  // namespace deepinfer::kernels::bf16dot::internal

// clang-format off
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
// clang-format on
