// The hardware kernels of the BF16-dot Linear (bf16_dot.h), each in its own file compiled with
// target attributes so that the rest of the binary stays x86-64-v3: the AMX-BF16 tile product
// (bf16_dot_amx.cc) and the AVX512_BF16 lane-order kernels (bf16_dot_avx512bf16.cc), which share
// the AVX-512 weight decoders of bf16_dot_decode_inl.h. Internal to bf16_dot.cc and its
// tests; call them only where bf16dot::KernelRuns (or the CPU's AVX-512 features) says the CPU has
// the instructions.
#ifndef DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_
#define DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/formats.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::bf16dot::internal {

// Asks Linux for this process's permission to use the AMX tile data state (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) and returns whether it was granted. Idempotent.
bool AmxRequestPermission();
// Loads the tile configuration (8 tiles of 16 rows x 64 bytes) on the calling thread; every
// thread calls it before its first AmxTileProduct of a Linear, and AmxEndThread after its last.
void AmxBeginThread();
void AmxEndThread();
// bf16dot::TileProduct for Kernel::kAmx (tiles 0-3: C, 4-5: A, 6-7: B).
void AmxTileProduct(const uint16_t* a, int64_t a_stride, int mt, const uint16_t* b,
                    int64_t b_stride, int nt, int64_t kt, float* c, int64_t ldc);

// The lane order (bf16_dot.h, Order::kVdp): shared definitions of the emulation (bf16_dot.cc)
// and the AVX512_BF16 kernels (bf16_dot_avx512bf16.cc).
constexpr int64_t kLaneStep = 64;       // columns per step (two vectors of 16 BF16 pairs)
constexpr int64_t kLaneStreamMaxM = 4;  // M up to this streams each weight row once
// K rounded up to whole steps (0 stays 0).
inline int64_t LanePaddedK(int64_t K) { return (K + kLaneStep - 1) / kLaneStep * kLaneStep; }
// The M > kLaneStreamMaxM path: weight rows per decoded panel (32, fewer when 32 rows of kp
// BF16 would pass 512 KiB, so a panel stays in L2: a multiple of 4, at least 4), activation
// rows per block and columns per K chunk (bf16_dot_avx512bf16.cc's PanelRows).
constexpr int64_t kLanePanelRowsMax = 32;
constexpr int64_t kLaneMC = 64;
constexpr int64_t kLaneKC = 1024;
inline int64_t LanePanelRows(int64_t kp) {
  constexpr int64_t kBudget = int64_t{512} << 10;
  if (kp * 2 * kLanePanelRowsMax <= kBudget) return kLanePanelRowsMax;
  return std::max<int64_t>(4, kBudget / (kp * 2) / 4 * 4);
}
// Scratch per thread of that path: the panel, then (64-byte aligned) its accumulators
// (kLaneMC x kLanePanelRowsMax vectors of 16 floats).
inline size_t LanePanelBytes(int64_t kp) {
  return (LanePanelRows(kp) * kp * sizeof(uint16_t) + 63) / 64 * 64 +
         kLaneMC * kLanePanelRowsMax * 16 * sizeof(float);
}
// The first r of 64 bytes / 32 words (masked tail loads).
inline uint64_t LaneTailMask64(int64_t r) {
  return r >= 64 ? ~uint64_t{0} : r <= 0 ? 0 : (uint64_t{1} << r) - 1;
}
inline uint32_t LaneTailMask32(int64_t r) {
  return r >= 32 ? ~uint32_t{0} : r <= 0 ? 0 : (uint32_t{1} << r) - 1;
}
// E8M0 scale bytes whose products with every nonzero e4m3 (2^-9 .. 448) / e2m1 (0.5 .. 6) value
// are BF16 normal numbers: the weight rows whose scales all pass take the BF16 products.
constexpr uint8_t kLaneFp8ScaleMin = 10, kLaneFp8ScaleMax = 246;
constexpr uint8_t kLaneFp4ScaleMin = 2, kLaneFp4ScaleMax = 252;
inline bool LaneFp8ScaleOk(uint8_t s) { return s >= kLaneFp8ScaleMin && s <= kLaneFp8ScaleMax; }
inline bool LaneFp4ScaleOk(uint8_t s) { return s >= kLaneFp4ScaleMin && s <= kLaneFp4ScaleMax; }
// The BF16 bits of e4m3 `code` times 2^(s - 127): the code's BF16 value (NaN codes: a zero of
// the code's sign) with s - 127 added to the 16-bit word when the magnitude is not zero
// (exact wherever the scale passes LaneFp8ScaleOk).
inline uint16_t LaneFp8Bf16(uint8_t code, uint8_t s) {
  const uint8_t mag = code & 0x7F;
  uint32_t bits = mag == 0x7F ? 0 : FloatToBf16(Fp8E4m3ToFloat(mag));
  bits |= uint32_t{code & 0x80u} << 8;
  if ((bits & 0x7FFF) != 0) bits += static_cast<uint32_t>((int{s} - 127) * 128);
  return static_cast<uint16_t>(bits);
}
// The same for e2m1 `nibble` (its low 4 bits) times 2^(s - 127).
inline uint16_t LaneFp4Bf16(uint8_t nibble, uint8_t s) {
  uint32_t bits = FloatToBf16(Fp4E2m1ToFloat(nibble));
  if ((bits & 0x7FFF) != 0) bits += static_cast<uint32_t>((int{s} - 127) * 128);
  return static_cast<uint16_t>(bits);
}

// Rows [n0, n1) of y (row stride y_stride; no bias) for the M rows of x packed by PackLaneX
// (row stride kp = LanePaddedK(K) BF16) in the lane order, and row_ok[n - n0] = whether weight
// row n takes the BF16 products (its scales pass, or BF16: it holds no denormal); the caller
// recomputes the other rows with the FP32 fallback. panel: LanePanelBytes(kp) bytes of scratch,
// 64-byte aligned (used when M > kLaneStreamMaxM). Kernel::kAvx512Bf16; needs KernelRuns for it.
void Avx512Bf16LaneRows(const uint16_t* xp, int64_t M, int64_t kp, const WeightView& w, int64_t n0,
                        int64_t n1, float* y, int64_t y_stride, uint16_t* panel, uint8_t* row_ok);

// Scratch of AmxRows per thread: a decoded panel of 32 weight rows x LanePaddedK(K) BF16
// (AmxPanelElems), then 32 x 32 floats of C tiles.
inline int64_t AmxPanelElems(int64_t K) { return 32 * LanePaddedK(K); }
inline size_t AmxPanelBytes(int64_t K) {
  return AmxPanelElems(K) * sizeof(uint16_t) + 32 * 32 * sizeof(float);
}
// Rows [n0, n1) of y (row stride y_stride; no bias) for the M activation rows packed by
// bf16dot::PackAmxX, in Order::kAmx, with row_ok[n - n0] = whether weight row n takes the BF16
// products (as Avx512Bf16LaneRows; the caller recomputes the other rows with the FP32 fallback).
// panel: AmxPanelBytes(K) bytes, 64-byte aligned. Configures the calling thread's tiles and
// releases them. Kernel::kAmx; needs KernelRuns for it.
void AmxRows(const uint16_t* xb, int64_t M, const WeightView& w, int64_t n0, int64_t n1, float* y,
             int64_t y_stride, uint16_t* panel, uint8_t* row_ok);

}  // namespace deepinfer::kernels::bf16dot::internal

#endif  // DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_
