// Softmax-weighted sums shared by the DeepSeek-V4 and V4.1 attention layers: one query head of
// attention with a learned sink logit (V4 spec §3.5, V4.1 spec §4.4) and the gated pooling of a
// compressor block (V4 spec §3.6.1, V4.1 spec §4.5). The models differ in where the keys and the
// pooled values come from (rings, paged rows, formats); the arithmetic, and so its summation
// order, is one.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_SOFTMAX_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_SOFTMAX_H_

#include <cstdint>
#include <vector>

namespace deepinfer::model::dsv4 {

// One head of sink attention: scores_j = fp32(dot64(q, k_j)) * scale, p_j = exp(score_j - max)
// (rounded to BF16 before P.V when `bf16`, as the reference does), denominator sum_j p_j +
// exp(sink - max), out[i] = sum_j p_j * k_j[i] / denominator (FP64 sums; rounded to BF16 when
// `bf16`). The keys double as values. q, keys[j] and out hold d floats; `scores` and `acc` are
// scratch the caller reuses across heads (resized here).
void SinkAttentionHead(const float* q, const std::vector<const float*>& keys, int64_t d,
                       float scale, float sink, bool bf16, std::vector<float>* scores,
                       std::vector<double>* acc, float* out);

// Softmax pooling of one compressed value: gates[0, n) become exp(gate - max) (in place) and the
// result is fp32(sum_i vals[i] * (gates[i] / sum)) with an FP64 sum.
float SoftmaxPool(float* gates, const float* vals, int64_t n);

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_SOFTMAX_H_
