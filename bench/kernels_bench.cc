// Kernel microbenchmarks (issue #3, KERNELS.md "Measuring"): matrix-vector products (decode)
// reported as GB/s of weight bytes, matrix products (prefill) as GFLOP/s, and beside them the
// machine's limits measured by this same binary: a large-array read bandwidth test and an FMA
// peak test, both on the kernel thread pool. Every product benchmark also reports its
// fraction of the measured limit (pct_of_read_bw / pct_of_fma_peak).
//
// Weights rotate over enough copies to exceed the last-level cache (>= 256 MiB in total), so
// decode numbers are DRAM numbers, as in a real model step.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "common/cpu_features.h"
#include "common/thread_pool.h"
#include "kernels/formats.h"
#include "kernels/ops.h"
#include "kernels/read_bandwidth.h"
#include "kernels/workspace.h"

namespace deepinfer::kernels {
namespace {

// Decode weights rotate over at least 4x the last-level cache (kernels/read_bandwidth.h).
const size_t kMinWeightFootprint = BeyondCacheBytes(size_t{256} << 20);

ThreadPool* Pool() { return ThreadPool::Default(); }

// --------------------------------------------------------------------------------------------
// Machine limits

// 10 independent 16-lane FMA chains for `iters` steps (the AVX-512 kernels' peak: the kernels
// use zmm FMAs when ActiveIsa() is kAvx512, so the roofline must too). Returns a value that
// depends on the chains.
__attribute__((target("avx512f"))) float FmaChains512(int64_t iters) {
  __m512 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int64_t k = 0; k < iters; ++k) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  }
  float s = 0;
  alignas(64) float lanes[16];
  for (int i = 0; i < 10; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    s += lanes[0];
  }
  return s;
}

// Each thread runs 10 independent FMA chains (enough to cover the FMA latency), 8 lanes wide,
// or 16 where the kernels run AVX-512.
double FmaOnce(int64_t iters) {
  std::atomic<int> sink{0};
  const int threads = Pool()->num_threads();
  const bool zmm = ActiveIsa() >= IsaLevel::kAvx512;
  Pool()->ParallelFor(threads, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (zmm) {
        sink += FmaChains512(iters) > 1e30f;
        continue;
      }
      __m256 acc[10];
      for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
      const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
      for (int64_t k = 0; k < iters; ++k) {
        for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
      }
      float s = 0;
      for (int i = 0; i < 10; ++i) s += _mm256_cvtss_f32(acc[i]);
      sink += s > 1e30f;
    }
  });
  return static_cast<double>(threads) * iters * 10 * (zmm ? 16 : 8) * 2;  // flops
}

// Median-of-5 measurements taken before the benchmarks run, so ratios can be printed.
struct Limits {
  double read_gbps = 0;
  double fma_gflops = 0;
};
Limits& MeasuredLimits() {
  static Limits limits;
  return limits;
}

void MeasureLimits() {
  std::vector<double> bw, fl;
  ReadBandwidthArrayOnce();
  for (int r = 0; r < 5; ++r) {
    int64_t t0 = MonotonicNanos();
    benchmark::DoNotOptimize(ReadBandwidthArrayOnce());
    bw.push_back(static_cast<double>(ReadBandwidthArrayBytes()) / (MonotonicNanos() - t0));
    t0 = MonotonicNanos();
    const double flops = FmaOnce(2'000'000);
    fl.push_back(flops / (MonotonicNanos() - t0));
  }
  std::sort(bw.begin(), bw.end());
  std::sort(fl.begin(), fl.end());
  MeasuredLimits() = {bw[2], fl[2]};
  std::printf(
      "measured limits (%d threads, kernels: %s): read bandwidth %.2f GB/s, FMA peak %.2f "
      "GFLOP/s; last-level cache %zu MiB, decode weights rotate over %zu MiB\n",
      Pool()->num_threads(), IsaName(ActiveIsa()), bw[2], fl[2], LastLevelCacheBytes() >> 20,
      kMinWeightFootprint >> 20);
}

void BM_ReadBandwidth(benchmark::State& state) {
  for (auto _ : state) {
    const int64_t t0 = MonotonicNanos();
    benchmark::DoNotOptimize(ReadBandwidthArrayOnce());
    state.SetIterationTime(static_cast<double>(MonotonicNanos() - t0) * 1e-9);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * ReadBandwidthArrayBytes());
}
BENCHMARK(BM_ReadBandwidth)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_FmaPeak(benchmark::State& state) {
  double flops = 0;
  for (auto _ : state) {
    const int64_t t0 = MonotonicNanos();
    flops += FmaOnce(1'000'000);
    state.SetIterationTime(static_cast<double>(MonotonicNanos() - t0) * 1e-9);
  }
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)->UseManualTime()->Unit(benchmark::kMillisecond);

