// Test-only emulation of the AVX-512 intrinsics that avx512.cc, avx512_ops.cc and
// avx512_inl.h use, on AVX2: each 512-bit vector is a pair of 256-bit halves and each mask
// operation a per-lane loop written from the Intel intrinsics guide's pseudo-code (masked loads
// and stores touch only the selected elements, aligned loads and stores abort when misaligned,
// FMAs stay fused). Compiled in only with DEEPINFER_AVX512_EMULATION (the test target
// kernels_avx512_emulated_test, src/kernels/CMakeLists.txt), so that machines without AVX-512,
// CI's included, run the AVX-512 kernels' logic against the scalar reference. Never part of the
// library. It checks the kernels' logic under our reading of each intrinsic, not the hardware.
#ifndef DEEPINFER_KERNELS_CPU_AVX512_EMULATION_H_
#define DEEPINFER_KERNELS_CPU_AVX512_EMULATION_H_

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
namespace shim {
struct M512 {
  __m256 lo, hi;
};
struct M512i {
  __m256i lo, hi;
};
inline M512 set1_ps(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
inline M512i set1_epi32(int v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
inline M512 setzero_ps() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
#define SHIM_BIN(name, T, op) \
  inline T name(T a, T b) { return {op(a.lo, b.lo), op(a.hi, b.hi)}; }
SHIM_BIN(add_ps, M512, _mm256_add_ps)
SHIM_BIN(sub_ps, M512, _mm256_sub_ps)
SHIM_BIN(mul_ps, M512, _mm256_mul_ps)
SHIM_BIN(div_ps, M512, _mm256_div_ps)
SHIM_BIN(min_ps, M512, _mm256_min_ps)
SHIM_BIN(max_ps, M512, _mm256_max_ps)
SHIM_BIN(andnot_ps, M512, _mm256_andnot_ps)
SHIM_BIN(add_epi32, M512i, _mm256_add_epi32)
SHIM_BIN(sub_epi32, M512i, _mm256_sub_epi32)
SHIM_BIN(and_si512, M512i, _mm256_and_si256)
SHIM_BIN(or_si512, M512i, _mm256_or_si256)
inline M512 fmadd_ps(M512 a, M512 b, M512 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline M512 fnmadd_ps(M512 a, M512 b, M512 c) {
  return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}
inline M512 roundscale_ps(M512 a, int imm) {
  if (imm != (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)) std::abort();
  return {_mm256_round_ps(a.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
          _mm256_round_ps(a.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
inline M512i cvtps_epi32(M512 a) { return {_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)}; }
inline M512i srli_epi32(M512i a, int n) {
  return {_mm256_srli_epi32(a.lo, n), _mm256_srli_epi32(a.hi, n)};
}
inline M512i srai_epi32(M512i a, int n) {
  return {_mm256_srai_epi32(a.lo, n), _mm256_srai_epi32(a.hi, n)};
}
inline M512i slli_epi32(M512i a, int n) {
  return {_mm256_slli_epi32(a.lo, n), _mm256_slli_epi32(a.hi, n)};
}
inline M512i castps_si512(M512 a) { return {_mm256_castps_si256(a.lo), _mm256_castps_si256(a.hi)}; }
inline M512 castsi512_ps(M512i a) { return {_mm256_castsi256_ps(a.lo), _mm256_castsi256_ps(a.hi)}; }
template <int kImm>
inline __mmask16 cmp_ps_mask(M512 a, M512 b) {
  const int lo = _mm256_movemask_ps(_mm256_cmp_ps(a.lo, b.lo, kImm));
  const int hi = _mm256_movemask_ps(_mm256_cmp_ps(a.hi, b.hi, kImm));
  return static_cast<__mmask16>(lo | (hi << 8));
}
// The lanes of a (64 bytes, any element type) to t[0..64/sizeof(T)) and back.
template <class V, class T>
inline void ToLanes(const V& a, T* t) {
  static_assert(sizeof(V) == 64);
  std::memcpy(t, &a, 64);
}
template <class V, class T>
inline V FromLanes(const T* t) {
  V r;
  std::memcpy(&r, t, 64);
  return r;
}
inline void ToArr(M512 a, float* t) { ToLanes(a, t); }
inline M512 FromArr(const float* t) { return FromLanes<M512>(t); }
inline void ToArrI(M512i a, int32_t* t) { ToLanes(a, t); }
inline M512i FromArrI(const int32_t* t) { return FromLanes<M512i>(t); }
inline void ToBytes(M512i a, uint8_t* t) { ToLanes(a, t); }
inline M512i FromBytes(const uint8_t* t) { return FromLanes<M512i>(t); }
// dst[i] = k[i] ? b[i] : a[i] over 16 lanes of T.
template <class V, class T>
inline V MaskBlend(__mmask16 k, V a, V b) {
  T x[16], y[16], o[16];
  ToLanes(a, x);
  ToLanes(b, y);
  for (int i = 0; i < 16; ++i) o[i] = (k >> i & 1) ? y[i] : x[i];
  return FromLanes<V>(o);
}
inline M512 mask_blend_ps(__mmask16 k, M512 a, M512 b) { return MaskBlend<M512, float>(k, a, b); }
inline M512i mask_blend_epi32(__mmask16 k, M512i a, M512i b) {
  return MaskBlend<M512i, int32_t>(k, a, b);
}
inline M512 mask_max_ps(M512 src, __mmask16 k, M512 a, M512 b) {
  return mask_blend_ps(k, src, max_ps(a, b));
}
inline M512 maskz_mov_ps(__mmask16 k, M512 a) { return mask_blend_ps(k, setzero_ps(), a); }
inline M512 maskz_loadu_ps(__mmask16 k, const float* p) {
  float o[16];
  for (int i = 0; i < 16; ++i) o[i] = (k >> i & 1) ? p[i] : 0.0f;
  return FromArr(o);
}
inline void mask_storeu_ps(float* p, __mmask16 k, M512 a) {
  float t[16];
  ToArr(a, t);
  for (int i = 0; i < 16; ++i)
    if (k >> i & 1) p[i] = t[i];
}
inline void store_ps(float* p, M512 a) {
  if (reinterpret_cast<uintptr_t>(p) % 64 != 0) std::abort();
  ToArr(a, p);
}
inline __m256 castps512_ps256(M512 a) { return a.lo; }
inline __m256 extractf32x8_ps(M512 a, int imm) {
  if (imm != 1) std::abort();
  return a.hi;
}
inline M512i cvtepu16_epi32(__m256i h) {
  return {_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)),
          _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1))};
}
inline __m256i maskz_loadu_epi16(__mmask16 k, const void* p) {
  uint16_t o[16];
  const uint16_t* s = static_cast<const uint16_t*>(p);
  for (int i = 0; i < 16; ++i) o[i] = (k >> i & 1) ? s[i] : 0;
  __m256i r;
  std::memcpy(&r, o, 32);
  return r;
}
}  // namespace shim
#define __m512 shim::M512
#define __m512i shim::M512i
#define _mm512_set1_ps shim::set1_ps
#define _mm512_set1_epi32 shim::set1_epi32
#define _mm512_setzero_ps shim::setzero_ps
#define _mm512_add_ps shim::add_ps
#define _mm512_sub_ps shim::sub_ps
#define _mm512_mul_ps shim::mul_ps
#define _mm512_div_ps shim::div_ps
#define _mm512_min_ps shim::min_ps
#define _mm512_max_ps shim::max_ps
#define _mm512_andnot_ps shim::andnot_ps
#define _mm512_add_epi32 shim::add_epi32
#define _mm512_sub_epi32 shim::sub_epi32
#define _mm512_and_si512 shim::and_si512
#define _mm512_or_si512 shim::or_si512
#define _mm512_fmadd_ps shim::fmadd_ps
#define _mm512_fnmadd_ps shim::fnmadd_ps
#undef _mm512_roundscale_ps
#define _mm512_roundscale_ps shim::roundscale_ps
#define _mm512_cvtps_epi32 shim::cvtps_epi32
#undef _mm512_srli_epi32
#undef _mm512_srai_epi32
#undef _mm512_slli_epi32
#define _mm512_srli_epi32 shim::srli_epi32
#define _mm512_srai_epi32 shim::srai_epi32
#define _mm512_slli_epi32 shim::slli_epi32
#define _mm512_castps_si512 shim::castps_si512
#define _mm512_castsi512_ps shim::castsi512_ps
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask(a, b, imm) shim::cmp_ps_mask<(imm)>(a, b)
#define _mm512_mask_blend_ps shim::mask_blend_ps
#define _mm512_mask_blend_epi32 shim::mask_blend_epi32
#define _mm512_mask_max_ps shim::mask_max_ps
#define _mm512_maskz_mov_ps shim::maskz_mov_ps
#define _mm512_maskz_loadu_ps shim::maskz_loadu_ps
#define _mm512_mask_storeu_ps shim::mask_storeu_ps
#define _mm512_store_ps shim::store_ps
#define _mm512_castps512_ps256 shim::castps512_ps256
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps shim::extractf32x8_ps
#define _mm512_cvtepu16_epi32 shim::cvtepu16_epi32
#define _mm256_maskz_loadu_epi16 shim::maskz_loadu_epi16

// ---- Additions for avx512.cc (Linear). Plain per-lane loops written from the Intel Intrinsics
// Guide pseudo-code; masked loads read only the selected elements.
namespace shim {
// vmovups zmm, m512 (no alignment requirement).
inline M512 loadu_ps(const void* p) {
  float o[16];
  std::memcpy(o, p, 64);
  return FromArr(o);
}
// vmovaps zmm, m512: #GP unless 64-byte aligned -> abort.
inline M512 load_ps(const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 64 != 0) std::abort();
  float o[16];
  std::memcpy(o, p, 64);
  return FromArr(o);
}
inline void storeu_ps(void* p, M512 a) {
  float t[16];
  ToArr(a, t);
  std::memcpy(p, t, 64);
}
inline void store_ps_v(void* p, M512 a) {
  if (reinterpret_cast<uintptr_t>(p) % 64 != 0) std::abort();
  float t[16];
  ToArr(a, t);
  std::memcpy(p, t, 64);
}
inline M512i loadu_si512(const void* p) {
  uint8_t o[64];
  std::memcpy(o, p, 64);
  return FromBytes(o);
}
inline M512i set1_epi8(char c) {
  uint8_t o[64];
  std::memset(o, static_cast<uint8_t>(c), 64);
  return FromBytes(o);
}
// dst.dword[i] = ZeroExtend(a.byte[i]), i = 0..15.
inline M512i cvtepu8_epi32(__m128i a) {
  uint8_t b[16];
  std::memcpy(b, &a, 16);
  int32_t o[16];
  for (int i = 0; i < 16; ++i) o[i] = static_cast<int32_t>(b[i]);
  return FromArrI(o);
}
// dst[i] = a[idx[i] & 15] (vpermps reads only bits 3:0 of each index dword).
inline M512 permutexvar_ps(M512i idx, M512 a) {
  int32_t ix[16];
  float x[16], o[16];
  ToArrI(idx, ix);
  ToArr(a, x);
  for (int i = 0; i < 16; ++i) o[i] = x[ix[i] & 15];
  return FromArr(o);
}
// IEEE binary16 -> binary32, exact (subnormal halves become normal floats; SNaN -> QNaN).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const int e = (h >> 10) & 31;
  const uint32_t m = h & 0x3FF;
  uint32_t bits;
  if (e == 31) {
    bits = sign | 0x7F800000u | (m << 13) | (m != 0 ? 0x00400000u : 0u);
  } else if (e == 0) {
    float v = std::ldexp(static_cast<float>(m), -24);  // exact
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else {
    bits = sign | (static_cast<uint32_t>(e - 15 + 127) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline M512 cvtph_ps(__m256i a) {
  uint16_t h[16];
  std::memcpy(h, &a, 32);
  float o[16];
  for (int i = 0; i < 16; ++i) o[i] = HalfToFloat(h[i]);
  return FromArr(o);
}
// k[i] = (a.byte[i] == b.byte[i]), 64 bits.
inline __mmask64 cmpeq_epi8_mask512(M512i a, M512i b) {
  uint8_t x[64], y[64];
  ToBytes(a, x);
  ToBytes(b, y);
  __mmask64 k = 0;
  for (int i = 0; i < 64; ++i)
    if (x[i] == y[i]) k |= __mmask64{1} << i;
  return k;
}
// k[i] = (a.byte[i] == b.byte[i]), 16 bits.
inline __mmask16 cmpeq_epi8_mask128(__m128i a, __m128i b) {
  uint8_t x[16], y[16];
  std::memcpy(x, &a, 16);
  std::memcpy(y, &b, 16);
  unsigned k = 0;
  for (int i = 0; i < 16; ++i)
    if (x[i] == y[i]) k |= 1u << i;
  return static_cast<__mmask16>(k);
}
// dst.byte[i] = k[i] ? mem.byte[i] : 0; unselected bytes are not read.
inline __m128i maskz_loadu_epi8(__mmask16 k, const void* p) {
  const uint8_t* s = static_cast<const uint8_t*>(p);
  uint8_t o[16];
  for (int i = 0; i < 16; ++i) o[i] = (k >> i & 1) ? s[i] : 0;
  __m128i r;
  std::memcpy(&r, o, 16);
  return r;
}
// dst[i] = k[i] ? a[i] * b[i] : 0.
inline M512 maskz_mul_ps(__mmask16 k, M512 a, M512 b) {
  float x[16], y[16], o[16];
  ToArr(a, x);
  ToArr(b, y);
  for (int i = 0; i < 16; ++i) {
    const float prod = x[i] * y[i];  // one IEEE single multiply
    o[i] = (k >> i & 1) ? static_cast<float>(prod) : 0.0f;
  }
  return FromArr(o);
}
// imm 0: lanes 0..7, imm 1: lanes 8..15 (imm bit 0 only).
inline __m256 extractf32x8_ps_any(M512 a, int imm) { return (imm & 1) ? a.hi : a.lo; }
}  // namespace shim
#define _mm512_loadu_ps shim::loadu_ps
#define _mm512_load_ps shim::load_ps
#define _mm512_storeu_ps shim::storeu_ps
#undef _mm512_store_ps
#define _mm512_store_ps shim::store_ps_v
#define _mm512_loadu_si512 shim::loadu_si512
#define _mm512_set1_epi8 shim::set1_epi8
#define _mm512_cvtepu8_epi32 shim::cvtepu8_epi32
#define _mm512_permutexvar_ps shim::permutexvar_ps
#define _mm512_cvtph_ps shim::cvtph_ps
#define _mm512_maskz_cvtph_ps(k, a) shim::maskz_mov_ps((k), shim::cvtph_ps(a))
#undef _mm512_cmpeq_epi8_mask
#define _mm512_cmpeq_epi8_mask shim::cmpeq_epi8_mask512
#undef _mm_cmpeq_epi8_mask
#define _mm_cmpeq_epi8_mask shim::cmpeq_epi8_mask128
#define _mm_maskz_loadu_epi8 shim::maskz_loadu_epi8
#define _mm512_maskz_mul_ps shim::maskz_mul_ps
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps shim::extractf32x8_ps_any

#endif  // DEEPINFER_KERNELS_CPU_AVX512_EMULATION_H_
