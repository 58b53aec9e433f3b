// Batched MoE decode at the kernel level (issue #30 "Batched MoE decode"): one expert-shaped
// Linear (MXFP4 in the layout the loader gives the kernels, and FP8) called with M = the tokens
// routed to that expert in a decode step, M = 1..64, rotating through weight copies larger than
// 4x the last-level cache so every call reads its weights from memory. If the weights are read
// once per call for all M rows, the time per call grows far slower than M while M is small
// (memory-bound); if they are re-read per row group it grows with M. Reports per call: time,
// time relative to M = 1 measured in the same run (`vs_m1`), and weight bytes read per second.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/clock.h"
#include "common/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/workspace.h"

namespace deepinfer::kernels {
namespace {

// 4x the last-level cache (sysfs), at least 256 MiB.
size_t RotationBytes() {
  size_t llc = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    size_t v = std::stoull(s);
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    llc = std::max(llc, v);
  }
  return std::max<size_t>(4 * llc, size_t{256} << 20);
}

struct Expert {
  std::vector<uint8_t> data, scales;
  Mxfp4LanePack lanes;
  WeightView view;
};

std::vector<Expert>& Experts(WeightDType dtype, int64_t N, int64_t K) {
  static std::vector<Expert> mxfp4, fp8;
  std::vector<Expert>& set = dtype == WeightDType::kMXFP4 ? mxfp4 : fp8;
  if (!set.empty()) return set;
  const int64_t bytes = WeightDataBytes(dtype, N, K) + WeightScaleCount(dtype, N, K);
  const int64_t copies = static_cast<int64_t>(RotationBytes()) / bytes + 1;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> byte(0, 255), exp(118, 126);
  set.resize(copies);
  for (Expert& e : set) {
    e.data.resize(WeightDataBytes(dtype, N, K));
    e.scales.resize(WeightScaleCount(dtype, N, K));
    for (auto& b : e.data) b = static_cast<uint8_t>(byte(rng) & 0xF7);  // no FP8 NaN codes
    for (auto& b : e.scales) b = static_cast<uint8_t>(exp(rng));
    e.view = WeightView{dtype, e.data.data(), e.scales.data(), ScaleDType::kE8M0, N, K};
    // As the model loader does: MXFP4 in the lane layout where the kernels read it.
    if (dtype == WeightDType::kMXFP4 && UsesMxfp4Lanes() && PackMxfp4Lanes(e.view, &e.lanes)) {
      e.view = WithLanes(e.view, e.lanes);
    }
  }
  return set;
}

double SecondsPerCall(WeightDType dtype, int64_t M, int64_t N, int64_t K, int calls) {
  std::vector<Expert>& set = Experts(dtype, N, K);
  std::vector<float> x(M * K), y(M * N);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  LinearOptions opt;
  opt.quantize_activations = true;
  Workspace ws;
  ThreadPool* pool = ThreadPool::Default();
  const size_t bytes = LinearWorkspaceBytes(M, set[0].view, opt, pool);
  void* w = ws.Get(bytes);
  size_t c = 0;
  const int64_t t0 = MonotonicNanos();
  for (int i = 0; i < calls; ++i) {
    Linear(x.data(), M, set[c].view, y.data(), opt, pool, w, bytes);
    c = (c + 1) % set.size();
  }
  benchmark::DoNotOptimize(y.data());
  return static_cast<double>(MonotonicNanos() - t0) * 1e-9 / calls;
}

void Run(benchmark::State& state, WeightDType dtype) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  for (auto _ : state) {
    // Paired with M = 1 in the same iteration: this host's speed drifts with other tenants.
    const double t1 = SecondsPerCall(dtype, 1, N, K, 20);
    const double tm = SecondsPerCall(dtype, M, N, K, 20);
    state.SetIterationTime(tm);
    state.counters["vs_m1"] = tm / t1;
    state.counters["ms_per_call"] = tm * 1e3;
    state.counters["weight_GBps"] =
        (WeightDataBytes(dtype, N, K) + WeightScaleCount(dtype, N, K)) / tm / 1e9;
  }
}

void BM_ExpertMxfp4(benchmark::State& s) { Run(s, WeightDType::kMXFP4); }
void BM_ExpertFp8(benchmark::State& s) { Run(s, WeightDType::kFP8Block); }

// An expert's gate / up projection at the DeepSeek-V4 `bench` preset's scale: 2048 x 4096.
void ExpertArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 2, 4, 8, 16, 32, 64}) b->Args({m, 2048, 4096});
  b->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_ExpertMxfp4)->Apply(ExpertArgs);
BENCHMARK(BM_ExpertFp8)->Apply(ExpertArgs);

}  // namespace
}  // namespace deepinfer::kernels

BENCHMARK_MAIN();
