#include "engine/sampler.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"

namespace deepinfer::engine {
namespace {

// Random123 tests/kat_vectors (Salmon et al. SC'11), philox4x32 with 10 rounds.
TEST(PhiloxTest, Random123KnownAnswers) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(Philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      Philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      Philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, UniformIsInRangeAndRoughlyUniform) {
  double sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double u = PhiloxUniform(42, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);  // std error ~0.002
  EXPECT_NE(PhiloxUniform(42, 0, 7), PhiloxUniform(42, 1, 7));
  EXPECT_NE(PhiloxUniform(42, 0, 7), PhiloxUniform(43, 0, 7));
  EXPECT_EQ(PhiloxUniform(42, 3, 7), PhiloxUniform(42, 3, 7));
}

TEST(SamplerTest, LogprobIsLogSoftmaxWithRankAndTop) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  // Hand-computed: log Z = log(e^1 + 2 e^3 + e^2).
  const double log_z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  TokenLogprob lp = ComputeLogprob(logits, 2, 3);
  EXPECT_NEAR(lp.logprob, 2.0 - log_z, 1e-6);
  EXPECT_EQ(lp.rank, 3);  // behind ids 1 and 3
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // tie 1 vs 3 broken by id
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3.0 - log_z, 1e-6);
  EXPECT_EQ(ComputeLogprob(logits, 3, 0).rank, 2);
}

TEST(SamplerTest, PenaltiesAndBiasMatchHandComputedValues) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logit_bias = {{4, 1.0f}};
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
  const std::vector<int32_t> prompt = {0};
  const std::vector<int32_t> output = {1, 1, 2};
  SampleContext ctx;
  ctx.params = &p;
  ctx.prompt = prompt;
  ctx.output = output;
  ApplyLogitProcessors(ctx, logits);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);                      // 2 / 2 (prompt token)
  EXPECT_FLOAT_EQ(logits[1], -4.0f - 0.5f - 0.25f * 2);  // -2 * 2, then penalties (count 2)
  EXPECT_FLOAT_EQ(logits[2], 0.5f - 0.5f - 0.25f);       // 1 / 2, penalties (count 1)
  EXPECT_FLOAT_EQ(logits[3], 0.5f);                      // untouched
  EXPECT_FLOAT_EQ(logits[4], 1.0f);                      // bias only
}

TEST(SamplerTest, MinTokensMasksEosAndStopIds) {
  SamplingParams p;
  p.min_tokens = 2;
  p.stop_token_ids = {3};
  const std::vector<int32_t> eos = {1};
  std::vector<int32_t> output = {5};
  SampleContext ctx;
  ctx.params = &p;
  ctx.output = output;
  ctx.eos_token_ids = eos;
  std::vector<float> logits(6, 0.0f);
  ApplyLogitProcessors(ctx, logits);
  EXPECT_TRUE(std::isinf(logits[1]) && logits[1] < 0);
  EXPECT_TRUE(std::isinf(logits[3]) && logits[3] < 0);
  EXPECT_EQ(logits[0], 0.0f);
  output.push_back(5);
  ctx.output = output;
  std::vector<float> logits2(6, 0.0f);
  ApplyLogitProcessors(ctx, logits2);
  EXPECT_EQ(logits2[1], 0.0f);
}

TEST(SamplerTest, GreedyIsArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(ChooseToken(p, std::vector<float>{0.f, 5.f, 5.f, 1.f}, 0.99), 1);
}

