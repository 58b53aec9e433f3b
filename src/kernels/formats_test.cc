// Format conversions and quantisation simulations against hand-computed values from the spec
// (shared/spec/deepseek-v4.md §2.2-2.5, §3.6.1) and IEEE/OCP definitions.
#include "kernels/formats.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference.h"
#include "kernels/ops.h"

namespace deepinfer::kernels {
namespace {

TEST(Bf16Test, RoundToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  // 1 + 2^-8 is exactly halfway between 0x3F80 and 0x3F81: ties to the even 0x3F80.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F808000u)), 0x3F80);
  // 1 + 3·2^-8 is halfway between 0x3F81 and 0x3F82: even is 0x3F82.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F818000u)), 0x3F82);
  // Just above halfway rounds up.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F808001u)), 0x3F81);
  // Largest finite float overflows to +inf under RNE.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload is only in the low bits must stay NaN (not become inf).
  EXPECT_TRUE(std::isnan(RoundBf16(BitsToFloat(0x7F800001u))));
  EXPECT_EQ(Bf16ToFloat(0x3FC0), 1.5f);
}

TEST(Fp8E4m3Test, DecodeHandValues) {
  EXPECT_EQ(Fp8E4m3ToFloat(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(Fp8E4m3ToFloat(0x80)));
  EXPECT_EQ(Fp8E4m3ToFloat(0x01), 0.001953125f);   // 2^-9, smallest subnormal
  EXPECT_EQ(Fp8E4m3ToFloat(0x07), 7.0f / 512.0f);  // largest subnormal
  EXPECT_EQ(Fp8E4m3ToFloat(0x08), 0.015625f);      // 2^-6, smallest normal
  EXPECT_EQ(Fp8E4m3ToFloat(0x38), 1.0f);           // exponent field 7 = bias
  EXPECT_EQ(Fp8E4m3ToFloat(0x3C), 1.5f);
  EXPECT_EQ(Fp8E4m3ToFloat(0x40), 2.0f);
  EXPECT_EQ(Fp8E4m3ToFloat(0x7E), 448.0f);  // max finite
  EXPECT_EQ(Fp8E4m3ToFloat(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(Fp8E4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(Fp8E4m3ToFloat(0xFF)));
  EXPECT_EQ(Fp8E4m3ToFloat(0x77), 240.0f);  // 1.875 · 2^7
}

TEST(Fp8E4m3Test, EncodeRoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const float v = Fp8E4m3ToFloat(static_cast<uint8_t>(c));
    EXPECT_EQ(FloatToFp8E4m3(v), c) << "code " << c << " value " << v;
  }
}

TEST(Fp8E4m3Test, EncodeRoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(RoundFp8E4m3(1.0625f), 1.0f);   // halfway 1 / 1.125 -> even mantissa 0
  EXPECT_EQ(RoundFp8E4m3(1.1875f), 1.25f);  // halfway 1.125 / 1.25 -> even mantissa 2
  EXPECT_EQ(RoundFp8E4m3(1.07f), 1.125f);
  EXPECT_EQ(RoundFp8E4m3(448.0f), 448.0f);
  EXPECT_EQ(RoundFp8E4m3(464.0f), 448.0f);  // halfway to the NaN slot: saturate
  EXPECT_EQ(RoundFp8E4m3(1e9f), 448.0f);
  EXPECT_EQ(RoundFp8E4m3(-1e9f), -448.0f);
  EXPECT_EQ(RoundFp8E4m3(std::ldexp(1.0f, -10)), 0.0f);                      // half of 2^-9 -> 0
  EXPECT_EQ(RoundFp8E4m3(3 * std::ldexp(1.0f, -10)), std::ldexp(1.0f, -8));  // 1.5 q -> 2 q
  EXPECT_EQ(RoundFp8E4m3(5 * std::ldexp(1.0f, -10)), std::ldexp(1.0f, -8));  // 2.5 q -> 2 q
  EXPECT_EQ(FloatToFp8E4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
}

TEST(E8m0Test, Decode) {
  EXPECT_EQ(E8m0ToFloat(127), 1.0f);
  EXPECT_EQ(E8m0ToFloat(128), 2.0f);
  EXPECT_EQ(E8m0ToFloat(120), 1.0f / 128.0f);
  EXPECT_EQ(E8m0ToFloat(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(E8m0ToFloat(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8m0ToFloat(255)));
}

TEST(Fp4E2m1Test, TableAndRounding) {
  const float expected[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(Fp4E2m1ToFloat(static_cast<uint8_t>(i)), expected[i]);
    EXPECT_EQ(FloatToFp4E2m1(expected[i]), i) << i;
  }
  // Ties go to the even code (codes 0,2,4,6 are "even").
  EXPECT_EQ(RoundFp4E2m1(0.25f), 0.0f);
  EXPECT_EQ(RoundFp4E2m1(0.75f), 1.0f);
  EXPECT_EQ(RoundFp4E2m1(1.25f), 1.0f);
  EXPECT_EQ(RoundFp4E2m1(1.75f), 2.0f);
  EXPECT_EQ(RoundFp4E2m1(2.5f), 2.0f);
  EXPECT_EQ(RoundFp4E2m1(3.5f), 4.0f);
  EXPECT_EQ(RoundFp4E2m1(5.0f), 4.0f);
  EXPECT_EQ(RoundFp4E2m1(5.01f), 6.0f);
  EXPECT_EQ(RoundFp4E2m1(-2.6f), -3.0f);
  EXPECT_EQ(RoundFp4E2m1(100.0f), 6.0f);
}

// Spec §2.4: byte j of a row holds column 2j in its low nibble, 2j+1 in its high nibble.
TEST(Fp4E2m1Test, NibbleOrderMatchesSpec) {
  // Row [0.5, -1, 6, 0, -6, 1.5] -> codes [1, 0xA, 7, 0, 0xF, 3].
  EXPECT_EQ(PackFp4Pair(FloatToFp4E2m1(0.5f), FloatToFp4E2m1(-1.0f)), 0xA1);
  EXPECT_EQ(PackFp4Pair(FloatToFp4E2m1(6.0f), FloatToFp4E2m1(0.0f)), 0x07);
  EXPECT_EQ(PackFp4Pair(FloatToFp4E2m1(-6.0f), FloatToFp4E2m1(1.5f)), 0x3F);

  // A one-row MXFP4 weight of 32 columns built from those hand-computed bytes, scale 2^1.
  std::vector<uint8_t> data(16, 0);
  data[0] = 0xA1;
  data[1] = 0x07;
  data[2] = 0x3F;
  const uint8_t scale = 128;
  WeightView w{WeightDType::kMXFP4, data.data(), &scale, ScaleDType::kE8M0, 1, 32};
  std::vector<float> out(32);
  DequantizeWeight(w, out.data());
  const float expect[6] = {1.0f, -2.0f, 12.0f, 0.0f, -12.0f, 3.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], expect[i]) << i;
  for (int i = 6; i < 32; ++i) EXPECT_EQ(out[i], 0.0f) << i;
}

TEST(Pow2ScaleTest, CeilLog2) {
  // amax/qmax exactly a power of two: log2 is an integer, no rounding up.
  EXPECT_EQ(Pow2ScaleExponent(448.0f, kActQuantAmaxFloor, 448.0f), 0);
  EXPECT_EQ(Pow2ScaleExponent(896.0f, kActQuantAmaxFloor, 448.0f), 1);
  EXPECT_EQ(Pow2ScaleExponent(449.0f, kActQuantAmaxFloor, 448.0f), 1);
  EXPECT_EQ(Pow2ScaleExponent(447.0f, kActQuantAmaxFloor, 448.0f), 0);
  EXPECT_EQ(Pow2ScaleExponent(1.0f, kActQuantAmaxFloor, 448.0f), -8);  // log2(1/448) = -8.8
  // Zero block: the floor 1e-4 gives ceil(log2(1e-4/448)) = ceil(-22.09) = -22.
  EXPECT_EQ(Pow2ScaleExponent(0.0f, kActQuantAmaxFloor, 448.0f), -22);
  EXPECT_EQ(Pow2ScaleExponent(6.0f, kFp4AmaxFloor, 6.0f), 0);
  EXPECT_EQ(Pow2ScaleExponent(0.0f, kFp4AmaxFloor, 6.0f), -126);
}

TEST(ActQuantFp8SimTest, EdgeBlocks) {
  // Block 0: amax exactly 448 -> scale 1; values are just rounded to e4m3.
  // Block 1: zeros -> stay zero. Block 2: contains NaN -> NaN stays, others quantised with
  // the amax of the finite values (1.0 -> scale 2^-8, 1.0/2^-8 = 256 exact in e4m3).
  std::vector<float> x(3 * 128, 0.0f);
  x[0] = 448.0f;
  x[1] = -448.0f;
  x[2] = 1.0625f;                // -> 1.0 (tie to even)
  x[3] = std::ldexp(3.0f, -10);  // 1.5 subnormal quanta -> 2 quanta = 2^-8
  x[256] = std::numeric_limits<float>::quiet_NaN();
  x[257] = 1.0f;
  x[258] = 0.3f;  // /2^-8 = 76.8 -> 80 (quantum 8 in [64,128)) -> 80·2^-8 = 0.3125
  ActQuantFp8Sim(x.data(), 1, 384);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], -448.0f);
  EXPECT_EQ(x[2], 1.0f);
  EXPECT_EQ(x[3], std::ldexp(1.0f, -8));
  for (int i = 128; i < 256; ++i) EXPECT_EQ(x[i], 0.0f);
  EXPECT_TRUE(std::isnan(x[256]));
  EXPECT_EQ(x[257], 1.0f);
  EXPECT_EQ(x[258], 0.3125f);
}

TEST(ActQuantFp8SimTest, AmaxAboveRangeDoublesScale) {
  std::vector<float> x(128, 0.0f);
  x[0] = 449.0f;  // scale 2: 449/2 = 224.5 -> 224 (quantum 16 in [128,256)) -> 448
  x[1] = 3.0f;    // 1.5 -> 1.5 -> 3
  x[2] = 0.01f;   // 0.005 -> subnormal region (< 2^-6): quantum 2^-9 -> 3·2^-9 -> 6·2^-9
  ActQuantFp8Sim(x.data(), 1, 128);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], 3.0f);
  EXPECT_EQ(x[2], 6.0f / 512.0f);
}

TEST(KvFp8SimTest, LeavesRopeDimsAlone) {
  std::vector<float> x(512);
  for (int i = 0; i < 512; ++i) x[i] = 0.001f * static_cast<float>(i) + 0.0003f;
  const std::vector<float> orig = x;
  std::vector<float> expect = x;
  // Dims 0..447 in 7 blocks of 64 with their own scales; dims 448..511 untouched.
  for (int b = 0; b < 7; ++b) ref::ActQuantFp8Sim(expect.data() + 64 * b, 1, 64, 64);
  KvFp8Sim(x.data(), 1, 512, 64);
  for (int i = 0; i < 512; ++i) EXPECT_EQ(x[i], expect[i]) << i;
  EXPECT_EQ(x[500], orig[500]);
  EXPECT_NE(x[447], orig[447]);  // was quantised
}

TEST(Fp4SimTest, HandValues) {
  std::vector<float> x(64, 0.0f);
  // Block 0: amax 6 -> scale 1.
  x[0] = 6.0f;
  x[1] = 0.25f;  // -> 0
  x[2] = 0.75f;  // -> 1
  x[3] = 2.5f;   // -> 2
  x[4] = -5.5f;  // -> -6
  x[5] = 5.0f;   // -> 4
  // Block 1: amax 12 -> scale 2: 7 -> 3.5 -> 4 -> 8; 1 -> 0.5 -> 1.
  x[32] = 12.0f;
  x[33] = 7.0f;
  x[34] = 1.0f;
  Fp4Sim(x.data(), 1, 64);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_EQ(x[2], 1.0f);
  EXPECT_EQ(x[3], 2.0f);
  EXPECT_EQ(x[4], -6.0f);
  EXPECT_EQ(x[5], 4.0f);
  EXPECT_EQ(x[32], 12.0f);
  EXPECT_EQ(x[33], 8.0f);
  EXPECT_EQ(x[34], 1.0f);
}

TEST(HadamardTest, MatchesDefinition) {
  const int n = 128;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = std::sin(0.37f * i) + 0.1f * i;
  std::vector<float> y = x;
  Hadamard128(y.data(), 1);
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int j = 0; j < n; ++j) s += ((__builtin_popcount(i & j) & 1) ? -1.0 : 1.0) * x[j];
    s /= std::sqrt(128.0);
    EXPECT_NEAR(y[i], s, 1e-5 * (1 + std::fabs(s))) << i;
  }
  // Orthonormal: applying twice gives back the input.
  Hadamard128(y.data(), 1);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], 1e-5 * (1 + std::fabs(x[i])));
}

