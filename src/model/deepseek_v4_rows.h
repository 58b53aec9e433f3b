// Row-wise building blocks shared by the DeepSeek-V4 and V4.1 forwards (deepseek_v4.cc,
// deepseek_v41.cc): the fixed-order FP64 dot product, the logistic function, the weighted
// RMSNorm of a row and the row loop that hands big enough work to the kernel pool. Both models'
// goldens depend on these exact summation orders, so one definition serves both.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_ROWS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_ROWS_H_

#include <cmath>
#include <cstdint>

#include "common/thread_pool.h"
#include "model/deepseek_v4_numerics.h"

namespace deepinfer::model::dsv4 {

// 1 / (1 + e^-x) in FP32.
inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// sum_i a[i] * b[i] in FP64 with 8 interleaved partial sums (lane i % 8, combined pairwise in a
// fixed order), so the FP64 add latency does not serialise the long dot products of attention,
// the indexer and mHC. The order depends only on n, never on the batch.
inline double DotF64(const float* a, const float* b, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(a[i + j]) * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) s[j] += static_cast<double>(a[i]) * b[i];
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

// Weighted RMSNorm of one row of `dim` values: y[i] = w[i] * (x[i] * rs) with
// rs = 1 / sqrt(fp32(sum x^2 / dim) + eps) (FP64 sum of squares), rounded to BF16 when `bf16`.
inline void WeightedRmsNormRow(const float* x, const float* w, int64_t dim, float eps, bool bf16,
                               float* y) {
  double ss = 0;
  for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float var = static_cast<float>(ss / dim);
  const float rs = 1.0f / std::sqrt(var + eps);
  for (int64_t i = 0; i < dim; ++i) y[i] = w[i] * (x[i] * rs);
  if (bf16) {
    for (int64_t i = 0; i < dim; ++i) y[i] = RoundBf16(y[i]);
  }
}

// Runs fn(r) for r in [0, n) on the kernel pool when the work is big enough to pay for the
// hand-off (`cost` ~ scalar operations per row). Rows are independent, so the result is the same
// however they are split.
template <class Fn>
void ForRows(int64_t n, int64_t cost, Fn&& fn) {
  if (n <= 1 || n * cost < (int64_t{1} << 15)) {
    for (int64_t r = 0; r < n; ++r) fn(r);
    return;
  }
  ThreadPool::Default()->ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  });
}

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_ROWS_H_
