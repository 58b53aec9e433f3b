// AVX-512 ops (avx512_ops.cc) against independent oracles: the AVX2 versions bitwise for the
// lane-wise ops (ops.h: elementwise ops compute each element with the same instructions on both
// ISAs), the scalar reference (cpu/reference.h) exactly where it is exact and within a relative
// error for the reductions, whose 16-lane order differs from both. Runs only where ActiveIsa() is
// kAvx512; skipped elsewhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/cpu_features.h"
#include "gtest/gtest.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"
#include "kernels/ops.h"
#include "kernels/relative_error.h"

namespace deepinfer::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMax = std::numeric_limits<float>::max();
constexpr float kMin = std::numeric_limits<float>::min();
constexpr float kDenorm = std::numeric_limits<float>::denorm_min();

// The sizes the issue asks for: below, at and across one 16-lane vector, and a long row.
const int64_t kSizes[] = {1, 7, 16, 17, 33, 1000};

// The avx512:: functions may only run where the dispatcher would select them.
#ifdef DEEPINFER_AVX512_EMULATION
// kernels_avx512_emulated_test: the intrinsics are emulated on AVX2, so these run anywhere.
bool HaveAvx512() { return true; }
#else
bool HaveAvx512() { return ActiveIsa() >= IsaLevel::kAvx512; }
#endif

std::vector<float> RandomVector(int64_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// Overwrites random positions of v with values from `specials` (about one element in four).
void Sprinkle(std::vector<float>& v, const std::vector<float>& specials, std::mt19937& rng) {
  std::uniform_int_distribution<size_t> pick(0, specials.size() - 1);
  std::uniform_int_distribution<int> coin(0, 3);
  for (auto& x : v) {
    if (coin(rng) == 0) x = specials[pick(rng)];
  }
}

// Bitwise equality, except that any NaN matches any NaN (the compiler may swap the operands of
// a commutative scalar op, which only changes which NaN payload survives).
void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " i=" << i << " got " << got[i];
    } else {
      EXPECT_EQ(FloatBits(got[i]), FloatBits(want[i]))
          << what << " i=" << i << " got " << got[i] << " want " << want[i];
    }
  }
}

// AVX2 as the dispatcher (ops.cc) runs it: Silu, SwiGlu and Axpy see whole 8-lane vectors only,
// a short tail is padded with zeros into one more vector.
constexpr int64_t kAvx2Lanes = 8;

void Avx2Silu(float* x, int64_t n) {
  const int64_t main = n / kAvx2Lanes * kAvx2Lanes;
  avx2::Silu(x, main);
  if (main < n) {
    float tmp[kAvx2Lanes] = {};
    std::copy(x + main, x + n, tmp);
    avx2::Silu(tmp, kAvx2Lanes);
    std::copy(tmp, tmp + (n - main), x + main);
  }
}

void Avx2SwiGlu(const float* gate, const float* up, float* out, int64_t n, float limit) {
  const int64_t main = n / kAvx2Lanes * kAvx2Lanes;
  avx2::SwiGlu(gate, up, out, main, limit);
  if (main < n) {
    float g[kAvx2Lanes] = {}, u[kAvx2Lanes] = {}, o[kAvx2Lanes];
    std::copy(gate + main, gate + n, g);
    std::copy(up + main, up + n, u);
    avx2::SwiGlu(g, u, o, kAvx2Lanes, limit);
    std::copy(o, o + (n - main), out + main);
  }
}

void Avx2Axpy(float a, const float* x, float* y, int64_t n) {
  const int64_t main = n / kAvx2Lanes * kAvx2Lanes;
  avx2::Axpy(a, x, y, main);
  if (main < n) {
    float xt[kAvx2Lanes] = {}, yt[kAvx2Lanes] = {};
    std::copy(x + main, x + n, xt);
    std::copy(y + main, y + n, yt);
    avx2::Axpy(a, xt, yt, kAvx2Lanes);
    std::copy(yt, yt + (n - main), y + main);
  }
}

// ---------------------------------------------------------------------------------------------
// Lane-wise ops: bitwise equal to AVX2.

