// AMX-BF16 tile products of the BF16-dot GEMM (bf16_dot.h, Kernel::kAmx). Only these functions
// carry the AMX target attribute; nothing here runs unless bf16dot::AmxAvailable() holds.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/bf16_dot_kernels.h"

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
__attribute__((target("amx-tile,amx-bf16"))) void Product(const uint16_t* a, int64_t a_stride,
                                                          const uint16_t* b, int64_t b_stride,
                                                          int64_t kt, float* c, int64_t ldc) {
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

}  // namespace

bool AmxRequestPermission() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0) return false;
  unsigned long bitmask = 0;  // NOLINT(runtime/int): the syscall's type
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
  return (bitmask >> kXfeatureXtileData) & 1;
}

__attribute__((target("amx-tile"))) void AmxBeginThread() {
  static const TileConfig config = MakeConfig();
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void AmxEndThread() { _tile_release(); }

void AmxTileProduct(const uint16_t* a, int64_t a_stride, int mt, const uint16_t* b,
                    int64_t b_stride, int nt, int64_t kt, float* c, int64_t ldc) {
  if (mt == 2 && nt == 2) return Product<2, 2>(a, a_stride, b, b_stride, kt, c, ldc);
  if (mt == 2) return Product<2, 1>(a, a_stride, b, b_stride, kt, c, ldc);
  if (nt == 2) return Product<1, 2>(a, a_stride, b, b_stride, kt, c, ldc);
  Product<1, 1>(a, a_stride, b, b_stride, kt, c, ldc);
}

}  // namespace deepinfer::kernels::bf16dot::internal