TEST(DequantizeTest, Fp8BlockScalesAndNaNCodes) {
  // 130 x 130 FP8 weight: scale blocks [2, 2]. Check a few elements against hand math.
  const int N = 130, K = 130;
  std::vector<uint8_t> data(N * K, 0x38);          // 1.0
  data[0] = 0x7F;                                  // NaN code -> 0
  data[1] = 0xC0;                                  // -2.0
  data[129 * K + 129] = 0x3C;                      // 1.5 in block (1,1)
  const uint8_t scales[4] = {127, 130, 126, 120};  // 1, 8, 0.5, 2^-7
  WeightView w{WeightDType::kFP8Block, data.data(), scales, ScaleDType::kE8M0, N, K};
  std::vector<float> out(N * K);
  DequantizeWeight(w, out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[128], 8.0f);          // row 0, col 128: block (0,1)
  EXPECT_EQ(out[128 * K + 5], 0.5f);  // block (1,0)
  EXPECT_EQ(out[129 * K + 129], 1.5f / 128.0f);
  // F32 scales are used as given.
  const float fscales[4] = {0.75f, 1.0f, 1.0f, 1.0f};
  WeightView wf{WeightDType::kFP8Block, data.data(), fscales, ScaleDType::kF32, N, K};
  DequantizeWeight(wf, out.data());
  EXPECT_EQ(out[1], -1.5f);
  // SliceRows on a 128 boundary keeps the scale rows aligned.
  WeightView s = SliceRows(w, 128, 2);
  std::vector<float> srow(2 * K);
  DequantizeWeight(s, srow.data());
  EXPECT_EQ(srow[5], 0.5f);
  EXPECT_EQ(srow[K + 129], 1.5f / 128.0f);
}

TEST(WeightSizesTest, MatchSpecShapes) {
  // attn.wq_a: FP8 [1024, 4096], scales [8, 32] (spec §2.3).
  EXPECT_EQ(WeightDataBytes(WeightDType::kFP8Block, 1024, 4096), 1024 * 4096);
  EXPECT_EQ(WeightScaleCount(WeightDType::kFP8Block, 1024, 4096), 8 * 32);
  // Expert w2: MXFP4 logical [4096, 2048] stored [4096, 1024] bytes, scales [4096, 64].
  EXPECT_EQ(WeightDataBytes(WeightDType::kMXFP4, 4096, 2048), 4096 * 1024);
  EXPECT_EQ(WeightScaleCount(WeightDType::kMXFP4, 4096, 2048), 4096 * 64);
  EXPECT_EQ(WeightScaleCount(WeightDType::kFP8Block, 130, 130), 4);
  EXPECT_EQ(WeightDataBytes(WeightDType::kBF16, 3, 5), 30);
}

}  // namespace
}  // namespace deepinfer::kernels