TEST(Avx512ElementwiseTest, RoundToBf16MatchesAvx2AndReferenceBitwise) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(101);
  // Ties to even (0x3F808000 rounds down, 0x3F818000 up), values rounding to inf, signalling
  // and negative NaNs, subnormals, signed zeros.
  std::vector<float> specials = {kNaN, -kNaN,   kInf,     -kInf,  kMax, -kMax,
                                 kMin, kDenorm, -kDenorm, 1e-40f, 0.0f, -0.0f};
  for (uint32_t bits :
       {0x3F808000u, 0x3F818000u, 0x7F800001u, 0xFFC00001u, 0x7F7FFFFFu, 0x807F8000u}) {
    specials.push_back(BitsToFloat(bits));
  }
  for (int64_t n : kSizes) {
    for (float stddev : {1e-3f, 1.0f, 1e30f}) {
      std::vector<float> x = RandomVector(n, rng, stddev);
      Sprinkle(x, specials, rng);
      std::vector<float> a = x, b = x, r = x;
      avx512::RoundToBf16(a.data(), n);
      avx2::RoundToBf16(b.data(), n);
      ref::RoundToBf16(r.data(), n);
      ExpectSameBits(a, b, "vs avx2 n=" + std::to_string(n));
      ExpectSameBits(a, r, "vs ref n=" + std::to_string(n));
    }
  }
}

TEST(Avx512ElementwiseTest, AddScaleAxpyMatchAvx2Bitwise) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(103);
  const std::vector<float> specials = {kNaN, kInf, -kInf, kMax, -kMax, kDenorm, -0.0f, 1e-40f};
  for (int64_t n : kSizes) {
    std::vector<float> x = RandomVector(n, rng, 3.0f), y = RandomVector(n, rng, 3.0f);
    Sprinkle(x, specials, rng);
    Sprinkle(y, specials, rng);
    const std::string at = " n=" + std::to_string(n);
    std::vector<float> a(n), b(n);
    avx512::Add(x.data(), y.data(), a.data(), n);
    avx2::Add(x.data(), y.data(), b.data(), n);
    ExpectSameBits(a, b, "add" + at);
    // out aliasing an input, as ops.h allows.
    a = x;
    avx512::Add(a.data(), y.data(), a.data(), n);
    ExpectSameBits(a, b, "add in place" + at);
    for (float s : {0.37f, -1e-30f, 3e30f}) {
      a = x;
      b = x;
      avx512::Scale(a.data(), s, n);
      avx2::Scale(b.data(), s, n);
      ExpectSameBits(a, b, "scale" + at);
    }
    for (float alpha : {-1.5f, 1e-20f, 7e25f}) {
      a = y;
      b = y;
      avx512::Axpy(alpha, x.data(), a.data(), n);
      Avx2Axpy(alpha, x.data(), b.data(), n);
      ExpectSameBits(a, b, "axpy" + at);
    }
  }
}

TEST(Avx512ElementwiseTest, SiluMatchesAvx2Bitwise) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(107);
  // Around Exp's clamps (-87.3, 88.7) and beyond, infinities, NaN, tiny values.
  const std::vector<float> specials = {kNaN,   kInf,   -kInf,  87.3f,   -87.3f,  88.7f, -88.7f,
                                       100.0f, -100.f, 1e-30f, -1e-30f, kDenorm, 0.0f,  -0.0f};
  for (int64_t n : kSizes) {
    for (float stddev : {0.1f, 3.0f, 40.0f}) {
      std::vector<float> x = RandomVector(n, rng, stddev);
      Sprinkle(x, specials, rng);
      std::vector<float> a = x, b = x;
      avx512::Silu(a.data(), n);
      Avx2Silu(b.data(), n);
      ExpectSameBits(a, b, "silu n=" + std::to_string(n));
    }
  }
}

