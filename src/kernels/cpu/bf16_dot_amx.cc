// AMX-BF16 kernels of the BF16-dot Linear (bf16_dot.h, Order::kAmx, Kernel::kAmx). The weights
// are the tiles' first operand: 16 weight rows x 32 columns of BF16 per tile, decoded from the
// checkpoint layout in natural column order (bf16_dot_decode_inl.h) into a small panel that
// stays in L1 (M <= 32: each weight row is read once, chunk by chunk, with the 2 x 2 C tiles
// held across the whole K) or in L2 (M > 32: a 32-row panel decoded once for every pair of
// activation tiles). The activations are the second operand, packed once per call in the VNNI
// layout (bf16dot::PackAmxX). TDPBF16PS's sum for C[n][m] takes the products W[n][k]·X[m][k]
// in the same pairs and the same order as with the operands the other way round, so this is the
// order bf16_dot.h describes (the products are commutative; the tiles and the portable
// emulation agreed bitwise on Intel Xeon, bf16_dot_test).
//
// Everything after the #pragma is compiled for AVX-512 F/BW/VL/DQ + BF16 + VBMI and AMX-TILE /
// AMX-BF16; callers run it only where bf16dot::KernelRuns(Kernel::kAmx) holds.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/bf16_dot_kernels.h"
#include "kernels/cpu/linear_driver.h"  // before the #pragma (bf16_dot_decode_inl.h uses it)

// clang-format off
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,amx-tile,amx-bf16"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,amx-tile,amx-bf16")
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

// Linux uapi (asm/prctl.h, fpu/xstate.h); spelled out for older headers.
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtileData = 18;

// The LDTILECFG memory operand (palette 1): 16 tiles' column bytes and rows.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

TileConfig MakeConfig() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;  // 16 FP32 (C) or 32 BF16 (A, B) per row
    cfg.rows[t] = kTileM;
  }
  return cfg;
}

