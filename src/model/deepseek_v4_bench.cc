// DeepSeek-V4 decode throughput at batch 1 on the `bench` preset (make-test-model, ~1.2 B
// parameters, 64 FP4 experts top-6), next to the roofline: tokens/s <= read bandwidth / bytes of
// active weights read per token (KERNELS.md "Decode is a bandwidth problem"). The checkpoint is
// generated into the build directory on first run (~0.9 GB, tens of seconds).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/thread_pool.h"
#include "model/bench_testing.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v4_make_test_model.h"
#include "model/deepseek_v4_reference.h"

namespace deepinfer::model::dsv4 {
namespace {

DeepseekV4Model* BenchModel() {
  static DeepseekV4Model* model = [] {
    const std::string dir = DSV4_BENCH_DIR;
    if (!std::filesystem::exists(dir + "/model.safetensors")) {
      auto config = TestModelPreset("bench");
      CHECK(config.ok());
      CHECK(WriteTestModel(*config, 1, dir).ok());
    }
    auto m = LoadModel(dir, LoadOptions{});
    CHECK(m.ok()) << m.status();
    return static_cast<DeepseekV4Model*>(m->release());
  }();
  return model;
}

using bench::ReadBandwidth;

void BM_DsV4DecodeBatch1(benchmark::State& state) {
  DeepseekV4Model* model = BenchModel();
  const int64_t kMax = 2048;
  ReferenceSession session(model, kMax);
  std::vector<int32_t> prompt(64);
  std::iota(prompt.begin(), prompt.end(), 100);
  CHECK(session.Feed(prompt, {}, nullptr, LogitsMode::kLast).ok());
  int32_t token = 1000;
  for (auto _ : state) {
    if (session.position() >= kMax) {
      state.PauseTiming();
      session.Reset();
      CHECK(session.Feed(prompt, {}, nullptr, LogitsMode::kLast).ok());
      state.ResumeTiming();
    }
    auto logits = session.Feed(std::span<const int32_t>(&token, 1));
    CHECK(logits.ok());
    token = ArgMax(*logits);
    benchmark::DoNotOptimize(token);
  }
  const double active = static_cast<double>(model->info().active_weight_bytes_per_token);
  const double bw = ReadBandwidth();
  // Wall-clock rates (UseRealTime): decode time includes waiting for the pool's threads.
  state.counters["tok_per_s"] = benchmark::Counter(state.iterations(), benchmark::Counter::kIsRate);
  state.counters["roofline_ratio"] =
      benchmark::Counter(state.iterations() * active / bw, benchmark::Counter::kIsRate);
  state.counters["active_MB"] = active / 1e6;
  state.counters["read_GBps"] = bw / 1e9;
  state.counters["roofline_tok_per_s"] = bw / active;
  state.counters["params_M"] = model->info().num_parameters / 1e6;
}
BENCHMARK(BM_DsV4DecodeBatch1)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

}  // namespace
}  // namespace deepinfer::model::dsv4

BENCHMARK_MAIN();
