// Ops: vectorised versions against the scalar reference (cpu/reference.h) at awkward sizes with
// fresh random data per case, hand-computed small cases, and batch invariance.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/cpu_features.h"
#include "gtest/gtest.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"
#include "kernels/relative_error.h"
#include "kernels/workspace.h"

namespace deepinfer::kernels {
namespace {

bool HaveAvx2() { return ActiveIsa() >= IsaLevel::kAvx2; }

// The vectorised Linear implementations this CPU can run (AVX2, and AVX-512 where present), so
// that each Linear test checks every one of them directly, not only the one the dispatcher picks.
struct VectorLinear {
  const char* name;
  size_t (*workspace_bytes)(int64_t, const WeightView&, const LinearOptions&, int);
  void (*linear)(const float*, int64_t, const WeightView&, float*, const LinearOptions&,
                 ThreadPool*, void*, size_t);
  // Runs the product with a workspace sized for `threads` (the pool's thread count, 1 if null).
  void Run(const float* x, int64_t M, const WeightView& w, float* y, const LinearOptions& opt,
           ThreadPool* pool, Workspace& ws) const {
    const size_t bytes = workspace_bytes(M, w, opt, pool != nullptr ? pool->num_threads() : 1);
    linear(x, M, w, y, opt, pool, ws.Get(bytes), bytes);
  }
};
#ifdef DEEPINFER_AVX512_EMULATION
// kernels_avx512_emulated_test: the AVX-512 kernels run on emulated intrinsics on any machine.
constexpr bool kAvx512Emulated = true;
#else
constexpr bool kAvx512Emulated = false;
#endif

std::vector<VectorLinear> VectorLinears() {
  std::vector<VectorLinear> v;
  if (ActiveIsa() >= IsaLevel::kAvx2) {
    v.push_back({"avx2", &avx2::LinearWorkspaceBytes, &avx2::Linear});
  }
  if (kAvx512Emulated || ActiveIsa() >= IsaLevel::kAvx512) {
    v.push_back({kAvx512Emulated ? "avx512 (emulated)" : "avx512", &avx512::LinearWorkspaceBytes,
                 &avx512::Linear});
  }
  return v;
}

// Sets DEEPINFER_BATCH_INVARIANT for the scope of a test and restores the previous config.
class BatchInvariantScope {
 public:
  explicit BatchInvariantScope(bool on) : saved_(Env()) {
    EnvConfig env = saved_;
    env.batch_invariant = on;
    SetEnvConfigForTesting(env);
  }
  ~BatchInvariantScope() { SetEnvConfigForTesting(saved_); }

