// Scalar number-format conversions used by the checkpoint formats of DeepSeek-V4 and Llama
// (shared/spec/deepseek-v4.md §2.2-2.5): BF16, FP8 e4m3fn, E8M0 scales, FP4 e2m1, and the
// power-of-two block-scale rule of the reference's activation quantiser.
//
// Everything here is header-only, branchy and exact: these functions are the oracle that the
// vectorised kernels are tested against. Rounding is always round-to-nearest, ties to even.
#ifndef DEEPINFER_KERNELS_FORMATS_H_
#define DEEPINFER_KERNELS_FORMATS_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace deepinfer::kernels {

// ---------------------------------------------------------------------------------------------
// Bit casts.

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------------------------------------
// BF16: the upper 16 bits of an IEEE float32.

// Widening is exact.
inline float Bf16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// Round-to-nearest-even narrowing (what torch's .to(bfloat16) does). NaN stays a quiet NaN
// with its sign; overflow rounds to ±inf as IEEE requires.
inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// f rounded to the nearest BF16 value, returned as float.
inline float RoundBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

// ---------------------------------------------------------------------------------------------
// FP8 e4m3fn (OCP "fn" variant): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
// 0x7F and 0xFF are NaN; exponent field 0 holds subnormals m·2^-9; largest finite ±448.

inline constexpr float kFp8E4m3Max = 448.0f;

// Exact decode. NaN codes decode to NaN (the weight dequantisers map them to 0 instead, as
// DS4 does; see DequantizeWeight in ops.h).
inline float Fp8E4m3ToFloat(uint8_t code) {
  const uint32_t sign = code >> 7;
  const uint32_t exp = (code >> 3) & 0xF;
  const uint32_t man = code & 0x7;
  float v;
  if (exp == 0xF && man == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
  }
  return sign ? -v : v;
}

// Round-to-nearest-even encode. |f| > 448 saturates to ±448 (the reference clamps to the e4m3
// range before the cast); NaN encodes as 0x7F (with the sign bit of f).
inline uint8_t FloatToFp8E4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | 0x7F;
  float a = std::fabs(f);
  if (a >= kFp8E4m3Max) return sign | 0x7E;  // 448 = 1.75 * 2^8
  // Quantum of the binade a lives in (subnormal quantum 2^-9 below 2^-6).
  int e;
  std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1): binade exponent is e-1
  int binade = e - 1;
  if (binade < -6) binade = -6;
  const float quantum = std::ldexp(1.0f, binade - 3);
  const float q = std::nearbyint(a / quantum) * quantum;  // RNE (default rounding mode)
  if (q >= kFp8E4m3Max) return sign | 0x7E;
  if (q == 0.0f) return sign;
  int qe;
  std::frexp(q, &qe);
  int qb = qe - 1;
  if (qb < -6) {  // subnormal: m * 2^-9
    return sign | static_cast<uint8_t>(std::ldexp(q, 9));
  }
  const uint32_t man = static_cast<uint32_t>(std::ldexp(q, 3 - qb)) - 8;  // 8..15 -> 0..7
  return sign | static_cast<uint8_t>(((qb + 7) << 3) | man);
}

// f rounded to the nearest e4m3 value (saturating), returned as float.
inline float RoundFp8E4m3(float f) { return Fp8E4m3ToFloat(FloatToFp8E4m3(f)); }

// ---------------------------------------------------------------------------------------------
// E8M0 scale byte: value 2^(e-127). Byte 0 decodes to 2^-127 (a float32 subnormal, as DS4
// decodes it); 255 is NaN (never expected in a checkpoint).
inline float E8m0ToFloat(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return BitsToFloat(0x00400000u);  // 2^-127
  return BitsToFloat(static_cast<uint32_t>(e) << 23);
}

// std::ldexp(1, e - 127) for an E8M0 byte, without the libm call: E8m0ToFloat except that 255
// gives +inf (DeepSeek-V4.1's tile scales, kernels/linear_fp8_blocks.h, are defined this way).
inline float E8m0ToFloatLdexp(uint8_t e) {
  return e == 0xFF ? std::numeric_limits<float>::infinity() : E8m0ToFloat(e);
}

// ---------------------------------------------------------------------------------------------
// FP4 e2m1: bit 3 = sign, then 2 exponent bits and 1 mantissa bit. Values
// {0, 0.5, 1, 1.5, 2, 3, 4, 6} and their negatives. Packed two per byte: byte j of a row holds
// logical column 2j in its LOW nibble and column 2j+1 in its HIGH nibble (spec §2.4).

inline constexpr float kFp4E2m1Max = 6.0f;
inline constexpr float kFp4E2m1Table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

inline float Fp4E2m1ToFloat(uint8_t nibble) { return kFp4E2m1Table[nibble & 0xF]; }

// Round-to-nearest-even encode into a nibble; |f| > 6 saturates to ±6; NaN encodes as +0
// (e2m1 has no NaN; callers that care must check first).
inline uint8_t FloatToFp4E2m1(float f) {
  if (std::isnan(f)) return 0;
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  const float a = std::fabs(f);
  // Midpoints between consecutive magnitudes; at an exact midpoint choose the even code.
  //   codes:     0    1    2    3    4    5    6    7
  //   values:    0   0.5   1   1.5   2    3    4    6
  uint8_t code;
  if (a <= 0.25f)
    code = 0;  // tie 0.25 -> 0 (even)
  else if (a < 0.75f)
    code = 1;
  else if (a <= 1.25f)
    code = 2;  // tie 0.75 -> 2, tie 1.25 -> 2
  else if (a < 1.75f)
    code = 3;
  else if (a <= 2.5f)
    code = 4;  // tie 1.75 -> 4, tie 2.5 -> 4
  else if (a < 3.5f)
    code = 5;
  else if (a <= 5.0f)
    code = 6;  // tie 3.5 -> 6, tie 5 -> 6
  else
    code = 7;
  return sign | code;
}

inline float RoundFp4E2m1(float f) { return Fp4E2m1ToFloat(FloatToFp4E2m1(f)); }

// Packs two nibbles: `even` goes to the low nibble (spec §2.4).
inline uint8_t PackFp4Pair(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xF) | ((odd & 0xF) << 4));
}

// ---------------------------------------------------------------------------------------------
// Power-of-two block scale of the reference's quantisers (spec §2.5, §3.5 step 4, §3.6.1):
// scale = 2^ceil(log2(max(amax, amax_floor) / qmax)). Computed exactly (the division is done in
// double, whose result is a power of two only when the exact quotient is), so it equals the
// real-number definition used by the float64 oracle. Returns the exponent.
inline int Pow2ScaleExponent(float amax, float amax_floor, float qmax) {
  double a = static_cast<double>(amax);
  if (!(a >= amax_floor)) a = amax_floor;  // also replaces NaN by the floor
  const double t = a / static_cast<double>(qmax);
  int e;
  const double frac = std::frexp(t, &e);  // t = frac * 2^e, frac in [0.5, 1)
  return frac == 0.5 ? e - 1 : e;         // exact power of two: log2 is integral
}

// Parameters of the three quantisers.
inline constexpr float kActQuantAmaxFloor = 1e-4f;   // FP8 activations / KV
inline constexpr float kFp4AmaxFloor = 0x1.8p-124f;  // 6 * 2^-126

}  // namespace deepinfer::kernels

#endif  // DEEPINFER_KERNELS_FORMATS_H_
