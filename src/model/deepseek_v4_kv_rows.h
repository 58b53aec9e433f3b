// Byte formats of the rows of DeepSeek-V4's paged KV caches (shared/spec/deepseek-v4.md §4,
// docs/kv-format.md §6). The values the numerics store are already quantised, so the compact
// formats are exactly lossless for them: Decode(Encode(row)) == row bit for bit.
//
//   kF32      dim FP32 values (4·dim bytes): the FP32-activation debug mode (tier B), whose RoPE
//             values are not BF16.
//   kFp8Rope  main compressed rows ("layers.L.compressed_kv"), nope = dim − rope_dim:
//               [0, nope)                  e4m3fn codes of values 0..nope−1
//               [nope, nope + 2·rope_dim)  the last rope_dim values as BF16, little-endian
//               next nope/64 bytes         E8M0 scale of each 64-value block of the e4m3 part
//               zero padding to a multiple of 8 bytes
//             value i < nope = e4m3(code[i]) × 2^(scale[i/64] − 127). V4-Flash (512/64):
//             448 + 128 + 7 = 583 → 584 B, vLLM's record; the tiny models (128/64): 200 B.
//   kMxfp4    indexer keys ("layers.L.indexer_k"): dim/2 bytes of packed e2m1 (byte j: value 2j
//             in the low nibble, 2j+1 in the high nibble), then dim/32 E8M0 scales, one per
//             32 values: value i = e2m1(nibble i) × 2^(scale[i/32] − 127). 128 dims: 68 B.
//
// Encoding picks each block's smallest power-of-two scale that fits its largest magnitude
// (448 resp. 6), clamped to E8M0's range: every row the FP8/FP4 simulation produces (values
// e4m3 resp. e2m1 times a power of two) is then representable, because scaling such a value by
// 2^k >= 1 stays representable while it fits. NaN: an e4m3 NaN is stored per value (code 0x7F,
// with its sign) and decodes to a quiet NaN; e2m1 has no NaN, so an MXFP4 block holding one gets
// the NaN scale 0xFF and decodes all-NaN (the OCP MX convention; the indexer's score of that
// row is NaN either way). Any other value the format cannot hold exactly (a BF16 part that is
// not BF16, an e4m3 part not on its block's grid) is a bug upstream: Encode CHECK-fails.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_KV_ROWS_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_KV_ROWS_H_

#include <cstdint>

namespace deepinfer::model::dsv4 {

enum class KvRowFormat : int {
  kF32 = 0,
  kFp8Rope = 1,
  kMxfp4 = 2,
};

// Bytes of one encoded row of the format above.
int64_t Fp8RopeRowBytes(int64_t dim, int64_t rope_dim);
int64_t Mxfp4RowBytes(int64_t dim);

// One paged cache's row format: `dim` values per row, of which the last `rope_dim` are BF16 in
// kFp8Rope (ignored otherwise). dim − rope_dim must be a multiple of 64 (kFp8Rope), dim a
// multiple of 32 (kMxfp4).
struct KvRowCodec {
  KvRowFormat format = KvRowFormat::kF32;
  int64_t dim = 0;
  int64_t rope_dim = 0;

  int64_t RowBytes() const;
  // row: [dim] floats -> out: [RowBytes()] bytes (padding zeroed). CHECK-fails when a value is
  // not exactly representable (see the file comment).
  void Encode(const float* row, uint8_t* out) const;
  // in: [RowBytes()] bytes -> row: [dim] floats.
  void Decode(const uint8_t* in, float* row) const;
};

}  // namespace deepinfer::model::dsv4

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_KV_ROWS_H_
