// The hardware tile products of the BF16-dot GEMM (bf16_dot.h), each in its own file compiled
// with per-function target attributes so that the rest of the binary stays x86-64-v3: AMX-BF16
// (bf16_dot_amx.cc) and AVX512_BF16 (bf16_dot_avx512bf16.cc). Internal to bf16_dot.cc and its
// tests; call them only where bf16dot::KernelRuns says the CPU has the instructions.
#ifndef DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_
#define DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_

#include <cstdint>

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

}  // namespace deepinfer::kernels::bf16dot::internal

#endif  // DEEPINFER_KERNELS_CPU_BF16_DOT_KERNELS_H_
