// The BF16-dot GEMM (cpu/bf16_dot.h): the packed layouts element by element, the emulated tile
// arithmetic on hand-computed cases (pair order, DAZ, FTZ), the emulations against an FP64 sum of
// the exact products with the rounding-error bound of their order on every machine, Linear
// against the scalar reference with batch, thread and stride invariance, the FP32 fallback for
// weights that are not BF16-exact, and the hardware kernels (AMX, AVX512_BF16) bitwise against
// their emulations where the CPU has them (skipped with a message elsewhere).
#include "kernels/cpu/bf16_dot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/cpu_features.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16_dot_kernels.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"
#include "kernels/relative_error.h"
#include "kernels/workspace.h"

namespace deepinfer::kernels::bf16dot {
namespace {

const Kernel kEmulations[] = {Kernel::kEmulatedAmx, Kernel::kEmulatedVdp};

// A random BF16-exact value: e4m3-like significands (3 bits) scaled by 2^[-6, 6].
float RandomExact(std::mt19937& rng) {
  std::uniform_int_distribution<int> sig(8, 15), ex(-6, 6), sign(0, 1);
  const float v = std::ldexp(static_cast<float>(sig(rng)) / 8.0f, ex(rng));
  return sign(rng) != 0 ? -v : v;
}

// One tile problem of mt x nt tiles over kt K tiles, packed, with its FP32 operands kept.
struct TileProblem {
  int64_t M, N, K;
  std::vector<float> x, w;  // [M, K], [N, K]
  std::vector<uint16_t> a, b;
  TileProblem(int mt, int nt, int64_t kt, std::mt19937& rng)
      : M(mt * kTileM), N(nt * kTileN), K(kt * kTileK), x(M * K), w(N * K) {
    for (float& v : x) v = RandomExact(rng);
    for (float& v : w) v = RandomExact(rng);
    a.resize(PaddedRows(M) * PaddedK(K));
    b.resize(N * PaddedK(K));
    PackA(x.data(), K, M, K, a.data());
    for (int j = 0; j < nt; ++j) {
      EXPECT_TRUE(PackB(w.data() + j * kTileN * K, kTileN, K, b.data() + j * kTileN * K));
    }
  }
  std::vector<float> Run(Kernel kernel, int mt, int nt) const {
    std::vector<float> c(M * N, -1.0f);
    TileProduct(kernel, a.data(), kTileM * K, mt, b.data(), kTileN * K, nt, K / kTileK, c.data(),
                N);
    return c;
  }
};

TEST(Bf16Dot, PackedLayouts) {
  const int64_t M = 3, K = 37;  // K pads to 64: two K tiles
  std::vector<float> x(M * K);
  for (int64_t i = 0; i < M * K; ++i) x[i] = static_cast<float>(i + 1);
  std::vector<uint16_t> a(PaddedRows(M) * PaddedK(K), 0xFFFF);
  PackA(x.data(), K, M, K, a.data());
  ASSERT_EQ(PaddedRows(M), 16);
  ASSERT_EQ(PaddedK(K), 64);
  // Element (m, k) sits in K tile k / 32, row m, position k % 32; padding is +0.
  EXPECT_EQ(Bf16ToFloat(a[0 * kTileElems + 2 * kTileK + 5]), x[2 * K + 5]);
  EXPECT_EQ(Bf16ToFloat(a[1 * kTileElems + 1 * kTileK + 4]), x[1 * K + 36]);
  EXPECT_EQ(a[1 * kTileElems + 1 * kTileK + 5], 0);  // k = 37: past K
  EXPECT_EQ(a[0 * kTileElems + 3 * kTileK + 0], 0);  // m = 3: past M

  const int64_t count = 5;
  std::vector<float> w(count * K);
  for (int64_t i = 0; i < count * K; ++i) w[i] = static_cast<float>(-(i + 1));
  std::vector<uint16_t> b(PaddedK(K) * kTileN, 0xFFFF);
  EXPECT_TRUE(PackB(w.data(), count, K, b.data()));
  // VNNI: element [p][2j + h] of K tile t is W[j][32t + 2p + h].
  EXPECT_EQ(Bf16ToFloat(b[0 * kTileElems + 3 * 32 + 2 * 4 + 1]), w[4 * K + 7]);
  EXPECT_EQ(Bf16ToFloat(b[1 * kTileElems + 2 * 32 + 2 * 1 + 0]), w[1 * K + 36]);
  EXPECT_EQ(b[1 * kTileElems + 2 * 32 + 2 * 1 + 1], 0);  // k = 37
  EXPECT_EQ(b[0 * kTileElems + 0 * 32 + 2 * 5 + 0], 0);  // row 5: past count
  // A value that BF16 cannot hold exactly, or one DAZ would flush, is reported.
  w[3] = 1.0f + 0x1p-10f;
  EXPECT_FALSE(PackB(w.data(), count, K, b.data()));
  w[3] = 0x1p-130f;
  EXPECT_FALSE(PackB(w.data(), count, K, b.data()));
}

// A [N, K] BF16 weight holding the BF16-exact values w.
struct Bf16Weight {
  std::vector<uint16_t> bits;
  WeightView view;
  Bf16Weight(const std::vector<float>& w, int64_t N, int64_t K) : bits(N * K) {
    for (int64_t i = 0; i < N * K; ++i) bits[i] = FloatToBf16(w[i]);
    view = WeightView{WeightDType::kBF16, bits.data(), nullptr, ScaleDType::kE8M0, N, K};
  }
};

// y = x · W^T through Linear(kernel) with BF16 weights and activations promised BF16.
std::vector<float> Bf16Linear(Kernel kernel, const std::vector<float>& x, int64_t M,
                              const std::vector<float>& w, int64_t N, int64_t K) {
  const Bf16Weight weight(w, N, K);
  LinearOptions opt;
  opt.input_is_bf16 = true;
  Workspace ws;
  const size_t bytes = LinearWorkspaceBytes(M, weight.view, opt, 1);
  std::vector<float> y(M * N, -7.0f);
  Linear(kernel, x.data(), M, weight.view, y.data(), opt, nullptr, ws.Get(bytes), bytes);
  return y;
}

// x[k] = xs[k], W[0][k] = ws[k] for k < 4: the one output under `kernel`.
float FourTermDot(Kernel kernel, const float (&xs)[4], const float (&ws)[4]) {
  return Bf16Linear(kernel, std::vector<float>(xs, xs + 4), 1, std::vector<float>(ws, ws + 4), 1,
                    4)[0];
}

// Products p0..p3 = 1, 2^-24, -1, 2^-24. AMX: e = p0 + p2 = 0, o = p1 + p3 = 2^-23, c = 2^-23.
// Lane order: lane 0 = p1 + p0 = 1 + 2^-24, which rounds (tie, even) to 1; lane 1 = p3 + p2 =
// -1 + 2^-24 (exact); their sum is 2^-24.
TEST(Bf16Dot, EmulatedPairOrdersHandComputed) {
  const float xs[4] = {1.0f, 0x1p-12f, -1.0f, 0x1p-12f};
  const float ws[4] = {1.0f, 0x1p-12f, 1.0f, 0x1p-12f};
  EXPECT_EQ(FourTermDot(Kernel::kEmulatedAmx, xs, ws), 0x1p-23f);
  EXPECT_EQ(FourTermDot(Kernel::kEmulatedVdp, xs, ws), 0x1p-24f);
}

// The lane order's layout: FP8 steps hold VPUNPCK{L,H}BW's interleave, the others the columns
// in order; padding is +0. The decoded bits are the reference's values where a row passes, and
// rows with a scale outside the exact range (or BF16 denormals) do not.
TEST(Bf16Dot, LaneLayoutAndDecode) {
  EXPECT_EQ(LaneColumn(WeightDType::kFP8Block, 0), 0);
  EXPECT_EQ(LaneColumn(WeightDType::kFP8Block, 7), 7);
  EXPECT_EQ(LaneColumn(WeightDType::kFP8Block, 8), 16);  // word 8: second 128-bit lane
  EXPECT_EQ(LaneColumn(WeightDType::kFP8Block, 32), 8);  // vector 1 (unpackhi), word 0
  EXPECT_EQ(LaneColumn(WeightDType::kFP8Block, 63), 63);
  EXPECT_EQ(LaneColumn(WeightDType::kFP8Block, 45), 24 + 5);
  EXPECT_EQ(LaneColumn(WeightDType::kBF16, 45), 45);
  EXPECT_EQ(LaneColumn(WeightDType::kMXFP4, 1), 2);    // low nibbles first
  EXPECT_EQ(LaneColumn(WeightDType::kMXFP4, 16), 32);  // the second block
  EXPECT_EQ(LaneColumn(WeightDType::kMXFP4, 32), 1);   // vector 1: high nibbles
  EXPECT_EQ(LaneColumn(WeightDType::kMXFP4, 63), 63);
  for (WeightDType dtype : {WeightDType::kFP8Block, WeightDType::kMXFP4}) {
    std::vector<bool> seen(64);
    for (int q = 0; q < 64; ++q) seen[LaneColumn(dtype, q)] = true;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 64);  // a permutation
  }

