#include "model/deepseek_v4_mhc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "model/deepseek_v4_numerics.h"
#include "model/deepseek_v4_rows.h"

namespace deepinfer::model::dsv4 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rounds x to BF16 when `bf16` (the reference's BF16 tensors), else leaves the FP32 value.
inline float R1(bool bf16, float x) { return bf16 ? RoundBf16(x) : x; }

}  // namespace

void HcMixes(const HcWeights& hw, const HcDims& h, const float* X, int64_t T, float* pre,
             float* post, float* comb) {
  const int64_t n = h.n, D = h.D, nD = n * D, mix = (2 + n) * n;
  const float eps = static_cast<float>(h.hc_eps);
  ForRows(T, mix * nD, [&](int64_t t) {
    const float* v = X + t * nD;
    double ss = 0;
    for (int64_t i = 0; i < nD; ++i) ss += static_cast<double>(v[i]) * v[i];
    const float rs = 1.0f / std::sqrt(static_cast<float>(ss / nD) + static_cast<float>(h.rms_eps));
    std::vector<float> mixes(mix);
    int64_t i = 0;
    for (; i + 4 <= mix; i += 4) {
      const float* rows[4] = {hw.fn.data() + i * nD, hw.fn.data() + (i + 1) * nD,
                              hw.fn.data() + (i + 2) * nD, hw.fn.data() + (i + 3) * nD};
      double dots[4];
      DotF64x4(rows, v, nD, dots);  // bitwise DotF64 of each row
      for (int j = 0; j < 4; ++j) mixes[i + j] = static_cast<float>(dots[j]) * rs;
    }
    for (; i < mix; ++i) mixes[i] = static_cast<float>(DotF64(hw.fn.data() + i * nD, v, nD)) * rs;
    for (int64_t i = 0; i < n; ++i) {
      pre[t * n + i] = Sigmoid(mixes[i] * hw.scale[0] + hw.base[i]) + eps;
      post[t * n + i] = 2.0f * Sigmoid(mixes[n + i] * hw.scale[1] + hw.base[n + i]);
    }
    float* M = comb + t * n * n;
    for (int64_t i = 0; i < n * n; ++i) M[i] = mixes[2 * n + i] * hw.scale[2] + hw.base[2 * n + i];
    // Sinkhorn: row softmax + eps, column normalise, then (iters-1) x (row, column).
    for (int64_t i = 0; i < n; ++i) {
      float mx = kNegInf;
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, M[i * n + j]);
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        M[i * n + j] = std::exp(M[i * n + j] - mx);
        sum += M[i * n + j];
      }
      for (int64_t j = 0; j < n; ++j) M[i * n + j] = M[i * n + j] / sum + eps;
    }
    auto col_norm = [&] {
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        for (int64_t i = 0; i < n; ++i) s += M[i * n + j];
        for (int64_t i = 0; i < n; ++i) M[i * n + j] /= (s + eps);
      }
    };
    auto row_norm = [&] {
      for (int64_t i = 0; i < n; ++i) {
        float s = 0;
        for (int64_t j = 0; j < n; ++j) s += M[i * n + j];
        for (int64_t j = 0; j < n; ++j) M[i * n + j] /= (s + eps);
      }
    };
    col_norm();
    for (int64_t it = 1; it < h.sinkhorn_iters; ++it) {
      row_norm();
      col_norm();
    }
  });
}

void HcCollapse(const HcDims& h, const float* X, const float* pre, int64_t T, bool bf16, float* x) {
  const int64_t n = h.n, D = h.D;
  ForRows(T, n * D, [&](int64_t t) {
    float* xt = x + t * D;
    for (int64_t k = 0; k < D; ++k) {
      double acc = 0;
      for (int64_t s = 0; s < n; ++s) {
        acc += static_cast<double>(pre[t * n + s]) * X[(t * n + s) * D + k];
      }
      xt[k] = static_cast<float>(acc);
    }
    if (bf16) {
      for (int64_t k = 0; k < D; ++k) xt[k] = RoundBf16(xt[k]);
    }
  });
}

void HcPost(const HcDims& h, float* X, const float* y, const float* post, const float* comb,
            int64_t T, bool bf16) {
  const int64_t n = h.n, D = h.D;
  ForRows(T, 2 * n * n * D, [&](int64_t t) {
    float* Xt = X + t * n * D;
    const std::vector<float> old(Xt, Xt + n * D);
    const float* M = comb + t * n * n;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < D; ++k) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(M[i * n + j]) * old[i * D + k];
        Xt[j * D + k] =
            R1(bf16, static_cast<float>(static_cast<double>(post[t * n + j]) * y[t * D + k] + acc));
      }
    }
  });
}

void LastRowStreamStats(const HcDims& h, const float* X, int64_t T, std::vector<float>* rms,
                        std::vector<float>* first8) {
  const int64_t n = h.n, D = h.D;
  const float* Xl = X + (T - 1) * n * D;
  for (int64_t st = 0; st < n; ++st) {
    double ss = 0;
    for (int64_t k = 0; k < D; ++k) ss += static_cast<double>(Xl[st * D + k]) * Xl[st * D + k];
    rms->push_back(static_cast<float>(std::sqrt(ss / D)));
  }
  first8->assign(Xl, Xl + std::min<int64_t>(8, D));
}

}  // namespace deepinfer::model::dsv4