 private:
  EnvConfig saved_;
};

// Owns the bytes of a random weight in one format.
struct TestWeight {
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
  WeightView view;
};

// nan_free: FP8 weights without the NaN codes 0x7F/0xFF (the decode fast path only completes
// tiles without them, so random bytes alone would almost never exercise it).
TestWeight MakeWeight(WeightDType dtype, ScaleDType sdt, int64_t N, int64_t K, std::mt19937& rng,
                      bool nan_free = false) {
  TestWeight t;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  t.data.resize(WeightDataBytes(dtype, N, K));
  const int64_t n_scales = WeightScaleCount(dtype, N, K);
  switch (dtype) {
    case WeightDType::kF32: {
      auto* p = reinterpret_cast<float*>(t.data.data());
      for (int64_t i = 0; i < N * K; ++i) p[i] = normal(rng) * 0.05f;
      break;
    }
    case WeightDType::kBF16: {
      auto* p = reinterpret_cast<uint16_t*>(t.data.data());
      for (int64_t i = 0; i < N * K; ++i) p[i] = FloatToBf16(normal(rng) * 0.05f);
      break;
    }
    case WeightDType::kFP8Block:
    case WeightDType::kMXFP4:
      for (auto& b : t.data) {
        do {
          b = static_cast<uint8_t>(byte(rng));
        } while (nan_free && dtype == WeightDType::kFP8Block && (b & 0x7F) == 0x7F);
      }
      break;
  }
  if (n_scales > 0) {
    std::uniform_int_distribution<int> e(117, 127);
    if (sdt == ScaleDType::kF32) {
      t.scales.resize(n_scales * 4);
      auto* p = reinterpret_cast<float*>(t.scales.data());
      std::uniform_real_distribution<float> u(0.001f, 0.01f);
      for (int64_t i = 0; i < n_scales; ++i) p[i] = u(rng);  // arbitrary, not powers of two
    } else {
      t.scales.resize(n_scales);
      for (auto& s : t.scales) s = static_cast<uint8_t>(e(rng));
    }
  }
  t.view =
      WeightView{dtype, t.data.data(), t.scales.empty() ? nullptr : t.scales.data(), sdt, N, K};
  return t;
}

std::vector<float> RandomVector(int64_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

const char* DTypeName(WeightDType d) {
  switch (d) {
    case WeightDType::kF32:
      return "f32";
    case WeightDType::kBF16:
      return "bf16";
    case WeightDType::kFP8Block:
      return "fp8";
    case WeightDType::kMXFP4:
      return "mxfp4";
  }
  return "?";
}

struct LinearCase {
  WeightDType dtype;
  ScaleDType sdt;
  int64_t M, N, K;
  bool quantize;
  bool bias;
};

std::string CaseName(const LinearCase& c) {
  return std::string(DTypeName(c.dtype)) + (c.sdt == ScaleDType::kF32 ? "_f32scale" : "") + "_M" +
         std::to_string(c.M) + "_N" + std::to_string(c.N) + "_K" + std::to_string(c.K) +
         (c.quantize ? "_q" : "") + (c.bias ? "_bias" : "");
}

std::vector<LinearCase> LinearCases() {
  std::vector<LinearCase> cases;
  struct Fmt {
    WeightDType d;
    ScaleDType s;
    bool q;
    int64_t k_small, k_mid, k_big;
  };
  // K not a power of two wherever the format allows (MXFP4 needs K % 32 == 0).
  const Fmt fmts[] = {
      {WeightDType::kF32, ScaleDType::kE8M0, false, 7, 300, 1001},
      {WeightDType::kBF16, ScaleDType::kE8M0, false, 9, 257, 1000},
      {WeightDType::kFP8Block, ScaleDType::kE8M0, true, 130, 300, 1000},
      {WeightDType::kFP8Block, ScaleDType::kF32, true, 100, 260, 1030},
      {WeightDType::kFP8Block, ScaleDType::kE8M0, false, 13, 256, 520},
      {WeightDType::kMXFP4, ScaleDType::kE8M0, true, 32, 96, 1056},
  };
  for (const Fmt& f : fmts) {
    cases.push_back({f.d, f.s, 1, 4096, f.k_mid, f.q, false});
    cases.push_back({f.d, f.s, 1, 7, f.k_big, f.q, true});
    cases.push_back({f.d, f.s, 1, 1, f.k_small, f.q, false});
    cases.push_back({f.d, f.s, 3, 1, f.k_big, f.q, false});
    cases.push_back({f.d, f.s, 3, 7, f.k_mid, f.q, true});
    cases.push_back({f.d, f.s, 17, 4096, f.k_small, f.q, false});
    cases.push_back({f.d, f.s, 17, 130, f.k_big, f.q, true});
    cases.push_back({f.d, f.s, 130, 7, f.k_big, f.q, false});
    cases.push_back({f.d, f.s, 130, 260, f.k_mid, f.q, true});
  }
  return cases;
}

class LinearVsReferenceTest : public ::testing::TestWithParam<LinearCase> {};

// Bound: FP32 accumulation in 8 lanes vs a double-precision sequential sum. Products are exact
// or singly rounded; the sum error is ~ sqrt(K)·2^-24 relative in practice, so 1e-5 holds for
// every format (FP8/FP4 products with quantised activations are exact, leaving only the sum).
constexpr double kLinearRelBound = 1e-5;

TEST_P(LinearVsReferenceTest, MatchesScalarReference) {
  if (!HaveAvx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  const LinearCase c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(CaseName(c))));
  TestWeight w = MakeWeight(c.dtype, c.sdt, c.N, c.K, rng);
  // Row stride > K to exercise x_stride.
  const int64_t x_stride = c.K + 3;
  std::vector<float> x = RandomVector(c.M * x_stride, rng);
  std::vector<float> bias = RandomVector(c.N, rng);
  LinearOptions opt;
  opt.quantize_activations = c.quantize;
  opt.bias = c.bias ? bias.data() : nullptr;
  opt.x_stride = x_stride;

  std::vector<float> ref_out(c.M * c.N);
  Workspace ws_ref, ws;
  const size_t ref_bytes = ref::LinearWorkspaceBytes(c.M, w.view, opt);
  ref::Linear(x.data(), c.M, w.view, ref_out.data(), opt, ws_ref.Get(ref_bytes), ref_bytes);

  ThreadPool pool(2);
  // MXFP4 also in the lane layout (read by the AVX2 kernels, ignored by the others).
  std::vector<WeightView> views = {w.view};
  Mxfp4LanePack lanes;
  if (c.dtype == WeightDType::kMXFP4) {
    ASSERT_TRUE(PackMxfp4Lanes(w.view, &lanes));
    views.push_back(WithLanes(w.view, lanes));
  }
  // Both kernel choices for M > 4: packed panels, and streaming (batch-invariant mode).
  for (const WeightView& view : views) {
    for (const VectorLinear& impl : VectorLinears()) {
      for (bool invariant : {false, true}) {
        BatchInvariantScope scope(invariant);
        std::vector<float> out(c.M * c.N, -1.0f);
        impl.Run(x.data(), c.M, view, out.data(), opt, &pool, ws);
        EXPECT_LE(RelativeError(out, ref_out), kLinearRelBound)
            << impl.name << " " << CaseName(c) << " invariant " << invariant << " lanes "
            << (view.lane_codes != nullptr);
        for (float v : out) ASSERT_TRUE(std::isfinite(v)) << impl.name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearVsReferenceTest, ::testing::ValuesIn(LinearCases()),
                         [](const auto& info) { return CaseName(info.param); });

// The dispatcher silently falls back to AVX2 when the AVX-512 self-check fails (ops.cc), so on
// an AVX-512 machine the check itself must pass here, loudly.
TEST(Avx512Test, SelfCheckPasses) {
  if (!kAvx512Emulated && ActiveIsa() < IsaLevel::kAvx512) {
    GTEST_SKIP() << "needs AVX-512 F/BW/VL/DQ";
  }
  std::string failure;
  EXPECT_TRUE(avx512::SelfCheck(&failure)) << failure;
}

// Batch invariance (issue #3): the same row alone and inside batches of 3, 17 and 64 rows at
// different positions, with 1, 2 and 3 threads, gives bitwise identical outputs.
TEST(LinearBatchInvarianceTest, RowIndependentOfBatchAndThreads) {
  BatchInvariantScope invariant(true);
  struct Fmt {
    WeightDType d;
    ScaleDType s;
    bool q;
    int64_t K;
  };
  const Fmt fmts[] = {{WeightDType::kF32, ScaleDType::kE8M0, false, 300},
                      {WeightDType::kBF16, ScaleDType::kE8M0, false, 1000},
                      {WeightDType::kFP8Block, ScaleDType::kE8M0, true, 1000},
                      {WeightDType::kFP8Block, ScaleDType::kE8M0, false, 333},
                      {WeightDType::kFP8Block, ScaleDType::kF32, true, 260},
                      {WeightDType::kMXFP4, ScaleDType::kE8M0, true, 1056}};
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (const Fmt& f : fmts) {
    std::mt19937 rng(1234 + static_cast<int>(f.d) * 7 + f.K);
    const int64_t N = 333;
    // FP8 without NaN codes so that its decode fast path is what gets checked.
    TestWeight w = MakeWeight(f.d, f.s, N, f.K, rng, /*nan_free=*/f.K == 333);
    LinearOptions opt;
    opt.quantize_activations = f.q;
    std::vector<float> row = RandomVector(f.K, rng);
    Workspace ws;
    auto run = [&](const std::vector<float>& x, int64_t M, ThreadPool* pool) {
      std::vector<float> y(M * N);
      const size_t bytes = LinearWorkspaceBytes(M, w.view, opt, pool);
      Linear(x.data(), M, w.view, y.data(), opt, pool, ws.Get(bytes), bytes);
      return y;
    };
    const std::vector<float> alone = run(row, 1, &pool1);
    for (int64_t M : {3, 17, 64}) {
      for (int64_t pos : {int64_t{0}, M / 2, M - 1}) {
        std::vector<float> batch = RandomVector(M * f.K, rng);
        std::copy(row.begin(), row.end(), batch.begin() + pos * f.K);
        for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
          const std::vector<float> y = run(batch, M, pool);
          for (int64_t n = 0; n < N; ++n) {
            ASSERT_EQ(FloatBits(y[pos * N + n]), FloatBits(alone[n]))
                << DTypeName(f.d) << " M=" << M << " pos=" << pos << " n=" << n
                << " threads=" << pool->num_threads();
          }
        }
      }
    }
  }
}

TEST(LinearTest, HandComputedSmallProduct) {
  // x = [1, 2, 3], W = [[1, 0, -1], [0.5, 0.5, 0.5]] (BF16-exact), bias [10, 20].
  const float w_f32[6] = {1, 0, -1, 0.5f, 0.5f, 0.5f};
  uint16_t w_bf16[6];
  for (int i = 0; i < 6; ++i) w_bf16[i] = FloatToBf16(w_f32[i]);
  const float x[3] = {1, 2, 3};
  const float bias[2] = {10, 20};
  for (WeightView w : {WeightView{WeightDType::kF32, w_f32, nullptr, ScaleDType::kE8M0, 2, 3},
                       WeightView{WeightDType::kBF16, w_bf16, nullptr, ScaleDType::kE8M0, 2, 3}}) {
    LinearOptions opt;
    opt.bias = bias;
    float y[2];
    Workspace ws;
    const size_t bytes = LinearWorkspaceBytes(1, w, opt, nullptr);
    Linear(x, 1, w, y, opt, nullptr, ws.Get(bytes), bytes);
    EXPECT_EQ(y[0], 10.0f - 2.0f);
    EXPECT_EQ(y[1], 20.0f + 3.0f);
  }
}

// FP8 decode fast path (bit-placement decoder, block scale folded into x): every one of the 256
// e4m3 codes, through M = 1..4 (each MR kernel), in the 32-column body, the 8-column step and the
// K tail, with scales inside the fast range, on its edges (2^-107, 2^7) and outside (fallback).
// x is one-hot, so y[n] is exactly the decoded weight times its block scale; the expectation
// comes from the scalar format decoder (formats.h), with NaN codes read as 0 (spec §2.4).
TEST(LinearDecodeTest, Fp8AllCodesExact) {
  if (!HaveAvx2()) GTEST_SKIP();
  const int64_t N = 256, K = 141;  // 4 x 32 + 8 + 5 tail columns; 2 column blocks
  std::vector<uint8_t> codes(N * K);
  for (int64_t n = 0; n < N; ++n) std::fill(codes.begin() + n * K, codes.begin() + (n + 1) * K, n);
  for (int e0 : {127, 117, 20, 19, 134, 135}) {
    // Scale block (rb, cb) has exponent byte e0 + cb - rb (column block 1 differs).
    std::vector<uint8_t> scales = {static_cast<uint8_t>(e0), static_cast<uint8_t>(e0 + 1),
                                   static_cast<uint8_t>(e0 - 1), static_cast<uint8_t>(e0)};
    const WeightView w{
        WeightDType::kFP8Block, codes.data(), scales.data(), ScaleDType::kE8M0, N, K};
    for (int64_t M = 1; M <= 4; ++M) {
      for (int64_t col : {int64_t{0}, int64_t{37}, int64_t{130}, int64_t{133}, int64_t{140}}) {
        for (const VectorLinear& impl : VectorLinears()) {
          // Row m of x is one-hot at column (col + m) % K.
          std::vector<float> x(M * K, 0.0f), y(M * N, -1.0f);
          for (int64_t m = 0; m < M; ++m) x[m * K + (col + m) % K] = 1.0f;
          Workspace ws;
          impl.Run(x.data(), M, w, y.data(), LinearOptions(), nullptr, ws);
          for (int64_t m = 0; m < M; ++m) {
            const int64_t k = (col + m) % K;
            for (int64_t n = 0; n < N; ++n) {
              const uint8_t c = static_cast<uint8_t>(n);
              const float v = (c & 0x7F) == 0x7F ? 0.0f : Fp8E4m3ToFloat(c);
              const float expect = v * E8m0ToFloat(scales[(n / 128) * 2 + k / 128]);
              ASSERT_EQ(y[m * N + n], expect)
                  << impl.name << " code " << n << " e0 " << e0 << " M " << M << " k " << k;
            }
          }
        }
      }
    }
  }
}

// MXFP4 decode path: all 16 e2m1 codes in the low (even column) and high (odd column) nibble,
// in a full 64-column superblock and in a 32-column tail, with E8M0 scales from 2^-127 (byte 0,
// decoded as DS4 does) to 2^127, for M = 1..4, 6 and 10, with and without batch-invariant mode.
// One-hot x: y[n] = e2m1 · scale exactly (from the spec's value table in formats.h).
// Body of the Mxfp4AllCodesExact tests: scale bytes exps (6 of them), lanes = also through the
// lane layout (PackMxfp4Lanes must accept exps then).
void CheckMxfp4AllCodesExact(const uint8_t (&exps)[6], bool lanes) {
  const int64_t N = 16 * 6, K = 96;  // one superblock + a 32-column tail
  // Row 16·i + c: every byte = c (low nibble) | (15 - c) (high nibble); scale byte exps[i],
  // except block 1 of each row, which gets exps[(i + 1) % 6].
  std::vector<uint8_t> data(N * K / 2), scales(N * K / 32);
  for (int64_t n = 0; n < N; ++n) {
    const int c = static_cast<int>(n % 16), i = static_cast<int>(n / 16);
    std::fill(data.begin() + n * K / 2, data.begin() + (n + 1) * K / 2, PackFp4Pair(c, 15 - c));
    for (int64_t b = 0; b < K / 32; ++b) scales[n * (K / 32) + b] = exps[b == 1 ? (i + 1) % 6 : i];
  }
  WeightView w{WeightDType::kMXFP4, data.data(), scales.data(), ScaleDType::kE8M0, N, K};
  Mxfp4LanePack pack;
  if (lanes) {
    ASSERT_TRUE(PackMxfp4Lanes(w, &pack));
    w = WithLanes(w, pack);
  }
  for (bool invariant : {false, true}) {
    BatchInvariantScope scope(invariant);
    for (int64_t M : {1, 2, 3, 4, 6, 10}) {
      for (int64_t col : {0, 1, 30, 33, 62, 63, 64, 95}) {
        for (const VectorLinear& impl : VectorLinears()) {
          std::vector<float> x(M * K, 0.0f), y(M * N, -1.0f);
          for (int64_t m = 0; m < M; ++m) x[m * K + (col + 2 * m) % K] = 1.0f;
          Workspace ws;
          impl.Run(x.data(), M, w, y.data(), LinearOptions(), nullptr, ws);
          for (int64_t m = 0; m < M; ++m) {
            const int64_t k = (col + 2 * m) % K;
            for (int64_t n = 0; n < N; ++n) {
              const int c = static_cast<int>(n % 16);
              const float v = kFp4E2m1Table[k % 2 == 0 ? c : 15 - c];
              const float expect = v * E8m0ToFloat(scales[n * (K / 32) + k / 32]);
              // A weight that overflows FP32 (6 · 2^127 with e = 254) is ±inf, and 0 · inf makes
              // the row NaN, as in the dequantise-then-multiply reference (ref::WeightAt).
              bool row_overflows = false;
              for (int64_t b = 0; b < K / 32; ++b) {
                const float s = E8m0ToFloat(scales[n * (K / 32) + b]);
                row_overflows |=
                    std::isinf(kFp4E2m1Table[c] * s) || std::isinf(kFp4E2m1Table[15 - c] * s);
              }
              if (row_overflows) {
                ASSERT_TRUE(std::isnan(y[m * N + n]))
                    << impl.name << " n " << n << " M " << M << " k " << k;
                continue;
              }
              ASSERT_EQ(FloatBits(y[m * N + n] + 0.0f), FloatBits(expect + 0.0f))
                  << impl.name << " n " << n << " M " << M << " k " << k << " invariant "
                  << invariant;
            }
          }
        }
      }
    }
  }
}

TEST(LinearDecodeTest, Mxfp4AllCodesExact) {
  if (!HaveAvx2()) GTEST_SKIP();
  CheckMxfp4AllCodesExact({0, 1, 100, 127, 140, 254}, false);
}

// The lane layout's kernel (unscaled codes, one scale multiply per group) gives the same exact
// products for every scale PackMxfp4Lanes accepts, the extremes included.
TEST(LinearDecodeTest, Mxfp4LanesAllCodesExact) {
  if (!HaveAvx2()) GTEST_SKIP();
  CheckMxfp4AllCodesExact({1, 2, 100, 127, 200, 252}, true);
}

// The lane layout without activation quantisation, with a row stride, two full groups and a
// tail: against the reference, and bitwise the same rows with 1, 2 or 3 threads.
TEST(LinearDecodeTest, Mxfp4LanesUnquantisedStridedAndThreads) {
  if (!HaveAvx2()) GTEST_SKIP();
  std::mt19937 rng(21);
  const int64_t N = 70, K = 608, x_stride = K + 5;
  TestWeight w = MakeWeight(WeightDType::kMXFP4, ScaleDType::kE8M0, N, K, rng);
  Mxfp4LanePack pack;
  ASSERT_TRUE(PackMxfp4Lanes(w.view, &pack));
  const WeightView lanes = WithLanes(w.view, pack);
  for (int64_t M : {1, 3, 17}) {
    std::vector<float> x = RandomVector(M * x_stride, rng);
    LinearOptions opt;
    opt.x_stride = x_stride;
    std::vector<float> ref_out(M * N);
    Workspace ws_ref, ws;
    const size_t ref_bytes = ref::LinearWorkspaceBytes(M, w.view, opt);
    ref::Linear(x.data(), M, w.view, ref_out.data(), opt, ws_ref.Get(ref_bytes), ref_bytes);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> out(M * N, -1.0f);
      const size_t bytes = avx2::LinearWorkspaceBytes(M, lanes, opt, threads);
      avx2::Linear(x.data(), M, lanes, out.data(), opt, &pool, ws.Get(bytes), bytes);
      EXPECT_LE(RelativeError(out, ref_out), kLinearRelBound)
          << "M " << M << " threads " << threads;
      if (first.empty()) first = out;
      for (int64_t i = 0; i < M * N; ++i) {
        ASSERT_EQ(FloatBits(out[i]), FloatBits(first[i])) << "M " << M << " threads " << threads;
      }
    }
  }
}

// Scales the lane layout cannot reproduce exactly are refused, leaving the plain layout in use.
TEST(LinearDecodeTest, Mxfp4LanesRefuseExtremeScales) {
  std::mt19937 rng(5);
  for (uint8_t e : {0, 253, 254, 255}) {
    TestWeight w = MakeWeight(WeightDType::kMXFP4, ScaleDType::kE8M0, 3, 64, rng);
    w.scales[4] = e;
    Mxfp4LanePack pack;
    EXPECT_FALSE(PackMxfp4Lanes(w.view, &pack)) << int{e};
    EXPECT_TRUE(pack.codes.empty() && pack.scales.empty());
  }
}

// PackMxfp4Lanes puts the code of column 256g + Mxfp4LaneColumn(q, i, h) in nibble h of byte i
// of chunk q, code 0 past K, and copies the scales (127 past K).
TEST(LinearDecodeTest, Mxfp4LanePackFollowsTheColumnMap) {
  std::mt19937 rng(8);
  const int64_t N = 3, K = 352;  // one full group and a partial one
  TestWeight w = MakeWeight(WeightDType::kMXFP4, ScaleDType::kE8M0, N, K, rng);
  Mxfp4LanePack pack;
  ASSERT_TRUE(PackMxfp4Lanes(w.view, &pack));
  const int64_t kp = 512;
  ASSERT_EQ(pack.codes.size(), static_cast<size_t>(N * kp / 2));
  ASSERT_EQ(pack.scales.size(), static_cast<size_t>(N * kp / 32));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < kp; g += 256) {
      for (int q = 0; q < 4; ++q) {
        for (int i = 0; i < 32; ++i) {
          for (int h = 0; h < 2; ++h) {
            const int64_t k = g + Mxfp4LaneColumn(q, i, h);
            const uint8_t byte = w.data[n * K / 2 + std::min(k, K - 1) / 2];
            const int want = k >= K ? 0 : (k % 2 == 0 ? byte & 0x0F : byte >> 4);
            const uint8_t packed = pack.codes[n * kp / 2 + g / 2 + 32 * q + i];
            ASSERT_EQ(h == 0 ? packed & 0x0F : packed >> 4, want) << n << " " << k;
          }
        }
      }
    }
    for (int64_t b = 0; b < kp / 32; ++b) {
      EXPECT_EQ(pack.scales[n * kp / 32 + b], b < K / 32 ? w.scales[n * K / 32 + b] : 127);
    }
  }
}

// Mxfp4LaneColumn maps the 4 x 32 x 2 nibbles of a group onto its 256 columns one to one, and
// every nibble feeds the lane of its column's block.
TEST(LinearDecodeTest, Mxfp4LaneColumnIsAPermutation) {
  std::vector<int> seen(256, 0);
  for (int q = 0; q < 4; ++q) {
    for (int i = 0; i < 32; ++i) {
      for (int h = 0; h < 2; ++h) {
        const int col = Mxfp4LaneColumn(q, i, h);
        ASSERT_TRUE(col >= 0 && col < 256);
        ++seen[col];
        // Byte i feeds dword lane 4(i/16) + (i%8)/2 after vpunpck{l,h}bw.
        EXPECT_EQ(col / 32, 4 * (i / 16) + (i % 8) / 2);
      }
    }
  }
  for (int c = 0; c < 256; ++c) EXPECT_EQ(seen[c], 1) << c;
}

// MXFP4 uses one summation order for every M, so even without DEEPINFER_BATCH_INVARIANT a row's
// output is bitwise the same alone and inside batches (prefill-sized ones included).
TEST(LinearDecodeTest, Mxfp4RowIndependentOfBatchWithoutFlag) {
  if (!HaveAvx2()) GTEST_SKIP();
  BatchInvariantScope scope(false);
  ThreadPool pool(2);
  std::mt19937 rng(99);
  const int64_t N = 70, K = 224;
  TestWeight w = MakeWeight(WeightDType::kMXFP4, ScaleDType::kE8M0, N, K, rng);
  Mxfp4LanePack pack;
  ASSERT_TRUE(PackMxfp4Lanes(w.view, &pack));
  LinearOptions opt;
  opt.quantize_activations = true;
  const std::vector<float> row = RandomVector(K, rng);
  Workspace ws;
  for (const WeightView& view : {w.view, WithLanes(w.view, pack)}) {
    auto run = [&](const std::vector<float>& x, int64_t M) {
      std::vector<float> y(M * N);
      const size_t bytes = LinearWorkspaceBytes(M, view, opt, &pool);
      Linear(x.data(), M, view, y.data(), opt, &pool, ws.Get(bytes), bytes);
      return y;
    };
    const std::vector<float> alone = run(row, 1);
    for (int64_t M : {2, 5, 33, 130}) {
      std::vector<float> batch = RandomVector(M * K, rng);
      const int64_t pos = M - 1;
      std::copy(row.begin(), row.end(), batch.begin() + pos * K);
      const std::vector<float> y = run(batch, M);
      for (int64_t n = 0; n < N; ++n) {
        ASSERT_EQ(FloatBits(y[pos * N + n]), FloatBits(alone[n]))
            << "M " << M << " n " << n << " lanes " << (view.lane_codes != nullptr);
      }
    }
  }
}

// All-zero weight blocks (codes +0 and -0) give exactly the bias, through the decode paths.
TEST(LinearDecodeTest, ZeroBlocksGiveBias) {
  if (!HaveAvx2()) GTEST_SKIP();
  std::mt19937 rng(7);
  const int64_t N = 9, K = 200;
  std::vector<uint8_t> fp8(N * K), fp4(N * K / 2);
  for (size_t i = 0; i < fp8.size(); ++i) fp8[i] = (i % 3) ? 0x00 : 0x80;
  for (size_t i = 0; i < fp4.size(); ++i) fp4[i] = (i % 3) ? 0x08 : 0x80;
  std::vector<uint8_t> s8(2 * 1, 120), s4(N * K / 32 + 8, 127);
  std::vector<float> bias = RandomVector(N, rng);
  for (const WeightView& w :
       {WeightView{WeightDType::kFP8Block, fp8.data(), s8.data(), ScaleDType::kE8M0, N, K},
        WeightView{WeightDType::kMXFP4, fp4.data(), s4.data(), ScaleDType::kE8M0, N, 192}}) {
    for (bool q : {false, true}) {
      LinearOptions opt;
      opt.bias = bias.data();
      opt.quantize_activations = q;
      std::vector<float> x = RandomVector(3 * w.cols, rng);
      for (const VectorLinear& impl : VectorLinears()) {
        std::vector<float> y(3 * N);
        Workspace ws;
        impl.Run(x.data(), 3, w, y.data(), opt, nullptr, ws);
        for (int64_t i = 0; i < 3 * N; ++i) EXPECT_EQ(y[i], bias[i % N]) << impl.name << " " << i;
      }
    }
  }
}

// FP8 (NaN-free, so the decode fast path runs) at awkward K against the scalar reference, and
// bitwise against the packed prefill path: ops.h promises that a row's result does not depend
// on which kernel computed it, and the packed path decodes with the generic FP8 decoder.
TEST(LinearDecodeTest, Fp8FastPathMatchesReferenceAndPackedPath) {
  if (!HaveAvx2()) GTEST_SKIP();
  BatchInvariantScope scope(false);
  ThreadPool pool(2);
  for (int64_t K : {8, 13, 40, 130, 300, 1000, 4100}) {
    std::mt19937 rng(static_cast<uint32_t>(K));
    const int64_t N = 37, M = 10;  // packed on every kernel (AVX-512 streams M <= 8)
    TestWeight w = MakeWeight(WeightDType::kFP8Block, ScaleDType::kE8M0, N, K, rng, true);
    ASSERT_FALSE(Fp8HasNanCodes(static_cast<const uint8_t*>(w.view.data), N * K));
    for (bool q : {false, true}) {
      LinearOptions opt;
      opt.quantize_activations = q;
      std::vector<float> x = RandomVector(M * K, rng);
      std::vector<float> ref_out(M * N), packed(M * N);
      Workspace ws;
      size_t bytes = ref::LinearWorkspaceBytes(M, w.view, opt);
      ref::Linear(x.data(), M, w.view, ref_out.data(), opt, ws.Get(bytes), bytes);
      for (const VectorLinear& impl : VectorLinears()) {
        impl.Run(x.data(), M, w.view, packed.data(), opt, &pool, ws);
        // fp8_nan_free (set by loaders after Fp8HasNanCodes) only skips the decoder's NaN test.
        for (bool nan_free : {false, true}) {
          WeightView view = w.view;
          view.fp8_nan_free = nan_free;
          for (int64_t mr = 1; mr <= 4; ++mr) {  // streamed in groups of mr rows
            std::vector<float> streamed(M * N);
            for (int64_t m = 0; m < M; m += mr) {
              const int64_t rows = std::min(mr, M - m);
              impl.Run(x.data() + m * K, rows, view, streamed.data() + m * N, opt, &pool, ws);
            }
            EXPECT_LE(RelativeError(streamed, ref_out), kLinearRelBound)
                << impl.name << " K " << K << " q " << q;
            for (int64_t i = 0; i < M * N; ++i) {
              ASSERT_EQ(FloatBits(streamed[i]), FloatBits(packed[i]))
                  << impl.name << " K " << K << " q " << q << " mr " << mr << " i " << i
                  << " nan_free " << nan_free;
            }
          }
        }
      }
    }
  }
}

// fp8_nan_free on NaN-free weights changes no bit, also where the decode fast path does not
// apply (block scales below 2^-107 or above 2^7: the generic decoder, whose NaN masking the flag
// skips) and on the packed path (M > 4), for every vectorised implementation.
TEST(LinearDecodeTest, Fp8NanFreeFlagChangesNoBitOnTheGenericDecoder) {
  BatchInvariantScope scope(false);
  ThreadPool pool(2);
  std::mt19937 rng(7);
  const int64_t N = 300, K = 333;
  std::vector<uint8_t> codes(N * K);
  for (auto& c : codes) {
    do c = static_cast<uint8_t>(rng());
    while ((c & 0x7F) == 0x7F);
  }
  const int64_t sblocks = ((N + 127) / 128) * ((K + 127) / 128);
  std::vector<uint8_t> scales(sblocks);
  for (int64_t i = 0; i < sblocks; ++i) scales[i] = i % 2 == 0 ? 5 + i : 140 + i;
  WeightView w{WeightDType::kFP8Block, codes.data(), scales.data(), ScaleDType::kE8M0, N, K};
  ASSERT_FALSE(Fp8HasNanCodes(codes.data(), N * K));
  std::uniform_real_distribution<float> u(-1e-3f, 1e-3f);
  for (int64_t M : {1, 2, 3, 4, 6, 10}) {
    std::vector<float> x(M * K);
    for (float& v : x) v = u(rng);
    for (const VectorLinear& impl : VectorLinears()) {
      std::vector<float> checked(M * N), skipped(M * N);
      Workspace ws;
      w.fp8_nan_free = false;
      impl.Run(x.data(), M, w, checked.data(), LinearOptions(), &pool, ws);
      w.fp8_nan_free = true;
      impl.Run(x.data(), M, w, skipped.data(), LinearOptions(), &pool, ws);
      for (int64_t i = 0; i < M * N; ++i) {
        ASSERT_EQ(FloatBits(checked[i]), FloatBits(skipped[i])) << impl.name << " M " << M;
      }
    }
  }
}

// Exactly the two e4m3 NaN codes count, wherever they sit (vector body or tail).
TEST(LinearDecodeTest, Fp8HasNanCodesFindsExactlyTheNanCodes) {
  for (int code = 0; code < 256; ++code) {
    for (int64_t n : {1, 31, 32, 33, 100}) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<uint8_t> codes(n, 0x7E);  // 448, the largest finite e4m3
        codes[at] = static_cast<uint8_t>(code);
        EXPECT_EQ(Fp8HasNanCodes(codes.data(), n), code == 0x7F || code == 0xFF)
            << "code " << code << " n " << n << " at " << at;
      }
    }
  }
  EXPECT_FALSE(Fp8HasNanCodes(nullptr, 0));
}