  const int64_t M = 2, K = 70;  // two steps, the second mostly padding
  std::vector<float> x(M * K);
  for (int64_t i = 0; i < M * K; ++i) x[i] = static_cast<float>(i + 1);
  x[K + 3] = 1.0f + 0x1p-12f;  // row 1 is not BF16
  std::vector<uint16_t> packed(M * 128, 0xFFFF);
  uint8_t exact[M];
  PackLaneX(x.data(), K, M, K, WeightDType::kFP8Block, packed.data(), exact);
  EXPECT_EQ(exact[0], 1);
  EXPECT_EQ(exact[1], 0);
  EXPECT_EQ(Bf16ToFloat(packed[8]), x[16]);
  EXPECT_EQ(packed[64 + 32], 0);  // column 72: past K
  EXPECT_EQ(Bf16ToFloat(packed[64 + 5]), x[64 + 5]);

  std::mt19937 rng(29);
  for (WeightDType dtype : {WeightDType::kFP8Block, WeightDType::kMXFP4}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    const int64_t N = 384, Kw = 160;
    std::vector<uint8_t> data(WeightDataBytes(dtype, N, Kw)),
        scales(WeightScaleCount(dtype, N, Kw));
    std::uniform_int_distribution<int> byte(0, 255), exponent(100, 140);
    for (uint8_t& d : data) d = static_cast<uint8_t>(byte(rng));
    for (uint8_t& e : scales) e = static_cast<uint8_t>(exponent(rng));
    scales[1] = dtype == WeightDType::kFP8Block ? 9 : 1;  // rows 0..127 (FP8) / row 0 (MXFP4)
    scales[scales.size() - 1] = dtype == WeightDType::kFP8Block ? 247 : 253;  // the last rows
    const WeightView w{dtype, data.data(), scales.data(), ScaleDType::kE8M0, N, Kw};
    std::vector<uint16_t> bits(192);
    std::vector<float> ref_row(Kw);
    for (int64_t n : {int64_t{0}, int64_t{130}, N - 1}) {
      const bool ok = DecodeLaneRow(w, n, bits.data());
      EXPECT_EQ(ok, n == 130) << "row " << n;
      if (!ok) continue;
      ref::DecodeWeightRow(w, n, ref_row.data());
      for (int64_t q = 0; q < 192; ++q) {
        const int64_t k = q / 64 * 64 + LaneColumn(dtype, q % 64);
        if (k >= Kw) {
          ASSERT_EQ(bits[q], 0);
          continue;
        }
        const float v = std::isnan(ref_row[k]) ? 0.0f : ref_row[k];
        ASSERT_EQ(Bf16ToFloat(bits[q]), v) << "column " << k;
      }
    }
  }
}

// DAZ: BF16 denormal inputs count as zero. FTZ: 2^-100 · 2^-30 = 2^-130 is below FLT_MIN and
// becomes +0 (an IEEE FMA would return the denormal). Tile level for the AMX order; the lane
// order through Linear, where a denormal weight sends its row to the FP32 fallback instead.
TEST(Bf16Dot, EmulatedDenormalsAreFlushed) {
  std::vector<float> x(kTileM * kTileK, 0.0f), w(kTileN * kTileK, 0.0f);
  std::vector<uint16_t> a(kTileElems), b(kTileElems);
  std::vector<float> c(kTileM * kTileN);
  x[0] = 0x1p-100f;
  w[0] = 0x1p-30f;
  PackA(x.data(), kTileK, kTileM, kTileK, a.data());
  PackB(w.data(), kTileN, kTileK, b.data());
  TileProduct(Kernel::kEmulatedAmx, a.data(), 0, 1, b.data(), 0, 1, 1, c.data(), kTileN);
  EXPECT_EQ(FloatBits(c[0]), 0u);
  EXPECT_EQ(FloatBits(Bf16Linear(Kernel::kEmulatedVdp, {0x1p-100f}, 1, {0x1p-30f}, 1, 1)[0]), 0u);
  // A denormal BF16 weight (0x0001 = 2^-133) times 2^100: DAZ gives 0, not 2^-33.
  b[0] = 0x0001;
  x[0] = 0x1p100f;
  PackA(x.data(), kTileK, kTileM, kTileK, a.data());
  TileProduct(Kernel::kEmulatedAmx, a.data(), 0, 1, b.data(), 0, 1, 1, c.data(), kTileN);
  EXPECT_EQ(c[0], 0.0f);
  EXPECT_EQ(Bf16Linear(Kernel::kEmulatedVdp, {0x1p100f}, 1, {0x1p-133f}, 1, 1)[0], 0x1p-33f);
}

// Random BF16-exact operands [M, K] x [N, K] (integers in [-8, 8] when `integers`).
struct LinearProblem {
  int64_t M, N, K;
  std::vector<float> x, w;
  LinearProblem(int64_t m, int64_t n, int64_t k, bool integers, std::mt19937& rng)
      : M(m), N(n), K(k), x(m * k), w(n * k) {
    std::uniform_int_distribution<int> small(-8, 8);
    for (float& v : x) v = integers ? static_cast<float>(small(rng)) : RandomExact(rng);
    for (float& v : w) v = integers ? static_cast<float>(small(rng)) : RandomExact(rng);
  }
};

// Small integers: every partial sum is exact, so both orders give the exact dot product.
TEST(Bf16Dot, EmulationsAreExactOnIntegers) {
  std::mt19937 rng(7);
  const LinearProblem pr(32, 32, 96, true, rng);
  for (Kernel kernel : kEmulations) {
    const std::vector<float> c = Bf16Linear(kernel, pr.x, pr.M, pr.w, pr.N, pr.K);
    for (int64_t m = 0; m < pr.M; ++m) {
      for (int64_t n = 0; n < pr.N; ++n) {
        double exact = 0;
        for (int64_t k = 0; k < pr.K; ++k) exact += double{pr.x[m * pr.K + k]} * pr.w[n * pr.K + k];
        ASSERT_EQ(c[m * pr.N + n], exact) << KernelName(kernel) << " m " << m << " n " << n;
      }
    }
  }
}

// Random BF16-exact operands: each output within the recursive-summation bound of its order
// around the FP64 sum of the exact products: |c - Σp| <= (K + 2) · 2^-24 · Σ|p| (each product
// exact; at most K + 2 roundings on any product's path).
TEST(Bf16Dot, EmulationsWithinExactProductBound) {
  std::mt19937 rng(11);
  for (Kernel kernel : kEmulations) {
    for (const auto& [m, n, k] : {std::tuple{16, 16, 32}, std::tuple{32, 16, 128},
                                  std::tuple{5, 32, 224}, std::tuple{17, 9, 64}}) {
      const LinearProblem pr(m, n, k, false, rng);
      const std::vector<float> c = Bf16Linear(kernel, pr.x, pr.M, pr.w, pr.N, pr.K);
      for (int64_t i = 0; i < pr.M; ++i) {
        for (int64_t j = 0; j < pr.N; ++j) {
          double exact = 0, magnitude = 0;
          for (int64_t kk = 0; kk < pr.K; ++kk) {
            const double p = double{pr.x[i * pr.K + kk]} * pr.w[j * pr.K + kk];
            exact += p;
            magnitude += std::fabs(p);
          }
          const double bound = (pr.K + 2) * 0x1p-24 * magnitude;
          ASSERT_LE(std::fabs(c[i * pr.N + j] - exact), bound)
              << KernelName(kernel) << " m " << i << " n " << j << " K " << pr.K;
        }
      }
    }
  }
}

// A tile's rows and columns never depend on the tiles next to them: a 2 x 2 product equals
// its four 1 x 1 parts bitwise (AMX order; the lane order has no tiles).
TEST(Bf16Dot, TileBlockingDoesNotChangeResults) {
  std::mt19937 rng(5);
  TileProblem pr(2, 2, 5, rng);
  for (Kernel kernel : {Kernel::kEmulatedAmx}) {
    const std::vector<float> whole = pr.Run(kernel, 2, 2);
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        std::vector<float> part(kTileM * kTileN);
        TileProduct(kernel, pr.a.data() + i * kTileM * pr.K, 0, 1, pr.b.data() + j * kTileN * pr.K,
                    0, 1, pr.K / kTileK, part.data(), kTileN);
        for (int r = 0; r < kTileM; ++r) {
          ASSERT_EQ(0, std::memcmp(part.data() + r * kTileN,
                                   whole.data() + (i * kTileM + r) * pr.N + j * kTileN,
                                   kTileN * sizeof(float)))
              << KernelName(kernel) << " tile " << i << "," << j << " row " << r;
        }
      }
    }
  }
}

