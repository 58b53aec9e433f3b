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
  // The dot products first, as (row, unit) items on the pool: a unit is 4 mixes by DotF64x4, the
  // last mix % 4 one each by DotF64. A decode step (T = 1) reads the [mix, nD] FP32 weights
  // (0.4 MB at the bench preset's size) twice per layer, which on one thread left the other idle
  // for ~3 % of a step. Each dot is one row's own FP64 sum: bitwise the same for any split.
  std::vector<float> rs(T), mixes(T * mix);
  ForRows(T, nD, [&](int64_t t) {
    const float* v = X + t * nD;
    double ss = 0;
    for (int64_t i = 0; i < nD; ++i) ss += static_cast<double>(v[i]) * v[i];
    rs[t] = 1.0f / std::sqrt(static_cast<float>(ss / nD) + static_cast<float>(h.rms_eps));
  });
  const int64_t groups = mix / 4, units = groups + mix % 4;
  ForRows(T * units, 4 * nD, [&](int64_t item) {
    const int64_t t = item / units, u = item % units;
    const float* v = X + t * nD;
    float* m = mixes.data() + t * mix;
    if (u < groups) {
      const int64_t i = 4 * u;
      const float* rows[4] = {hw.fn.data() + i * nD, hw.fn.data() + (i + 1) * nD,
                              hw.fn.data() + (i + 2) * nD, hw.fn.data() + (i + 3) * nD};
      double dots[4];
      DotF64x4(rows, v, nD, dots);  // bitwise DotF64 of each row
      for (int j = 0; j < 4; ++j) m[i + j] = static_cast<float>(dots[j]) * rs[t];
    } else {
      const int64_t i = 4 * groups + (u - groups);
      m[i] = static_cast<float>(DotF64(hw.fn.data() + i * nD, v, nD)) * rs[t];
    }
  });
  ForRows(T, 64 * mix, [&](int64_t t) {
    const float* m = mixes.data() + t * mix;
    for (int64_t i = 0; i < n; ++i) {
      pre[t * n + i] = Sigmoid(m[i] * hw.scale[0] + hw.base[i]) + eps;
      post[t * n + i] = 2.0f * Sigmoid(m[n + i] * hw.scale[1] + hw.base[n + i]);
    }
    float* M = comb + t * n * n;
    for (int64_t i = 0; i < n * n; ++i) M[i] = m[2 * n + i] * hw.scale[2] + hw.base[2 * n + i];
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
  // (row, column chunk) items, so that a decode step's single row is split over the pool too:
  // a column's outputs read only that column's old values, each output's FP64 sum keeps its
  // order, so any split gives the same bits.
  constexpr int64_t kChunk = 256;
  const int64_t chunks = (D + kChunk - 1) / kChunk;
  ForRows(T * chunks, 2 * n * n * kChunk, [&](int64_t item) {
    const int64_t t = item / chunks, k0 = item % chunks * kChunk, k1 = std::min(D, k0 + kChunk);
    float* Xt = X + t * n * D;
    std::vector<float> old(n * (k1 - k0));  // old[i][k - k0]
    for (int64_t i = 0; i < n; ++i) {
      std::copy(Xt + i * D + k0, Xt + i * D + k1, old.begin() + i * (k1 - k0));
    }
    const float* M = comb + t * n * n;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = k0; k < k1; ++k) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) {
          acc += static_cast<double>(M[i * n + j]) * old[i * (k1 - k0) + k - k0];
        }
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
