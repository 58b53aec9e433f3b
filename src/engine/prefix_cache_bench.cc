// Prefix-cache benefit on a multi-turn chat (issue "KV cache system, part 2"): time to first
// token of turn 4 of a chat with a 2,000-token system prompt on the DeepSeek-V4 `bench` preset,
// with the prefix cache against --no-prefix-caching, measured in the same run and printed as a
// ratio, with the prompt tokens each run computed for that turn. Turn k's prompt is the system
// prompt, then turns 1..k-1 (a 60-token user message and the model's 8-token greedy reply each),
// then turn k's user message, so each turn extends the previous one, as a chat template does.
// The checkpoint is generated into the build directory on first use (shared with
// deepseek_v4_bench).
#include <filesystem>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/check.h"
#include "engine/engine.h"
#include "engine/llm.h"
#include "model/deepseek_v4_make_test_model.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

std::unique_ptr<LLM> BenchLLM(bool prefix_caching) {
  const std::string dir = DSV4_BENCH_DIR;
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    auto config = model::dsv4::TestModelPreset("bench");
    CHECK(config.ok());
    CHECK(model::dsv4::WriteTestModel(*config, 1, dir).ok());
  }
  auto m = model::LoadModel(dir, model::LoadOptions{});
  CHECK(m.ok()) << m.status();
  EngineConfig config;
  config.enable_prefix_caching = prefix_caching;
  config.kv_memory_bytes = int64_t{2} << 30;
  config.max_num_batched_tokens = 2048;
  auto llm = LLM::Create(std::move(*m), config);
  CHECK(llm.ok()) << llm.status();
  return std::move(*llm);
}

struct TurnResult {
  double ttft_s = 0;
  int64_t computed = 0;  // prompt tokens the engine computed for this turn
  int cached = 0;
};

// Runs the 4 turns; returns turn 4's result. `prompts_out` receives each turn's prompt so that
// the uncached run can replay exactly the same turn 4.
TurnResult RunChat(LLM* llm, int turns, std::vector<std::vector<int32_t>>* prompts_out) {
  const int64_t vocab = llm->engine().model_info().vocab_size;
  std::mt19937 rng(99);
  auto random = [&](int n) {
    std::vector<int32_t> v(n);
    for (int32_t& t : v) t = 3 + static_cast<int32_t>(rng() % (vocab - 3));
    return v;
  };
  std::vector<int32_t> prompt = random(2000);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 8;
  p.ignore_eos = true;
  TurnResult r;
  for (int turn = 1; turn <= turns; ++turn) {
    const std::vector<int32_t> user = random(60);
    prompt.insert(prompt.end(), user.begin(), user.end());
    prompts_out->push_back(prompt);
    const int64_t before = llm->engine().Stats().total_prompt_tokens;
    auto out = llm->Generate({prompt}, p);
    CHECK(out.ok()) << out.status();
    const SampleOutput& s = (*out)[0].samples[0];
    r.ttft_s = static_cast<double>(s.first_token_ns - (*out)[0].arrival_ns) * 1e-9;
    r.computed = llm->engine().Stats().total_prompt_tokens - before;
    r.cached = s.cached_tokens;
    prompt.insert(prompt.end(), s.token_ids.begin(), s.token_ids.end());
  }
  return r;
}

void BM_ChatTurn4TimeToFirstToken(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<std::vector<int32_t>> prompts;
    auto cached_llm = BenchLLM(true);
    const TurnResult cached = RunChat(cached_llm.get(), 4, &prompts);
    cached_llm.reset();
    auto plain_llm = BenchLLM(false);
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 8;
    p.ignore_eos = true;
    const int64_t before = plain_llm->engine().Stats().total_prompt_tokens;
    auto out = plain_llm->Generate({prompts.back()}, p);
    CHECK(out.ok());
    const double uncached_ttft =
        static_cast<double>((*out)[0].samples[0].first_token_ns - (*out)[0].arrival_ns) * 1e-9;
    const int64_t uncached_computed = plain_llm->engine().Stats().total_prompt_tokens - before;
    state.counters["turn4_prompt_tokens"] = static_cast<double>(prompts.back().size());
    state.counters["cached_tokens"] = cached.cached;
    state.counters["computed_cached"] = static_cast<double>(cached.computed);
    state.counters["computed_uncached"] = static_cast<double>(uncached_computed);
    state.counters["ttft_cached_ms"] = cached.ttft_s * 1e3;
    state.counters["ttft_uncached_ms"] = uncached_ttft * 1e3;
    state.counters["ttft_speedup"] = uncached_ttft / cached.ttft_s;
  }
}
BENCHMARK(BM_ChatTurn4TimeToFirstToken)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace deepinfer::engine

BENCHMARK_MAIN();