// ops.h: for every format the streamed (decode) and packed (prefill) kernels give bitwise the
// same row, so a row's output does not depend on M even without DEEPINFER_BATCH_INVARIANT.
// Every format and both scale types, K with and without a vector tail, each vectorised
// implementation; the packed result is also checked against the scalar reference.
TEST(LinearDecodeTest, PackedPathMatchesStreamedBitwise) {
  BatchInvariantScope scope(false);
  ThreadPool pool(2);
  struct Fmt {
    WeightDType d;
    ScaleDType s;
    int64_t K;
  };
  const Fmt fmts[] = {{WeightDType::kF32, ScaleDType::kE8M0, 77},
                      {WeightDType::kF32, ScaleDType::kE8M0, 1024},
                      {WeightDType::kBF16, ScaleDType::kE8M0, 1000},
                      {WeightDType::kBF16, ScaleDType::kE8M0, 515},
                      {WeightDType::kFP8Block, ScaleDType::kE8M0, 700},
                      {WeightDType::kFP8Block, ScaleDType::kF32, 333},
                      {WeightDType::kMXFP4, ScaleDType::kE8M0, 608},
                      {WeightDType::kMXFP4, ScaleDType::kE8M0, 96}};
  for (const Fmt& f : fmts) {
    std::mt19937 rng(static_cast<uint32_t>(f.K * 31 + static_cast<int>(f.d)));
    const int64_t N = 101, M = 70;
    TestWeight w = MakeWeight(f.d, f.s, N, f.K, rng, /*nan_free=*/true);
    const std::vector<float> x = RandomVector(M * f.K, rng);
    std::vector<float> ref_out(M * N);
    Workspace ws;
    const size_t ref_bytes = ref::LinearWorkspaceBytes(M, w.view, LinearOptions());
    ref::Linear(x.data(), M, w.view, ref_out.data(), LinearOptions(), ws.Get(ref_bytes), ref_bytes);
    for (const VectorLinear& impl : VectorLinears()) {
      std::vector<float> packed(M * N), row(N);
      impl.Run(x.data(), M, w.view, packed.data(), LinearOptions(), &pool, ws);
      EXPECT_LE(RelativeError(packed, ref_out), kLinearRelBound)
          << impl.name << " " << DTypeName(f.d);
      for (int64_t m = 0; m < M; m += 9) {
        impl.Run(x.data() + m * f.K, 1, w.view, row.data(), LinearOptions(), nullptr, ws);
        for (int64_t n = 0; n < N; ++n) {
          ASSERT_EQ(FloatBits(row[n]), FloatBits(packed[m * N + n]))
              << impl.name << " " << DTypeName(f.d) << " K " << f.K << " m " << m << " n " << n;
        }
      }
    }
  }
}