// Scalar reference of the filtered distribution: computes the probability each token is chosen
// by brute force over the definition, then checks ChooseToken's inverse CDF against it.
std::vector<double> ReferenceDistribution(const SamplingParams& p,
                                          const std::vector<float>& logits) {
  const int v = static_cast<int>(logits.size());
  std::vector<double> prob(v);
  double mx = -1e30, z = 0;
  for (float x : logits) mx = std::max<double>(mx, x);
  for (int i = 0; i < v; ++i) z += prob[i] = std::exp((logits[i] - mx) / p.temperature);
  for (double& x : prob) x /= z;
  std::vector<bool> keep(v, true);
  // rank by probability (ties by id)
  auto higher = [&](int a, int b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); };
  if (p.top_k > 0) {
    for (int i = 0; i < v; ++i) {
      int better = 0;
      for (int j = 0; j < v; ++j) better += higher(j, i);
      if (better >= p.top_k) keep[i] = false;
    }
    double s = 0;
    for (int i = 0; i < v; ++i)
      if (keep[i]) s += prob[i];
    for (int i = 0; i < v; ++i) prob[i] = keep[i] ? prob[i] / s : 0;
  }
  if (p.top_p < 1) {
    // keep token i iff the mass strictly above it is < top_p
    std::vector<bool> k2 = keep;
    for (int i = 0; i < v; ++i) {
      if (!keep[i]) continue;
      double above = 0;
      for (int j = 0; j < v; ++j)
        if (keep[j] && higher(j, i)) above += prob[j];
      if (above >= p.top_p) k2[i] = false;
    }
    keep = k2;
  }
  if (p.min_p > 0) {
    double pmax = 0;
    for (int i = 0; i < v; ++i)
      if (keep[i]) pmax = std::max(pmax, prob[i]);
    for (int i = 0; i < v; ++i)
      if (keep[i] && prob[i] < p.min_p * pmax) keep[i] = false;
  }
  double s = 0;
  for (int i = 0; i < v; ++i) s += keep[i] ? prob[i] : 0;
  std::vector<double> out(v);
  for (int i = 0; i < v; ++i) out[i] = keep[i] ? prob[i] / s : 0;
  return out;
}

std::vector<double> EmpiricalDistribution(const SamplingParams& p,
                                          const std::vector<float>& logits) {
  // Deterministic grid over u: frequency = measure of u choosing each token.
  const int grid = 20000;
  std::vector<double> freq(logits.size());
  for (int g = 0; g < grid; ++g) freq[ChooseToken(p, logits, (g + 0.5) / grid)] += 1.0 / grid;
  return freq;
}

TEST(SamplerTest, FiltersMatchScalarReference) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f, 1.5f, 0.7f, -3.0f, 2.2f};
  std::vector<SamplingParams> cases(6);
  cases[0].temperature = 1.0f;
  cases[1].temperature = 0.5f;
  cases[1].top_k = 3;
  cases[2].top_p = 0.6f;
  cases[3].min_p = 0.3f;
  cases[4].temperature = 1.7f;
  cases[4].top_k = 5;
  cases[4].top_p = 0.8f;
  cases[4].min_p = 0.2f;
  cases[5].top_k = 2;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto ref = ReferenceDistribution(cases[c], logits);
    const auto got = EmpiricalDistribution(cases[c], logits);
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(got[i], ref[i], 1e-3) << "case " << c << " token " << i;
    }
  }
}