// C tiles 0..3 = (A 4 | 5) x (B 6 | 7): tile 2i + j is M tile i times N tile j.
template <int MT, int NT>
void Product(const uint16_t* a, int64_t a_stride, const uint16_t* b, int64_t b_stride, int64_t kt,
             float* c, int64_t ldc) {
  _tile_zero(0);
  if constexpr (NT == 2) _tile_zero(1);
  if constexpr (MT == 2) _tile_zero(2);
  if constexpr (MT == 2 && NT == 2) _tile_zero(3);
  for (int64_t t = 0; t < kt; ++t) {
    _tile_loadd(4, a + t * kTileElems, 64);
    if constexpr (MT == 2) _tile_loadd(5, a + a_stride + t * kTileElems, 64);
    _tile_loadd(6, b + t * kTileElems, 64);
    if constexpr (NT == 2) _tile_loadd(7, b + b_stride + t * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
  }
  const int64_t stride = ldc * static_cast<int64_t>(sizeof(float));
  _tile_stored(0, c, stride);
  if constexpr (NT == 2) _tile_stored(1, c + kTileN, stride);
  if constexpr (MT == 2) _tile_stored(2, c + kTileM * ldc, stride);
  if constexpr (MT == 2 && NT == 2) _tile_stored(3, c + kTileM * ldc + kTileN, stride);
}

// The Linear's blocking: 32 weight rows (two A tiles) per panel; the M <= 32 path decodes
// kChunkSteps steps (256 columns, 16 KiB of panel) at a time.
constexpr int64_t kPanelRows = 2 * kTileM;
constexpr int64_t kPanelTileElems = kPanelRows * kTileK;  // a K tile of the panel: 2 A tiles
constexpr int64_t kChunkSteps = 4;

// Rows [0, nc) of the panel, steps [s0, s1), decoded: K tile t = 2(s - s0) + h (vector h of
// step s) of row r at out + t * kPanelTileElems + r * 32. Rows [nc, 32) are zeroed (their
// products are computed and dropped).
template <class Dec>
void DecodePanel(const Dec& dec, typename Dec::Row* rows, int64_t nc, int64_t s0, int64_t s1,
                 uint16_t* out) {
  for (int64_t r = 0; r < nc; ++r) {
    for (int64_t s = s0; s < s1; ++s) {
      __m512i w0, w1;
      dec.Step(rows[r], s, &w0, &w1);
      uint16_t* t = out + (s - s0) * 2 * kPanelTileElems + r * kTileK;
      _mm512_store_si512(t, w0);
      _mm512_store_si512(t + kPanelTileElems, w1);
    }
  }
  for (int64_t r = nc; r < kPanelRows; ++r) {
    for (int64_t t = 0; t < 2 * (s1 - s0); ++t) {
      _mm512_store_si512(out + t * kPanelTileElems + r * kTileK, _mm512_setzero_si512());
    }
  }
}

// C tiles 2i + j += weight tile i (A, 4 + i) x activation tile j (B, 6 + j) over K tiles
// [0, kt): a + t * kPanelTileElems + i * 512, b + t * kTileElems + j * b_stride.
template <int NA, int MB>
void Accumulate(const uint16_t* a, const uint16_t* b, int64_t b_stride, int64_t kt) {
  for (int64_t t = 0; t < kt; ++t) {
    _tile_loadd(4, a + t * kPanelTileElems, 64);
    if constexpr (NA == 2) _tile_loadd(5, a + t * kPanelTileElems + kTileElems, 64);
    _tile_loadd(6, b + t * kTileElems, 64);
    if constexpr (MB == 2) _tile_loadd(7, b + b_stride + t * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (MB == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NA == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (NA == 2 && MB == 2) _tile_dpbf16ps(3, 5, 7);
  }
}

void AccumulateTiles(int na, int mb, const uint16_t* a, const uint16_t* b, int64_t b_stride,
                     int64_t kt) {
  if (na == 2 && mb == 2) return Accumulate<2, 2>(a, b, b_stride, kt);
  if (na == 2) return Accumulate<2, 1>(a, b, b_stride, kt);
  if (mb == 2) return Accumulate<1, 2>(a, b, b_stride, kt);
  Accumulate<1, 1>(a, b, b_stride, kt);
}

// C tiles to cbuf ([32 weight rows][32 activation rows] floats), then the y block: output
// (m0 + c, nb + r) = cbuf[r][c].
void StoreOutputs(float* cbuf, int64_t nb, int64_t nc, int64_t m0, int64_t mc, float* y,
                  int64_t y_stride) {
  constexpr int64_t kLd = 2 * kTileN;
  _tile_stored(0, cbuf, kLd * sizeof(float));
  _tile_stored(1, cbuf + kTileN, kLd * sizeof(float));
  _tile_stored(2, cbuf + kTileM * kLd, kLd * sizeof(float));
  _tile_stored(3, cbuf + kTileM * kLd + kTileN, kLd * sizeof(float));
  for (int64_t c = 0; c < mc; ++c) {
    float* yr = y + (m0 + c) * y_stride + nb;
    for (int64_t r = 0; r < nc; ++r) yr[r] = cbuf[r * kLd + c];
  }
}

void ZeroC() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

template <class Dec>
void Rows(const WeightView& w, const uint16_t* xb, int64_t M, int64_t n0, int64_t n1, float* y,
          int64_t y_stride, uint16_t* panel, uint8_t* row_ok) {
  const Dec dec(w);
  const int64_t K = w.cols, kt = PaddedK(K) / kTileK, steps = (kt + 1) / 2;
  const int64_t m_tiles = PaddedRows(M) / kTileM, x_stride = kt * kTileElems;
  float* cbuf = reinterpret_cast<float*>(panel + AmxPanelElems(K));
  typename Dec::Row rows[kPanelRows];
  for (int64_t nb = n0; nb < n1; nb += kPanelRows) {
    const int64_t nc = std::min(kPanelRows, n1 - nb);
    const int na = nc > kTileM ? 2 : 1;
    for (int64_t r = 0; r < nc; ++r) rows[r] = dec.MakeRow(nb + r);
    if (m_tiles <= 2) {
      // The weights stream once; the accumulators stay in the C tiles over the whole K.
      const int mb = static_cast<int>(m_tiles);
      ZeroC();
      for (int64_t s0 = 0; s0 < steps; s0 += kChunkSteps) {
        const int64_t s1 = std::min(steps, s0 + kChunkSteps);
        DecodePanel(dec, rows, nc, s0, s1, panel);
        AccumulateTiles(na, mb, panel, xb + 2 * s0 * kTileElems, x_stride,
                        std::min(kt, 2 * s1) - 2 * s0);
      }
      StoreOutputs(cbuf, nb, nc, 0, M, y, y_stride);
    } else {
      DecodePanel(dec, rows, nc, 0, steps, panel);
      for (int64_t mi = 0; mi < m_tiles; mi += 2) {
        const int mb = static_cast<int>(std::min<int64_t>(2, m_tiles - mi));
        ZeroC();
        AccumulateTiles(na, mb, panel, xb + mi * x_stride, x_stride, kt);
        const int64_t m0 = mi * kTileM;
        StoreOutputs(cbuf, nb, nc, m0, std::min<int64_t>(mb * kTileM, M - m0), y, y_stride);
      }
    }
    for (int64_t r = 0; r < nc; ++r) row_ok[nb + r - n0] = Dec::Bad(rows[r]) ? 0 : 1;
  }
}

}  // namespace

bool AmxRequestPermission() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0) return false;
  unsigned long bitmask = 0;  // NOLINT(runtime/int): the syscall's type
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
  return (bitmask >> kXfeatureXtileData) & 1;
}

void AmxBeginThread() {
  static const TileConfig config = MakeConfig();
  _tile_loadconfig(&config);
}

void AmxEndThread() { _tile_release(); }

void AmxTileProduct(const uint16_t* a, int64_t a_stride, int mt, const uint16_t* b,
                    int64_t b_stride, int nt, int64_t kt, float* c, int64_t ldc) {
  if (mt == 2 && nt == 2) return Product<2, 2>(a, a_stride, b, b_stride, kt, c, ldc);
  if (mt == 2) return Product<2, 1>(a, a_stride, b, b_stride, kt, c, ldc);
  if (nt == 2) return Product<1, 2>(a, a_stride, b, b_stride, kt, c, ldc);
  Product<1, 1>(a, a_stride, b, b_stride, kt, c, ldc);
}

void AmxRows(const uint16_t* xb, int64_t M, const WeightView& w, int64_t n0, int64_t n1, float* y,
             int64_t y_stride, uint16_t* panel, uint8_t* row_ok) {
  AmxBeginThread();
  switch (w.dtype) {
    case WeightDType::kFP8Block:
      Rows<decode::Fp8Decoder<decode::ColumnOrder::kNatural>>(w, xb, M, n0, n1, y, y_stride, panel,
                                                              row_ok);
      break;
    case WeightDType::kMXFP4:
      Rows<decode::Mxfp4Decoder<decode::ColumnOrder::kNatural>>(w, xb, M, n0, n1, y, y_stride,
                                                                panel, row_ok);
      break;
    default:
      Rows<decode::Bf16Decoder>(w, xb, M, n0, n1, y, y_stride, panel, row_ok);
      break;
  }
  AmxEndThread();
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
