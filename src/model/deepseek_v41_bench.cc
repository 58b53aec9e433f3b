// DeepSeek-V4.1 on the `bench` preset (make-test-model --arch deepseek_v41 --preset bench: 12
// layers + 1 DSpark stage, hidden 1024, 64 FP4 experts top-6; decoder layers 7-11 after the
// last KV source 6), run by `make bench`:
//   - BM_DsV41Prefill/compact|none: prefill tokens/s of one 1024-token prompt (LogitsMode::kLast)
//     with decoder-side bounded replay (compact, keep 140) and without (none), in one process so
//     the ratio is measured under the same load;
//   - BM_DsV41DecodeBatch1: decode tokens/s next to the active-weight roofline, read bandwidth /
//     bytes of active weights per token (same method as deepseek_v4_bench.cc);
//   - BM_DsV41DecodeBatch/1|16: decode tokens/s of 1 and 16 sequences stepped together;
//   - rss_MB: resident set after loading and one forward (weights mapped from the file and any
//     load-time copies).
// The checkpoint is generated into the build directory on first run.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/thread_pool.h"
#include "model/bench_testing.h"
#include "model/deepseek_v41.h"
#include "model/deepseek_v41_make_test_model.h"
#include "model/deepseek_v41_session_testing.h"

namespace deepinfer::model::dsv41 {
namespace {

constexpr int64_t kPrompt = 1024;

using bench::RssMb;

std::vector<int32_t> Prompt(int64_t n) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(100 + (i * 7919) % 120000);
  return p;
}

DeepseekV41Model* BenchModel() {
  static DeepseekV41Model* model = [] {
    const std::string dir = DSV41_BENCH_DIR;
    if (!std::filesystem::exists(dir + "/model.safetensors")) {
      auto config = TestModelConfigJson41("bench");
      CHECK(config.ok());
      CHECK(WriteTestModel41(*config, 1, dir).ok());
    }
    LoadOptions o;
    o.show_progress = false;
    auto m = LoadDeepseekV41(dir, o);
    CHECK(m.ok()) << m.status();
    return static_cast<DeepseekV41Model*>(m->release());
  }();
  return model;
}

using bench::ReadBandwidth;

void BM_DsV41Prefill(benchmark::State& state) {
  DeepseekV41Model* model = BenchModel();
  const bool compact = state.range(0) == 1;
  model->set_prefill_truncation(compact, 140);
  const std::vector<int32_t> prompt = Prompt(kPrompt);
  for (auto _ : state) {
    state.PauseTiming();
    Session s(model, kPrompt + 8);
    state.ResumeTiming();
    auto logits = s.Feed(prompt, 0, 0, {}, LogitsMode::kLast);
    CHECK(logits.ok()) << logits.status();
    benchmark::DoNotOptimize(logits->data());
  }
  state.counters["tok_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kPrompt), benchmark::Counter::kIsRate);
  state.counters["keep"] = static_cast<double>(model->prefill_truncation_keep());
  state.counters["rss_MB"] = RssMb();
  state.SetLabel(compact ? "compact" : "none");
  model->set_prefill_truncation(true, 140);
}
BENCHMARK(BM_DsV41Prefill)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DsV41DecodeBatch1(benchmark::State& state) {
  DeepseekV41Model* model = BenchModel();
  const int64_t kMax = 1024;
  auto session = std::make_unique<Session>(model, kMax);
  const std::vector<int32_t> prompt = Prompt(64);
  int64_t pos = 64;
  CHECK(session->Feed(prompt, 0, 0, {}, LogitsMode::kLast).ok());
  int32_t token = 1000;
  for (auto _ : state) {
    if (pos >= kMax) {
      state.PauseTiming();
      session = std::make_unique<Session>(model, kMax);
      CHECK(session->Feed(prompt, 0, 0, {}, LogitsMode::kLast).ok());
      pos = 64;
      state.ResumeTiming();
    }
    auto logits = session->Feed(std::span<const int32_t>(&token, 1), 0, 0, {}, LogitsMode::kLast);
    CHECK(logits.ok());
    ++pos;
    token =
        static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    benchmark::DoNotOptimize(token);
  }
  const double active = static_cast<double>(model->info().active_weight_bytes_per_token);
  const double bw = ReadBandwidth();
  state.counters["tok_per_s"] = benchmark::Counter(state.iterations(), benchmark::Counter::kIsRate);
  state.counters["roofline_ratio"] =
      benchmark::Counter(state.iterations() * active / bw, benchmark::Counter::kIsRate);
  state.counters["active_MB"] = active / 1e6;
  state.counters["read_GBps"] = bw / 1e9;
  state.counters["roofline_tok_per_s"] = bw / active;
  state.counters["params_M"] = model->info().num_parameters / 1e6;
  state.counters["rss_MB"] = RssMb();
}
BENCHMARK(BM_DsV41DecodeBatch1)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();

// Decode tokens/s of `range(0)` sequences stepped together (one chunk of one token each per
// forward, as the engine batches decode): with one weight pass per step, 16 sequences cost far
// less than 16 single-sequence steps (the ratio tok_per_s(16) / tok_per_s(1) shows it).
void BM_DsV41DecodeBatch(benchmark::State& state) {
  DeepseekV41Model* model = BenchModel();
  const int B = static_cast<int>(state.range(0));
  const int64_t kMax = 512, kStart = 64;
  const std::vector<int32_t> prompt = Prompt(kStart);
  std::unique_ptr<Session> session;
  int64_t pos = kMax;
  std::vector<int32_t> tokens(B);
  for (auto _ : state) {
    if (pos >= kMax) {
      state.PauseTiming();
      session = std::make_unique<Session>(model, kMax, B);
      for (int b = 0; b < B; ++b) {
        CHECK(session->Feed(prompt, 0, b, {}, LogitsMode::kLast).ok());
        tokens[b] = 1000 + 37 * b;
      }
      pos = kStart;
      state.ResumeTiming();
    }
    ForwardBatch batch;
    for (int b = 0; b < B; ++b) {
      SequenceChunk c;
      c.start_pos = pos;
      c.tokens = std::span<const int32_t>(&tokens[b], 1);
      c.block_table = session->table(b);
      c.state_slot = b;
      c.logits = LogitsMode::kLast;
      batch.chunks.push_back(c);
    }
    ForwardOutput out;
    CHECK(model->Forward(batch, session->view(), &out).ok());
    const int64_t V = model->info().vocab_size;
    for (int b = 0; b < B; ++b) {
      const float* row = out.logits.data() + b * V;
      tokens[b] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
    ++pos;
    benchmark::DoNotOptimize(tokens.data());
  }
  state.counters["tok_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * B, benchmark::Counter::kIsRate);
  state.counters["batch"] = B;
}
BENCHMARK(BM_DsV41DecodeBatch)
    ->Arg(1)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();

}  // namespace
}  // namespace deepinfer::model::dsv41

BENCHMARK_MAIN();
