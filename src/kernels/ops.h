// The CPU kernel API (ARCHITECTURE.md §5, KERNELS.md): every op the Llama and DeepSeek-V4
// forward passes need, on raw float32 activation arrays.
//
// Conventions
// - Activations are float32, row-major, contiguous unless a stride parameter says otherwise.
//   Where the reference casts to BF16 the model calls RoundToBf16 itself.
// - Ops never allocate: the few that need scratch take a caller workspace whose size is given
//   by a *WorkspaceBytes / *WorkspaceFloats function (kernels/workspace.h has a grow-only
//   buffer for callers). Shapes are checked with CHECK (a bad
//   shape is a bug in the caller; file-level validation happens in the loaders, which can use
//   WeightDataBytes/WeightScaleCount below).
// - Each op has a scalar reference in cpu/reference.h (the test oracle) and, where it matters,
//   an AVX2 version (cpu/avx2.h) and an AVX-512 version (cpu/avx512.h: F, BW, VL, DQ); the
//   version is chosen at run time from ActiveIsa() (common/cpu_features.h, capped by
//   DEEPINFER_FORCE_ISA=scalar|avx2|avx512|avx512bf16|amx). Vector versions exist for Linear,
//   RoundToBf16, ActQuantFp8Sim, RmsNorm, Softmax, Silu, SwiGlu, Add/Scale/Axpy and attention;
//   KvFp8Sim, Fp4Sim, Hadamard, RoPE, TopK (O(n log k) heap), EmbeddingGather and the dequantisers
//   run the same scalar code on every ISA (small or memory-bound per call). Linears whose operands
//   are both BF16-exact (LinearOptions::quantize_activations with BF16, E8M0-scaled FP8 or MXFP4
//   weights) take the BF16-dot GEMM of cpu/bf16_dot.h, for every M, where one is active:
//   AVX512_BF16 VDPBF16PS in the lane order (the default where the CPU has AVX512_BF16 and
//   VBMI) or AMX-BF16 tiles (opt-in: DEEPINFER_FORCE_ISA=amx), gated by a start-up self-check, or
//   their portable emulations (amxemu, avx512bf16emu; any CPU). Its products are the same exact
//   products; its summation order is that header's (AMX and VDPBF16PS orders differ from each other
//   and from the FP32 kernels' below). Every other linear keeps the FP32 kernels (FP32 activations
//   are never rounded to BF16).
// - Threads: ops that take a ThreadPool* split their work with its static ParallelFor; nullptr
//   means "run on the calling thread".
//
// Reduction order and batch invariance (DEEPINFER_BATCH_INVARIANT)
// Every op here is batch-invariant unconditionally, so the flag costs nothing:
// - Linear: output y[m][n] is the dot product of row m of x with row n of W, accumulated in
//   FP32 with fused multiply-adds fma(x, w, acc) in 8 lanes: lane l sums k = l, l+8, l+16, ...
//   in increasing k (the last partial group of 8 is zero-padded); then the lanes are added as
//   ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then the bias is added. w is the dequantised
//   weight fl(code·scale) (exact for E8M0 scales). Power-of-two scales may be folded into x
//   instead of w where that is provably exact (same products): the FP8 decode path multiplies x by
//   2^(e-127)·2^120 per 128x128 block and decodes e4m3 by bit placement to e4m3·2^-120, checking
//   exactness and otherwise using the plain decoder. For F32/BF16/FP8 the same order is used for
//   every M (the decode path that streams weights and the prefill path that packs them produce
//   bitwise identical rows). MXFP4 has its own order, used for every M (by the streamed decode
//   path and by the packed prefill path alike): the weight is the exact product fl(e2m1 ·
//   2^(e-127)) (a BF16 number), columns come in 64-column superblocks, and vector v = 2u + o (u =
//   0..3, o = 0..1) of a superblock holds in lane l = 4L + d column 2·(16L + 8(u%2) + 2d + o) +
//   u/2; accumulator a_o takes fma(x_v, w_v, a_o) for u = 0..3, superblock by superblock, and the
//   row's result is the lane combination below of a_0 + a_1. MXFP4 weights that carry the lane
//   layout (WeightView::lane_codes, PackMxfp4Lanes) use instead, for every M: columns in groups
//   of 256 (8 blocks; K zero-padded to a whole group), lane l of the group holding block l;
//   vector v = 2u + o of chunk q (q, u = 0..3, o = 0..1) holds in lane l column
//   32l + 8q + 4(u%2) + 2(u/2) + o; per group, partial p_o = x_0·w_0 then fma(x_v, w_v, p_o) over
//   the vectors with that o in the order (q, u), with the unscaled weight e2m1 (exact); then
//   acc = fma(p_0 + p_1, s, acc) with s_l = 2^(e_l - 127) the scale of block l, group by
//   group; the row's result is the lane combination below of acc. The products x·e2m1 are exact,
//   but the scale comes after the sums, so they round (and could overflow, for |x| near
//   FLT_MAX/6) differently from the scaled products of the plain layout. The work is split along
//   N only (never K), so the result does not depend on M, on the row's position in the batch or
//   on the thread count. The scalar reference sums k sequentially (a different but equally fixed
//   order).
// - Linear on AVX-512 (a different, equally fixed order; results differ from the AVX2 ones in
//   the last bits, but never between M, rows, threads or kernels on one machine): 16 lanes, lane
//   l sums k = l, l+16, ... by FMAs (tail zero-padded), then lanes l and l+8 are added and the
//   8 sums combined as above. MXFP4: in each 32-column block, vector 0 holds the even columns
//   (lane j: column 2j) and vector 1 the odd ones (column 2j + 1); accumulator a_o takes vector
//   o, block by block, and the result is the lane combination of a_0 + a_1. The weight values
//   (and so every product) are the same as on AVX2.
// - Row-wise ops (norms, softmax, quantisers, RoPE, attention per query) process each row
//   independently with a fixed order (8-lane partial sums combined as above for the AVX2 path;
//   16-lane partial sums folded to 8 (l + l+8) and then combined as above for AVX-512).
//   Elementwise ops compute each element with the same instructions on both ISAs (bitwise
//   equal results).
#ifndef DEEPINFER_KERNELS_OPS_H_
#define DEEPINFER_KERNELS_OPS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/config.h"
#include "common/thread_pool.h"
#include "kernels/formats.h"

