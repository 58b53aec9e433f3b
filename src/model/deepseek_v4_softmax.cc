#include "model/deepseek_v4_softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_rows.h"

namespace deepinfer::model::dsv4 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rounds x to BF16 when `bf16` (the reference's BF16 tensors), else leaves the FP32 value.
inline float R1(bool bf16, float x) { return bf16 ? RoundBf16(x) : x; }

}  // namespace

void SinkAttentionHead(const float* q, const std::vector<const float*>& keys, int64_t d,
                       float scale, float sink, bool bf16, std::vector<float>* scores,
                       std::vector<double>* acc, float* out) {
  const int64_t nk = static_cast<int64_t>(keys.size());
  scores->resize(nk);
  acc->resize(d);
  float* sc = scores->data();
  float mx = kNegInf;
  int64_t j = 0;
  for (; j + 4 <= nk; j += 4) {
    double dots[4];
    DotF64x4(keys.data() + j, q, d, dots);
    for (int k = 0; k < 4; ++k) sc[j + k] = static_cast<float>(dots[k]) * scale;
  }
  for (; j < nk; ++j) sc[j] = static_cast<float>(DotF64(q, keys[j], d)) * scale;
  for (j = 0; j < nk; ++j) mx = std::max(mx, sc[j]);
  // sc[j] becomes the weight of key j in P.V (the reference rounds P to BF16 before P.V); the
  // denominator sums the unrounded p_j, in key order.
  double denom = 0;
  for (j = 0; j < nk; ++j) {
    const float pj = std::exp(sc[j] - mx);
    denom += pj;
    sc[j] = R1(bf16, pj);
  }
  denom += std::exp(sink - mx);
  // out[i] = sum_j p_j * k_j[i] in key order for every i, as 32-column blocks held in registers
  // across all keys (a product of two floats is exact in FP64, so each fused step rounds where a
  // plain += would).
  double* a = acc->data();
  int64_t i0 = 0;
  for (; i0 + 32 <= d; i0 += 32) {
    __m256d s[8];
    for (int v = 0; v < 8; ++v) s[v] = _mm256_setzero_pd();
    for (j = 0; j < nk; ++j) {
      const __m256d pj = _mm256_set1_pd(static_cast<double>(sc[j]));
      const float* kj = keys[j] + i0;
      for (int v = 0; v < 8; ++v) {
        s[v] = _mm256_fmadd_pd(pj, _mm256_cvtps_pd(_mm_loadu_ps(kj + 4 * v)), s[v]);
      }
    }
    for (int v = 0; v < 8; ++v) _mm256_storeu_pd(a + i0 + 4 * v, s[v]);
  }
  for (int64_t i = i0; i < d; ++i) a[i] = 0.0;
  for (j = 0; j < nk; ++j) {
    const double pr = sc[j];
    for (int64_t i = i0; i < d; ++i) a[i] += pr * keys[j][i];
  }
  for (int64_t i = 0; i < d; ++i) out[i] = R1(bf16, static_cast<float>(a[i] / denom));
}

float SoftmaxPool(float* gates, const float* vals, int64_t n) {
  float mx = kNegInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, gates[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    gates[i] = std::exp(gates[i] - mx);
    sum += gates[i];
  }
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(vals[i]) * (gates[i] / sum);
  return static_cast<float>(acc);
}

}  // namespace deepinfer::model::dsv4
