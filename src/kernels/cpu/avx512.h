// AVX-512 (F, BW, VL, DQ) versions of the kernel ops. Same contracts as ops.h; the reduction
// orders are the 16-lane ones documented in ops.h ("AVX-512"). Only called by the dispatcher in
// ops.cc when ActiveIsa() == kAvx512. The definitions are compiled for AVX-512 with
// `#pragma GCC target` after every #include, so no inline function from a header (std::, absl)
// is ever emitted with AVX-512 instructions: the binary stays runnable on AVX2-only machines.
// Linear lives in avx512.cc, the other ops in avx512_ops.cc, SelfCheck in avx512_check.cc.
#ifndef DEEPINFER_KERNELS_CPU_AVX512_H_
#define DEEPINFER_KERNELS_CPU_AVX512_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/thread_pool.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::avx512 {

// Runs every AVX-512 Linear format through its streamed and packed paths against the scalar
// reference (and the packed rows bitwise against the streamed ones), and the row-wise and
// elementwise ops against the reference / the AVX2 versions, on small random problems
// (about a millisecond). Returns false and describes the first mismatch in *failure. The
// dispatcher (ops.cc) runs it once before it first selects these kernels and falls back to AVX2,
// with an error in the log, if it fails: a CPU, compiler or kernel bug then costs speed instead
// of serving wrong numbers. Defined in avx512_check.cc.
bool SelfCheck(std::string* failure);

size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            int num_threads);
void Linear(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
            ThreadPool* pool, void* workspace, size_t workspace_bytes);

// Elementwise ops take any n (the tail is processed with masked vectors, lane-wise the same
// arithmetic, so an element's result never depends on where it falls).
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

}  // namespace deepinfer::kernels::avx512

#endif  // DEEPINFER_KERNELS_CPU_AVX512_H_
