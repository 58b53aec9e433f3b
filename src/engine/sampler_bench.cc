// Sampling cost per sequence for a DeepSeek-V4-size vocabulary (issue "CPU speed": sampling
// one token from 129,280 logits with temperature 1, and with top-p 0.9 / top-k 50, costs
// <= 0.3 ms). The row is shaped like a language model's (a few strong candidates over a
// Gaussian bulk); greedy is listed for comparison. `make bench` runs it.
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/sampler.h"

namespace deepinfer::engine {
namespace {

constexpr int64_t kVocab = 129280;

std::vector<float> Row(float sigma) {
  std::mt19937 rng(7);
  std::normal_distribution<float> bulk(0.0f, sigma);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = bulk(rng);
  std::uniform_int_distribution<int64_t> pick(0, kVocab - 1);
  for (int i = 0; i < 20; ++i) logits[pick(rng)] = 6.0f + bulk(rng);
  return logits;
}

void RunSample(benchmark::State& state, const SamplingParams& params, float sigma) {
  const std::vector<float> logits = Row(sigma);
  const std::vector<int32_t> prompt = {1, 2, 3};
  std::vector<int32_t> output;
  SampleContext ctx;
  ctx.params = &params;
  ctx.prompt = prompt;
  ctx.seed = 11;
  std::vector<float> scratch;
  int64_t step = 0;
  for (auto _ : state) {
    output.resize(step++ % 64);
    ctx.output = output;
    benchmark::DoNotOptimize(Sample(ctx, logits, &scratch).token);
  }
  state.counters["ms_per_sample"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 1e-3,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_SampleGreedy(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.0f;
  RunSample(state, p, 1.0f);
}
void BM_SampleTemperature1(benchmark::State& state) {
  SamplingParams p;
  RunSample(state, p, static_cast<float>(state.range(0)) / 10.0f);
}
void BM_SampleTopP09TopK50(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9f;
  p.top_k = 50;
  RunSample(state, p, static_cast<float>(state.range(0)) / 10.0f);
}
void BM_SampleTopP09(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9f;
  RunSample(state, p, static_cast<float>(state.range(0)) / 10.0f);
}
void BM_SampleWithPenalties(benchmark::State& state) {
  SamplingParams p;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.5f;
  RunSample(state, p, 1.0f);
}

// Argument: the bulk's standard deviation in tenths of a nat (a random model's rows are flat,
// a trained model's peaked).
BENCHMARK(BM_SampleGreedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleTemperature1)->Arg(3)->Arg(10)->Arg(30)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleTopP09TopK50)->Arg(3)->Arg(10)->Arg(30)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleTopP09)->Arg(10)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleWithPenalties)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace deepinfer::engine

BENCHMARK_MAIN();
