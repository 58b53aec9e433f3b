// Sampled DSpark drafts verified by rejection sampling (sampled_drafts.h; spec §4.2-4.3 and the
// seeded statistical check of §7.3): the first emitted token's frequencies over many seeded
// trials match the exact target law (chi-square, threshold from the number of bins), with the
// real DSpark slot-0 distribution of dsv41-tiny-a as q and the real target row as p. Controls: the
// same statistic against q, and of the unverified drafts against p, exceeds the threshold, so
// the check has power. Every draw is keyed Philox, so the test is deterministic.
#include "engine/speculative/sampled_drafts.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <vector>

#include "common/config.h"
#include "common/status_matchers.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "gtest/gtest.h"
#include "model/deepseek_v41.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;

TEST(SampledDraftsTest, DraftDistributionAndInverseCdf) {
  const std::vector<float> logits = {0.f, std::log(3.f), -1e30f};
  const std::vector<double> q = DraftDistribution(logits, 1.0f);
  const double e = std::exp(static_cast<double>(logits[1]));  // ~3 (log 3 rounded to float)
  EXPECT_NEAR(q[0], 1 / (1 + e), 1e-15);
  EXPECT_NEAR(q[1], e / (1 + e), 1e-15);
  EXPECT_EQ(q[2], 0.0);
  EXPECT_EQ(SampleDense(q, 0.0), 0);
  EXPECT_EQ(SampleDense(q, 0.2499), 0);
  EXPECT_EQ(SampleDense(q, 0.2501), 1);
  EXPECT_EQ(SampleDense(q, 0.999999999), 1);  // never the massless id
  const std::vector<double> half = DraftDistribution(logits, 2.0f);  // temperature flattens
  EXPECT_NEAR(half[1] / half[0], std::sqrt(e), 1e-12);
}

// Chi-square of `counts` (N trials) against the law `p`: bins with expected count >= 5, the
// rest pooled into one bin (dropped when its expected count is < 5). Returns {statistic, df}.
std::pair<double, int> ChiSquare(const std::vector<int64_t>& counts, std::span<const double> p,
                                 int64_t n) {
  double stat = 0, pooled_e = 0, pooled_o = 0;
  int bins = 0;
  for (size_t v = 0; v < p.size(); ++v) {
    const double e = p[v] * n;
    if (e >= 5) {
      stat += (counts[v] - e) * (counts[v] - e) / e;
      ++bins;
    } else {
      pooled_e += e;
      pooled_o += counts[v];
    }
  }
  if (pooled_e >= 5) {
    stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++bins;
  }
  return {stat, bins - 1};
}

