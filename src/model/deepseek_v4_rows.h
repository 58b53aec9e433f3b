// Row-wise building blocks shared by the DeepSeek-V4 and V4.1 forwards (deepseek_v4.cc,
// deepseek_v41.cc): the fixed-order FP64 dot product, the logistic function, the weighted
// RMSNorm of a row and the row loop that hands big enough work to the kernel pool. Both models'
// goldens depend on these exact summation orders, so one definition serves both.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_ROWS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_ROWS_H_

#include <immintrin.h>

#include <algorithm>
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

// out[k] = DotF64(a[k], b, n) for k < 4, bitwise: the same lanes (i % 8) and the same final
// combination. A product of two floats is exact in FP64, so a fused multiply-add rounds exactly
// where DotF64's add does. The four sums run interleaved (eight FP64 add chains instead of two),
// which is what makes attention's and the indexer's many short dot products fast.
inline void DotF64x4(const float* const* a, const float* b, int64_t n, double* out) {
  __m256d lo[4], hi[4];
  for (int k = 0; k < 4; ++k) lo[k] = hi[k] = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 bv = _mm256_loadu_ps(b + i);
    const __m256d blo = _mm256_cvtps_pd(_mm256_castps256_ps128(bv));
    const __m256d bhi = _mm256_cvtps_pd(_mm256_extractf128_ps(bv, 1));
    for (int k = 0; k < 4; ++k) {
      const __m256 av = _mm256_loadu_ps(a[k] + i);
      lo[k] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(av)), blo, lo[k]);
      hi[k] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(av, 1)), bhi, hi[k]);
    }
  }
  for (int k = 0; k < 4; ++k) {
    alignas(32) double s[8];
    _mm256_store_pd(s, lo[k]);
    _mm256_store_pd(s + 4, hi[k]);
    for (int64_t t = i, j = 0; t < n; ++t, ++j) s[j] += static_cast<double>(a[k][t]) * b[t];
    out[k] = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
  }
}

// sum_h max(dot64(q[h], k), 0) * w[h] over h < nh in head order (the indexer's score of key k
// for one query row; q[h] = q + h * n), each dot product bitwise DotF64's.
inline double IndexerScoreF64(const float* q, const float* w, int64_t nh, const float* k,
                              int64_t n) {
  double acc = 0;
  int64_t h = 0;
  for (; h + 4 <= nh; h += 4) {
    const float* qs[4] = {q + h * n, q + (h + 1) * n, q + (h + 2) * n, q + (h + 3) * n};
    double dots[4];
    DotF64x4(qs, k, n, dots);
    for (int j = 0; j < 4; ++j) acc += std::max(dots[j], 0.0) * w[h + j];
  }
  for (; h < nh; ++h) acc += std::max(DotF64(q + h * n, k, n), 0.0) * w[h];
  return acc;
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