// A random weight of `dtype` [N, K] (E8M0 scale bytes in [lo, hi]) and its view.
struct RandomWeight {
  std::vector<uint8_t> data, scales;
  WeightView view;
  RandomWeight(WeightDType dtype, int64_t N, int64_t K, std::mt19937& rng, int lo = 118,
               int hi = 127) {
    std::uniform_int_distribution<int> byte(0, 255), exponent(lo, hi);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    data.resize(WeightDataBytes(dtype, N, K));
    scales.resize(WeightScaleCount(dtype, N, K));
    for (uint8_t& d : data) d = static_cast<uint8_t>(byte(rng));
    if (dtype == WeightDType::kBF16) {
      for (int64_t i = 0; i < N * K; ++i) {
        const uint16_t h = FloatToBf16(normal(rng));
        std::memcpy(data.data() + 2 * i, &h, 2);
      }
    }
    for (uint8_t& s : scales) s = static_cast<uint8_t>(exponent(rng));
    view = WeightView{dtype, data.data(), scales.data(), ScaleDType::kE8M0, N, K};
  }
};

std::vector<float> RunLinear(Kernel kernel, const std::vector<float>& x, int64_t M,
                             const WeightView& w, const LinearOptions& opt, ThreadPool* pool,
                             int64_t y_stride = 0) {
  Workspace ws;
  const size_t bytes = LinearWorkspaceBytes(M, w, opt, pool ? pool->num_threads() : 1);
  std::vector<float> y(M * (y_stride != 0 ? y_stride : w.rows), -7.0f);
  LinearOptions o = opt;
  o.y_stride = y_stride;
  Linear(kernel, x.data(), M, w, y.data(), o, pool, ws.Get(bytes), bytes);
  return y;
}

