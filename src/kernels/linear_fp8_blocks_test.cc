// LinearFp8Blocks / DequantizeFp8BlocksRows (linear_fp8_blocks.h) at awkward sizes: N, K not
// multiples of the tiles, tiles 32x32 (DeepSeek-V4.1), 128x128 and 16x48, E8M0 and F32 scales,
// M from 1 to 70, with and without a thread pool. Checks: the decode against the e4m3 definition
// computed here; the product against the scalar reference Linear (cpu/reference.h, sequential
// sums) within the FP32 bound; bitwise equality with Linear on the dequantised matrix (the order
// the header promises) and, for 128x128 tiles, with Linear on the same bytes as a kFP8Block view;
// a row's result independent of its companions.
#include "kernels/linear_fp8_blocks.h"

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference.h"
#include "kernels/formats.h"
#include "kernels/relative_error.h"
#include "kernels/workspace.h"

namespace deepinfer::kernels {
namespace {

// e4m3fn by its definition: (-1)^s · 2^(e-7) · (1 + m/8), subnormal 2^-6 · m/8; NaN -> 0 here.
float E4m3ByDefinition(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return 0.0f;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return static_cast<float>(s ? -v : v);
}

struct Fp8Weight {
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scale_bytes;  // E8M0 bytes or F32 bytes
  Fp8BlocksView view;
};

Fp8Weight MakeWeight(int64_t N, int64_t K, int64_t br, int64_t bc, ScaleDType sdt,
                     std::mt19937& rng) {
  Fp8Weight w;
  w.codes.resize(N * K);
  std::uniform_int_distribution<int> code(0, 255);
  for (auto& c : w.codes) {
    c = static_cast<uint8_t>(code(rng));
    if ((c & 0x7F) == 0x7F && code(rng) % 2 == 0) c = 0x10;  // keep a few NaN codes only
  }
  const int64_t n = Fp8BlocksScaleCount(N, K, br, bc);
  std::uniform_int_distribution<int> e(118, 130);
  if (sdt == ScaleDType::kE8M0) {
    w.scale_bytes.resize(n);
    for (auto& s : w.scale_bytes) s = static_cast<uint8_t>(e(rng));
  } else {
    w.scale_bytes.resize(4 * n);
    std::uniform_real_distribution<float> u(0.001f, 0.1f);
    for (int64_t i = 0; i < n; ++i) {
      const float s = u(rng);
      std::memcpy(w.scale_bytes.data() + 4 * i, &s, 4);
    }
  }
  w.view.data = w.codes.data();
  w.view.scales = w.scale_bytes.data();
  w.view.scale_dtype = sdt;
  w.view.rows = N;
  w.view.cols = K;
  w.view.block_rows = br;
  w.view.block_cols = bc;
  return w;
}

std::vector<float> RandomVector(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

std::vector<float> RunFp8(const std::vector<float>& x, int64_t M, const Fp8BlocksView& w,
                          const LinearOptions& opt, ThreadPool* pool) {
  Workspace ws;
  const size_t bytes = LinearFp8BlocksWorkspaceBytes(M, w, opt, pool);
  std::vector<float> y(M * w.rows, -7.0f);
  LinearFp8Blocks(x.data(), M, w, y.data(), opt, pool, ws.Get(bytes), bytes);
  return y;
}

struct Shape {
  int64_t N, K, br, bc;
};

TEST(LinearFp8BlocksTest, DecodeMatchesDefinition) {
  std::mt19937 rng(3);
  for (ScaleDType sdt : {ScaleDType::kE8M0, ScaleDType::kF32}) {
    for (const Shape s :
         {Shape{33, 70, 32, 32}, Shape{5, 200, 16, 48}, Shape{130, 129, 128, 128}}) {
      Fp8Weight w = MakeWeight(s.N, s.K, s.br, s.bc, sdt, rng);
      std::vector<float> got(s.N * s.K);
      DequantizeFp8BlocksRows(w.view, 0, s.N, got.data());
      for (int64_t r = 0; r < s.N; ++r) {
        for (int64_t k = 0; k < s.K; ++k) {
          const int64_t si = (r / s.br) * ((s.K + s.bc - 1) / s.bc) + k / s.bc;
          float scale;
          if (sdt == ScaleDType::kE8M0) {
            scale = static_cast<float>(std::ldexp(1.0, w.scale_bytes[si] - 127));
          } else {
            std::memcpy(&scale, w.scale_bytes.data() + 4 * si, 4);
          }
          ASSERT_EQ(got[r * s.K + k], E4m3ByDefinition(w.codes[r * s.K + k]) * scale)
              << r << "," << k;
        }
      }
      // A tile-aligned row slice decodes the same rows.
      if (s.N > s.br) {
        const Fp8BlocksView sl = SliceFp8BlocksRows(w.view, s.br, s.N - s.br);
        std::vector<float> part((s.N - s.br) * s.K);
        DequantizeFp8BlocksRows(sl, 0, s.N - s.br, part.data());
        EXPECT_TRUE(std::equal(part.begin(), part.end(), got.begin() + s.br * s.K));
      }
    }
  }
}

TEST(LinearFp8BlocksTest, MatchesReferenceAndDequantisedLinearBitwise) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  const Shape shapes[] = {{1, 31, 32, 32},   {33, 65, 32, 32},     {70, 200, 32, 32},
                          {129, 97, 32, 32}, {200, 130, 128, 128}, {45, 301, 16, 48}};
  for (ScaleDType sdt : {ScaleDType::kE8M0, ScaleDType::kF32}) {
    for (const Shape& s : shapes) {
      Fp8Weight w = MakeWeight(s.N, s.K, s.br, s.bc, sdt, rng);
      std::vector<float> dq(s.N * s.K);
      DequantizeFp8BlocksRows(w.view, 0, s.N, dq.data());
      WeightView f32;
      f32.dtype = WeightDType::kF32;
      f32.data = dq.data();
      f32.rows = s.N;
      f32.cols = s.K;
      for (int64_t M : {1, 3, 5, 17, 70}) {
        for (bool bias : {false, true}) {
          std::ostringstream os;  // (not operator+: GCC 12 -Wrestrict false positive)
          os << "N" << s.N << " K" << s.K << " tile " << s.br << "x" << s.bc << " M" << M
             << (bias ? " bias" : "") << (sdt == ScaleDType::kF32 ? " f32scale" : "");
          const std::string what = os.str();
          const std::vector<float> x = RandomVector(M * s.K, rng);
          const std::vector<float> b = RandomVector(s.N, rng);
          LinearOptions opt;
          opt.bias = bias ? b.data() : nullptr;
          std::vector<float> ref_y(M * s.N);
          Workspace wr;
          const size_t rb = ref::LinearWorkspaceBytes(M, f32, opt);
          ref::Linear(x.data(), M, f32, ref_y.data(), opt, wr.Get(rb), rb);
          std::vector<float> lin_y(M * s.N);
          Workspace wl;
          const size_t lb = LinearWorkspaceBytes(M, f32, opt, &pool);
          Linear(x.data(), M, f32, lin_y.data(), opt, &pool, wl.Get(lb), lb);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            const std::vector<float> y = RunFp8(x, M, w.view, opt, p);
            EXPECT_LE(RelativeError(y, ref_y), 1e-5) << what;
            EXPECT_EQ(y, lin_y) << what << (p ? " pool" : "");
          }
          // A loader's nan_free (set where Fp8HasNanCodes finds none) changes no result.
          std::vector<uint8_t> clean = w.codes;
          for (uint8_t& c : clean) c = (c & 0x7F) == 0x7F ? 0x10 : c;
          ASSERT_FALSE(Fp8HasNanCodes(clean.data(), s.N * s.K));
          Fp8BlocksView nf = w.view;
          nf.data = clean.data();
          const std::vector<float> checked = RunFp8(x, M, nf, opt, &pool);
          nf.nan_free = true;
          EXPECT_EQ(RunFp8(x, M, nf, opt, &pool), checked) << what << " nan_free";
          if (s.br == 128 && s.bc == 128) {
            WeightView v4;
            v4.dtype = WeightDType::kFP8Block;
            v4.data = w.codes.data();
            v4.scales = w.scale_bytes.data();
            v4.scale_dtype = sdt;
            v4.rows = s.N;
            v4.cols = s.K;
            std::vector<float> y4(M * s.N);
            Workspace w4;
            const size_t b4 = LinearWorkspaceBytes(M, v4, opt, &pool);
            Linear(x.data(), M, v4, y4.data(), opt, &pool, w4.Get(b4), b4);
            EXPECT_EQ(RunFp8(x, M, w.view, opt, &pool), y4) << what << " vs kFP8Block";
          }
        }
      }
    }
  }
}

// Fp8BlocksView::Scale and the AVX2 decode path's E8M0 scale (E8m0ToFloatLdexp) are
// std::ldexp(1, e - 127) bit for bit (2^-127 subnormal
// at e = 0, +inf at e = 255), as Fp8BlocksView::Scale computes it.
TEST(LinearFp8BlocksTest, TileScaleIsLdexpOfTheExponent) {
  for (int e = 0; e < 256; ++e) {
    const float want = std::ldexp(1.0f, e - 127);
    const float got = E8m0ToFloatLdexp(static_cast<uint8_t>(e));
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "e " << e;
    const uint8_t byte = static_cast<uint8_t>(e);
    Fp8BlocksView v;
    v.scales = &byte;
    v.rows = v.cols = 1;
    EXPECT_EQ(std::bit_cast<uint32_t>(v.Scale(0, 0)), std::bit_cast<uint32_t>(want)) << "e " << e;
  }
}

// Extreme tile scales (2^-127 .. 2^127 and +inf, where fl(e4m3 · scale) underflows, overflows
// or is NaN for the NaN codes): decode-sized M (the AVX2 streaming path) still equals the F32
// Linear on the dequantised rows bit for bit, NaN where it has NaN.
TEST(LinearFp8BlocksTest, ExtremeScalesMatchDequantisedLinear) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  const int64_t N = 64, K = 96;
  Fp8Weight w = MakeWeight(N, K, 32, 32, ScaleDType::kE8M0, rng);
  const uint8_t extremes[] = {0, 1, 5, 127, 240, 250, 254, 255};
  for (size_t i = 0; i < w.scale_bytes.size(); ++i) w.scale_bytes[i] = extremes[i % 8];
  std::vector<float> dq(N * K);
  DequantizeFp8BlocksRows(w.view, 0, N, dq.data());
  WeightView f32;
  f32.dtype = WeightDType::kF32;
  f32.data = dq.data();
  f32.rows = N;
  f32.cols = K;
  for (int64_t M : {1, 2, 4}) {
    const std::vector<float> x = RandomVector(M * K, rng);
    std::vector<float> lin_y(M * N);
    Workspace wl;
    const size_t lb = LinearWorkspaceBytes(M, f32, {}, &pool);
    Linear(x.data(), M, f32, lin_y.data(), {}, &pool, wl.Get(lb), lb);
    const std::vector<float> y = RunFp8(x, M, w.view, {}, &pool);
    for (int64_t i = 0; i < M * N; ++i) {
      if (std::isnan(lin_y[i])) {
        EXPECT_TRUE(std::isnan(y[i])) << "M " << M << " i " << i;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(lin_y[i]))
            << "M " << M << " i " << i;
      }
    }
  }
}

TEST(LinearFp8BlocksTest, RowIndependentOfCompanions) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  Fp8Weight w = MakeWeight(97, 160, 32, 32, ScaleDType::kE8M0, rng);
  const std::vector<float> row = RandomVector(160, rng);
  const std::vector<float> alone = RunFp8(row, 1, w.view, {}, &pool);
  for (int64_t M : {2, 4, 5, 9, 33}) {
    std::vector<float> batch = RandomVector(M * 160, rng);
    const int64_t at = M / 2;
    std::copy(row.begin(), row.end(), batch.begin() + at * 160);
    const std::vector<float> y = RunFp8(batch, M, w.view, {}, &pool);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), y.begin() + at * 97)) << "M " << M;
  }
}

}  // namespace
}  // namespace deepinfer::kernels