// K = 0: every output is the empty sum, i.e. the bias (or +0), on the streamed and packed paths.
TEST(LinearDecodeTest, EmptyDotProductsGiveBias) {
  const float bias[3] = {1.5f, -2.0f, 0.25f};
  const uint8_t scale = 127;
  for (WeightDType d :
       {WeightDType::kF32, WeightDType::kBF16, WeightDType::kFP8Block, WeightDType::kMXFP4}) {
    const WeightView w{d, &scale, &scale, ScaleDType::kE8M0, 3, 0};
    for (int64_t M : {1, 6, 10}) {
      for (bool with_bias : {false, true}) {
        LinearOptions opt;
        opt.bias = with_bias ? bias : nullptr;
        const std::vector<float> x(M, 1.0f);  // never read
        for (const VectorLinear& impl : VectorLinears()) {
          std::vector<float> y(M * 3, -7.0f);
          Workspace ws;
          impl.Run(x.data(), M, w, y.data(), opt, nullptr, ws);
          for (int64_t i = 0; i < M * 3; ++i) {
            ASSERT_EQ(y[i], with_bias ? bias[i % 3] : 0.0f)
                << impl.name << " " << DTypeName(d) << " M " << M << " i " << i;
          }
        }
      }
    }
  }
}

// FP8 with large block scales (E8M0 bytes up to 254 = 2^127, F32 scales up to 3e38), where the
// decoders' folded scale · 256 overflows: one-hot x, so y[n] must be exactly ref::WeightAt =
// fl(e4m3 · scale), through the streamed (M = 1) and packed (M = 10; 6 too on the AVX2 kernels)
// paths (NaN where that weight, and so every weight of its row, overflows: the zero columns then
// give 0 · inf).
TEST(LinearDecodeTest, Fp8LargeScalesExact) {
  BatchInvariantScope scope(false);
  const int64_t N = 256, K = 80;
  std::vector<uint8_t> codes(N * K);
  for (int64_t n = 0; n < N; ++n) std::fill(codes.begin() + n * K, codes.begin() + (n + 1) * K, n);
  std::vector<std::pair<ScaleDType, std::vector<uint8_t>>> cases;
  for (int e : {240, 246, 247, 250, 254}) {
    cases.push_back({ScaleDType::kE8M0, {static_cast<uint8_t>(e), static_cast<uint8_t>(e)}});
  }
  for (float f : {1e35f, 1.4e36f, 1e37f, 3e38f}) {
    std::vector<uint8_t> b(8);
    std::memcpy(b.data(), &f, 4);
    std::memcpy(b.data() + 4, &f, 4);
    cases.push_back({ScaleDType::kF32, b});
  }
  for (const auto& [sdt, bytes] : cases) {
    const WeightView w{WeightDType::kFP8Block, codes.data(), bytes.data(), sdt, N, K};
    for (int64_t M : {1, 6, 10}) {
      std::vector<float> x(M * K, 0.0f);
      for (int64_t m = 0; m < M; ++m) x[m * K + (5 + 13 * m) % K] = 1.0f;
      for (const VectorLinear& impl : VectorLinears()) {
        std::vector<float> y(M * N);
        Workspace ws;
        impl.Run(x.data(), M, w, y.data(), LinearOptions(), nullptr, ws);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            const float expect = ref::WeightAt(w, n, (5 + 13 * m) % K);
            if (std::isinf(expect)) {  // every column of row n overflows: 0 · inf = NaN
              ASSERT_TRUE(std::isnan(y[m * N + n])) << impl.name << " code " << n;
              continue;
            }
            ASSERT_EQ(FloatBits(y[m * N + n] + 0.0f), FloatBits(expect + 0.0f))
                << impl.name << " scale " << static_cast<int>(bytes[0]) << " M " << M << " code "
                << n;
          }
        }
      }
    }
  }
}