std::vector<float> RunReference(const std::vector<float>& x, int64_t M, const WeightView& w,
                                const LinearOptions& opt) {
  Workspace ws;
  const size_t bytes = ref::LinearWorkspaceBytes(M, w, opt);
  std::vector<float> y(M * w.rows);
  ref::Linear(x.data(), M, w, y.data(), opt, ws.Get(bytes), bytes);
  return y;
}

struct Shape {
  WeightDType dtype;
  int64_t N, K;
};
const Shape kShapes[] = {
    {WeightDType::kFP8Block, 200, 300},  // two scale row blocks, K not a multiple of 32
    {WeightDType::kFP8Block, 17, 128},
    {WeightDType::kMXFP4, 70, 352},
    {WeightDType::kBF16, 33, 77},
};

// Every M from decode to a multi-tile prefill: within the reference's tolerance, each row equal
// to the same row computed alone, and the same with 3 threads and a strided output.
TEST(Bf16Dot, LinearMatchesReferenceAndIsBatchInvariant) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(3);
  for (Kernel kernel : kEmulations) {
    for (const Shape& s : kShapes) {
      RandomWeight w(s.dtype, s.N, s.K, rng);
      std::vector<float> bias(s.N);
      for (float& v : bias) v = normal(rng);
      LinearOptions opt;
      opt.quantize_activations = true;
      opt.bias = bias.data();
      ASSERT_TRUE(Applies(w.view, opt));
      for (int64_t M : {1, 5, 16, 17, 37}) {
        SCOPED_TRACE(std::string(KernelName(kernel)) + " dtype " +
                     std::to_string(static_cast<int>(s.dtype)) + " M " + std::to_string(M));
        std::vector<float> x(M * s.K);
        for (float& v : x) v = normal(rng);
        const std::vector<float> y = RunLinear(kernel, x, M, w.view, opt, nullptr);
        EXPECT_LE(RelativeError(y, RunReference(x, M, w.view, opt)), 1e-5);
        EXPECT_EQ(y, RunLinear(kernel, x, M, w.view, opt, &pool));
        const std::vector<float> strided = RunLinear(kernel, x, M, w.view, opt, nullptr, s.N + 3);
        for (int64_t m = 0; m < M; ++m) {
          const std::vector<float> xr(x.begin() + m * s.K, x.begin() + (m + 1) * s.K);
          const std::vector<float> alone = RunLinear(kernel, xr, 1, w.view, opt, nullptr);
          ASSERT_EQ(0, std::memcmp(alone.data(), y.data() + m * s.N, s.N * sizeof(float)))
              << "row " << m;
          ASSERT_EQ(0, std::memcmp(strided.data() + m * (s.N + 3), y.data() + m * s.N,
                                   s.N * sizeof(float)));
        }
      }
    }
  }
}