// --------------------------------------------------------------------------------------------
// Products

struct WeightSet {
  std::vector<std::vector<uint8_t>> data, scales;
  std::vector<WeightView> views;
  std::vector<Mxfp4LanePack> lanes;  // MXFP4 in the lane layout, where the kernels read it
  int64_t bytes_each = 0;
};

WeightSet MakeWeights(WeightDType dtype, int64_t N, int64_t K, size_t min_footprint, bool repack,
                      bool keep_nan_check) {
  WeightSet s;
  const int64_t data_bytes = WeightDataBytes(dtype, N, K);
  const int64_t scale_count = WeightScaleCount(dtype, N, K);
  s.bytes_each = data_bytes + scale_count;
  const int copies =
      static_cast<int>(std::max<size_t>(1, (min_footprint + s.bytes_each - 1) / s.bytes_each));
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> byte(0, 255), exp(118, 126);
  for (int c = 0; c < copies; ++c) {
    std::vector<uint8_t> d(data_bytes), sc(scale_count);
    if (dtype == WeightDType::kBF16) {
      auto* p = reinterpret_cast<uint16_t*>(d.data());
      for (int64_t i = 0; i < N * K; ++i) p[i] = FloatToBf16((byte(rng) - 128) / 4096.0f);
    } else if (dtype == WeightDType::kF32) {
      auto* p = reinterpret_cast<float*>(d.data());
      for (int64_t i = 0; i < N * K; ++i) p[i] = (byte(rng) - 128) / 4096.0f;
    } else {
      for (auto& b : d) b = static_cast<uint8_t>(byte(rng) & 0xF7);  // no NaN codes
    }
    for (auto& b : sc) b = static_cast<uint8_t>(exp(rng));
    s.data.push_back(std::move(d));
    s.scales.push_back(std::move(sc));
  }
  // As a model loader does: MXFP4 goes into the lane layout where the kernels use it.
  const bool lanes = repack && dtype == WeightDType::kMXFP4 && UsesMxfp4Lanes();
  s.lanes.resize(lanes ? copies : 0);
  for (int c = 0; c < copies; ++c) {
    s.views.push_back(WeightView{dtype, s.data[c].data(),
                                 s.scales[c].empty() ? nullptr : s.scales[c].data(),
                                 ScaleDType::kE8M0, N, K});
    if (lanes && PackMxfp4Lanes(s.views.back(), &s.lanes[c])) {
      s.views.back() = WithLanes(s.views.back(), s.lanes[c]);
    }
    // As a model loader does: FP8 without NaN codes skips the kernel's per-tile check.
    if (dtype == WeightDType::kFP8Block && !keep_nan_check) {
      s.views.back().fp8_nan_free = !Fp8HasNanCodes(s.data[c].data(), N * K);
    }
  }
  return s;
}

