// Request builders and output comparisons shared by the tests that check an engine path against
// the uncached / unbatched computation (prefix_cache_model_test.cc, prefix_cache_v41_test.cc).
// Header-only, test-only (uses gtest).
#ifndef DEEPINFER_ENGINE_TESTING_OUTPUT_COMPARE_H_
#define DEEPINFER_ENGINE_TESTING_OUTPUT_COMPARE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"

namespace deepinfer::engine::testing {

// `n` token ids uniform in [3, vocab) from a seeded std::mt19937 (ids 0-2 are left out: special
// tokens in the test models).
inline std::vector<int32_t> RandomPrompt(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % (vocab - 3));
  return p;
}

// Greedy decoding of exactly `max_tokens` tokens with the top-5 log-probabilities of each.
inline SamplingParams GreedyWithLogprobs(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.logprobs = 5;
  p.ignore_eos = true;
  return p;
}

// Same tokens and bitwise the same log-probabilities (chosen and top-5) at every position.
inline void ExpectBitwiseEqual(const SampleOutput& a, const SampleOutput& b) {
  EXPECT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t k = 0; k < a.logprobs.size(); ++k) {
    EXPECT_EQ(a.logprobs[k].logprob, b.logprobs[k].logprob) << "token " << k;
    EXPECT_EQ(a.logprobs[k].top, b.logprobs[k].top) << "token " << k;
  }
}

// Largest |logprob difference| over both runs' top-5 alternatives (ids present in both), token
// by token while the greedy tokens agree; `agree` gets how many leading tokens agree.
inline double MaxLogprobDiff(const SampleOutput& a, const SampleOutput& b, int* agree) {
  double worst = 0;
  *agree = 0;
  for (size_t k = 0; k < a.logprobs.size() && k < b.logprobs.size(); ++k) {
    for (const auto& [id, lp] : a.logprobs[k].top) {
      for (const auto& [id2, lp2] : b.logprobs[k].top) {
        if (id == id2) worst = std::max(worst, std::abs(static_cast<double>(lp) - lp2));
      }
    }
    if (a.token_ids[k] != b.token_ids[k]) break;
    ++*agree;
  }
  return worst;
}

}  // namespace deepinfer::engine::testing

#endif  // DEEPINFER_ENGINE_TESTING_OUTPUT_COMPARE_H_