// FP8 scale bytes 0..12 make some e4m3 · 2^(e-127) weights subnormal (not BF16-exact normals):
// those weight rows take the FP32 fallback and still match the reference.
TEST(Bf16Dot, ExtremeScalesTakeTheFallback) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  RandomWeight w(WeightDType::kFP8Block, 256, 256, rng, 118, 127);
  w.scales[0] = 3;  // rows 0..127, columns 0..127
  LinearOptions opt;
  opt.quantize_activations = true;
  std::vector<float> decoded(256);
  ref::DecodeWeightRow(w.view, 0, decoded.data());
  std::vector<uint16_t> b(PaddedK(256) * kTileN);
  EXPECT_FALSE(PackB(decoded.data(), 1, 256, b.data()));
  for (Kernel kernel : kEmulations) {
    const int64_t M = 9;
    std::vector<float> x(M * 256);
    for (float& v : x) v = normal(rng);
    const std::vector<float> y = RunLinear(kernel, x, M, w.view, opt, nullptr);
    EXPECT_LE(RelativeError(y, RunReference(x, M, w.view, opt)), 1e-5) << KernelName(kernel);
  }
}

// input_is_bf16: BF16 activations times BF16 / FP8 weights take the tiles without quantising;
// a row that breaks the promise takes the FP32 fallback (acc = fma(x, w, acc) in increasing k,
// checked bitwise here) and leaves the other rows as they are alone.
TEST(Bf16Dot, PromisedBf16InputsAndRowsThatBreakThePromise) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Kernel kernel : kEmulations) {
    for (WeightDType dtype : {WeightDType::kBF16, WeightDType::kFP8Block}) {
      const int64_t M = 19, N = 40, K = 200;
      RandomWeight w(dtype, N, K, rng);
      LinearOptions opt;
      opt.input_is_bf16 = true;
      ASSERT_TRUE(Applies(w.view, opt));
      std::vector<float> x(M * K);
      for (float& v : x) v = RoundBf16(normal(rng));
      x[7 * K + 3] = 1.0f + 0x1p-12f;  // row 7 is not BF16
      const std::vector<float> y = RunLinear(kernel, x, M, w.view, opt, nullptr);
      EXPECT_LE(RelativeError(y, RunReference(x, M, w.view, opt)), 1e-5);
      std::vector<float> row(K);
      for (int64_t n = 0; n < N; ++n) {
        ref::DecodeWeightRow(w.view, n, row.data());
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc = std::fma(x[7 * K + k], row[k], acc);
        ASSERT_EQ(y[7 * N + n], acc) << KernelName(kernel) << " n " << n;
      }
      for (int64_t m = 0; m < M; ++m) {
        const std::vector<float> xr(x.begin() + m * K, x.begin() + (m + 1) * K);
        const std::vector<float> alone = RunLinear(kernel, xr, 1, w.view, opt, nullptr);
        ASSERT_EQ(0, std::memcmp(alone.data(), y.data() + m * N, N * sizeof(float))) << m;
      }
    }
  }
}