TEST(Avx512ElementwiseTest, SwiGluMatchesAvx2BitwiseWithClampLimits) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(109);
  for (int64_t n : kSizes) {
    for (float limit : {0.0f, -1.0f, 10.0f, 2.75f}) {
      // Values on and around ±limit, beyond it, and non-finite ones.
      const float l = limit > 0 ? limit : 7.0f;
      const std::vector<float> specials = {l,
                                           -l,
                                           std::nextafter(l, 0.0f),
                                           -std::nextafter(l, 0.0f),
                                           2 * l,
                                           -2 * l,
                                           kNaN,
                                           kInf,
                                           -kInf,
                                           100.0f,
                                           -100.0f,
                                           0.0f};
      std::vector<float> g = RandomVector(n, rng, 3.0f), u = RandomVector(n, rng, 3.0f);
      Sprinkle(g, specials, rng);
      Sprinkle(u, specials, rng);
      std::vector<float> a(n), b(n);
      avx512::SwiGlu(g.data(), u.data(), a.data(), n, limit);
      Avx2SwiGlu(g.data(), u.data(), b.data(), n, limit);
      const std::string at = " n=" + std::to_string(n) + " limit=" + std::to_string(limit);
      ExpectSameBits(a, b, "swiglu" + at);
      // out aliasing gate.
      a = g;
      avx512::SwiGlu(a.data(), u.data(), a.data(), n, limit);
      ExpectSameBits(a, b, "swiglu in place" + at);
    }
  }
}

TEST(Avx512ElementwiseTest, ResultDoesNotDependOnPositionInTheTail) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  // Element i computed in a 1000-long call (main loop) and alone (n = 1, all tail).
  std::mt19937 rng(113);
  const int64_t n = 1000;
  std::vector<float> x = RandomVector(n, rng, 5.0f), u = RandomVector(n, rng, 5.0f);
  std::vector<float> all = x, swi(n);
  avx512::Silu(all.data(), n);
  avx512::SwiGlu(x.data(), u.data(), swi.data(), n, 2.75f);
  for (int64_t i = 0; i < n; i += 37) {
    float one = x[i], s;
    avx512::Silu(&one, 1);
    avx512::SwiGlu(&x[i], &u[i], &s, 1, 2.75f);
    EXPECT_EQ(FloatBits(one), FloatBits(all[i])) << i;
    EXPECT_EQ(FloatBits(s), FloatBits(swi[i])) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// ActQuantFp8Sim: exact arithmetic, so bitwise equal to AVX2 and to the scalar reference.

TEST(Avx512ActQuantFp8SimTest, MatchesAvx2AndReferenceBitwise) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(127);
  // e4m3 ties (1.0625 = 1 + 1/16 lies between 1 and 1.125), the subnormal range after scaling,
  // FP32 subnormals, and huge magnitudes (scale exponent up to 120).
  const std::vector<float> specials = {kNaN,   -kNaN,  0.0f,  -0.0f,   1.0625f, -1.1875f,
                                       448.0f, 3e38f,  -kMax, kDenorm, 1e-40f,  1e-30f,
                                       2e-3f,  -7e-4f, 1e20f, -5e-10f};
  for (int64_t cols : {1, 7, 16, 17, 33, 200, 1000}) {
    for (int64_t block : {128, 16, 7}) {
      for (float stddev : {1e-7f, 1e-3f, 1.0f, 1e4f}) {
        const int64_t rows = 2;
        std::vector<float> x = RandomVector(rows * cols, rng, stddev);
        if (stddev == 1.0f) Sprinkle(x, specials, rng);
        std::vector<float> a = x, b = x, r = x;
        avx512::ActQuantFp8Sim(a.data(), rows, cols, block);
        avx2::ActQuantFp8Sim(b.data(), rows, cols, block);
        ref::ActQuantFp8Sim(r.data(), rows, cols, block);
        const std::string at = " cols=" + std::to_string(cols) + " block=" + std::to_string(block) +
                               " stddev=" + std::to_string(stddev);
        ExpectSameBits(a, b, "vs avx2" + at);
        ExpectSameBits(a, r, "vs ref" + at);
      }
    }
  }
}

