#include "model/deepseek_v4_kv_rows.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "kernels/formats.h"

namespace deepinfer::model::dsv4 {
namespace {

using kernels::FloatBits;

constexpr int64_t kFp8Block = 64;  // values per E8M0 scale of the e4m3 part
constexpr int64_t kFp4Block = 32;  // values per E8M0 scale of MXFP4
constexpr uint8_t kE8m0NaN = 0xFF;

// e4m3fn code -> value, NaN codes -> NaN (kernels::Fp8E4m3ToFloat, tabulated).
const std::array<float, 256>& E4m3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int c = 0; c < 256; ++c) t[c] = kernels::Fp8E4m3ToFloat(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

// Largest magnitude of x[0..n) ignoring NaN (as the simulation's std::max(amax, |x|) does);
// sets *has_nan.
float AbsMaxIgnoringNaN(const float* x, int64_t n, bool* has_nan) {
  float amax = 0.f;
  *has_nan = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      *has_nan = true;
      continue;
    }
    amax = std::max(amax, std::fabs(x[i]));
  }
  return amax;
}

// Exponent of the smallest power-of-two scale s with amax / s <= qmax, within E8M0's range
// [2^-127, 2^127] (0 for an all-zero block, whose codes are signed zeros under any scale).
int BlockScaleExponent(float amax, float qmax, const char* what) {
  CHECK(std::isfinite(amax)) << "DeepSeek-V4 KV row: " << what << " block holds " << amax
                             << ", which the FP8/FP4 simulation never produces";
  if (amax == 0.f) return 0;
  return std::clamp(kernels::Pow2ScaleExponent(amax, 0.f, qmax), -127, 127);
}

bool SameBits(float a, float b) { return FloatBits(a) == FloatBits(b); }

void EncodeFp8Rope(const float* row, int64_t dim, int64_t rope_dim, uint8_t* out) {
  const int64_t nope = dim - rope_dim;
  uint8_t* codes = out;
  uint8_t* rope = out + nope;
  uint8_t* scales = rope + 2 * rope_dim;
  for (int64_t blk = 0; blk < nope / kFp8Block; ++blk) {
    const float* v = row + blk * kFp8Block;
    bool has_nan;
    const int e =
        BlockScaleExponent(AbsMaxIgnoringNaN(v, kFp8Block, &has_nan), kernels::kFp8E4m3Max, "e4m3");
    const float s = std::ldexp(1.0f, e);
    scales[blk] = static_cast<uint8_t>(e + 127);
    for (int64_t i = 0; i < kFp8Block; ++i) {
      const uint8_t code = kernels::FloatToFp8E4m3(v[i] / s);  // exact: s is a power of two
      const float back = E4m3Table()[code] * s;
      CHECK(SameBits(back, v[i]) || (std::isnan(v[i]) && std::isnan(back)))
          << "DeepSeek-V4 KV row: value " << v[i] << " at " << blk * kFp8Block + i
          << " is not an e4m3 value times its block's scale 2^" << e
          << " (the row did not come from the FP8 simulation)";
      codes[blk * kFp8Block + i] = code;
    }
  }
  for (int64_t i = 0; i < rope_dim; ++i) {
    const float v = row[nope + i];
    const uint16_t bits = kernels::FloatToBf16(v);
    CHECK(SameBits(kernels::Bf16ToFloat(bits), v) || std::isnan(v))
        << "DeepSeek-V4 KV row: RoPE value " << v << " at " << nope + i << " is not BF16";
    std::memcpy(rope + 2 * i, &bits, 2);  // little-endian hosts only (docs/kv-format.md)
  }
  const int64_t used = nope + 2 * rope_dim + nope / kFp8Block;
  std::memset(out + used, 0, Fp8RopeRowBytes(dim, rope_dim) - used);
}

void DecodeFp8Rope(const uint8_t* in, int64_t dim, int64_t rope_dim, float* row) {
  const int64_t nope = dim - rope_dim;
  const uint8_t* codes = in;
  const uint8_t* rope = in + nope;
  const uint8_t* scales = rope + 2 * rope_dim;
  const std::array<float, 256>& e4m3 = E4m3Table();
  for (int64_t blk = 0; blk < nope / kFp8Block; ++blk) {
    const float s = kernels::E8m0ToFloat(scales[blk]);
    const uint8_t* c = codes + blk * kFp8Block;
    float* v = row + blk * kFp8Block;
    for (int64_t i = 0; i < kFp8Block; ++i) v[i] = e4m3[c[i]] * s;
  }
  for (int64_t i = 0; i < rope_dim; ++i) {
    uint16_t bits;
    std::memcpy(&bits, rope + 2 * i, 2);
    row[nope + i] = kernels::Bf16ToFloat(bits);
  }
}

