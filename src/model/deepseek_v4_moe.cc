#include "model/deepseek_v4_moe.h"

#include <algorithm>
#include <cmath>

#include "model/deepseek_v4_numerics.h"

namespace deepinfer::model::dsv4 {

void SwigluGateInPlace(float* gate, const float* up, int64_t M, int64_t I, float limit,
                       const float* row_weights, bool bf16) {
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t i = 0; i < I; ++i) {
      float gv = gate[r * I + i], uv = up[r * I + i];
      if (limit > 0) {
        uv = std::clamp(uv, -limit, limit);
        gv = std::min(gv, limit);
      }
      float h = gv / (1.0f + std::exp(-gv)) * uv;
      if (row_weights != nullptr) h *= row_weights[r];
      gate[r * I + i] = bf16 ? RoundBf16(h) : h;
    }
  }
}

void TopKBiasedExperts(const float* scores, const float* bias, int64_t E, int64_t K,
                       int32_t* ids) {
  std::vector<std::pair<float, int32_t>> b(E);
  for (int64_t e = 0; e < E; ++e) b[e] = {scores[e] + bias[e], static_cast<int32_t>(e)};
  std::partial_sort(b.begin(), b.begin() + K, b.end(), [](const auto& x, const auto& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  });
  for (int64_t j = 0; j < K; ++j) ids[j] = b[j].second;
}

}  // namespace deepinfer::model::dsv4
