// The interleaved FP64 dot products and sink attention against plain loops that follow the
// formulas term by term (deepseek_v4_rows.h, deepseek_v4_softmax.h). A product of two floats is
// exact in FP64, so fused and separate multiply-adds round alike and the results must be equal
// bit for bit, not merely close: the V4 / V4.1 goldens and the indexer's top-k order rest on it.
#include "model/deepseek_v4_rows.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_softmax.h"

namespace deepinfer::model::dsv4 {
namespace {

// Floats of both signs over ~40 binades, with exact zeros, so the FP64 sums round often.
std::vector<float> WideFloats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() % 16 == 0) ? 0.0f : std::ldexp(normal(rng), exponent(rng));
  return v;
}

TEST(DsV4Rows, DotF64x4EqualsFourDotF64Bitwise) {
  std::mt19937 rng(7);
  for (int64_t n : {0, 1, 7, 8, 9, 15, 31, 128, 133, 512, 4096}) {
    const std::vector<float> b = WideFloats(n, rng);
    std::vector<std::vector<float>> a;
    for (int k = 0; k < 4; ++k) a.push_back(WideFloats(n, rng));
    const float* rows[4] = {a[0].data(), a[1].data(), a[2].data(), a[3].data()};
    double out[4];
    DotF64x4(rows, b.data(), n, out);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(out[k], DotF64(a[k].data(), b.data(), n)) << "n " << n << " k " << k;
    }
  }
}

TEST(DsV4Rows, IndexerScoreIsTheHeadOrderedSumOfRectifiedDots) {
  std::mt19937 rng(11);
  for (int64_t nh : {1, 3, 4, 5, 16, 17}) {
    for (int64_t n : {8, 100, 128}) {
      const std::vector<float> q = WideFloats(nh * n, rng), k = WideFloats(n, rng),
                               w = WideFloats(nh, rng);
      double expect = 0;
      for (int64_t h = 0; h < nh; ++h) {
        expect += std::max(DotF64(q.data() + h * n, k.data(), n), 0.0) * w[h];
      }
      EXPECT_EQ(IndexerScoreF64(q.data(), w.data(), nh, k.data(), n), expect)
          << "heads " << nh << " n " << n;
    }
  }
}

// V4 spec §3.5 term by term: s_j = fp32(dot64(q, k_j)) * scale, p_j = exp(s_j - max), the
// denominator sum_j p_j + exp(sink - max) and o[i] = fp32(sum_j bf16?(p_j) * k_j[i] / denom),
// FP64 sums in key order.
std::vector<float> PlainSinkAttention(const std::vector<float>& q,
                                      const std::vector<std::vector<float>>& keys, float scale,
                                      float sink, bool bf16) {
  const int64_t d = static_cast<int64_t>(q.size());
  std::vector<float> s;
  float mx = -INFINITY;
  for (const auto& k : keys) {
    // DotF64's lane order is its definition (DotF64x4 is checked against it above).
    s.push_back(static_cast<float>(DotF64(q.data(), k.data(), d)) * scale);
    mx = std::max(mx, s.back());
  }
  double denom = 0;
  std::vector<double> acc(d, 0.0);
  for (size_t j = 0; j < keys.size(); ++j) {
    const float p = std::exp(s[j] - mx);
    denom += p;
    const double pr = bf16 ? RoundBf16(p) : p;
    for (int64_t i = 0; i < d; ++i) acc[i] += pr * static_cast<double>(keys[j][i]);
  }
  denom += std::exp(sink - mx);
  std::vector<float> out(d);
  for (int64_t i = 0; i < d; ++i) {
    const float v = static_cast<float>(acc[i] / denom);
    out[i] = bf16 ? RoundBf16(v) : v;
  }
  return out;
}

TEST(DsV4Rows, SinkAttentionHeadEqualsThePlainFormulaBitwise) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bool bf16 : {false, true}) {
    for (int64_t d : {8, 33, 64, 100, 512}) {
      for (int64_t nk : {1, 3, 4, 5, 37, 192}) {
        std::vector<float> q(d);
        for (auto& x : q) x = normal(rng);
        std::vector<std::vector<float>> keys(nk, std::vector<float>(d));
        for (auto& k : keys) {
          for (auto& x : k) x = normal(rng);
        }
        std::vector<const float*> ptrs;
        for (const auto& k : keys) ptrs.push_back(k.data());
        const float scale = 1.0f / std::sqrt(static_cast<float>(d)), sink = normal(rng);
        std::vector<float> scores, out(d);
        std::vector<double> acc;
        SinkAttentionHead(q.data(), ptrs, d, scale, sink, bf16, &scores, &acc, out.data());
        const std::vector<float> expect = PlainSinkAttention(q, keys, scale, sink, bf16);
        for (int64_t i = 0; i < d; ++i) {
          ASSERT_EQ(out[i], expect[i])
              << "bf16 " << bf16 << " d " << d << " keys " << nk << " i " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::model::dsv4
