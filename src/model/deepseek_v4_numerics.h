// Scalar numerics of the DeepSeek-V4 reference (shared/spec/deepseek-v4.md §2.4-2.5, §3):
// BF16 rounding, e4m3 / e2m1 rounding, the power-of-two block quantisers used for activation
// quantisation and for the FP8/FP4 KV simulation, the 128-point Hadamard transform, RoPE tables
// (incl. YaRN) and the linear layer over the checkpoint's weight formats.
//
// TODO(kernels): these are local scalar helpers written while src/kernels/ops.h was not yet
// available; switch to the kernels library (Linear, ActQuantFp8Sim, KvFp8Sim, Fp4Sim,
// Hadamard128, RoPE) once it lands and is verified against the same unit tests.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_NUMERICS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_NUMERICS_H_

#include <cstdint>
#include <cstring>
#include <vector>

namespace deepinfer::model::dsv4 {

// Rounds an FP32 value to the nearest BF16 value (round-to-nearest-even), returned as FP32.
inline float RoundBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf / NaN unchanged
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
// Widens BF16 bits to FP32.
inline float Bf16ToF32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
// FP32 -> BF16 bits (round-to-nearest-even).
inline uint16_t F32ToBf16Bits(float x) {
  float r = RoundBf16(x);
  uint32_t u;
  std::memcpy(&u, &r, 4);
  return static_cast<uint16_t>(u >> 16);
}

// Rounds |x| <= 448 to the nearest e4m3fn value (RNE, subnormal step 2^-9).
float RoundE4M3(float x);
// Rounds |x| <= 6 to the nearest e2m1 value {0, .5, 1, 1.5, 2, 3, 4, 6} (RNE).
float RoundE2M1(float x);
// e4m3fn byte -> value (NaN codes 0x7f/0xff -> 0, as DS4 does).
float E4M3ToF32(uint8_t code);
// Nearest e4m3fn byte of a value already representable (or to be rounded) in e4m3.
uint8_t F32ToE4M3(float x);
// E8M0 scale byte -> 2^(e-127).
float E8M0ToF32(uint8_t code);
// Smallest power of two >= v (v > 0), as the reference's ceil(log2(v)) scale rounding.
float Pow2Ceil(float v);

// Per-row activation quantisation of the reference's act_quant (spec §2.5): each block of
// `block` values of x[0..n) gets scale s = 2^ceil(log2(amax/448)) (amax floored at 1e-4) and
// q = e4m3(x/s). Writes q (unscaled e4m3 values as floats) into `q` and the scales into
// `scales` (n/block entries). n must be a multiple of block.
void QuantizeE4M3Blocks(const float* x, int64_t n, int block, float* q, float* scales);
// In-place FP8 simulation (quantise + dequantise) in blocks of `block`: the window / compressed
// KV non-RoPE dims (block 64, spec §3.5 step 4).
void Fp8SimInPlace(float* x, int64_t n, int block);
// In-place FP4 simulation in blocks of 32: scale 2^ceil(log2(amax/6)), amax floored at
// 6*2^-126, e2m1 round-to-nearest-even (spec §3.6.1, indexer).
void Fp4SimInPlace(float* x, int64_t n);
// In-place normalised 128-point Walsh-Hadamard transform (Sylvester order, scale 128^-1/2).
void Hadamard128InPlace(float* x);

// RoPE frequency vector (rope_dim/2 entries) of spec §3.5.1 / §3.5.3. `original_seq_len` <= 0
// disables YaRN.
std::vector<double> RopeFrequencies(int rope_dim, double base, int64_t original_seq_len,
                                    double factor, double beta_fast, double beta_slow);
// Rotates the interleaved pairs of x[0..rope_dim) by angle pos*freq[i] (inverse: -angle).
void ApplyRope(float* x, int rope_dim, const std::vector<double>& freqs, int64_t pos, bool inverse);

// Weight formats of the checkpoint (spec §2.4).
enum class WeightFormat {
  kF32,       // F32 [out, in]
  kBf16,      // BF16 [out, in]
  kFp8Block,  // F8_E4M3 [out, in] + scale [ceil(out/128), ceil(in/128)] (E8M0 or F32)
  kMxFp4,     // I8 [out, in/2] packed e2m1 (low nibble = even column) + E8M0 scale [out, in/32]
};

// A weight matrix viewed in place (no copies). Rows are outputs.
struct WeightMatrix {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;  // out features
  int64_t cols = 0;  // logical in features
  const void* data = nullptr;
  const uint8_t* scale = nullptr;    // E8M0 bytes, or nullptr when scale_f32 is used
  const float* scale_f32 = nullptr;  // F32 scales (FP8 only; some converters write these)
  int64_t scale_cols = 0;            // columns of the scale tensor
  // MXFP4 only, optional: the same weights in the lane layout of the AVX2 kernels
  // (kernels::Mxfp4LanePack, owned by Weights::lane_packs), which Linear passes on to them.
  const uint8_t* lane_codes = nullptr;
  const uint8_t* lane_scales = nullptr;
  // FP8 only: no weight byte is an e4m3 NaN code (checked once at load), so the kernels may skip
  // their NaN-code masking (kernels::WeightView::fp8_nan_free).
  bool fp8_nan_free = false;
  // Dequantised value of element (r, c) (slow path, tests and small ops).
  float At(int64_t r, int64_t c) const;
  int64_t Bytes() const;
};

// y[m][n] = sum_k x[m][k] * W[n][k] for m < M, FP32 accumulation.
// quantize_act: quantise each row of x per 128 to e4m3 first (FP8/FP4 weights, spec §2.5); the
// products are then exact and the block sums are scaled once per block. Without it the input is
// used as given (BF16/F32 weights, and wo_a which the reference runs in BF16).
// precise: FP64 accumulation (the FP32-activation debug mode mirrors a float64 oracle).
// input_is_bf16: the caller promises x holds BF16 values (a product the reference runs in BF16:
// wo_a, indexer weights_proj), so the kernels may take their exact BF16 dot products
// (kernels::LinearOptions::input_is_bf16; a row that breaks the promise takes the FP32 path).
// Parallelised over output rows with a static partition (results independent of thread count).
void Linear(const WeightMatrix& w, const float* x, int64_t M, float* y, bool quantize_act,
            bool precise = false, bool input_is_bf16 = false);

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_NUMERICS_H_