// The sort-based sampler this code replaced (kept as the reference): double probabilities, a
// full sort of the vocabulary in (probability desc, id asc) order, then top-k (renormalised),
// top-p, min-p and the inverse CDF at u. Returns the chosen token and, through `margin`, how
// far u * total lies from the nearest cumulative boundary (relative to total), so the
// comparison can skip draws that summation order may legitimately resolve differently.
int32_t SortBasedChooseToken(const SamplingParams& p, const std::vector<float>& logits, double u,
                             double* margin) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  // The same FP32 probabilities the sampler uses (their precision against double is
  // FiltersMatchScalarReference's business), so only the selection algorithm differs.
  std::vector<float> p32(vocab);
  const float mx = *std::max_element(logits.begin(), logits.end());
  kernels::ExpScaled(logits.data(), vocab, mx, 1.0f / p.temperature, p32.data());
  std::vector<double> prob(p32.begin(), p32.end());
  double sum = 0.0;
  for (double x : prob) sum += x;
  for (double& x : prob) x /= sum;
  std::vector<int32_t> ids(vocab);
  for (int64_t v = 0; v < vocab; ++v) ids[v] = static_cast<int32_t>(v);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return prob[a] != prob[b] ? prob[a] > prob[b] : a < b;
  });
  if (p.top_k > 0 && p.top_k < vocab) ids.resize(p.top_k);
  while (ids.size() > 1 && prob[ids.back()] == 0.0) ids.pop_back();
  double s = 0.0;
  for (int32_t id : ids) s += prob[id];
  for (int32_t id : ids) prob[id] /= s;
  *margin = 1.0;
  auto note = [&](double boundary, double value) {
    *margin = std::min(*margin, std::abs(boundary - value));
  };
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < ids.size()) {
      cum += prob[ids[n]];
      note(cum, p.top_p);
      ++n;
      if (cum >= p.top_p) break;
    }
    ids.resize(std::max<size_t>(n, 1));
  }
  if (p.min_p > 0.0f) {
    const double threshold = p.min_p * prob[ids[0]];
    size_t n = 1;
    while (n < ids.size() && prob[ids[n]] >= threshold) {
      note(prob[ids[n]] / prob[ids[0]], p.min_p);
      ++n;
    }
    if (n < ids.size()) note(prob[ids[n]] / prob[ids[0]], p.min_p);
    ids.resize(n);
  }
  double total = 0.0;
  for (int32_t id : ids) total += prob[id];
  const double target = u * total;
  double cum = 0.0;
  for (int32_t id : ids) {
    cum += prob[id];
    note(cum / total, target / total);
    if (target < cum) return id;
  }
  return ids.back();
}

// Random logits shaped like a language model's row (a few strong candidates over a Gaussian
// bulk), with ties and masked entries, over a full-size vocabulary.
std::vector<float> LmLikeLogits(std::mt19937* rng, int64_t vocab, float bulk_sigma) {
  std::normal_distribution<float> bulk(0.0f, bulk_sigma);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = bulk(*rng);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  for (int i = 0; i < 20; ++i) logits[pick(*rng)] = 6.0f + bulk(*rng);
  for (int i = 0; i < 10; ++i) logits[pick(*rng)] = logits[pick(*rng)];  // ties
  for (int i = 0; i < 50; ++i) logits[pick(*rng)] = -std::numeric_limits<float>::infinity();
  return logits;
}

TEST(SamplerTest, ChooseTokenEqualsSortBasedSamplerForTheSameRandomNumbers) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  struct Case {
    float temperature, top_p, min_p;
    int top_k;
    float sigma;
  };
  const std::vector<Case> cases = {
      {1.0f, 1.0f, 0.0f, 0, 1.0f},   {1.0f, 0.9f, 0.0f, 50, 2.0f}, {0.7f, 0.95f, 0.0f, 0, 1.5f},
      {1.3f, 1.0f, 0.05f, 0, 0.5f},  {2.0f, 0.5f, 0.0f, 0, 3.0f},  {1.0f, 1.0f, 0.0f, 1000, 1.0f},
      {0.05f, 1.0f, 0.0f, 0, 1.0f},  {1.0f, 0.8f, 0.1f, 40, 1.0f}, {5.0f, 1.0f, 0.0f, 0, 0.1f}};
  int compared = 0, skipped = 0;
  for (const Case& c : cases) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.top_k = c.top_k;
    const std::vector<float> logits = LmLikeLogits(&rng, 129280, c.sigma);
    for (int draw = 0; draw < 40; ++draw) {
      const double u = uni(rng);
      double margin = 0.0;
      const int32_t want = SortBasedChooseToken(p, logits, u, &margin);
      if (margin < 1e-9) {  // within rounding of a boundary: either side is correct
        ++skipped;
        continue;
      }
      ++compared;
      ASSERT_EQ(ChooseToken(p, logits, u), want)
          << "T=" << c.temperature << " top_p=" << c.top_p << " top_k=" << c.top_k
          << " min_p=" << c.min_p << " u=" << u;
    }
  }
  EXPECT_GT(compared, 9 * 40 * 3 / 4) << "skipped " << skipped;
}

