// Opens the AVX-512 code region of avx512.cc and avx512_ops.cc, and holds their shared helpers.
// Include it after every other #include of those files (avx512.h explains why), and close the
// region at the end of the file with avx512_inl_end.h. It relies on their earlier #include of
// <immintrin.h> and <cstdint>. From here on the code is compiled for AVX-512 F/BW/VL/DQ
// (`#pragma GCC target`), or, in kernels_avx512_emulated_test (DEEPINFER_AVX512_EMULATION), for
// the baseline ISA with the intrinsics emulated on AVX2 (avx512_emulation.h).
#ifndef DEEPINFER_KERNELS_CPU_AVX512_INL_H_
#define DEEPINFER_KERNELS_CPU_AVX512_INL_H_

#ifdef DEEPINFER_AVX512_EMULATION
#include "kernels/cpu/avx512_emulation.h"
#elif defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
#endif
#ifndef __clang__
// GCC 12's AVX-512 intrinsics build their unused pass-through operand from a self-initialised
// variable (_mm512_undefined_ps), which the uninitialised-use warnings report at every inlined
// use (a false positive: the operand is never read).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace deepinfer::kernels::avx512 {
namespace {

// The 16-lane reduction order (ops.h): lanes l and l + 8 added, then the AVX2 combination
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), instruction for instruction as avx2's HorizontalSum.
inline float HorizontalSum16(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// The lanes that hold elements when r are left: the first min(r, 16) (none for r <= 0).
inline __mmask16 LanesLeft(int64_t r) {
  return r >= 16  ? static_cast<__mmask16>(0xFFFF)
         : r <= 0 ? static_cast<__mmask16>(0)
                  : static_cast<__mmask16>((uint32_t{1} << r) - 1u);
}

// 16 BF16 values widened exactly to FP32 (bit placement).
inline __m512 WidenBf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace
}  // namespace deepinfer::kernels::avx512

#endif  // DEEPINFER_KERNELS_CPU_AVX512_INL_H_
