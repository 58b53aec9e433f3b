#include "model/deepseek_v4_softmax.h"

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
  for (int64_t j = 0; j < nk; ++j) {
    sc[j] = static_cast<float>(DotF64(q, keys[j], d)) * scale;
    mx = std::max(mx, sc[j]);
  }
  double denom = 0;
  std::fill(acc->begin(), acc->end(), 0.0);
  double* a = acc->data();
  for (int64_t j = 0; j < nk; ++j) {
    const float pj = std::exp(sc[j] - mx);
    denom += pj;
    const double pr = R1(bf16, pj);  // the reference rounds P to BF16 before P.V
    for (int64_t i = 0; i < d; ++i) a[i] += pr * keys[j][i];
  }
  denom += std::exp(sink - mx);
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
