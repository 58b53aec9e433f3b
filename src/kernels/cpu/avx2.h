// AVX2 + FMA versions of the kernel ops (x86-64-v3 baseline). Same contracts as ops.h; the
// reduction orders are the ones documented in ops.h. Only called by the dispatcher in ops.cc
// when ActiveIsa() >= kAvx2.
#ifndef DEEPINFER_KERNELS_CPU_AVX2_H_
#define DEEPINFER_KERNELS_CPU_AVX2_H_

#include <cstddef>
#include <cstdint>

#include "common/thread_pool.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::avx2 {

size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            int num_threads);
void Linear(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
            ThreadPool* pool, void* workspace, size_t workspace_bytes);

// y[M, N] (+ bias) = x[M, K] · W^T for M <= 4 (kStreamMaxM) FP8Block weights with any scale
// tile (w.fp8_tile_rows x w.fp8_tile_cols, fp8_tile_cols % 32 == 0; CHECKed), streamed once:
// bitwise what Linear gives on the same rows dequantised to F32 (same row decoder arithmetic,
// fl(e4m3 · scale), same FMA order), for LinearFp8Blocks' decode path. Row strides in floats;
// N split over `pool` (null: the calling thread).
void LinearFp8TilesSmallM(const float* x, int64_t x_stride, int64_t M, const WeightView& w,
                          float* y, int64_t y_stride, const float* bias, ThreadPool* pool);

void RoundToBf16(float* x, int64_t n);
void ActQuantFp8Sim(float* x, int64_t rows, int64_t cols, int64_t block);
void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, const float* weight_f32,
             const uint16_t* weight_bf16, float eps);
void ExpScaled(const float* x, int64_t n, float shift, float scale, float* out);
void Silu(float* x, int64_t n);
void SwiGlu(const float* gate, const float* up, float* out, int64_t n, float limit);
void Softmax(float* x, int64_t rows, int64_t n);
void Add(const float* a, const float* b, float* out, int64_t n);
void Scale(float* x, float s, int64_t n);
void Axpy(float a, const float* x, float* y, int64_t n);
void Attention(const float* q, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
               const float* const* k_rows, const float* const* v_rows, int64_t n_keys,
               const AttentionOptions& opt, float* out, float* workspace, int64_t h_begin,
               int64_t h_end);

}  // namespace deepinfer::kernels::avx2

#endif  // DEEPINFER_KERNELS_CPU_AVX2_H_
