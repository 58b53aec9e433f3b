#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "common/check.h"

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

TokenLogprob ComputeLogprob(std::span<const float> logits, int32_t token, int top_n) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  CHECK(token >= 0 && token < vocab);
  float max_logit = kNegInf;
  for (float x : logits) max_logit = std::max(max_logit, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_z = max_logit + std::log(sum);
  TokenLogprob out;
  out.token_id = token;
  out.logprob = static_cast<float>(logits[token] - log_z);
  int32_t rank = 1;
  for (int64_t v = 0; v < vocab; ++v) {
    if (logits[v] > logits[token] || (logits[v] == logits[token] && v < token)) ++rank;
  }
  out.rank = rank;
  if (top_n > 0) {
    const int n = static_cast<int>(std::min<int64_t>(top_n, vocab));
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), ByValueDesc{logits.data()});
    out.top.reserve(n);
    for (int i = 0; i < n; ++i) {
      out.top.emplace_back(ids[i], static_cast<float>(logits[ids[i]] - log_z));
    }
  }
  return out;
}

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
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(vocab, false);
    for (int32_t id : ctx.prompt) {
      if (id >= 0 && id < vocab) seen[id] = true;
    }
    for (int32_t id : ctx.output) {
      if (id >= 0 && id < vocab) seen[id] = true;
    }
    for (int64_t v = 0; v < vocab; ++v) {
      if (!seen[v]) continue;
      logits[v] =
          logits[v] > 0 ? logits[v] / p.repetition_penalty : logits[v] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : ctx.output) ++counts[id];
    for (const auto& [id, count] : counts) {
      if (id < 0 || id >= vocab) continue;
      logits[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    }
  }
}

int32_t ChooseToken(const SamplingParams& p, std::span<const float> logits, double u) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  CHECK(vocab > 0);
  if (p.greedy() || p.top_k == 1) {
    int32_t best = 0;
    for (int64_t v = 1; v < vocab; ++v) {
      if (logits[v] > logits[best]) best = static_cast<int32_t>(v);
    }
    return best;
  }
  // Probabilities after temperature, in double for a stable inverse CDF.
  std::vector<double> prob(vocab);
  float max_logit = kNegInf;
  for (float x : logits) max_logit = std::max(max_logit, x);
  if (max_logit == kNegInf) return 0;  // everything masked: nothing sensible to do
  const double inv_t = 1.0 / p.temperature;
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) {
    prob[v] = std::exp((static_cast<double>(logits[v]) - max_logit) * inv_t);
    sum += prob[v];
  }
  for (double& x : prob) x /= sum;

  // Candidate ids in descending probability (ties by id). Only as much as needed is sorted.
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  auto by_prob = [&prob](int32_t a, int32_t b) {
    if (prob[a] != prob[b]) return prob[a] > prob[b];
    return a < b;
  };
  int64_t keep = vocab;
  if (p.top_k > 0 && p.top_k < vocab) keep = p.top_k;
  if (keep < vocab) {
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_prob);
    ids.resize(keep);
  } else {
    std::sort(ids.begin(), ids.end(), by_prob);
  }
  // Drop zero-probability tokens (masked to -inf).
  while (ids.size() > 1 && prob[ids.back()] == 0.0) ids.pop_back();
  if (p.top_k > 0) {
    // Renormalise over the top-k before top-p (vLLM order: top-k, then top-p on the result).
    double s = 0.0;
    for (int32_t id : ids) s += prob[id];
    for (int32_t id : ids) prob[id] /= s;
  }
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < ids.size()) {
      cum += prob[ids[n]];
      ++n;
      if (cum >= p.top_p) break;
    }
    ids.resize(std::max<size_t>(n, 1));
  }
  if (p.min_p > 0.0f) {
    const double threshold = p.min_p * prob[ids[0]];
    size_t n = 1;
    while (n < ids.size() && prob[ids[n]] >= threshold) ++n;
    ids.resize(n);
  }
  double total = 0.0;
  for (int32_t id : ids) total += prob[id];
  const double target = u * total;
  double cum = 0.0;
  for (int32_t id : ids) {
    cum += prob[id];
    if (target < cum) return id;
  }
  return ids.back();
}

SampleResult Sample(const SampleContext& ctx, std::span<const float> logits,
                    std::vector<float>* scratch) {
  const SamplingParams& p = *ctx.params;
  scratch->assign(logits.begin(), logits.end());
  ApplyLogitProcessors(ctx, *scratch);
  const double u = p.greedy() ? 0.0
                              : PhiloxUniform(ctx.seed, static_cast<uint32_t>(ctx.sample_index),
                                              ctx.output.size());
  SampleResult result;
  result.token = ChooseToken(p, *scratch, u);
  if (p.logprobs >= 0) result.logprob = ComputeLogprob(logits, result.token, p.logprobs);
  return result;
}

}  // namespace deepinfer::engine