void RunLinear(benchmark::State& state, WeightDType dtype, bool quantize, bool repack = true,
               bool keep_nan_check = false, bool bf16_input = false) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  // Decode benches rotate through copies larger than the caches; prefill reuses one matrix
  // (it is compute-bound by design, and the copies would only cost memory).
  // Batched decode (M <= 64) also reads its weights from memory each step; its limit is still
  // the FMA peak beyond M = 4.
  const bool rotate = M <= 64 && N * K >= (int64_t{1} << 22);
  const bool decode = M <= 4 && rotate;
  WeightSet ws = MakeWeights(dtype, N, K, rotate ? kMinWeightFootprint : 0, repack, keep_nan_check);
  std::vector<float> x(M * K), y(M * N);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = bf16_input ? RoundBf16(nd(rng)) : nd(rng);
  LinearOptions opt;
  opt.quantize_activations = quantize;
  opt.input_is_bf16 = bf16_input;
  Workspace scratch;
  const size_t bytes = LinearWorkspaceBytes(M, ws.views[0], opt, Pool());
  void* wsp = scratch.Get(bytes);
  size_t c = 0;
  for (auto _ : state) {
    const int64_t t0 = MonotonicNanos();
    Linear(x.data(), M, ws.views[c], y.data(), opt, Pool(), wsp, bytes);
    benchmark::ClobberMemory();
    state.SetIterationTime(static_cast<double>(MonotonicNanos() - t0) * 1e-9);
    c = (c + 1) % ws.views.size();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["weight_GBps"] =
      benchmark::Counter(iters * ws.bytes_each / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] =
      benchmark::Counter(iters * 2.0 * M * N * K / 1e9, benchmark::Counter::kIsRate);
  // Paired ratio: this host's speed drifts by tens of percent within a minute (other tenants),
  // so a limit measured once at start-up can be far from the one the kernel met. Alternate
  // ~20 ms of the kernel with one measurement of its limit (read bandwidth for decode, FMA peak
  // for prefill), kPairs times, and report the median of the per-pair ratios.
  constexpr int kPairs = 7;
  std::vector<double> ratios;
  for (int pair = 0; pair < kPairs; ++pair) {
    int64_t calls = 0;
    const int64_t t0 = MonotonicNanos();
    int64_t t1 = t0;
    while (t1 - t0 < 20'000'000 || calls < 2) {
      Linear(x.data(), M, ws.views[c], y.data(), opt, Pool(), wsp, bytes);
      c = (c + 1) % ws.views.size();
      ++calls;
      t1 = MonotonicNanos();
    }
    const double secs = static_cast<double>(t1 - t0) * 1e-9;
    if (decode) {
      const double kernel_gbps = calls * ws.bytes_each / secs / 1e9;
      const int64_t r0 = MonotonicNanos();
      benchmark::DoNotOptimize(ReadBandwidthArrayOnce());
      const double read_gbps =
          static_cast<double>(ReadBandwidthArrayBytes()) / (MonotonicNanos() - r0);
      ratios.push_back(kernel_gbps / read_gbps);
    } else {
      const double kernel_gflops = calls * 2.0 * M * N * K / secs / 1e9;
      const int64_t f0 = MonotonicNanos();
      const double flops = FmaOnce(1'000'000);
      ratios.push_back(kernel_gflops / (flops / (MonotonicNanos() - f0)));
    }
  }
  std::sort(ratios.begin(), ratios.end());
  state.counters[decode ? "paired_pct_read_bw" : "paired_pct_fma_peak"] =
      100.0 * ratios[kPairs / 2];
}

void BM_LinearBf16(benchmark::State& s) { RunLinear(s, WeightDType::kBF16, false); }
// BF16 weights times activations already rounded to BF16 (LinearOptions::input_is_bf16): the
// BF16-dot tiles where a level with them is active, the FP32 kernels otherwise.
void BM_LinearBf16Input(benchmark::State& s) {
  RunLinear(s, WeightDType::kBF16, false, true, false, true);
}
void BM_LinearF32(benchmark::State& s) { RunLinear(s, WeightDType::kF32, false); }
void BM_LinearFp8(benchmark::State& s) { RunLinear(s, WeightDType::kFP8Block, true); }
// FP8 as loaded without the NaN-code scan (WeightView::fp8_nan_free false): the kernel checks
// every tile, as it did before the scan existed.
void BM_LinearFp8NanChecked(benchmark::State& s) {
  RunLinear(s, WeightDType::kFP8Block, true, true, /*keep_nan_check=*/true);
}
void BM_LinearMxfp4(benchmark::State& s) { RunLinear(s, WeightDType::kMXFP4, true); }
// MXFP4 left in the checkpoint layout (DEEPINFER_REPACK_WEIGHTS=0, or scales the repack refuses).
void BM_LinearMxfp4Plain(benchmark::State& s) {
  RunLinear(s, WeightDType::kMXFP4, true, /*repack=*/false);
}

// Decode: M = 1 (and a small batch of 4), 4096 x 4096.
BENCHMARK(BM_LinearBf16)->Args({1, 4096, 4096})->Args({4, 4096, 4096})->UseManualTime();
BENCHMARK(BM_LinearF32)->Args({1, 4096, 4096})->UseManualTime();
BENCHMARK(BM_LinearFp8)->Args({1, 4096, 4096})->Args({4, 4096, 4096})->UseManualTime();
BENCHMARK(BM_LinearFp8NanChecked)->Args({1, 4096, 4096})->UseManualTime();
BENCHMARK(BM_LinearMxfp4)
    ->Args({1, 4096, 4096})
    ->Args({2, 4096, 4096})
    ->Args({4, 4096, 4096})
    ->UseManualTime();