TEST(Avx512ActQuantFp8SimTest, InfiniteBlocksMatchReference) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  // A block holding ±inf: frexp(inf) yields exponent 0, so the scale is 1 and every element
  // saturates as FloatToFp8E4m3 does (inf and 1000 -> 448). Only compared with the reference:
  // avx2's vector lanes do not saturate there (RoundE4m3 assumes |y| <= 448).
  std::mt19937 rng(131);
  for (int64_t cols : {1, 7, 16, 17, 33, 200}) {
    std::vector<float> x = RandomVector(cols, rng, 300.0f);
    x[cols / 2] = (cols % 2) ? kInf : -kInf;
    if (cols > 3) x[1] = 1000.0f;
    if (cols > 5) x[4] = kNaN;
    std::vector<float> a = x, r = x;
    avx512::ActQuantFp8Sim(a.data(), 1, cols, 128);
    ref::ActQuantFp8Sim(r.data(), 1, cols, 128);
    ExpectSameBits(a, r, "cols=" + std::to_string(cols));
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions: 16-lane order, compared with the scalar reference within a tolerance.

TEST(Avx512RmsNormTest, MatchesReference) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(137);
  for (int64_t dim : {1, 7, 16, 17, 33, 1000, 4097}) {
    const int64_t rows = 3;
    std::vector<float> x = RandomVector(rows * dim, rng);
    std::vector<float> wf = RandomVector(dim, rng);
    std::vector<uint16_t> wb(dim);
    for (int64_t i = 0; i < dim; ++i) wb[i] = FloatToBf16(wf[i]);
    for (int variant = 0; variant < 3; ++variant) {  // no weight, f32 weight, bf16 weight
      const float* pf = variant == 1 ? wf.data() : nullptr;
      const uint16_t* pb = variant == 2 ? wb.data() : nullptr;
      std::vector<float> a(rows * dim), r(rows * dim);
      avx512::RmsNorm(x.data(), a.data(), rows, dim, pf, pb, 1e-6f);
      ref::RmsNorm(x.data(), r.data(), rows, dim, pf, pb, 1e-6f);
      EXPECT_LE(RelativeError(a, r), 2e-6) << "dim " << dim << " variant " << variant;
      // In place (x and y the same array) gives the same result.
      std::vector<float> inplace = x;
      avx512::RmsNorm(inplace.data(), inplace.data(), rows, dim, pf, pb, 1e-6f);
      ExpectSameBits(inplace, a, "in place dim " + std::to_string(dim));
      // Each row is independent of the others (batch invariance).
      std::vector<float> row1(dim);
      avx512::RmsNorm(x.data() + dim, row1.data(), 1, dim, pf, pb, 1e-6f);
      ExpectSameBits(row1, std::vector<float>(a.begin() + dim, a.begin() + 2 * dim),
                     "row 1 alone dim " + std::to_string(dim));
    }
  }
}

TEST(Avx512ExpScaledTest, MatchesStdExpPerElement) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(141);
  for (int64_t n : kSizes) {
    std::vector<float> x = RandomVector(n, rng, 4.0f), got(n), want(n);
    x[0] = -std::numeric_limits<float>::infinity();
    avx512::ExpScaled(x.data(), n, 2.0f, 0.8f, got.data());
    ref::ExpScaled(x.data(), n, 2.0f, 0.8f, want.data());
    EXPECT_EQ(got[0], 0.0f);
    for (int64_t i = 1; i < n; ++i) {
      ASSERT_NEAR(got[i], want[i], 2.5e-7f * want[i] + 1e-37f) << "n " << n << " i " << i;
    }
  }
}

TEST(Avx512SoftmaxTest, MatchesReference) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(139);
  for (int64_t n : kSizes) {
    for (float stddev : {0.1f, 3.0f, 40.0f}) {
      for (int64_t rows : {1, 3}) {
        std::vector<float> x = RandomVector(rows * n, rng, stddev);
        std::vector<float> a = x, r = x;
        avx512::Softmax(a.data(), rows, n);
        ref::Softmax(r.data(), rows, n);
        EXPECT_LE(RelativeError(a, r), 1e-6) << "n " << n << " stddev " << stddev;
        for (int64_t row = 0; row < rows; ++row) {
          double sum = 0;
          for (int64_t i = 0; i < n; ++i) sum += a[row * n + i];
          EXPECT_NEAR(sum, 1.0, 1e-5) << "n " << n << " row " << row;
        }
      }
    }
  }
}