namespace deepinfer::kernels {

// The instruction set the CPU kernels run with: kAmx / kAvx512Bf16 where that BF16-dot kernel
// is active (cpu/bf16_dot.h ActiveKernel; self-checked), else ActiveIsa() up to
// kAvx512, except kAvx2 where the AVX-512 kernels failed their one-time self-check on this
// machine (avx512::SelfCheck; runs it if it has not run yet, about a millisecond). For logs and
// `deepinfer version`.
IsaLevel KernelIsa();

// =============================================================================================
// Weights

// Storage format of a weight matrix [N, K] (spec §2.2-2.4).
enum class WeightDType {
  kF32,       // float32 [N, K]
  kBF16,      // uint16 bf16 bits [N, K]
  kFP8Block,  // e4m3fn bytes [N, K] + one scale per 128x128 block: [ceil(N/128), ceil(K/128)]
  kMXFP4,     // e2m1 nibbles [N, K/2] bytes (low nibble = even column) + scales [N, K/32]
};

// Type of the block scales (FP8Block accepts either; MXFP4 is always E8M0).
enum class ScaleDType { kE8M0, kF32 };

// A non-owning view of a weight matrix exactly as the safetensors file stores it.
// `rows` = N (output features), `cols` = K (input features, logical: MXFP4 stores K/2 bytes per
// row, and K must then be a multiple of 32). Scales are row-major as stored.
struct WeightView {
  WeightDType dtype = WeightDType::kF32;
  const void* data = nullptr;
  const void* scales = nullptr;  // FP8Block / MXFP4 only
  ScaleDType scale_dtype = ScaleDType::kE8M0;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  // Row-block offset into `scales` for FP8Block views made by SliceRows (in 128-row units);
  // leave 0 for a whole tensor.
  int64_t scale_row_offset = 0;
  // MXFP4 only, optional: the same weights in the lane layout of the AVX2 kernels
  // (Mxfp4LanePack, made once at load by PackMxfp4Lanes), which they then read instead of
  // `data`/`scales` (a different, equally fixed summation order: see the header comment). Null
  // otherwise; other kernels ignore it.
  const uint8_t* lane_codes = nullptr;
  const uint8_t* lane_scales = nullptr;
  // FP8Block only, optional: true when no weight byte is one of e4m3's NaN codes (0x7F, 0xFF),
  // as checked once at load by Fp8HasNanCodes. The AVX2 decode kernel then skips its per-tile
  // NaN-code check (a sixth of its vector work per weight); false keeps the check.
  bool fp8_nan_free = false;
  // FP8Block only: rows and columns of a scale tile. Linear and every kernel behind it take
  // V4's 128 x 128 (CHECKed); other sizes (V4.1's 32 x 32) reach only the AVX2 streaming kernel
  // behind LinearFp8Blocks (kernels/linear_fp8_blocks.h).
  int64_t fp8_tile_rows = 128;
  int64_t fp8_tile_cols = 128;
};

// Whether any of the `n` e4m3 bytes at `codes` is a NaN code (0x7F or 0xFF): model loaders call
// it once per FP8 tensor to set WeightView::fp8_nan_free.
bool Fp8HasNanCodes(const uint8_t* codes, int64_t n);

// MXFP4 weights [N, K] repacked for the AVX2 Linear (about 1.2x faster matrix-vector products:
// one fixed decode table and one scale multiply per lane and 256 columns, instead of a
// per-block table). Kp = K rounded up to 256 (kMxfp4LaneGroup). codes: N x Kp/2 bytes; group g
// of a row (128 bytes) is 4 chunks of 32 bytes; byte i of chunk q holds, in its low (h = 0) and
// high (h = 1) nibble, column 256g + Mxfp4LaneColumn(q, i, h) (code 0 past K). scales: N x Kp/32
// E8M0 bytes (127 past K).
struct Mxfp4LanePack {
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales;
};
inline constexpr int64_t kMxfp4LaneGroup = 256;
// Kp: K rounded up to a whole lane group (columns per row of the lane layout).
constexpr int64_t Mxfp4LanePaddedK(int64_t K) {
  return (K + kMxfp4LaneGroup - 1) / kMxfp4LaneGroup * kMxfp4LaneGroup;
}
// Column within its 256-column group of byte i (0..31) of chunk q (0..3), nibble h (0 = low):
// block l = 4(i/16) + (i%8)/2 (the lane that byte feeds), position 8q + 4((i%16)/8) + 2h + i%2.
constexpr int Mxfp4LaneColumn(int q, int i, int h) {
  return 32 * (4 * (i / 16) + (i % 8) / 2) + 8 * q + 4 * ((i % 16) / 8) + 2 * h + i % 2;
}
// Fills *out with w (MXFP4, no lane layout of its own) in the lane layout and returns true, or
// returns false and leaves *out empty where scaling after the sums would not give the
// reference's special values: a scale byte outside [1, 252] (E8M0 0 is 2^-127, not the 0 the
// kernel's shift makes; 253+ can overflow 6·2^(e-127) to inf; 255 is NaN).
// Rows are split over `pool` when given (model load).
bool PackMxfp4Lanes(const WeightView& w, Mxfp4LanePack* out, ThreadPool* pool = nullptr);
// Whether the Linear kernels this process runs (KernelIsa) read the lane layout: AVX2 yes;
// AVX-512 and the scalar fallback no (model loaders skip PackMxfp4Lanes then).
bool UsesMxfp4Lanes();
// A view of `w` whose lane fields point into `pack` (which must outlive it).
WeightView WithLanes(WeightView w, const Mxfp4LanePack& pack);

// Bytes of `data` for a weight of this dtype and shape (MXFP4: rows * cols / 2).
int64_t WeightDataBytes(WeightDType dtype, int64_t rows, int64_t cols);
// Number of scale entries (FP8Block: ceil(rows/128)*ceil(cols/128); MXFP4: rows*cols/32;
// otherwise 0). Bytes = count * (1 for E8M0, 4 for F32).
int64_t WeightScaleCount(WeightDType dtype, int64_t rows, int64_t cols);

// Rows [row_begin, row_begin + row_count) of `w` as a view (no copy). For FP8Block, row_begin
// must be a multiple of 128 (a scale block boundary); CHECK-fails otherwise.
WeightView SliceRows(const WeightView& w, int64_t row_begin, int64_t row_count);

// Dequantises rows [row_begin, row_end) of `w` to float32 `out` [(row_end-row_begin), K]
// (spec §2.4). FP8 NaN codes (0x7F/0xFF) decode to 0, as DS4 does.
void DequantizeWeightRows(const WeightView& w, int64_t row_begin, int64_t row_end, float* out);
// Whole matrix: out [N, K] float32.
void DequantizeWeight(const WeightView& w, float* out);
// Whole matrix rounded to BF16 (RNE) into out [N, K] (the official converter does this for
// wo_a; e4m3 x power-of-two values are exact in BF16 unless the scale is extreme).
void DequantizeWeightToBf16(const WeightView& w, uint16_t* out);

// =============================================================================================
// Linear: y[M, N] = x[M, K] · W[N, K]^T (+ bias)

struct LinearOptions {
  // Simulate the reference's FP8 activation quantisation before the product (spec §2.5): each
  // row of x is cut into blocks of 128 along K, each block is rounded to e4m3 with the
  // power-of-two scale 2^ceil(log2(max(amax,1e-4)/448)) and dequantised (ActQuantFp8Sim).
  // The product with FP8/FP4 weights is then exact per term; only FP32 summation remains.
  // x itself is not modified (the quantised copy lives in the workspace).
  bool quantize_activations = false;
  // The caller's promise that x already holds BF16 values (the reference rounded or quantised
  // them, e.g. V4.1's MXFP8 activations): with BF16, E8M0-scaled FP8 or MXFP4 weights the
  // products are then exact, and the BF16-dot GEMM may take the linear (cpu/bf16_dot.h; a row
  // that breaks the promise is computed there by FP32 FMAs instead). Other kernels ignore it.
  bool input_is_bf16 = false;
  // Optional bias [N] added after the reduction (nullptr: none).
  const float* bias = nullptr;
  // Row strides in floats; 0 means dense (K for x, N for y).
  int64_t x_stride = 0;
  int64_t y_stride = 0;
};

// Workspace bytes Linear needs for this call (0 when none; then `workspace` may be null).
// Depends on M, K, N, dtype, options, the ISA and pool's thread count, never on data; pass the
// same pool as to Linear (null = calling thread only).
size_t LinearWorkspaceBytes(int64_t M, const WeightView& w, const LinearOptions& opt,
                            const ThreadPool* pool);

// y[m][n] = Σ_k x[m][k]·W[n][k] (+ bias[n]) in FP32 (see the file comment for the exact order).
// FP8 NaN weight codes (0x7F/0xFF) count as 0, as in DequantizeWeight (spec §2.4, DS4): the FP8
// decode path detects them per tile of rows and recomputes such a tile with the plain decoder
// (slower, same result).
// x: [M, K] (stride opt.x_stride), y: [M, N] (stride opt.y_stride); M >= 0. x and y must not
// overlap. `workspace` must hold LinearWorkspaceBytes(M, w, opt, pool) bytes and be 64-byte
// aligned (CHECKed). pool may be null.
void Linear(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
            ThreadPool* pool, void* workspace, size_t workspace_bytes);

// =============================================================================================
// Format conversions on activation arrays

// x[i] = bf16(x[i]) (round to nearest even) in place: the reference's activation casts.
void RoundToBf16(float* x, int64_t n);
void Bf16ToF32(const uint16_t* in, float* out, int64_t n);
void F32ToBf16(const float* in, uint16_t* out, int64_t n);

// =============================================================================================
// Quantisation simulations (quantise + dequantise in place; spec §2.5, §3.5 step 4, §3.6.1).
// NaN inputs: NaN elements stay NaN and do not influence their block's scale (the amax
// ignores them); ±inf saturates the block (scale from inf → everything else becomes 0).

// Per row of x [rows, cols]: blocks of `block` (default 128) consecutive elements along cols
// (the last block may be shorter) rounded to e4m3 with scale 2^ceil(log2(max(amax,1e-4)/448)).
void ActQuantFp8Sim(float* x, int64_t rows, int64_t cols, int64_t block = 128);

// Window/compressed KV rows [rows, dim]: dims [0, dim - rope_dim) in blocks of 64 get the same
// e4m3 simulation; the last rope_dim dims are untouched (V4: dim 512, rope_dim 64).
void KvFp8Sim(float* x, int64_t rows, int64_t dim, int64_t rope_dim, int64_t block = 64);

// Per row of x [rows, cols]: blocks of `block` (default 32) rounded to FP4 e2m1 (RNE) with
// scale 2^ceil(log2(max(amax, 6·2^-126)/6)).
void Fp4Sim(float* x, int64_t rows, int64_t cols, int64_t block = 32);

// Walsh-Hadamard transform (Sylvester/natural order: H[i][j] = (-1)^popcount(i&j)) of each
// row of x [rows, n], n a power of two, scaled by n^-1/2, in place (butterflies with stride
// 1, 2, 4, ... then one multiply by the scale).
void HadamardTransform(float* x, int64_t rows, int64_t n);
// The 128-point case used by the V4 indexer (spec §3.6.1).
inline void Hadamard128(float* x, int64_t rows) { HadamardTransform(x, rows, 128); }

// =============================================================================================
// Normalisation

// y[r] = x[r] · rsqrt(mean(x[r]²) + eps) (· weight) for each of `rows` rows of `dim` floats,
// FP32 (spec §3 notation). x and y may be the same array. rsqrt is computed as 1/sqrt(·)
// (correctly rounded). Weighted forms multiply after normalising.
void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, float eps);
void RmsNorm(const float* x, float* y, int64_t rows, int64_t dim, const float* weight, float eps);
void RmsNormBf16Weight(const float* x, float* y, int64_t rows, int64_t dim, const uint16_t* weight,
                       float eps);