void EncodeMxfp4(const float* row, int64_t dim, uint8_t* out) {
  uint8_t* packed = out;
  uint8_t* scales = out + dim / 2;
  for (int64_t blk = 0; blk < dim / kFp4Block; ++blk) {
    const float* v = row + blk * kFp4Block;
    uint8_t* p = packed + blk * kFp4Block / 2;
    bool has_nan;
    const float amax = AbsMaxIgnoringNaN(v, kFp4Block, &has_nan);
    if (has_nan) {
      scales[blk] = kE8m0NaN;
      std::memset(p, 0, kFp4Block / 2);
      continue;
    }
    const int e = BlockScaleExponent(amax, kernels::kFp4E2m1Max, "e2m1");
    const float s = std::ldexp(1.0f, e);
    scales[blk] = static_cast<uint8_t>(e + 127);
    uint8_t nib[kFp4Block];
    for (int64_t i = 0; i < kFp4Block; ++i) {
      nib[i] = kernels::FloatToFp4E2m1(v[i] / s);  // exact: s is a power of two
      CHECK(SameBits(kernels::Fp4E2m1ToFloat(nib[i]) * s, v[i]))
          << "DeepSeek-V4 KV row: value " << v[i] << " at " << blk * kFp4Block + i
          << " is not an e2m1 value times its block's scale 2^" << e
          << " (the row did not come from the FP4 simulation)";
    }
    for (int64_t j = 0; j < kFp4Block / 2; ++j)
      p[j] = kernels::PackFp4Pair(nib[2 * j], nib[2 * j + 1]);
  }
}

void DecodeMxfp4(const uint8_t* in, int64_t dim, float* row) {
  const uint8_t* packed = in;
  const uint8_t* scales = in + dim / 2;
  for (int64_t blk = 0; blk < dim / kFp4Block; ++blk) {
    const float s = kernels::E8m0ToFloat(scales[blk]);  // 0xFF: NaN, the whole block NaN
    const uint8_t* p = packed + blk * kFp4Block / 2;
    float* v = row + blk * kFp4Block;
    for (int64_t j = 0; j < kFp4Block / 2; ++j) {
      v[2 * j] = kernels::Fp4E2m1ToFloat(p[j] & 0xF) * s;
      v[2 * j + 1] = kernels::Fp4E2m1ToFloat(p[j] >> 4) * s;
    }
  }
}

}  // namespace

int64_t Fp8RopeRowBytes(int64_t dim, int64_t rope_dim) {
  const int64_t nope = dim - rope_dim;
  const int64_t used = nope + 2 * rope_dim + nope / kFp8Block;
  return (used + 7) / 8 * 8;
}

int64_t Mxfp4RowBytes(int64_t dim) { return dim / 2 + dim / kFp4Block; }

int64_t KvRowCodec::RowBytes() const {
  switch (format) {
    case KvRowFormat::kF32:
      return dim * 4;
    case KvRowFormat::kFp8Rope:
      return Fp8RopeRowBytes(dim, rope_dim);
    case KvRowFormat::kMxfp4:
      return Mxfp4RowBytes(dim);
  }
  return 0;
}

void KvRowCodec::Encode(const float* row, uint8_t* out) const {
  switch (format) {
    case KvRowFormat::kF32:
      std::memcpy(out, row, dim * 4);
      return;
    case KvRowFormat::kFp8Rope:
      CHECK_EQ((dim - rope_dim) % kFp8Block, 0);
      EncodeFp8Rope(row, dim, rope_dim, out);
      return;
    case KvRowFormat::kMxfp4:
      CHECK_EQ(dim % kFp4Block, 0);
      EncodeMxfp4(row, dim, out);
      return;
  }
}

void KvRowCodec::Decode(const uint8_t* in, float* row) const {
  switch (format) {
    case KvRowFormat::kF32:
      std::memcpy(row, in, dim * 4);
      return;
    case KvRowFormat::kFp8Rope:
      DecodeFp8Rope(in, dim, rope_dim, row);
      return;
    case KvRowFormat::kMxfp4:
      DecodeMxfp4(in, dim, row);
      return;
  }
}

}  // namespace deepinfer::model::dsv4
