#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/check.h"
#include "engine/ordered_vocab.h"
#include "kernels/ops.h"

namespace deepinfer::engine {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Descending by value, ties by lower id: the one candidate order used everywhere so choices
// never depend on sort stability.
struct ByValueDesc {
  const float* v;
  bool operator()(int32_t a, int32_t b) const {
    if (v[a] != v[b]) return v[a] > v[b];
    return a < b;
  }
};

}  // namespace

std::array<uint32_t, 4> Philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kPhiloxM0} * ctr[0];
    const uint64_t p1 = uint64_t{kPhiloxM1} * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kPhiloxW0;
    key[1] += kPhiloxW1;
  }
  return ctr;
}

double PhiloxUniform(uint64_t seed, uint32_t sample_index, uint64_t step) {
  const auto r = Philox4x32_10(
      {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), sample_index, 0u},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t a = r[0] >> 5, b = r[1] >> 6;  // 27 + 26 = 53 bits
  return (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) *
         (1.0 / 9007199254740992.0);
}

namespace {

// Per-thread buffers: the sampler runs once per sequence per step, so nothing on that path
// allocates after the first call of a thread.
struct LogprobScratch {
  std::vector<float> prob;
  std::vector<int32_t> ids;
};
LogprobScratch& GetLogprobScratch() {
  thread_local LogprobScratch s;
  return s;
}

float MaxOf(std::span<const float> x) { return MaxAndMinFinite(x).first; }

int32_t ArgmaxLowestId(std::span<const float> logits) {
  const float mx = MaxOf(logits);
  for (size_t v = 0; v < logits.size(); ++v) {
    if (logits[v] == mx) return static_cast<int32_t>(v);
  }
  return 0;  // all NaN: nothing sensible to do
}

}  // namespace

TokenLogprob ComputeLogprob(std::span<const float> logits, int32_t token, int top_n) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  CHECK(token >= 0 && token < vocab);
  LogprobScratch& s = GetLogprobScratch();
  const float max_logit = MaxOf(logits);
  // log Z = max + log Σ exp(l - max): FP32 exponentials (kernels::ExpScaled), summed in double.
  s.prob.resize(vocab);
  kernels::ExpScaled(logits.data(), vocab, max_logit, 1.0f, s.prob.data());
  double sum = 0.0;
  for (float e : s.prob) sum += e;
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  TokenLogprob out;
  out.token_id = token;
  out.logprob = static_cast<float>(logits[token] - log_z);
  int32_t rank = 1;
  const float lt = logits[token];
  for (int64_t v = 0; v < vocab; ++v) rank += logits[v] > lt;
  for (int64_t v = 0; v < token; ++v) rank += logits[v] == lt;
  out.rank = rank;
  if (top_n > 0) {
    const int n = static_cast<int>(std::min<int64_t>(top_n, vocab));
    s.ids.resize(vocab);
    std::iota(s.ids.begin(), s.ids.end(), 0);
    const ByValueDesc order{logits.data()};
    std::nth_element(s.ids.begin(), s.ids.begin() + (n - 1), s.ids.end(), order);
    std::sort(s.ids.begin(), s.ids.begin() + n, order);
    out.top.reserve(n);
    for (int i = 0; i < n; ++i) {
      out.top.emplace_back(s.ids[i], static_cast<float>(logits[s.ids[i]] - log_z));
    }
  }
  return out;
}

namespace {

struct ProcessorScratch {
  std::vector<uint8_t> seen;    // [vocab] repetition-penalty marks, all 0 between calls
  std::vector<int32_t> counts;  // [vocab] output counts, all 0 between calls
  std::vector<int32_t> touched;
};
ProcessorScratch& GetProcessorScratch() {
  thread_local ProcessorScratch s;
  return s;
}

}  // namespace

void ApplyLogitProcessors(const SampleContext& ctx, std::span<float> logits) {
  const SamplingParams& p = *ctx.params;
  const int64_t vocab = static_cast<int64_t>(logits.size());
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < vocab) logits[id] += bias;
  }
  if (static_cast<int64_t>(ctx.output.size()) < p.min_tokens) {
    if (!p.ignore_eos) {
      for (int32_t id : ctx.eos_token_ids) {
        if (id >= 0 && id < vocab) logits[id] = kNegInf;
      }
    }
    for (int32_t id : p.stop_token_ids) {
      if (id >= 0 && id < vocab) logits[id] = kNegInf;
    }
  }
  ProcessorScratch& s = GetProcessorScratch();
  if (p.repetition_penalty != 1.0f) {
    if (static_cast<int64_t>(s.seen.size()) < vocab) s.seen.resize(vocab, 0);
    s.touched.clear();
    for (std::span<const int32_t> ids : {ctx.prompt, ctx.output}) {
      for (int32_t id : ids) {
        if (id < 0 || id >= vocab || s.seen[id]) continue;
        s.seen[id] = 1;
        s.touched.push_back(id);
        logits[id] =
            logits[id] > 0 ? logits[id] / p.repetition_penalty : logits[id] * p.repetition_penalty;
      }
    }
    for (int32_t id : s.touched) s.seen[id] = 0;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    if (static_cast<int64_t>(s.counts.size()) < vocab) s.counts.resize(vocab, 0);
    s.touched.clear();
    for (int32_t id : ctx.output) {
      if (id < 0 || id >= vocab) continue;
      if (s.counts[id]++ == 0) s.touched.push_back(id);
    }
    for (int32_t id : s.touched) {
      logits[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(s.counts[id]);
      s.counts[id] = 0;
    }
  }
}