// =============================================================================================
// RoPE (spec §3.5.1, §3.5.3)

// Base frequencies f_i = base^(-2i/rope_dim), i = 0 .. rope_dim/2 - 1 (double precision).
void RopeFrequencies(int64_t rope_dim, double base, double* freqs);

// YaRN parameters (spec §3.5.3; names as in the HF/official config rope_scaling).
struct YarnParams {
  double factor = 1.0;                // "factor" (16 for V4)
  int64_t original_max_position = 0;  // "original_max_position_embeddings" (65536 for V4)
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// Base frequencies with the YaRN ramp: corr(r) = d·ln(L0/(2πr)) / (2 ln base),
// low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), d-1),
// ramp_i = clamp((i - low)/(high - low), 0, 1) (high == low: high += 0.001 as the reference),
// f'_i = f_i·(1 - ramp_i) + (f_i/factor)·ramp_i. d = rope_dim.
void RopeFrequenciesYarn(int64_t rope_dim, double base, const YarnParams& yarn, double* freqs);

// cos/sin tables for the given positions: cos[t][i] = cos(pos[t]·f_i), sin likewise, angle and
// trig computed in double then rounded to float. Shapes [n_pos, rope_dim/2].
void RopeCosSin(const double* freqs, int64_t rope_dim, const int64_t* positions, int64_t n_pos,
                float* cos_out, float* sin_out);

enum class RopeStyle {
  // Pairs (2i, 2i+1) of the rope slice are complex numbers (GPT-J / official V4, spec §3.5.1).
  kInterleaved,
  // rotate_half: dims i and i + rope_dim/2 form a pair (HF Llama).
  kHalfSplit,
};

// Rotates the last `rope_dim` dims of every head in place:
// x [n_tokens, n_heads, head_dim] with token stride `token_stride` floats (0 = n_heads·head_dim)
// and head stride head_dim. cos/sin: [n_tokens, rope_dim/2] (from RopeCosSin). Pair (a, b)
// becomes (a·c − b·s, a·s + b·c); inverse = true uses −s (the conjugate rotation, spec §3.5
// step 9).
void ApplyRope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
               const float* cos_tab, const float* sin_tab, RopeStyle style, bool inverse,
               int64_t token_stride = 0);

