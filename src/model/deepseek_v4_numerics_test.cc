#include "model/deepseek_v4_numerics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::model::dsv4 {
namespace {

TEST(DsV4Numerics, RoundBf16HandValues) {
  EXPECT_EQ(RoundBf16(1.0f), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(RoundBf16(1.0f + std::ldexp(1.f, -8)), 1.0f);
  EXPECT_EQ(RoundBf16(1.0f + 3 * std::ldexp(1.f, -8)), 1.0f + std::ldexp(1.f, -6));
}

// RoundE4M3 against the grid itself: the nearest of the 127 finite non-negative e4m3 values
// (decoded by E4M3ToF32), ties to the even code, saturating at 448, sign restored; for a spread
// of 2^20 bit patterns over every exponent (both signs, subnormals, infinities) plus the
// midpoints between neighbouring grid values and the points just beside them.
TEST(DsV4Numerics, RoundE4M3MatchesTheGrid) {
  std::vector<double> grid;  // codes 0..126: increasing
  for (int c = 0; c < 127; ++c) grid.push_back(E4M3ToF32(static_cast<uint8_t>(c)));
  auto oracle = [&](float x) -> float {
    const double a = std::fabs(static_cast<double>(x));
    if (a >= 448.0) return std::copysign(448.0f, x);
    size_t hi = std::upper_bound(grid.begin(), grid.end(), a) - grid.begin();  // grid[hi] > a
    size_t lo = hi - 1;
    const double dl = a - grid[lo], dh = grid[hi] - a;
    const size_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return std::copysign(static_cast<float>(grid[pick]), x);
  };
  std::vector<float> xs;
  for (uint64_t i = 0; i < (uint64_t{1} << 32); i += 4099) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(i));
    if (!std::isnan(x)) xs.push_back(x);
  }
  for (size_t c = 0; c + 1 < grid.size(); ++c) {
    const float mid = static_cast<float>((grid[c] + grid[c + 1]) / 2);  // exact: few bits
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f), -mid});
  }
  xs.insert(xs.end(), {std::numeric_limits<float>::infinity(), 464.0f, 480.0f, 1e38f,
                       std::numeric_limits<float>::denorm_min()});
  for (float x : xs) {
    if (x == 0.0f) continue;
    ASSERT_EQ(std::bit_cast<uint32_t>(RoundE4M3(x)), std::bit_cast<uint32_t>(oracle(x)))
        << std::hexfloat << x;
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(RoundE4M3(-0.0f)), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_TRUE(std::isnan(RoundE4M3(std::numeric_limits<float>::quiet_NaN())));
}

TEST(DsV4Numerics, E4M3RoundingHandValues) {
  EXPECT_EQ(RoundE4M3(448.f), 448.f);
  EXPECT_EQ(RoundE4M3(17.f), 16.f);                    // step 2 in [16, 32): 17 ties to even 16
  EXPECT_EQ(RoundE4M3(19.f), 20.f);                    // 19 ties -> 20 (10 is even)
  EXPECT_EQ(RoundE4M3(1.0625f), 1.0f);                 // step 1/8 in [1, 2): halfway -> even
  EXPECT_EQ(RoundE4M3(-0.001953125f), -0.001953125f);  // smallest subnormal
  EXPECT_EQ(RoundE4M3(0.0009765625f), 0.0f);           // half of it ties to 0
  // Every decoded byte is a fixed point of the rounding.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const float v = E4M3ToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(RoundE4M3(v), v) << c;
    EXPECT_EQ(E4M3ToF32(F32ToE4M3(v)), v) << c;
  }
}

TEST(DsV4Numerics, E2M1RoundingHandValues) {
  EXPECT_EQ(RoundE2M1(5.f), 4.f);  // tie between 4 and 6 -> 4 (mantissa even)
  EXPECT_EQ(RoundE2M1(2.5f), 2.f);
  EXPECT_EQ(RoundE2M1(0.25f), 0.f);
  EXPECT_EQ(RoundE2M1(0.75f), 1.f);
  EXPECT_EQ(RoundE2M1(-5.5f), -6.f);
}