namespace {

OrderedVocab& GetOrderedVocab() {
  thread_local OrderedVocab v;
  return v;
}

// The prefix of sampling order that temperature -> top-k -> top-p -> min-p keep (the order
// and semantics of the sort-based sampler this replaced; vLLM's order). Never empty.
OrderedVocab::Cut KeptPrefix(const SamplingParams& p, OrderedVocab& ov) {
  OrderedVocab::Cut cut = ov.All();
  if (p.top_k > 0) cut = ov.FirstK(p.top_k);
  if (p.top_p < 1.0f) {
    // top-p over the top-k renormalised probabilities: cum / S_k >= top_p.
    cut = ov.ByMass(static_cast<double>(p.top_p) * ov.MassOf(cut), false, cut);
  }
  if (p.min_p > 0.0f) {
    const OrderedVocab::Cut by_min_p = ov.AtLeast(p.min_p * ov.prob(ov.First()));
    if (by_min_p < cut) cut = by_min_p;
  }
  return cut;
}

}  // namespace

int32_t ChooseToken(const SamplingParams& p, std::span<const float> logits, double u) {
  CHECK(!logits.empty());
  if (p.greedy() || p.top_k == 1) return ArgmaxLowestId(logits);
  OrderedVocab& ov = GetOrderedVocab();
  if (!ov.Build(logits, p.temperature, /*with_counts=*/p.top_k > 0)) return 0;  // everything masked
  const OrderedVocab::Cut kept = KeptPrefix(p, ov);
  const double target = u * ov.MassOf(kept);
  return ov.Last(ov.ByMass(target, true, kept));
}

void SamplingDistribution(const SamplingParams& p, std::span<const float> logits,
                          std::vector<TokenProb>* out) {
  CHECK(!logits.empty());
  out->clear();
  if (p.greedy() || p.top_k == 1) {
    out->push_back({ArgmaxLowestId(logits), 1.0f});
    return;
  }
  OrderedVocab& ov = GetOrderedVocab();
  if (!ov.Build(logits, p.temperature, /*with_counts=*/p.top_k > 0)) {
    out->push_back({0, 1.0f});
    return;
  }
  const OrderedVocab::Cut kept = KeptPrefix(p, ov);
  const double inv_total = 1.0 / ov.MassOf(kept);
  thread_local std::vector<int32_t> ids;
  ids.clear();
  ov.Tokens(kept, &ids);
  out->reserve(ids.size());
  for (int32_t id : ids) out->push_back({id, static_cast<float>(ov.prob(id) * inv_total)});
}

void SamplingProbabilities(const SamplingParams& p, std::span<const float> logits,
                           std::span<float> probs) {
  CHECK_EQ(logits.size(), probs.size());
  std::fill(probs.begin(), probs.end(), 0.0f);
  if (p.greedy() || p.top_k == 1) {
    probs[ArgmaxLowestId(logits)] = 1.0f;
    return;
  }
  OrderedVocab& ov = GetOrderedVocab();
  if (!ov.Build(logits, p.temperature, /*with_counts=*/p.top_k > 0)) {
    probs[0] = 1.0f;
    return;
  }
  const OrderedVocab::Cut kept = KeptPrefix(p, ov);
  const double inv_total = 1.0 / ov.MassOf(kept);
  ov.ForEach(kept, [&](int32_t id) { probs[id] = static_cast<float>(ov.prob(id) * inv_total); });
}

namespace {

// Whether any logit processor would change the row (else the row is sampled in place).
bool HasProcessors(const SampleContext& ctx) {
  const SamplingParams& p = *ctx.params;
  return !p.logit_bias.empty() || static_cast<int64_t>(ctx.output.size()) < p.min_tokens ||
         p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

}  // namespace

SampleResult Sample(const SampleContext& ctx, std::span<const float> logits,
                    std::vector<float>* scratch) {
  const SamplingParams& p = *ctx.params;
  std::span<const float> processed = logits;
  if (HasProcessors(ctx)) {
    scratch->assign(logits.begin(), logits.end());
    ApplyLogitProcessors(ctx, *scratch);
    processed = *scratch;
  }
  const double u = p.greedy() ? 0.0
                              : PhiloxUniform(ctx.seed, static_cast<uint32_t>(ctx.sample_index),
                                              ctx.output.size());
  SampleResult result;
  result.token = ChooseToken(p, processed, u);
  if (p.logprobs >= 0) result.logprob = ComputeLogprob(logits, result.token, p.logprobs);
  return result;
}

}  // namespace deepinfer::engine