// =============================================================================================
// Activations and elementwise

// In-place softmax of each row of x [rows, n] in FP32: exp(x - max) / Σ.
void Softmax(float* x, int64_t rows, int64_t n);

// out[i] = exp((x[i] − shift) · scale) in FP32 (the vectorised exp of Softmax: ~1 ulp, 0 below
// −87.3, so −inf inputs give 0). x may alias out. The sampler's unnormalised probabilities
// (shift = max logit, scale = 1 / temperature).
void ExpScaled(const float* x, int64_t n, float shift, float scale, float* out);

// x = x·sigmoid(x) in place.
void Silu(float* x, int64_t n);

// out[i] = silu(min(gate[i], limit)) · clamp(up[i], −limit, limit) (spec §3.7; limit <= 0
// disables both clamps, as for Llama). out may alias gate or up.
void SwiGlu(const float* gate, const float* up, float* out, int64_t n, float limit);

// out = a + b; out may alias a or b.
void Add(const float* a, const float* b, float* out, int64_t n);
// x *= s.
void Scale(float* x, float s, int64_t n);
// y += a·x.
void Axpy(float a, const float* x, float* y, int64_t n);

// The k largest values of x [n] with their indices, in descending value order; equal values
// are ordered by lower index first. NaN ranks below every number. 0 <= k <= n.
void TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values);

