// The one-time check that gates the AVX-512 kernels (avx512.h, SelfCheck). Compiled for the
// baseline ISA: it only calls the AVX-512 functions, never inlines them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"
#include "kernels/relative_error.h"
#include "kernels/workspace.h"

namespace deepinfer::kernels::avx512 {
namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Linear in one format: M = 6 (packed path) against the scalar reference, and each row alone
// (streamed path) bitwise against the packed result (ops.h: one order for every M).
bool CheckLinear(WeightDType dtype, int64_t K, std::mt19937& rng, std::string* failure) {
  // N spans two 48-row panels; K > 512 spans two packed K chunks (the accumulator buffer).
  const int64_t N = 60, M = 6;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255), exponent(118, 127);
  std::vector<uint8_t> data(WeightDataBytes(dtype, N, K));
  std::vector<uint8_t> scales(WeightScaleCount(dtype, N, K));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(byte(rng));
  if (dtype == WeightDType::kF32 || dtype == WeightDType::kBF16) {
    for (int64_t i = 0; i < N * K; ++i) {
      const float v = normal(rng);
      if (dtype == WeightDType::kF32) {
        std::memcpy(data.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = FloatToBf16(v);
        std::memcpy(data.data() + 2 * i, &h, 2);
      }
    }
  }
  for (uint8_t& s : scales) s = static_cast<uint8_t>(exponent(rng));
  const WeightView w{dtype, data.data(), scales.data(), ScaleDType::kE8M0, N, K};
  std::vector<float> x(M * K), bias(N);
  for (float& v : x) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  LinearOptions opt;
  opt.bias = bias.data();
  opt.quantize_activations = dtype == WeightDType::kFP8Block || dtype == WeightDType::kMXFP4;
  Workspace ws;
  std::vector<float> ref_y(M * N), packed(M * N), row(N);
  size_t bytes = ref::LinearWorkspaceBytes(M, w, opt);
  ref::Linear(x.data(), M, w, ref_y.data(), opt, ws.Get(bytes), bytes);
  bytes = avx512::LinearWorkspaceBytes(M, w, opt, 1);
  avx512::Linear(x.data(), M, w, packed.data(), opt, nullptr, ws.Get(bytes), bytes);
  // Products are exact or singly rounded; only the FP32 summation order differs (ops_test.cc).
  if (!(RelativeError(packed, ref_y) <= 1e-5)) {
    *failure = "Linear (packed) differs from the reference for weight dtype " +
               std::to_string(static_cast<int>(dtype));
    return false;
  }
  bytes = avx512::LinearWorkspaceBytes(1, w, opt, 1);
  for (int64_t m = 0; m < M; ++m) {
    avx512::Linear(x.data() + m * K, 1, w, row.data(), opt, nullptr, ws.Get(bytes), bytes);
    if (!SameBits(row, std::vector<float>(packed.begin() + m * N, packed.begin() + (m + 1) * N))) {
      *failure = "Linear (streamed) differs from the packed path for weight dtype " +
                 std::to_string(static_cast<int>(dtype));
      return false;
    }
  }
  return true;
}

bool CheckRowOps(std::mt19937& rng, std::string* failure) {
  const int64_t rows = 3, n = 77;
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(rows * n), a(rows * n), b(rows * n), up(rows * n);
  for (float& v : x) v = normal(rng);
  for (float& v : up) v = normal(rng);
  ref::RmsNorm(x.data(), a.data(), rows, n, nullptr, nullptr, 1e-6f);
  avx512::RmsNorm(x.data(), b.data(), rows, n, nullptr, nullptr, 1e-6f);
  if (!(RelativeError(b, a) <= 1e-6)) {
    *failure = "RmsNorm differs from the reference";
    return false;
  }
  a = x;
  b = x;
  ref::Softmax(a.data(), rows, n);
  avx512::Softmax(b.data(), rows, n);
  if (!(RelativeError(b, a) <= 1e-6)) {
    *failure = "Softmax differs from the reference";
    return false;
  }
  // Lane-wise ops are bitwise the AVX2 ones (which take whole vectors of 8).
  const int64_t n8 = rows * n / 8 * 8;
  std::vector<float> a8(n8), b8(n8);
  avx2::SwiGlu(x.data(), up.data(), a8.data(), n8, 7.0f);
  avx512::SwiGlu(x.data(), up.data(), b8.data(), n8, 7.0f);
  if (!SameBits(a8, b8)) {
    *failure = "SwiGlu differs from the AVX2 version";
    return false;
  }
  std::copy(x.begin(), x.begin() + n8, a8.begin());
  std::copy(x.begin(), x.begin() + n8, b8.begin());
  avx2::Silu(a8.data(), n8);
  avx512::Silu(b8.data(), n8);
  avx2::Axpy(0.75f, up.data(), a8.data(), n8);
  avx512::Axpy(0.75f, up.data(), b8.data(), n8);
  if (!SameBits(a8, b8)) {
    *failure = "Silu / Axpy differ from the AVX2 versions";
    return false;
  }
  // Activation quantisation with tiny values too (e4m3 subnormals), exactly as the reference.
  a = x;
  for (int64_t i = 0; i < rows * n; i += 3) a[i] *= 1e-3f;
  b = a;
  ref::ActQuantFp8Sim(a.data(), rows, n, 32);
  avx512::ActQuantFp8Sim(b.data(), rows, n, 32);
  if (!SameBits(a, b)) {
    *failure = "ActQuantFp8Sim differs from the reference";
    return false;
  }
  a = x;
  b = x;
  ref::RoundToBf16(a.data(), rows * n);
  avx512::RoundToBf16(b.data(), rows * n);
  if (!SameBits(a, b)) {
    *failure = "RoundToBf16 differs from the reference";
    return false;
  }
  return true;
}

}  // namespace

bool SelfCheck(std::string* failure) {
  std::mt19937 rng(20261130);
  return CheckLinear(WeightDType::kF32, 1043, rng, failure) &&
         CheckLinear(WeightDType::kBF16, 530, rng, failure) &&
         CheckLinear(WeightDType::kFP8Block, 700, rng, failure) &&
         CheckLinear(WeightDType::kMXFP4, 608, rng, failure) && CheckRowOps(rng, failure);
}

}  // namespace deepinfer::kernels::avx512