TEST(SamplerTest, SamplingDistributionIsWhatChooseTokenSamples) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f, 1.5f, 0.7f, -3.0f, 2.2f};
  std::vector<SamplingParams> cases(5);
  cases[1].temperature = 0.5f;
  cases[1].top_k = 3;
  cases[2].top_p = 0.6f;
  cases[3].min_p = 0.3f;
  cases[4].temperature = 0.0f;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto ref = ReferenceDistribution(cases[c].greedy() ? SamplingParams{} : cases[c],
                                           logits);
    std::vector<TokenProb> dist;
    SamplingDistribution(cases[c], logits, &dist);
    std::vector<float> dense(logits.size());
    SamplingProbabilities(cases[c], logits, dense);
    double total = 0.0;
    for (size_t i = 0; i < dist.size(); ++i) {
      total += dist[i].prob;
      if (i > 0) {  // sampling order: descending probability, ties by id
        EXPECT_TRUE(dist[i - 1].prob > dist[i].prob ||
                    (dist[i - 1].prob == dist[i].prob && dist[i - 1].token < dist[i].token));
      }
      EXPECT_FLOAT_EQ(dense[dist[i].token], dist[i].prob);
    }
    EXPECT_NEAR(total, 1.0, 1e-6) << "case " << c;
    if (cases[c].greedy()) {
      ASSERT_EQ(dist.size(), 1u);
      EXPECT_EQ(dist[0].token, 7);
      continue;
    }
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(dense[i], ref[i], 1e-6) << c << " " << i;
    // The inverse CDF of the list at u is ChooseToken's choice.
    for (double u : {0.01, 0.3, 0.55, 0.8, 0.999}) {
      double cum = 0.0;
      int32_t want = dist.back().token;
      for (const TokenProb& tp : dist) {
        cum += tp.prob;
        if (u < cum) {
          want = tp.token;
          break;
        }
      }
      EXPECT_EQ(ChooseToken(cases[c], logits, u), want) << "case " << c << " u " << u;
    }
  }
}

TEST(SamplerTest, AllMaskedRowAndOneLiveTokenAreHandled) {
  SamplingParams p;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ChooseToken(p, std::vector<float>{-inf, -inf, -inf}, 0.5), 0);
  EXPECT_EQ(ChooseToken(p, std::vector<float>{-inf, 3.0f, -inf}, 0.999), 1);
  p.top_p = 0.1f;
  p.min_p = 0.5f;
  EXPECT_EQ(ChooseToken(p, std::vector<float>{-inf, -inf, 0.0f}, 0.7), 2);
}

TEST(SamplerTest, SeededSampleDependsOnlyOnSeedIndexAndStep) {
  SamplingParams p;
  p.seed = 7;
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(i * 1.3f);
  std::vector<int32_t> out_a = {1, 2, 3};
  SampleContext ctx;
  ctx.params = &p;
  ctx.output = out_a;
  ctx.seed = 7;
  std::vector<float> scratch;
  const int32_t a = Sample(ctx, logits, &scratch).token;
  EXPECT_EQ(a, ChooseToken(p, logits, PhiloxUniform(7, 0, 3)));
  ctx.sample_index = 1;
  EXPECT_EQ(Sample(ctx, logits, &scratch).token, ChooseToken(p, logits, PhiloxUniform(7, 1, 3)));
}

TEST(SamplingParamsTest, ValidateNamesTheField) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate().ok());
  p.top_p = 0.0f;
  EXPECT_THAT(std::string(p.Validate().message()), ::testing::HasSubstr("top_p"));
  p = {};
  p.min_tokens = 20;
  EXPECT_THAT(std::string(p.Validate().message()), ::testing::HasSubstr("min_tokens"));
  p = {};
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  p = {};
  p.n = 0;
  EXPECT_THAT(std::string(p.Validate().message()), ::testing::HasSubstr("n ="));
}

}  // namespace
}  // namespace deepinfer::engine