// out[t] = table[ids[t]] for t < n (table F32 or BF16 [vocab, dim]; ids must be in
// [0, vocab), CHECKed: the caller validates token ids). out [n, dim].
void EmbeddingGather(const WeightView& table, const int32_t* ids, int64_t n, float* out);

// =============================================================================================
// Attention (one query position; the caller chooses the key set, so causality, windows,
// compressed rows and paged caches are all expressed by the row pointer lists).

struct AttentionOptions {
  // Multiplies q·k (1/sqrt(head_dim) for both models).
  float scale = 1.0f;
  // Per-head sink logit [n_heads] (not scaled) that enters only the softmax denominator
  // (spec §3.5 step 8); nullptr = none.
  const float* sinks = nullptr;
  // "Official numerics": round each probability exp(s - max) to BF16 before P·V, while the
  // denominator sums the FP32 probabilities (as the reference's FlashAttention-style kernel
  // does). false = FP32 everywhere (debug / Llama).
  bool round_p_to_bf16 = false;
};

// Floats of workspace the attention ops need: n_heads * n_keys.
inline int64_t AttentionWorkspaceFloats(int64_t n_heads, int64_t n_keys) {
  return n_heads * n_keys;
}

// V4 latent MQA: one key row per key that is also its value row.
// q [n_heads, head_dim]; kv_rows[j] points to head_dim floats; out [n_heads, head_dim]:
//   s_hj = scale·(q_h·k_j), m_h = max_j s_hj, p_hj = exp(s_hj − m_h),
//   out_h = Σ_j p'_hj·k_j / (Σ_j p_hj + exp(sink_h − m_h))   (p' = bf16(p) or p).
// n_keys == 0 gives out_h = 0. workspace: AttentionWorkspaceFloats(n_heads, n_keys) floats.
// pool parallelises over heads (may be null).
void AttentionLatentMqa(const float* q, int64_t n_heads, int64_t head_dim,
                        const float* const* kv_rows, int64_t n_keys, const AttentionOptions& opt,
                        float* out, float* workspace, ThreadPool* pool);

// Grouped-query attention (Llama): q [n_q_heads, head_dim]; k_rows[j] / v_rows[j] point to
// [n_kv_heads, head_dim] floats; query head h uses kv head h / (n_q_heads / n_kv_heads).
// Same softmax as above (sinks usually null). out [n_q_heads, head_dim].
void AttentionGqa(const float* q, int64_t n_q_heads, int64_t n_kv_heads, int64_t head_dim,
                  const float* const* k_rows, const float* const* v_rows, int64_t n_keys,
                  const AttentionOptions& opt, float* out, float* workspace, ThreadPool* pool);

}  // namespace deepinfer::kernels

#endif  // DEEPINFER_KERNELS_OPS_H_
