// The hardware tile products of the BF16-dot GEMM (bf16_dot.h), each in its own file compiled
// with per-function target attributes so that the rest of the binary stays x86-64-v3: AMX-BF16
// (bf16_dot_amx.cc) and AVX512_BF16 (bf16_dot_avx512bf16.cc), and the AVX-512 decode of B-tile
// weights (bf16_dot_pack_avx512.cc). Internal to bf16_dot.cc and its tests; call them only where
// bf16dot::KernelRuns (or the CPU's AVX-512 features) says the CPU has the instructions.
#ifndef DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_
#define DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_

#include <cstdint>

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

// bf16dot::TileProduct for Kernel::kAvx512Bf16 (16 output columns per zmm accumulator).
void Avx512Bf16TileProduct(const uint16_t* a, int64_t a_stride, int mt, const uint16_t* b,
                           int64_t b_stride, int nt, int64_t kt, float* c, int64_t ldc);

// Row `row` of a BF16, FP8Block or MXFP4 weight decoded to BF16 bits out[0, K) (the values of
// ref::WeightAt rounded by FloatToBf16), 16 / 32 columns per AVX-512 step. Returns whether every
// value is a BF16-exact normal number, zero or infinity (PackB's test); where it is not, out
// holds unspecified bits and the caller takes the FP32 fallback. Needs AVX-512 F/BW/VL/DQ
// (bf16_dot_pack_avx512.cc).
bool Avx512DecodeRowBf16(const WeightView& w, int64_t row, uint16_t* out);

}  // namespace deepinfer::kernels::bf16dot::internal

#endif  // DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_
