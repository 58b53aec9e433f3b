// Scalar reference implementations of the kernel ops (the test oracle, ARCHITECTURE.md §5).
//
// Written for readability: one element at a time, straight from the spec formulas, double
// accumulators where a sum is long (Linear, norms, softmax denominators), so they are both the
// most accurate version and the one to read when in doubt. Same contracts as kernels/ops.h;
// the dispatcher there calls these when ActiveIsa() is kScalar and for ops without a vector
// version. All are single-threaded and allocate nothing.
#ifndef DEEPINFER_KERNELS_CPU_REFERENCE_H_
#define DEEPINFER_KERNELS_CPU_REFERENCE_H_

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace deepinfer::kernels::ref {

// Weight element decode (spec §2.4; FP8 NaN codes decode to 0 as DS4 does).
float WeightAt(const WeightView& w, int64_t row, int64_t col);
// Decodes row `row` of w into out[K].
void DecodeWeightRow(const WeightView& w, int64_t row, float* out);

// Workspace of ref::Linear: (M·K if opt.quantize_activations) + K floats.
size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt);
// y[m][n] = Σ_k x[m][k]·W[n][k] summed sequentially over k in double, rounded to float, + bias.
void Linear(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
            void* workspace, size_t workspace_bytes);

void RoundToBf16(float* x, int64_t n);
void ActQuantFp8Sim(float* x, int64_t rows, int64_t cols, int64_t block);
void KvFp8Sim(float* x, int64_t rows, int64_t dim, int64_t rope_dim, int64_t block);
void Fp4Sim(float* x, int64_t rows, int64_t cols, int64_t block);
void HadamardTransform(float* x, int64_t rows, int64_t n);

// weight_f32 or weight_bf16 (at most one non-null) multiplies after normalising.
void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, const float* weight_f32,
             const uint16_t* weight_bf16, float eps);

void ApplyRope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
               const float* cos_tab, const float* sin_tab, RopeStyle style, bool inverse,
               int64_t token_stride);

void Softmax(float* x, int64_t rows, int64_t n);
void ExpScaled(const float* x, int64_t n, float shift, float scale, float* out);
void Silu(float* x, int64_t n);
void SwiGlu(const float* gate, const float* up, float* out, int64_t n, float limit);
void Add(const float* a, const float* b, float* out, int64_t n);
void Scale(float* x, float s, int64_t n);
void Axpy(float a, const float* x, float* y, int64_t n);
void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values);
void EmbeddingGather(const WeightView& table, const int32_t* ids, int64_t n, float* out);

// Attention for query heads [h_begin, h_end) (the dispatcher splits heads across threads).
// kv_group maps a query head to its kv head (GQA); k_rows[j] + kv_head*head_dim is the key.
void Attention(const float* q, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
               const float* const* k_rows, const float* const* v_rows, int64_t n_keys,
               const AttentionOptions& opt, float* out, float* workspace, int64_t h_begin,
               int64_t h_end);

}  // namespace deepinfer::kernels::ref

#endif  // DEEPINFER_KERNELS_CPU_REFERENCE_H_