// FP8 NaN codes count as 0 times the block scale (ref::WeightAt), so with an infinite scale they
// give NaN like every other code, on every path (body, 16/8-column steps, masked tail).
TEST(LinearDecodeTest, Fp8NanCodesTimesInfiniteScale) {
  const int64_t N = 2, K = 141;
  std::vector<uint8_t> codes(N * K, 0x7F);          // row 0: all NaN codes
  std::fill(codes.begin() + K, codes.end(), 0x38);  // row 1: 1.0
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> scales(8);
  for (int i = 0; i < 2; ++i) std::memcpy(scales.data() + 4 * i, &inf, 4);
  const WeightView w{WeightDType::kFP8Block, codes.data(), scales.data(), ScaleDType::kF32, N, K};
  for (int64_t M : {1, 6, 10}) {
    std::vector<float> x(M * K, 0.5f);
    for (const VectorLinear& impl : VectorLinears()) {
      std::vector<float> y(M * N);
      Workspace ws;
      impl.Run(x.data(), M, w, y.data(), LinearOptions(), nullptr, ws);
      for (int64_t m = 0; m < M; ++m) {
        EXPECT_TRUE(std::isnan(y[m * N])) << impl.name << " M " << M;
        EXPECT_EQ(y[m * N + 1], inf) << impl.name << " M " << M;
      }
    }
  }
}