BENCHMARK(BM_LinearMxfp4Plain)->Args({1, 4096, 4096})->UseManualTime();
// Batched decode: 16 rows against weights read from memory (the 1B Llama's FFN shape, and
// V4's attention shape in FP8): compute-bound, reported against the FMA peak.
BENCHMARK(BM_LinearBf16)->Args({16, 5632, 2048})->UseManualTime();
// An 8-sequence decode step (avx512.cc streams up to 8 x rows); K = 1024 as the V4 bench
// preset's vocabulary head.
BENCHMARK(BM_LinearBf16)->Args({8, 4096, 4096})->Args({8, 32768, 1024})->UseManualTime();
BENCHMARK(BM_LinearFp8)->Args({8, 4096, 4096})->UseManualTime();
BENCHMARK(BM_LinearFp8)->Args({16, 4096, 4096})->UseManualTime();
// Cache-resident matrix-vector (256 KiB of FP8): the decode kernels' compute cost alone.
BENCHMARK(BM_LinearBf16)
    ->Args({1, 128, 1024})
    ->Args({96, 64, 256})
    ->Args({96, 128, 1024})
    ->UseManualTime();
BENCHMARK(BM_LinearFp8)->Args({1, 256, 1024})->Args({1, 1024, 2048})->UseManualTime();
BENCHMARK(BM_LinearMxfp4)->Args({1, 512, 1024})->UseManualTime();
// Prefill: M >= 256.
BENCHMARK(BM_LinearBf16)
    ->Args({256, 4096, 4096})
    ->Args({512, 2048, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LinearFp8)
    ->Args({256, 4096, 4096})
    ->Args({512, 2048, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LinearMxfp4)->Args({256, 4096, 4096})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LinearBf16Input)
    ->Args({1, 4096, 4096})
    ->Args({16, 5632, 2048})
    ->Args({256, 4096, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Prints each product's achieved fraction of the measured limits after the table, twice:
// by wall time (the plain definition) and by the calling thread's CPU time (every benchmark
// splits its work statically over the same pool, so on an oversubscribed machine the ratio of
// CPU-time rates is the less noisy estimate of what the kernel achieves while it runs).
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const double real = r.GetAdjustedRealTime(), cpu = r.GetAdjustedCPUTime();
      const double cpu_factor = cpu > 0 ? real / cpu : 0;
      const std::string name = r.benchmark_name();
      if (name.rfind("BM_ReadBandwidth", 0) == 0) {
        read_cpu_gbps_ = ReadBandwidthArrayBytes() / (r.GetAdjustedCPUTime() * 1e-3) / 1e9;
        if (r.time_unit != benchmark::kMillisecond) read_cpu_gbps_ = 0;
      }
      if (name.rfind("BM_FmaPeak", 0) == 0) {
        auto gf = r.counters.find("GFLOPs");
        if (gf != r.counters.end()) fma_cpu_gflops_ = gf->second.value * cpu_factor;
      }
      auto gb = r.counters.find("weight_GBps");
      auto gf = r.counters.find("GFLOPs");
      if (gb == r.counters.end() || gf == r.counters.end()) continue;
      const Limits& lim = MeasuredLimits();
      // Counters are already rates per second of (manually timed) wall time.
      std::printf(
          "  -> %s: wall: %.2f GB/s = %.0f%% of read bandwidth, %.2f GFLOP/s = %.0f%% of "
          "FMA peak\n",
          name.c_str(), gb->second.value, 100.0 * gb->second.value / lim.read_gbps,
          gf->second.value, 100.0 * gf->second.value / lim.fma_gflops);
      for (const char* key : {"paired_pct_read_bw", "paired_pct_fma_peak"}) {
        auto paired = r.counters.find(key);
        if (paired == r.counters.end()) continue;
        std::printf(
            "     paired: %.0f%% of %s (median of per-pair ratios, kernel and limit "
            "measured back to back)\n",
            paired->second.value, key[11] == 'r' ? "read bandwidth" : "FMA peak");
      }
      if (read_cpu_gbps_ > 0 && fma_cpu_gflops_ > 0 && cpu_factor > 0) {
        std::printf("     cpu-time: %.2f GB/s = %.0f%% of %.2f, %.2f GFLOP/s = %.0f%% of %.2f\n",
                    gb->second.value * cpu_factor,
                    100.0 * gb->second.value * cpu_factor / read_cpu_gbps_, read_cpu_gbps_,
                    gf->second.value * cpu_factor,
                    100.0 * gf->second.value * cpu_factor / fma_cpu_gflops_, fma_cpu_gflops_);
      }
    }
  }

 private:
  double read_cpu_gbps_ = 0;
  double fma_cpu_gflops_ = 0;
};

}  // namespace
}  // namespace deepinfer::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  deepinfer::kernels::MeasureLimits();
  deepinfer::kernels::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