TEST(SampledDraftsTest, DsparkFirstTokenLawIsTheTargetsChiSquare) {
  const fs::path dir = fs::path(DEEPINFER_SHARED_DIR) / "models/dsv41-tiny-a";
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "no dsv41-tiny-a";
  model::LoadOptions lo;
  lo.show_progress = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<model::CausalLM> m, model::LoadModel(dir.string(), lo));
  auto* v41 = dynamic_cast<model::dsv41::DeepseekV41Model*>(m.get());
  ASSERT_NE(v41, nullptr);
  const int64_t V = m->info().vocab_size;
  // One sequence in a private arena: prompt, then the anchor y at position T.
  const model::KvLayout& L = m->kv_layout();
  std::vector<uint64_t> blocks(L.BlockBytes() / 8 + 8), state(L.StateBytes() / 8 + 8);
  model::KvCacheView kv;
  kv.block_base = reinterpret_cast<uint8_t*>(blocks.data());
  kv.num_blocks = 1;
  kv.state_base = reinterpret_cast<uint8_t*>(state.data());
  kv.num_state_slots = 1;
  const std::vector<int32_t> table = {0};
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(30);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 500);
  const int32_t anchor = 42;
  auto forward = [&](int64_t start, std::span<const int32_t> tokens, std::vector<float>* logits,
                     std::vector<float>* features) {
    model::ForwardBatch b;
    model::SequenceChunk c;
    c.start_pos = start;
    c.tokens = tokens;
    c.block_table = table;
    c.state_slot = 0;
    c.logits = model::LogitsMode::kLast;
    b.chunks.push_back(c);
    model::ForwardOutput out;
    ASSERT_OK(m->ForwardWithDraftFeatures(b, kv, &out, features));
    *logits = out.logits;
  };
  std::vector<float> logits, features;
  forward(0, prompt, &logits, &features);
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.push_back(anchor);
  model::DraftProposal none;
  ASSERT_OK(m->ProposeDrafts(0, features, next, 0, kv, 0, &none));  // context <= T - 1
  // q: DSpark's slot-0 draft distribution at temperature t (its Markov bias follows the anchor).
  const float t = 1.0f;
  model::dsv41::DsparkRequest req;
  req.position = static_cast<int64_t>(prompt.size()) - 1;
  req.token = anchor;
  req.want_logits = true;
  std::vector<model::dsv41::DsparkDraftResult> draft;
  ASSERT_OK(v41->DsparkDraft(std::span<const model::dsv41::DsparkRequest>(&req, 1), kv, {}, &draft));
  const std::vector<double> q =
      DraftDistribution(std::span<const float>(draft[0].logits).subspan(0, V), t);
  // p: the target's sampling distribution of the token after the anchor.
  forward(static_cast<int64_t>(prompt.size()), std::span<const int32_t>(&anchor, 1), &logits,
          &features);
  SamplingParams sp;
  sp.temperature = t;
  std::vector<float> pf(V);
  SamplingProbabilities(sp, logits, pf);
  std::vector<double> p(pf.begin(), pf.end());
  double mass = 0;
  for (double x : p) mass += x;
  for (double& x : p) x /= mass;
  double tv = 0;
  for (int64_t v = 0; v < V; ++v) tv += 0.5 * std::fabs(p[v] - q[v]);
  ASSERT_GT(tv, 0.2) << "p and q too close for the controls to have power";
  // Trials: d ~ q, verify against p (the bonus row does not affect the first token).
  const int64_t n = 40000;
  std::vector<int64_t> emitted(V, 0), drafted(V, 0);
  int64_t accepted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t d = SampleDense(q, PhiloxUniform(77, 0, 4 * i));
    BlockUniforms u;
    u.accept = {PhiloxUniform(77, 0, 4 * i + 1)};
    u.residual = {PhiloxUniform(77, 0, 4 * i + 2)};
    u.bonus = PhiloxUniform(77, 0, 4 * i + 3);
    const std::vector<std::vector<double>> prow = {p, p}, qrow = {q};
    const BlockOutcome o = VerifySampledBlock(prow, qrow, std::span<const int32_t>(&d, 1), u);
    ASSERT_EQ(o.tokens.size(), static_cast<size_t>(o.num_accepted + 1));
    ++emitted[o.tokens[0]];
    ++drafted[d];
    accepted += o.num_accepted;
  }
  // ~6 standard deviations of the chi-square law (mean df, variance 2 df).
  const auto [stat, df] = ChiSquare(emitted, p, n);
  const double threshold = df + 6 * std::sqrt(2.0 * df);
  const auto [vs_q, df_q] = ChiSquare(emitted, q, n);
  const auto [raw, df_raw] = ChiSquare(drafted, p, n);
  std::printf("sampled DSpark: TV(p, q) %.3f, acceptance %.3f (expected 1 - TV = %.3f); "
              "chi2 vs p %.1f (df %d, threshold %.1f), vs q %.1f, unverified drafts vs p %.1f\n",
              tv, double(accepted) / n, 1 - tv, stat, df, threshold, vs_q, raw);
  ASSERT_GT(df, 5);
  EXPECT_LT(stat, threshold);
  EXPECT_GT(vs_q, df_q + 6 * std::sqrt(2.0 * df_q));
  EXPECT_GT(raw, threshold);
  // The acceptance rate is 1 - TV(p, q) (spec §3.6's analytical acceptance), within 6 sigma.
  EXPECT_NEAR(double(accepted) / n, 1 - tv, 6 * std::sqrt(0.25 / n));
}

}  // namespace
}  // namespace deepinfer::engine