// The packed path with full accumulator blocks (M >= 96 rows, >= 48 weight rows per thread
// range, several 512-column K chunks), so the per-thread scratch is used to its end, against the
// reference, with 1 to 3 threads.
TEST(LinearDecodeTest, PackedFullBlocksMatchReference) {
  BatchInvariantScope scope(false);
  const std::pair<WeightDType, int64_t> fmts[] = {{WeightDType::kF32, 1100},
                                                  {WeightDType::kBF16, 1030},
                                                  {WeightDType::kFP8Block, 1100},
                                                  {WeightDType::kMXFP4, 1088}};
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (const auto& [dtype, K] : fmts) {
    std::mt19937 rng(static_cast<uint32_t>(77 + K));
    const int64_t N = 150, M = 101;
    TestWeight w = MakeWeight(dtype, ScaleDType::kE8M0, N, K, rng);
    LinearOptions opt;
    opt.quantize_activations = dtype == WeightDType::kFP8Block || dtype == WeightDType::kMXFP4;
    const std::vector<float> x = RandomVector(M * K, rng);
    std::vector<float> ref_out(M * N);
    Workspace ws;
    const size_t ref_bytes = ref::LinearWorkspaceBytes(M, w.view, opt);
    ref::Linear(x.data(), M, w.view, ref_out.data(), opt, ws.Get(ref_bytes), ref_bytes);
    for (const VectorLinear& impl : VectorLinears()) {
      for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
        std::vector<float> y(M * N);
        impl.Run(x.data(), M, w.view, y.data(), opt, pool, ws);
        EXPECT_LE(RelativeError(y, ref_out), kLinearRelBound)
            << impl.name << " " << DTypeName(dtype) << " threads " << pool->num_threads();
      }
    }
  }
}

// x_stride and y_stride larger than K and N (streamed and packed, 1 and 2 threads): the gaps of
// y keep their sentinel and the rows match the reference.
TEST(LinearDecodeTest, StridesRespected) {
  ThreadPool pool2(2);
  for (bool invariant : {false, true}) {
    BatchInvariantScope scope(invariant);
    for (WeightDType d :
         {WeightDType::kF32, WeightDType::kBF16, WeightDType::kFP8Block, WeightDType::kMXFP4}) {
      for (int64_t M : {3, 17}) {
        std::mt19937 rng(static_cast<uint32_t>(M * 10 + static_cast<int>(d)));
        const int64_t N = 70, K = d == WeightDType::kMXFP4 ? 160 : 141;
        const int64_t xs = K + 5, ys = N + 3;
        TestWeight w = MakeWeight(d, ScaleDType::kE8M0, N, K, rng);
        LinearOptions opt;
        opt.x_stride = xs;
        opt.y_stride = ys;
        opt.quantize_activations = d == WeightDType::kMXFP4;
        const std::vector<float> x = RandomVector(M * xs, rng);
        std::vector<float> ref_out(M * ys, 0.0f);
        Workspace ws;
        const size_t rb = ref::LinearWorkspaceBytes(M, w.view, opt);
        ref::Linear(x.data(), M, w.view, ref_out.data(), opt, ws.Get(rb), rb);
        for (const VectorLinear& impl : VectorLinears()) {
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
            std::vector<float> y(M * ys, 12345.0f), got, want;
            impl.Run(x.data(), M, w.view, y.data(), opt, pool, ws);
            for (int64_t m = 0; m < M; ++m) {
              for (int64_t n = 0; n < ys; ++n) {
                if (n >= N) {
                  ASSERT_EQ(y[m * ys + n], 12345.0f) << impl.name << " gap m " << m << " n " << n;
                } else {
                  got.push_back(y[m * ys + n]);
                  want.push_back(ref_out[m * ys + n]);
                }
              }
            }
            EXPECT_LE(RelativeError(got, want), kLinearRelBound)
                << impl.name << " " << DTypeName(d) << " M " << M << " invariant " << invariant;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Elementwise / row ops: AVX2 vs reference.

TEST(RmsNormTest, Avx2MatchesReference) {
  if (!HaveAvx2()) GTEST_SKIP();
  std::mt19937 rng(7);
  for (int64_t dim : {1, 7, 64, 130, 512, 4097}) {
    const int64_t rows = 3;
    std::vector<float> x = RandomVector(rows * dim, rng);
    std::vector<float> wf = RandomVector(dim, rng);
    std::vector<uint16_t> wb(dim);
    for (int64_t i = 0; i < dim; ++i) wb[i] = FloatToBf16(wf[i]);
    for (int variant = 0; variant < 3; ++variant) {
      const float* pf = variant == 1 ? wf.data() : nullptr;
      const uint16_t* pb = variant == 2 ? wb.data() : nullptr;
      std::vector<float> a(rows * dim), b(rows * dim);
      ref::RmsNorm(x.data(), a.data(), rows, dim, pf, pb, 1e-6f);
      avx2::RmsNorm(x.data(), b.data(), rows, dim, pf, pb, 1e-6f);
      EXPECT_LE(RelativeError(b, a), 2e-6) << "dim " << dim << " variant " << variant;
    }
  }
}

TEST(RmsNormTest, HandValue) {
  // x = [3, 4]: mean square 12.5, rsqrt = 0.28284; weight [1, 2].
  const float x[2] = {3, 4};
  const float w[2] = {1, 2};
  float y[2];
  RmsNorm(x, y, 1, 2, w, 0.0f);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y[1], 2 * 4 / std::sqrt(12.5), 1e-6);
}

TEST(ElementwiseTest, Avx2MatchesReferenceExactly) {
  if (!HaveAvx2()) GTEST_SKIP();
  std::mt19937 rng(11);
  for (int64_t n : {1, 7, 8, 9, 33, 1000}) {
    std::vector<float> a = RandomVector(n, rng), b = RandomVector(n, rng);
    std::vector<float> r1(n), r2(n);
    ref::Add(a.data(), b.data(), r1.data(), n);
    avx2::Add(a.data(), b.data(), r2.data(), n);
    EXPECT_EQ(r1, r2);
    r1 = a;
    r2 = a;
    ref::Scale(r1.data(), 0.37f, n);
    avx2::Scale(r2.data(), 0.37f, n);
    EXPECT_EQ(r1, r2);
    r1 = b;
    r2 = b;
    ref::Axpy(-1.5f, a.data(), r1.data(), n);
    avx2::Axpy(-1.5f, a.data(), r2.data(), n);
    EXPECT_LE(RelativeError(r2, r1), 1e-7);  // FMA vs mul+add: one rounding apart
    // BF16 rounding is exact arithmetic: bitwise equal.
    r1 = a;
    r2 = a;
    r1[0] = std::numeric_limits<float>::quiet_NaN();
    r2[0] = r1[0];
    ref::RoundToBf16(r1.data(), n);
    avx2::RoundToBf16(r2.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(r1[i])) {
        EXPECT_TRUE(std::isnan(r2[i]));
      } else {
        EXPECT_EQ(FloatBits(r1[i]), FloatBits(r2[i])) << i;
      }
    }
  }
}

// exp((x - shift) * scale) against std::exp per element (within 2 ulp), -inf to 0, and the
// dispatched op's element independent of the row length (the tail runs the vector code).
TEST(ExpScaledTest, EveryIsaMatchesStdExpPerElement) {
  std::mt19937 rng(31);
  for (int64_t n : {1, 7, 8, 33, 1000, 129280}) {
    std::vector<float> x = RandomVector(n, rng, 4.0f);
    x[0] = -std::numeric_limits<float>::infinity();
    const float shift = 3.5f, scale = 1.7f;
    std::vector<float> want(n), got(n);
    ref::ExpScaled(x.data(), n, shift, scale, want.data());
    std::vector<std::pair<const char*, void (*)(const float*, int64_t, float, float, float*)>>
        paths = {{"dispatch", &ExpScaled}};
    if (HaveAvx2() && n % 8 == 0) paths.push_back({"avx2", &avx2::ExpScaled});
    for (const auto& [name, fn] : paths) {
      fn(x.data(), n, shift, scale, got.data());
      EXPECT_EQ(got[0], 0.0f) << name;
      for (int64_t i = 1; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 2.5e-7f * want[i] + 1e-37f) << name << " n " << n << " i " << i;
      }
    }
    std::vector<float> prefix(std::min<int64_t>(n, 5));
    ExpScaled(x.data(), static_cast<int64_t>(prefix.size()), shift, scale, prefix.data());
    ExpScaled(x.data(), n, shift, scale, got.data());
    for (size_t i = 0; i < prefix.size(); ++i) EXPECT_EQ(FloatBits(prefix[i]), FloatBits(got[i]));
  }
}

TEST(ActivationTest, Avx2MatchesReference) {
  if (!HaveAvx2()) GTEST_SKIP();
  std::mt19937 rng(29);
  for (int64_t n : {1, 7, 8, 33, 1000}) {
    for (float stddev : {0.1f, 3.0f, 40.0f}) {
      std::vector<float> g = RandomVector(n, rng, stddev), u = RandomVector(n, rng, stddev);
      std::vector<float> a = g, b = g;
      ref::Silu(a.data(), n);
      avx2::Silu(b.data(), n);
      EXPECT_LE(RelativeError(b, a), 1e-6) << "silu n " << n;
      for (float limit : {0.0f, 10.0f, 2.75f}) {
        ref::SwiGlu(g.data(), u.data(), a.data(), n, limit);
        avx2::SwiGlu(g.data(), u.data(), b.data(), n, limit);
        EXPECT_LE(RelativeError(b, a), 1e-6) << "swiglu n " << n << " limit " << limit;
      }
      for (int64_t rows : {1, 3}) {
        std::vector<float> x = RandomVector(rows * n, rng, stddev);
        a = x;
        b = x;
        ref::Softmax(a.data(), rows, n);
        avx2::Softmax(b.data(), rows, n);
        EXPECT_LE(RelativeError(b, a), 1e-6) << "softmax n " << n;
      }
    }
  }
}

TEST(ActQuantFp8SimTest, Avx2MatchesReferenceExactly) {
  if (!HaveAvx2()) GTEST_SKIP();
  std::mt19937 rng(13);
  for (int64_t cols : {1, 64, 128, 200, 4096}) {
    for (float stddev : {1e-7f, 1e-3f, 1.0f, 1e4f}) {
      const int64_t rows = 3;
      std::vector<float> x = RandomVector(rows * cols, rng, stddev);
      if (cols > 5) {
        x[1] = 0.0f;
        x[2] = -0.0f;
        x[3] = std::numeric_limits<float>::quiet_NaN();
      }
      std::vector<float> a = x, b = x;
      ref::ActQuantFp8Sim(a.data(), rows, cols, 128);
      avx2::ActQuantFp8Sim(b.data(), rows, cols, 128);
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i])) {
          ASSERT_TRUE(std::isnan(b[i]));
        } else {
          ASSERT_EQ(a[i], b[i]) << "cols " << cols << " i " << i << " x " << x[i];
        }
      }
    }
  }
}