TEST(Avx512SoftmaxTest, NonFiniteInputs) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  for (int64_t n : {7, 16, 17, 33}) {
    // -inf entries get probability 0; the others are the softmax of the finite ones.
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = (i % 3 == 0) ? -kInf : static_cast<float>(i % 5);
    std::vector<float> a = x, r = x;
    avx512::Softmax(a.data(), 1, n);
    ref::Softmax(r.data(), 1, n);
    for (int64_t i = 0; i < n; i += 3) EXPECT_EQ(a[i], 0.0f) << i;
    EXPECT_LE(RelativeError(a, r), 1e-6) << n;
    // A NaN anywhere (first vector or tail) makes the whole row NaN, as in the reference.
    for (int64_t pos : {int64_t{0}, n - 1}) {
      std::vector<float> y = x;
      y[pos] = kNaN;
      avx512::Softmax(y.data(), 1, n);
      for (int64_t i = 0; i < n; ++i) EXPECT_TRUE(std::isnan(y[i])) << "n " << n << " i " << i;
    }
  }
}

// Attention against ref::Attention for GQA groups, sinks, BF16-rounded probabilities and
// n_keys = 0, 1, 37, with key rows in scrambled memory order.
TEST(Avx512AttentionTest, MatchesReference) {
  if (!HaveAvx512()) GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ: " << IsaName(ActiveIsa());
  std::mt19937 rng(149);
  struct Shape {
    int64_t hq, hkv, d;
  };
  for (Shape s : {Shape{4, 1, 128}, Shape{8, 2, 48}, Shape{6, 6, 7}, Shape{4, 2, 17},
                  Shape{16, 1, 512}, Shape{3, 3, 16}}) {
    for (int64_t n_keys : {0, 1, 37}) {
      for (bool sinks_on : {false, true}) {
        for (bool round_p : {false, true}) {
          const int64_t rows = std::max<int64_t>(n_keys, 1);
          std::vector<float> q = RandomVector(s.hq * s.d, rng);
          std::vector<float> keys = RandomVector(rows * s.hkv * s.d, rng);
          std::vector<float> vals = RandomVector(rows * s.hkv * s.d, rng);
          std::vector<float> sinks = RandomVector(s.hq, rng);
          std::vector<const float*> kp(n_keys), vp(n_keys);
          for (int64_t j = 0; j < n_keys; ++j) {
            const int64_t src = (j * 7) % n_keys;
            kp[j] = keys.data() + src * s.hkv * s.d;
            vp[j] = vals.data() + src * s.hkv * s.d;
          }
          AttentionOptions opt;
          opt.scale = 1.0f / std::sqrt(static_cast<float>(s.d));
          opt.sinks = sinks_on ? sinks.data() : nullptr;
          opt.round_p_to_bf16 = round_p;
          std::vector<float> a(s.hq * s.d, 123.0f), r(s.hq * s.d, -7.0f);
          std::vector<float> ws(AttentionWorkspaceFloats(s.hq, n_keys) + 1);
          avx512::Attention(q.data(), s.hq, s.hkv, s.d, kp.data(), vp.data(), n_keys, opt, a.data(),
                            ws.data(), 0, s.hq);
          ref::Attention(q.data(), s.hq, s.hkv, s.d, kp.data(), vp.data(), n_keys, opt, r.data(),
                         ws.data(), 0, s.hq);
          const std::string at = std::to_string(s.hq) + "/" + std::to_string(s.hkv) + "x" +
                                 std::to_string(s.d) + " keys " + std::to_string(n_keys) +
                                 " sinks " + std::to_string(sinks_on) + " round_p " +
                                 std::to_string(round_p);
          if (n_keys == 0) {
            for (float v : a) ASSERT_EQ(v, 0.0f) << at;
            continue;
          }
          // round_p: a 1-ulp score difference can flip a BF16 rounding of p (2^-8 relative).
          EXPECT_LE(RelativeError(a, r), round_p ? 4e-3 : 1e-5) << at;
          // Heads split across threads: a sub-range of heads gives the same rows bitwise.
          std::vector<float> part(s.hq * s.d, 0.0f);
          const int64_t h0 = s.hq / 2;
          avx512::Attention(q.data(), s.hq, s.hkv, s.d, kp.data(), vp.data(), n_keys, opt,
                            part.data(), ws.data(), h0, s.hq);
          ExpectSameBits(std::vector<float>(part.begin() + h0 * s.d, part.end()),
                         std::vector<float>(a.begin() + h0 * s.d, a.end()), "heads " + at);
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::kernels
