// AVX512_BF16 tile products of the BF16-dot GEMM (bf16_dot.h, Kernel::kAvx512Bf16): the B
// tile's pair row p is one zmm (16 output columns x 2 BF16), each activation row's BF16 pair p
// is broadcast, and VDPBF16PS accumulates into one zmm of 16 outputs, so an output element's
// order is Order::kVdp whatever the register blocking. Only this function carries the
// AVX512_BF16 target attribute.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/bf16_dot_kernels.h"

namespace deepinfer::kernels::bf16dot::internal {

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void Avx512Bf16TileProduct(
    const uint16_t* a, int64_t a_stride, int mt, const uint16_t* b, int64_t b_stride, int nt,
    int64_t kt, float* c, int64_t ldc) {
  constexpr int kRows = 4;  // activation rows per register block (4 x 2 accumulators)
  for (int i = 0; i < mt; ++i) {
    for (int r0 = 0; r0 < kTileM; r0 += kRows) {
      __m512 acc[kRows][2];
      for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      for (int64_t t = 0; t < kt; ++t) {
        const uint16_t* at = a + i * a_stride + t * kTileElems + r0 * kTileK;
        for (int p = 0; p < kTileK / 2; ++p) {
          __m512i bv[2];
          for (int j = 0; j < nt; ++j) {
            bv[j] = _mm512_loadu_si512(b + j * b_stride + t * kTileElems + p * 2 * kTileN);
          }
          for (int r = 0; r < kRows; ++r) {
            int32_t pair;
            std::memcpy(&pair, at + r * kTileK + 2 * p, sizeof(pair));
            const __m512i av = _mm512_set1_epi32(pair);
            for (int j = 0; j < nt; ++j) {
              acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)av, (__m512bh)bv[j]);
            }
          }
        }
      }
      for (int r = 0; r < kRows; ++r) {
        for (int j = 0; j < nt; ++j) {
          _mm512_storeu_ps(c + (i * kTileM + r0 + r) * ldc + j * kTileN, acc[r][j]);
        }
      }
    }
  }
}

}  // namespace deepinfer::kernels::bf16dot::internal