// Non-finite inputs follow the reference: a block holding ±inf saturates (its scale comes from
// inf, so finite elements become 0 and inf becomes ±448) wherever the inf sits; a NaN gate or up
// stays NaN through the SwiGLU clamp; a NaN logit makes its softmax row NaN.
TEST(NonFiniteTest, Avx2FollowsReference) {
  if (!HaveAvx2()) GTEST_SKIP();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t pos : {0, 5, 17, 130}) {  // vector body and scalar tail of a 131-column row
    std::vector<float> x(131);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 1000.0f - static_cast<float>(i);
    x[pos] = pos % 2 ? -inf : inf;
    std::vector<float> a = x, b = x;
    ref::ActQuantFp8Sim(a.data(), 1, 131, 128);
    avx2::ActQuantFp8Sim(b.data(), 1, 131, 128);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(FloatBits(a[i]), FloatBits(b[i])) << pos << " " << i;
  }
  for (int64_t n : {8, 16, 19}) {
    std::vector<float> g(n, 1.5f), u(n, -0.5f), out(n);
    g[n - 1] = nan;
    u[0] = nan;
    avx2::SwiGlu(g.data(), u.data(), out.data(), n, 7.0f);
    EXPECT_TRUE(std::isnan(out[0])) << n;
    EXPECT_TRUE(std::isnan(out[n - 1])) << n;
    EXPECT_FALSE(std::isnan(out[1])) << n;
    std::vector<float> logits(n, 0.25f);
    logits[1] = nan;
    avx2::Softmax(logits.data(), 1, n);
    for (float v : logits) EXPECT_TRUE(std::isnan(v)) << n;
  }
}

TEST(AttentionTest, Avx2MatchesReference) {
  if (!HaveAvx2()) GTEST_SKIP();
  std::mt19937 rng(17);
  struct Shape {
    int64_t hq, hkv, d, keys;
  };
  for (Shape s : {Shape{4, 1, 128, 1}, Shape{4, 1, 128, 37}, Shape{64, 1, 512, 140},
                  Shape{8, 2, 48, 17}, Shape{6, 6, 7, 5}, Shape{3, 1, 16, 0}}) {
    for (bool round_p : {false, true}) {
      std::vector<float> q = RandomVector(s.hq * s.d, rng);
      std::vector<float> keys = RandomVector(std::max<int64_t>(s.keys, 1) * s.hkv * s.d, rng);
      std::vector<float> vals = RandomVector(std::max<int64_t>(s.keys, 1) * s.hkv * s.d, rng);
      std::vector<float> sinks = RandomVector(s.hq, rng);
      std::vector<const float*> kp(s.keys), vp(s.keys);
      // Rows in scrambled memory order, as a ring/gather would give.
      for (int64_t j = 0; j < s.keys; ++j) {
        const int64_t src = (j * 7) % s.keys;
        kp[j] = keys.data() + src * s.hkv * s.d;
        vp[j] = vals.data() + src * s.hkv * s.d;
      }
      AttentionOptions opt;
      opt.scale = 1.0f / std::sqrt(static_cast<float>(s.d));
      opt.sinks = sinks.data();
      opt.round_p_to_bf16 = round_p;
      std::vector<float> a(s.hq * s.d), b(s.hq * s.d);
      std::vector<float> ws(AttentionWorkspaceFloats(s.hq, s.keys) + 1);
      ref::Attention(q.data(), s.hq, s.hkv, s.d, kp.data(), vp.data(), s.keys, opt, a.data(),
                     ws.data(), 0, s.hq);
      avx2::Attention(q.data(), s.hq, s.hkv, s.d, kp.data(), vp.data(), s.keys, opt, b.data(),
                      ws.data(), 0, s.hq);
      // round_p: a 1-ulp score difference can flip a BF16 rounding of p (2^-8 relative).
      EXPECT_LE(RelativeError(b, a), round_p ? 4e-3 : 1e-5)
          << s.hq << "x" << s.d << " keys " << s.keys;
    }
  }
}

TEST(AttentionTest, HandComputedWithSink) {
  // One head, d = 2, keys k0 = [1, 0], k1 = [0, 1] (= values), q = [2, 0], scale 1, sink 1.
  // s = [2, 0], m = 2, p = [1, e^-2], denominator 1 + e^-2 + e^(1-2).
  const float q[2] = {2, 0};
  const float k0[2] = {1, 0}, k1[2] = {0, 1};
  const float* rows[2] = {k0, k1};
  const float sink = 1.0f;
  AttentionOptions opt;
  opt.scale = 1.0f;
  opt.sinks = &sink;
  float out[2];
  float ws[2];
  AttentionLatentMqa(q, 1, 2, rows, 2, opt, out, ws, nullptr);
  const double den = 1 + std::exp(-2.0) + std::exp(-1.0);
  EXPECT_NEAR(out[0], 1 / den, 1e-6);
  EXPECT_NEAR(out[1], std::exp(-2.0) / den, 1e-6);
}

