// Quantisers and compact row formats of DeepSeek-V4.1 (shared/spec/deepseek-v41.md §3, §6).
//
// Every quantiser here is a quantise-then-dequantise simulation that also writes the quantised
// form into a compact byte row; decoding that row gives back exactly the simulated values, so
// caches can hold the compact rows in both numeric tiers without changing any result.
//
//   MXFP8 (window KV, §3 "MXFP8 window KV"): per 32 values one E8M0 scale
//     2^ceil(log2(max(amax,1e-4)/448)) and e4m3 codes (RNE).
//     Row: [dim] e4m3 bytes, then [dim/32] E8M0 bytes            (528 B for dim 512)
//   NVFP4 (compressed KV, §3): per 16 values an e4m3 scale e4m3_RNE(max(amax, 6*2^-9) / 6) and
//     e2m1 codes (RNE) of clamp(x / s, ±6); no global scale.
//     Row: [dim/2] packed e2m1 (even dim in the low nibble), then [dim/16] e4m3 scales (288 B)
//   MXFP4 (index q / keys, §3): per 32 values scale 2^ceil(log2(max(amax, 6*2^-126)/6)), e2m1.
//     Row: [dim/2] packed e2m1, then [dim/32] E8M0 bytes              (68 B for dim 128)
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_FORMATS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_FORMATS_H_

#include <cstdint>

namespace deepinfer::model::dsv41 {

// Activation quantisation in front of FP8/FP4-weight linears (§3 "MXFP8 act quant"): x[0..n)
// rounded in place per block of 32 (n % 32 == 0).
void Mxfp8SimInPlace(float* x, int64_t n);

// Row sizes in bytes for `dim` values.
inline int64_t Mxfp8RowBytes(int64_t dim) { return dim + dim / 32; }
inline int64_t Nvfp4RowBytes(int64_t dim) { return dim / 2 + dim / 16; }
inline int64_t Mxfp4RowBytes(int64_t dim) { return dim / 2 + dim / 32; }

// Simulate in place and (when row != nullptr) write the compact row. dim % block == 0.
void Mxfp8Quantize(float* x, int64_t dim, uint8_t* row);
void Nvfp4Quantize(float* x, int64_t dim, uint8_t* row);
void Mxfp4Quantize(float* x, int64_t dim, uint8_t* row);
// Decode a compact row into dim floats.
void Mxfp8Decode(const uint8_t* row, int64_t dim, float* x);
void Nvfp4Decode(const uint8_t* row, int64_t dim, float* x);
void Mxfp4Decode(const uint8_t* row, int64_t dim, float* x);

}  // namespace deepinfer::model::dsv41

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_FORMATS_H_
