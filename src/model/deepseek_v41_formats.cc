#include "model/deepseek_v41_formats.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "model/deepseek_v4_numerics.h"

namespace deepinfer::model::dsv41 {
namespace {

using dsv4::E4M3ToF32;
using dsv4::F32ToE4M3;
using dsv4::Pow2Ceil;
using dsv4::RoundE2M1;
using dsv4::RoundE4M3;

constexpr float kE2M1[16] = {0.f,  0.5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                             -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};

// e2m1 code of a value already on the e2m1 grid.
uint8_t E2M1Code(float q) {
  const float a = std::fabs(q);
  uint8_t m = a < 0.25f ? 0 : a < 0.75f ? 1 : a < 1.25f ? 2 : a < 1.75f ? 3 : a < 2.5f ? 4
            : a < 3.5f ? 5 : a < 5.f ? 6 : 7;
  return static_cast<uint8_t>((std::signbit(q) ? 8 : 0) | m);
}

// E8M0 byte of a power of two.
uint8_t E8M0Code(float s) {
  int e;
  std::frexp(s, &e);  // s = 0.5 * 2^e
  return static_cast<uint8_t>(e - 1 + 127);
}

float E8M0Value(uint8_t code) { return std::ldexp(1.f, static_cast<int>(code) - 127); }

}  // namespace

void Mxfp8SimInPlace(float* x, int64_t n) { Mxfp8Quantize(x, n, nullptr); }

void Mxfp8Quantize(float* x, int64_t dim, uint8_t* row) {
  CHECK_EQ(dim % 32, 0);
  for (int64_t b = 0; b < dim / 32; ++b) {
    float* xb = x + b * 32;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    amax = std::max(amax, 1e-4f);
    const float s = Pow2Ceil(amax * (1.0f / 448.0f));
    const float inv = 1.0f / s;
    for (int i = 0; i < 32; ++i) {
      const float q = RoundE4M3(std::clamp(xb[i] * inv, -448.f, 448.f));
      if (row != nullptr) row[b * 32 + i] = F32ToE4M3(q);
      xb[i] = q * s;
    }
    if (row != nullptr) row[dim + b] = E8M0Code(s);
  }
}

void Mxfp8Decode(const uint8_t* row, int64_t dim, float* x) {
  for (int64_t b = 0; b < dim / 32; ++b) {
    const float s = E8M0Value(row[dim + b]);
    for (int i = 0; i < 32; ++i) x[b * 32 + i] = E4M3ToF32(row[b * 32 + i]) * s;
  }
}

void Nvfp4Quantize(float* x, int64_t dim, uint8_t* row) {
  CHECK_EQ(dim % 16, 0);
  const float floor_amax = 6.0f * std::ldexp(1.0f, -9);
  for (int64_t b = 0; b < dim / 16; ++b) {
    float* xb = x + b * 16;
    float amax = 0.f;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xb[i]));
    amax = std::max(amax, floor_amax);
    const float s = RoundE4M3(amax / 6.0f);  // true FP32 division
    for (int i = 0; i < 16; ++i) {
      const float q = RoundE2M1(std::clamp(xb[i] / s, -6.f, 6.f));
      xb[i] = q * s;
      if (row != nullptr) {
        const uint8_t code = E2M1Code(q);
        uint8_t& byte = row[(b * 16 + i) / 2];
        if (i % 2 == 0) {
          byte = code;
        } else {
          byte = static_cast<uint8_t>(byte | (code << 4));
        }
      }
    }
    if (row != nullptr) row[dim / 2 + b] = F32ToE4M3(s);
  }
}

void Nvfp4Decode(const uint8_t* row, int64_t dim, float* x) {
  for (int64_t b = 0; b < dim / 16; ++b) {
    const float s = E4M3ToF32(row[dim / 2 + b]);
    for (int i = 0; i < 16; i += 2) {
      const uint8_t byte = row[(b * 16 + i) / 2];
      x[b * 16 + i] = kE2M1[byte & 0xf] * s;
      x[b * 16 + i + 1] = kE2M1[byte >> 4] * s;
    }
  }
}

void Mxfp4Quantize(float* x, int64_t dim, uint8_t* row) {
  CHECK_EQ(dim % 32, 0);
  const float floor_amax = 6.0f * std::ldexp(1.0f, -126);
  for (int64_t b = 0; b < dim / 32; ++b) {
    float* xb = x + b * 32;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    amax = std::max(amax, floor_amax);
    const float s = Pow2Ceil(amax * (1.0f / 6.0f));
    const float inv = 1.0f / s;
    for (int i = 0; i < 32; ++i) {
      const float q = RoundE2M1(std::clamp(xb[i] * inv, -6.f, 6.f));
      xb[i] = q * s;
      if (row != nullptr) {
        const uint8_t code = E2M1Code(q);
        uint8_t& byte = row[(b * 32 + i) / 2];
        byte = i % 2 == 0 ? code : static_cast<uint8_t>(byte | (code << 4));
      }
    }
    if (row != nullptr) row[dim / 2 + b] = E8M0Code(s);
  }
}

void Mxfp4Decode(const uint8_t* row, int64_t dim, float* x) {
  for (int64_t b = 0; b < dim / 32; ++b) {
    const float s = E8M0Value(row[dim / 2 + b]);
    for (int i = 0; i < 32; i += 2) {
      const uint8_t byte = row[(b * 32 + i) / 2];
      x[b * 32 + i] = kE2M1[byte & 0xf] * s;
      x[b * 32 + i + 1] = kE2M1[byte >> 4] * s;
    }
  }
}

}  // namespace deepinfer::model::dsv41