TEST(AttentionTest, GqaUsesGroupedKvHead) {
  // 4 query heads over 2 kv heads: heads 0,1 use kv head 0 and heads 2,3 use kv head 1.
  const int64_t d = 4;
  std::vector<float> q(4 * d, 0.0f);  // zero queries: uniform softmax over keys
  std::vector<float> kv0(2 * d), kv1(2 * d);
  for (int i = 0; i < 2 * d; ++i) {
    kv0[i] = static_cast<float>(i);
    kv1[i] = static_cast<float>(10 + i);
  }
  const float* rows[2] = {kv0.data(), kv1.data()};
  AttentionOptions opt;
  std::vector<float> out(4 * d), ws(8);
  AttentionGqa(q.data(), 4, 2, d, rows, rows, 2, opt, out.data(), ws.data(), nullptr);
  for (int i = 0; i < d; ++i) {
    EXPECT_FLOAT_EQ(out[0 * d + i], (kv0[i] + kv1[i]) / 2);
    EXPECT_FLOAT_EQ(out[1 * d + i], (kv0[i] + kv1[i]) / 2);
    EXPECT_FLOAT_EQ(out[2 * d + i], (kv0[d + i] + kv1[d + i]) / 2);
    EXPECT_FLOAT_EQ(out[3 * d + i], (kv0[d + i] + kv1[d + i]) / 2);
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE

TEST(RopeTest, YarnRampMatchesSpec) {
  // Spec §3.5.3: dim 64, base 160000, L0 65536, factor 16 -> pairs 0..15 unchanged (ramp 0 for
  // i <= low = 15), 25..31 divided by 16, linear in between.
  double base_f[32], yarn_f[32];
  RopeFrequencies(64, 160000.0, base_f);
  YarnParams y;
  y.factor = 16;
  y.original_max_position = 65536;
  RopeFrequenciesYarn(64, 160000.0, y, yarn_f);
  for (int i = 0; i < 32; ++i) {
    EXPECT_DOUBLE_EQ(base_f[i], std::pow(160000.0, -2.0 * i / 64.0));
    if (i <= 15) {
      EXPECT_DOUBLE_EQ(yarn_f[i], base_f[i]) << i;
    }
    if (i >= 25) {
      EXPECT_DOUBLE_EQ(yarn_f[i], base_f[i] / 16) << i;
    }
  }
  const double ramp20 = (20 - 15) / 10.0;
  EXPECT_DOUBLE_EQ(yarn_f[20], base_f[20] * (1 - ramp20) + base_f[20] / 16 * ramp20);
}

TEST(RopeTest, InterleavedAndHalfSplitRotateTheRightPairs) {
  // head_dim 6, rope_dim 4: dims 2..5 rotate. One frequency pair set, position 1.
  const double freqs[2] = {0.5, 0.25};
  const int64_t pos = 3;
  float c[2], s[2];
  RopeCosSin(freqs, 4, &pos, 1, c, s);
  EXPECT_FLOAT_EQ(c[0], std::cos(1.5));
  EXPECT_FLOAT_EQ(s[1], std::sin(0.75));
  const float x0[6] = {9, 8, 1, 2, 3, 4};
  float xi[6], xh[6];
  std::copy(x0, x0 + 6, xi);
  std::copy(x0, x0 + 6, xh);
  ApplyRope(xi, 1, 1, 6, 4, c, s, RopeStyle::kInterleaved, false);
  ApplyRope(xh, 1, 1, 6, 4, c, s, RopeStyle::kHalfSplit, false);
  // Untouched head part.
  EXPECT_EQ(xi[0], 9);
  EXPECT_EQ(xi[1], 8);
  // Interleaved: pairs (1,2) with angle 1.5 and (3,4) with angle 0.75.
  EXPECT_NEAR(xi[2], 1 * std::cos(1.5) - 2 * std::sin(1.5), 1e-6);
  EXPECT_NEAR(xi[3], 1 * std::sin(1.5) + 2 * std::cos(1.5), 1e-6);
  EXPECT_NEAR(xi[4], 3 * std::cos(0.75) - 4 * std::sin(0.75), 1e-6);
  EXPECT_NEAR(xi[5], 3 * std::sin(0.75) + 4 * std::cos(0.75), 1e-6);
  // Half split: pairs (1,3) with angle 1.5 and (2,4) with angle 0.75.
  EXPECT_NEAR(xh[2], 1 * std::cos(1.5) - 3 * std::sin(1.5), 1e-6);
  EXPECT_NEAR(xh[4], 1 * std::sin(1.5) + 3 * std::cos(1.5), 1e-6);
  EXPECT_NEAR(xh[3], 2 * std::cos(0.75) - 4 * std::sin(0.75), 1e-6);
  EXPECT_NEAR(xh[5], 2 * std::sin(0.75) + 4 * std::cos(0.75), 1e-6);
  // Inverse undoes the rotation.
  ApplyRope(xi, 1, 1, 6, 4, c, s, RopeStyle::kInterleaved, true);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(xi[i], x0[i], 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Small ops against hand values.

TEST(SwiGluTest, ClampsAsSpec) {
  // limit 10: gate clamped above only, up clamped to [-10, 10] (spec §3.7).
  const float gate[4] = {20, -20, 1, 0};
  const float up[4] = {1, 1, 50, -50};
  float out[4];
  SwiGlu(gate, up, out, 4, 10.0f);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  EXPECT_NEAR(out[0], silu(10), 1e-5);
  EXPECT_NEAR(out[1], silu(-20), 1e-9);
  EXPECT_NEAR(out[2], silu(1) * 10, 1e-5);
  EXPECT_EQ(out[3], 0.0f);
  SwiGlu(gate, up, out, 4, 0.0f);  // no clamp (Llama)
  EXPECT_NEAR(out[0], silu(20), 1e-4);
}

TEST(SoftmaxTest, HandValues) {
  float x[3] = {1, 2, 3};
  Softmax(x, 1, 3);
  const double d = std::exp(-2.0) + std::exp(-1.0) + 1;
  EXPECT_NEAR(x[0], std::exp(-2.0) / d, 1e-7);
  EXPECT_NEAR(x[2], 1 / d, 1e-7);
}

TEST(TopKTest, TiesGoToLowerIndexAndNaNLast) {
  const float x[7] = {1, 5, std::numeric_limits<float>::quiet_NaN(), 5, 3, 5, -1};
  int32_t idx[5];
  float val[5];
  TopK(x, 7, 5, idx, val);
  const int32_t expect[5] = {1, 3, 5, 4, 0};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(idx[i], expect[i]) << i;
  EXPECT_EQ(val[3], 3.0f);
}

TEST(TopKTest, MatchesReferenceOnRandomDataWithTies) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> small(0, 20);  // many ties
  for (int64_t n : {1, 5, 64, 1000}) {
    for (int64_t k : {int64_t{1}, std::min<int64_t>(n, 6), n / 2, n}) {
      std::vector<float> x(n);
      for (auto& v : x) v = static_cast<float>(small(rng));
      if (n > 3) x[2] = std::numeric_limits<float>::quiet_NaN();
      std::vector<int32_t> i1(k), i2(k);
      std::vector<float> v1(k), v2(k);
      ref::TopK(x.data(), n, k, i1.data(), v1.data());
      TopK(x.data(), n, k, i2.data(), v2.data());
      EXPECT_EQ(i1, i2) << "n " << n << " k " << k;
    }
  }
}

TEST(EmbeddingTest, GathersBf16Rows) {
  const uint16_t table[6] = {FloatToBf16(1), FloatToBf16(2), FloatToBf16(3),
                             FloatToBf16(4), FloatToBf16(5), FloatToBf16(-6)};
  WeightView t{WeightDType::kBF16, table, nullptr, ScaleDType::kE8M0, 3, 2};
  const int32_t ids[2] = {2, 0};
  float out[4];
  EmbeddingGather(t, ids, 2, out);
  EXPECT_EQ(out[0], 5);
  EXPECT_EQ(out[1], -6);
  EXPECT_EQ(out[2], 1);
  EXPECT_EQ(out[3], 2);
}

}  // namespace
}  // namespace deepinfer::kernels
