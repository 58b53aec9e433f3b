// Manifold-constrained hyper-connections (mHC) shared by DeepSeek-V4 (spec §3.2, §3.3) and V4.1
// (spec §4.3): the per-row mixing coefficients with their Sinkhorn-normalised combination matrix,
// the collapse of the n residual streams into one row and the post update that writes a
// sub-layer's output back into the streams. The two models differ only in which coefficients
// collapse the streams (V4: this site's pre; V4.1: the carried pre of the previous site), which
// the callers choose.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_MHC_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_MHC_H_

#include <cstdint>
#include <vector>

#include "model/deepseek_v4_weights.h"

namespace deepinfer::model::dsv4 {

// Sizes and constants of an mHC site, as both models' Configs spell them.
struct HcDims {
  int64_t n = 0;               // hc_mult: residual streams
  int64_t D = 0;               // hidden_size
  int64_t sinkhorn_iters = 0;  // hc_sinkhorn_iters
  double rms_eps = 0;
  double hc_eps = 0;
};

// The HcDims of a V4 or V4.1 Config.
template <class ConfigT>
HcDims HcDimsOf(const ConfigT& c) {
  return {c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, c.rms_eps, c.hc_eps};
}

// Mixing coefficients of T rows of streams X [T, n, D]: pre [T, n] (sigmoid + hc_eps), post
// [T, n] (2 * sigmoid) and comb [T, n, n] (row softmax + hc_eps, then Sinkhorn column / row
// normalisation, sinkhorn_iters column passes in all). FP32 math over FP64 RMS and dot products.
void HcMixes(const HcWeights& hw, const HcDims& h, const float* X, int64_t T, float* pre,
             float* post, float* comb);

// x[t] = sum_s pre[t][s] * X[t][s] (FP64 sums), rounded to BF16 when `bf16`. X [T, n, D], pre
// [T, n], x [T, D].
void HcCollapse(const HcDims& h, const float* X, const float* pre, int64_t T, bool bf16,
                float* x);

// X[t][j] = post[t][j] * y[t] + sum_i comb[t][i][j] * X[t][i] (FP64 sums), each value rounded to
// BF16 when `bf16`. X [T, n, D] updated in place, y [T, D], post [T, n], comb [T, n, n].
void HcPost(const HcDims& h, float* X, const float* y, const float* post, const float* comb,
            int64_t T, bool bf16);

// Debug summary of the last row of the streams X [T, n, D] (BlockDebug): appends each stream's
// RMS (FP64 mean of squares) to `rms` and sets `first8` to the first 8 values of stream 0.
void LastRowStreamStats(const HcDims& h, const float* X, int64_t T, std::vector<float>* rms,
                        std::vector<float>* first8);

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_MHC_H_