TEST(Bf16Dot, AppliesOnlyToExactProducts) {
  WeightView w;
  LinearOptions opt;
  w.dtype = WeightDType::kFP8Block;
  EXPECT_FALSE(Applies(w, opt));  // FP32 activations
  opt.input_is_bf16 = true;
  EXPECT_TRUE(Applies(w, opt));
  opt.input_is_bf16 = false;
  opt.quantize_activations = true;
  EXPECT_TRUE(Applies(w, opt));
  w.scale_dtype = ScaleDType::kF32;  // fl(e4m3 · s) need not be a BF16 number
  EXPECT_FALSE(Applies(w, opt));
  w.dtype = WeightDType::kF32;
  EXPECT_FALSE(Applies(w, opt));
  w.dtype = WeightDType::kMXFP4;
  EXPECT_TRUE(Applies(w, opt));
  w.dtype = WeightDType::kBF16;
  EXPECT_TRUE(Applies(w, opt));
}

TEST(Bf16Dot, EmulationsPassTheSelfCheck) {
  for (Kernel kernel : kEmulations) {
    std::string failure;
    EXPECT_TRUE(SelfCheck(kernel, &failure)) << KernelName(kernel) << ": " << failure;
  }
}

// The dispatcher's choice follows DEEPINFER_FORCE_ISA (run the suite with amxemu to send every
// eligible ops.h Linear through the emulated tiles).
TEST(Bf16Dot, ActiveKernelFollowsTheEnvironment) {
  const Kernel* k = ActiveKernel();
  switch (Env().bf16_dot_emulation) {
    case Bf16DotEmulation::kAmx:
      ASSERT_NE(k, nullptr);
      EXPECT_EQ(*k, Kernel::kEmulatedAmx);
      break;
    case Bf16DotEmulation::kVdp:
      ASSERT_NE(k, nullptr);
      EXPECT_EQ(*k, Kernel::kEmulatedVdp);
      break;
    case Bf16DotEmulation::kNone:
      if (static_cast<int>(ActiveIsa()) < static_cast<int>(IsaLevel::kAvx512Bf16)) {
        EXPECT_EQ(k, nullptr);
      }
      break;
  }
}

