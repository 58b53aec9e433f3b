// Mixture-of-experts pieces shared by DeepSeek-V4 (spec §3.7) and V4.1 (spec §4.6): the clamped
// SwiGLU activation of an expert, the biased top-k expert choice and the grouped dispatch that
// runs each routed expert once over all the rows routed to it. Scoring, hash routing and the
// route weights differ between the models and stay with them.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_MOE_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_MOE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "common/thread_pool.h"

namespace deepinfer::model::dsv4 {

// gate[r][i] = silu(min(gate, limit)) * clamp(up, -limit, limit) * row_weights[r] for M rows of
// I values, in place (no clamping when limit <= 0, no row weight when row_weights is null), each
// value rounded to BF16 when `bf16`.
void SwigluGateInPlace(float* gate, const float* up, int64_t M, int64_t I, float limit,
                       const float* row_weights, bool bf16);

// ids[0, K): the K experts of largest scores[e] + bias[e] (E entries), largest first, ties to
// the lower expert id.
void TopKBiasedExperts(const float* scores, const float* bias, int64_t E, int64_t K,
                       int32_t* ids);

// y [T, D] = sum over each row's K routed experts of expert_fn's output, experts in id order.
// ids / wts [T, K]: routed expert ids and route weights; xn [T, D]. Each expert e with rows runs
// once as expert_fn(e, xg, M, rw, yg) over its M rows (xg [M, D] gathered inputs, rw [M] route
// weights, yg [M, D] output), so its weights are read once per step; every row still sums its
// experts in expert-id order, so its result does not depend on the other rows.
//
// With `pool` and at least two routed experts per thread (decode: each expert has a row or
// two), whole experts are handed to the pool's threads, each expert's linears running on one
// thread (a parallel call made inside a pool task runs inline), instead of every linear being
// split across the threads: one hand-off per layer instead of three per expert, and each thread
// reads an expert's weights as one run. expert_fn must then be safe to call concurrently. The
// kernels compute a row the same way whatever the thread count and the sums keep expert-id
// order, so y is bitwise the same either way.
template <class ExpertFn>
void RunRoutedExperts(const float* xn, int64_t T, int64_t D, int64_t E, int64_t K,
                      const int32_t* ids, const float* wts, ExpertFn&& expert_fn, float* y,
                      ThreadPool* pool = nullptr) {
  std::fill(y, y + T * D, 0.f);
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < K; ++j) by_expert[ids[t * K + j]].push_back({t, wts[t * K + j]});
  }
  std::vector<int64_t> active;  // experts with rows, in id order
  for (int64_t e = 0; e < E; ++e) {
    if (!by_expert[e].empty()) active.push_back(e);
  }
  const int64_t n_active = static_cast<int64_t>(active.size());
  if (pool != nullptr && pool->num_threads() > 1 && n_active >= 2 * pool->num_threads()) {
    std::vector<std::vector<float>> outs(n_active);
    pool->ParallelForChunks(n_active, 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        const auto& list = by_expert[active[i]];
        const int64_t M = static_cast<int64_t>(list.size());
        std::vector<float> xg(M * D), rw(M);
        for (int64_t r = 0; r < M; ++r) {
          std::memcpy(xg.data() + r * D, xn + list[r].first * D, D * 4);
          rw[r] = list[r].second;
        }
        outs[i].resize(M * D);
        expert_fn(active[i], xg.data(), M, rw.data(), outs[i].data());
      }
    });
    for (int64_t i = 0; i < n_active; ++i) {
      const auto& list = by_expert[active[i]];
      for (size_t r = 0; r < list.size(); ++r) {
        float* yt = y + list[r].first * D;
        for (int64_t k = 0; k < D; ++k) yt[k] += outs[i][r * D + k];
      }
    }
    return;
  }
  std::vector<float> xg, rw, yg;
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = by_expert[e];
    if (list.empty()) continue;
    const int64_t M = static_cast<int64_t>(list.size());
    xg.resize(M * D);
    rw.resize(M);
    yg.resize(M * D);
    for (int64_t r = 0; r < M; ++r) {
      std::memcpy(xg.data() + r * D, xn + list[r].first * D, D * 4);
      rw[r] = list[r].second;
    }
    expert_fn(e, xg.data(), M, rw.data(), yg.data());
    for (int64_t r = 0; r < M; ++r) {
      float* yt = y + list[r].first * D;
      for (int64_t k = 0; k < D; ++k) yt[k] += yg[r * D + k];
    }
  }
}

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_MOE_H_