TEST(DsV4Numerics, Fp8SimUsesPowerOfTwoScale) {
  // amax 1.0 -> scale 2^ceil(log2(1/448)) = 2^-8; values become e4m3 multiples of 2^-8.
  float x[64];
  for (int i = 0; i < 64; ++i) x[i] = (i - 32) / 32.0f;
  Fp8SimInPlace(x, 64, 64);
  for (int i = 0; i < 64; ++i) {
    const float expect = RoundE4M3((i - 32) / 32.0f * 256.f) / 256.f;
    EXPECT_EQ(x[i], expect);
  }
}

TEST(DsV4Numerics, HadamardIsOrthonormal) {
  float x[128] = {};
  x[0] = 1.f;
  Hadamard128InPlace(x);
  for (int i = 0; i < 128; ++i) EXPECT_FLOAT_EQ(x[i], 1.0f / std::sqrt(128.f));
  Hadamard128InPlace(x);  // H is its own inverse when normalised
  EXPECT_NEAR(x[0], 1.f, 1e-6);
  for (int i = 1; i < 128; ++i) EXPECT_NEAR(x[i], 0.f, 1e-6);
}

TEST(DsV4Numerics, YarnRampMatchesSpecNumbers) {
  // Spec §3.5.3: dim 64, base 160000, L0 65536, beta 32/1 -> pairs 0..14 unchanged, 25..31 / 16.
  const auto plain = RopeFrequencies(64, 160000, 0, 16, 32, 1);
  const auto yarn = RopeFrequencies(64, 160000, 65536, 16, 32, 1);
  for (int i = 0; i <= 15; ++i) EXPECT_DOUBLE_EQ(yarn[i], plain[i]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_NEAR(yarn[i], plain[i] / 16, 1e-18) << i;
  EXPECT_LT(yarn[20], plain[20]);
  EXPECT_GT(yarn[20], plain[20] / 16);
}

TEST(DsV4Numerics, LinearMatchesDequantisedProduct) {
  // FP8 block weight [3, 256] with distinct block scales; activation quantisation off/on.
  std::vector<uint8_t> w(3 * 256);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>((i * 37 + 11) % 0x7e);
  std::vector<uint8_t> s = {120, 126};
  WeightMatrix m;
  m.format = WeightFormat::kFp8Block;
  m.rows = 3;
  m.cols = 256;
  m.data = w.data();
  m.scale = s.data();
  m.scale_cols = 2;
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = std::sin(i * 0.37f);
  float y[3];
  Linear(m, x.data(), 1, y, false);
  for (int r = 0; r < 3; ++r) {
    double ref = 0;
    for (int k = 0; k < 256; ++k) ref += static_cast<double>(x[k]) * m.At(r, k);
    EXPECT_NEAR(y[r], ref, 1e-4 * (1 + std::fabs(ref)));
  }
  Linear(m, x.data(), 1, y, true);
  std::vector<float> q(256), sc(2);
  QuantizeE4M3Blocks(x.data(), 256, 128, q.data(), sc.data());
  for (int r = 0; r < 3; ++r) {
    double ref = 0;
    for (int k = 0; k < 256; ++k) ref += static_cast<double>(q[k]) * sc[k / 128] * m.At(r, k);
    EXPECT_NEAR(y[r], ref, 1e-4 * (1 + std::fabs(ref)));
  }
}

TEST(DsV4Numerics, Fp4WeightNibbleOrder) {
  // Byte 0x21: low nibble 1 (0.5) is column 0, high nibble 2 (1.0) is column 1 (spec §2.4).
  std::vector<uint8_t> w(16, 0);
  w[0] = 0x21;
  std::vector<uint8_t> s = {128};  // 2^1
  WeightMatrix m;
  m.format = WeightFormat::kMxFp4;
  m.rows = 1;
  m.cols = 32;
  m.data = w.data();
  m.scale = s.data();
  m.scale_cols = 1;
  EXPECT_EQ(m.At(0, 0), 1.0f);
  EXPECT_EQ(m.At(0, 1), 2.0f);
  EXPECT_EQ(m.At(0, 2), 0.0f);
}

}  // namespace
}  // namespace deepinfer::model::dsv4