// The hardware kernels against their emulations, bitwise: tile products (AMX) and whole
// Linears at every M of the streamed (1-4) and panel (5+) paths of the lane order.
void CheckHardwareAgainstEmulation(Kernel hardware, Kernel emulation) {
  std::mt19937 rng(13);
  if (OrderOf(hardware) == Order::kAmx) {
    for (const auto& [mt, nt, kt] :
         {std::tuple{1, 1, 1}, std::tuple{2, 1, 3}, std::tuple{1, 2, 4}, std::tuple{2, 2, 9}}) {
      TileProblem pr(mt, nt, kt, rng);
      EXPECT_EQ(pr.Run(hardware, mt, nt), pr.Run(emulation, mt, nt))
          << "tiles " << mt << "x" << nt << " K tiles " << kt;
    }
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  // Bitwise (memcmp: the sign of a zero counts too).
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (const Shape& s : kShapes) {
    RandomWeight w(s.dtype, s.N, s.K, rng);
    LinearOptions opt;
    opt.quantize_activations = true;
    for (int64_t M : {1, 2, 3, 4, 5, 16, 37}) {
      std::vector<float> x(M * s.K);
      for (float& v : x) v = normal(rng);
      EXPECT_TRUE(same(RunLinear(hardware, x, M, w.view, opt, &pool),
                       RunLinear(emulation, x, M, w.view, opt, nullptr)))
          << "dtype " << static_cast<int>(s.dtype) << " M " << M;
    }
  }
  // Several K chunks of the panel path (accumulators saved and reloaded), several blocks of
  // activation rows (M > 64), a step with one MXFP4 block (K % 64 == 32), and panels of fewer
  // than 32 rows (K > 8192).
  for (const auto& [s, ms] :
       {std::pair{Shape{WeightDType::kBF16, 70, 2112}, std::vector<int64_t>{1, 5, 65, 70}},
        std::pair{Shape{WeightDType::kFP8Block, 40, 1100}, std::vector<int64_t>{3, 66}},
        std::pair{Shape{WeightDType::kMXFP4, 40, 1056}, std::vector<int64_t>{2, 9, 65}},
        std::pair{Shape{WeightDType::kBF16, 12, 8256}, std::vector<int64_t>{1, 5}}}) {
    RandomWeight w(s.dtype, s.N, s.K, rng);
    LinearOptions opt;
    opt.quantize_activations = true;
    for (int64_t M : ms) {
      std::vector<float> x(M * s.K);
      for (float& v : x) v = normal(rng);
      const std::vector<float> y = RunLinear(hardware, x, M, w.view, opt, &pool);
      EXPECT_TRUE(same(y, RunLinear(emulation, x, M, w.view, opt, nullptr)))
          << "dtype " << static_cast<int>(s.dtype) << " K " << s.K << " M " << M;
      const std::vector<float> x0(x.begin(), x.begin() + s.K);
      EXPECT_EQ(0, std::memcmp(RunLinear(hardware, x0, 1, w.view, opt, nullptr).data(), y.data(),
                               s.N * sizeof(float)))
          << "row 0 alone, K " << s.K << " M " << M;
    }
  }
  // Scales across the whole E8M0 range and BF16 denormals: rows on both sides of the exact
  // range, so the hardware's choice of the rows that take the fallback is compared too.
  for (const Shape& s : {Shape{WeightDType::kFP8Block, 640, 200},
                         Shape{WeightDType::kMXFP4, 96, 96}, Shape{WeightDType::kBF16, 40, 70}}) {
    RandomWeight w(s.dtype, s.N, s.K, rng, 0, 255);
    if (s.dtype == WeightDType::kBF16) {
      uint16_t* h = reinterpret_cast<uint16_t*>(w.data.data());
      h[3 * s.K + 5] = 0x0001;
      h[9 * s.K + 69] = 0x8003;
    }
    LinearOptions opt;
    opt.quantize_activations = true;
    for (int64_t M : {1, 3, 9}) {
      std::vector<float> x(M * s.K);
      for (float& v : x) v = normal(rng);
      const std::vector<float> got = RunLinear(hardware, x, M, w.view, opt, &pool);
      const std::vector<float> want = RunLinear(emulation, x, M, w.view, opt, nullptr);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << "extreme values, dtype " << static_cast<int>(s.dtype) << " M " << M;
    }
  }
  std::string failure;
  EXPECT_TRUE(SelfCheck(hardware, &failure)) << failure;
}

TEST(Bf16Dot, AmxMatchesItsEmulationBitwise) {
  if (!KernelRuns(Kernel::kAmx)) {
    GTEST_SKIP() << "needs AMX-TILE + AMX-BF16 and the OS tile permission; this CPU has: "
                 << CpuFeaturesString() << " (the emulation is tested on every machine)";
  }
  CheckHardwareAgainstEmulation(Kernel::kAmx, Kernel::kEmulatedAmx);
}

TEST(Bf16Dot, Avx512Bf16MatchesItsEmulationBitwise) {
  if (!KernelRuns(Kernel::kAvx512Bf16)) {
    GTEST_SKIP() << "needs AVX512_BF16 (with AVX-512 F/BW/VL/DQ); this CPU has: "
                 << CpuFeaturesString() << " (the emulation is tested on every machine)";
  }
  CheckHardwareAgainstEmulation(Kernel::kAvx512Bf16, Kernel::kEmulatedVdp);
}

}  // namespace
}  // namespace deepinfer::kernels::bf16dot
