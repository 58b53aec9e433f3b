// `deepinfer bench`: offline throughput and latency of the engine on one model.
//
//   deepinfer bench --model DIR [--prompt-len 128] [--output-len 64] [--batch-sizes 1,8,32]
//                   [--temperatures 0,1] [--no-prefix-caching] [--prefix-cache-mode replay|exact]
//                   [--snapshot-memory 1G]
// For each batch size B and temperature T, submits B requests of random prompt ids at once
// (temperature T with top-p 1 and top-k off — T = 0 is greedy —, seeded, ignore_eos, exactly
// output-len tokens each) and prints one table row, plus the sampled-to-greedy TPOT ratio (the
// cost of sampling, which greedy-only benchmarks never show):
//   prompt tok/s  = B * prompt-len / (time until the last request's first token)
//   output tok/s  = B * output-len / (time until the last request finished)
//   TTFT          = mean time from submission to a request's first token
//   TPOT          = mean time per output token after the first
// Each batch size is run once after one untimed warm-up request.
//
//   deepinfer bench --model DIR --sweep [--sweep-concurrency 1,2,4,8,16,32] [--sweep-rounds 2]
//                   [--sweep-csv bench_sweep.csv] [--sweep-plot bench_sweep.png|.svg|none]
// runs concurrency * rounds requests at each level, at most `concurrency` in flight (streamed,
// so inter-token latencies are seen), at the first of --temperatures, and writes one CSV row per
// level with vLLM's / SGLang's metric names (tools/bench_sweep.h) and a gnuplot Pareto plot of
// per-user against total tokens/s.
//
//   --trace FILE  writes a Chrome-trace JSON of the timed engine steps (schedule, step, forward,
//                 sample, post_process; src/engine/step_trace.h) for chrome://tracing / Perfetto.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "engine/llm.h"
#include "engine/step_trace.h"
#include "model/model.h"
#include "tools/bench_sweep.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/engine_flags.h"

namespace deepinfer::cli {
namespace {

int BenchFail(const absl::Status& s) {
  std::fprintf(stderr, "deepinfer bench: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int RunBench(int argc, char** argv) {
  FlagSet flags("bench");
  flags.AddString("model", "", "Hugging Face model directory (config.json + *.safetensors)");
  flags.AddString("prompt-len", "128", "prompt tokens per request");
  flags.AddString("output-len", "64", "generated tokens per request");
  flags.AddString("batch-sizes", "1,8,32", "comma-separated numbers of concurrent requests");
  flags.AddString("temperatures", "0,1",
                  "comma-separated sampling temperatures (0 = greedy), top-p 1, top-k off");
  flags.AddString("kv-memory-mb", "1024", "KV cache budget in MiB (blocks + state slots)");
  flags.AddString("max-num-batched-tokens", "2048", "token budget per engine step");
  flags.AddBool("no-async-scheduling", false, "plan the next step only after the current one");
  flags.AddBool("sweep", false, "sweep concurrency levels, write a CSV and a Pareto plot");
  flags.AddString("sweep-concurrency", "1,2,4,8,16,32", "comma-separated concurrency levels");
  flags.AddString("sweep-rounds", "2", "requests per level = concurrency x rounds");
  flags.AddString("sweep-csv", "bench_sweep.csv", "CSV file written by --sweep");
  flags.AddString("sweep-plot", "bench_sweep.png",
                  "Pareto plot written by --sweep (.png or .svg; 'none' to skip)");
  flags.AddString("trace", "", "write a Chrome-trace JSON of the timed engine steps to FILE");
  AddPrefixCacheFlags(flags);
  if (std::optional<int> exit_code = flags.ParseCommandLine(argc, argv)) return *exit_code;
  absl::StatusOr<int64_t> prompt_len = flags.GetInt("prompt-len");
  absl::StatusOr<int64_t> output_len = flags.GetInt("output-len");
  absl::StatusOr<int64_t> kv_mb = flags.GetInt("kv-memory-mb");
  absl::StatusOr<int64_t> budget = flags.GetInt("max-num-batched-tokens");
  absl::StatusOr<std::vector<int32_t>> batches = flags.GetIntList("batch-sizes");
  std::vector<float> temperatures;
  for (absl::string_view t : absl::StrSplit(flags.GetString("temperatures"), ',')) {
    float value = 0.0f;
    if (!absl::SimpleAtof(absl::StripAsciiWhitespace(t), &value) || !(value >= 0.0f) ||
        value > 100.0f) {
      std::fprintf(stderr, "deepinfer bench: --temperatures: '%s' is not a temperature in [0, 100]\n",
                   std::string(t).c_str());
      return 2;
    }
    temperatures.push_back(value);
  }
  for (const absl::Status& s : {prompt_len.status(), output_len.status(), kv_mb.status(),
                                budget.status(), batches.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "deepinfer bench: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  if (flags.GetString("model").empty() || *prompt_len < 1 || *output_len < 1 || batches->empty() ||
      *std::min_element(batches->begin(), batches->end()) < 1) {
    std::fprintf(stderr,
                 "deepinfer bench: --model is required; lengths and batch sizes must be >= 1\n\n%s",
                 flags.Usage().c_str());
    return 2;
  }

  model::LoadOptions load_options;
  absl::StatusOr<std::unique_ptr<model::CausalLM>> loaded =
      model::LoadModel(flags.GetString("model"), load_options);
  if (!loaded.ok()) return BenchFail(loaded.status());
  const model::ModelInfo info = (*loaded)->info();
  engine::EngineConfig config;
  if (absl::Status s = ApplyPrefixCacheFlags(flags, &config); !s.ok()) {
    std::fprintf(stderr, "deepinfer bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  config.kv_memory_bytes = *kv_mb << 20;
  const bool sweep = flags.GetBool("sweep");
  absl::StatusOr<std::vector<int32_t>> levels = flags.GetIntList("sweep-concurrency");
  absl::StatusOr<int64_t> rounds = flags.GetInt("sweep-rounds");
  if (sweep && (!levels.ok() || levels->empty() ||
                *std::min_element(levels->begin(), levels->end()) < 1 || !rounds.ok() ||
                *rounds < 1)) {
    std::fprintf(stderr,
                 "deepinfer bench: --sweep-concurrency needs integers >= 1 and --sweep-rounds an "
                 "integer >= 1\n");
    return 2;
  }
  const std::string plot_path = flags.GetString("sweep-plot");
  if (sweep && plot_path != "none" && !absl::EndsWith(plot_path, ".png") &&
      !absl::EndsWith(plot_path, ".svg")) {
    std::fprintf(stderr, "deepinfer bench: --sweep-plot '%s' must end in .png or .svg (or be none)\n",
                 plot_path.c_str());
    return 2;
  }
  config.max_num_seqs = sweep ? *std::max_element(levels->begin(), levels->end())
                              : *std::max_element(batches->begin(), batches->end());
  config.max_num_batched_tokens = static_cast<int>(*budget);
  config.async_scheduling = !flags.GetBool("no-async-scheduling");
  absl::StatusOr<std::unique_ptr<engine::LLM>> llm =
      engine::LLM::Create(std::move(*loaded), config);
  if (!llm.ok()) return BenchFail(llm.status());

  std::mt19937 rng(1234);
  auto make_prompts = [&](int count) {
    std::vector<std::vector<int32_t>> prompts(count);
    for (auto& p : prompts) {
      p.resize(*prompt_len);
      for (int32_t& t : p) t = static_cast<int32_t>(3 + rng() % (info.vocab_size - 3));
    }
    return prompts;
  };
  engine::SamplingParams params;
  params.temperature = 0.0f;
  params.ignore_eos = true;
  params.max_tokens = static_cast<int>(*output_len);
  // Warm-up (page in weights, size buffers).
  if (auto w = (*llm)->Generate(make_prompts(1), params); !w.ok()) return BenchFail(w.status());

  const std::string trace_path = flags.GetString("trace");
  if (!trace_path.empty()) engine::StepTrace::Get().Start();
  auto finish_trace = [&]() -> int {
    if (trace_path.empty()) return 0;
    engine::StepTrace::Get().Stop();
    if (absl::Status s = engine::StepTrace::Get().WriteJson(trace_path); !s.ok()) {
      return BenchFail(s);
    }
    std::fprintf(stderr, "wrote trace %s (%zu spans)\n", trace_path.c_str(),
                 engine::StepTrace::Get().Events().size());
    return 0;
  };
  if (sweep) {
    params.temperature = temperatures.empty() ? 0.0f : temperatures[0];
    params.seed = 1;
    const std::string csv_path = flags.GetString("sweep-csv");
    std::FILE* csv = std::fopen(csv_path.c_str(), "w");
    if (csv == nullptr) {
      std::fprintf(stderr, "deepinfer bench: --sweep-csv: cannot write '%s'\n", csv_path.c_str());
      return 2;
    }
    std::fprintf(csv, "%s\n", SweepCsvHeader().c_str());
    std::printf("%s\n", SweepCsvHeader().c_str());
    for (int c : *levels) {
      const auto prompts = make_prompts(static_cast<int>(c * *rounds));
      const int64_t start = MonotonicNanos();
      absl::StatusOr<std::vector<RequestTiming>> timings =
          RunConcurrencyLevel(**llm, prompts, params, c);
      const int64_t end = MonotonicNanos();
      if (!timings.ok()) {
        std::fclose(csv);
        return BenchFail(timings.status());
      }
      const std::string line = SweepCsvLine(ComputeSweepRow(c, *timings, start, end));
      std::fprintf(csv, "%s\n", line.c_str());
      std::fflush(csv);
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    std::fclose(csv);
    if (int rc = finish_trace(); rc != 0) return rc;
    if (plot_path != "none") {
      const std::string title =
          absl::StrCat(info.architecture, ", prompt ", *prompt_len, ", output ", *output_len,
                       ", temperature ", params.temperature);
      if (absl::Status s = PlotSweep(csv_path, plot_path, title); !s.ok()) return BenchFail(s);
      std::fprintf(stderr, "wrote %s and %s\n", csv_path.c_str(), plot_path.c_str());
    }
    return 0;
  }
  std::printf("model %s (%s), prompt %lld, output %lld, %s scheduling\n",
              flags.GetString("model").c_str(), info.architecture.c_str(),
              static_cast<long long>(*prompt_len), static_cast<long long>(*output_len),
              config.async_scheduling ? "async" : "sync");
  std::printf("| batch | temp | prompt tok/s | output tok/s | TTFT ms | TPOT ms | wall s |\n");
  std::printf("|------:|-----:|-------------:|-------------:|--------:|--------:|-------:|\n");
  for (int b : *batches) {
    const auto prompts = make_prompts(b);
    double greedy_tpot = 0.0;
    for (float temperature : temperatures) {
      params.temperature = temperature;
      params.seed = 1;
      const int64_t start = MonotonicNanos();
      absl::StatusOr<std::vector<engine::GenerateOutput>> out = (*llm)->Generate(prompts, params);
      const int64_t end = MonotonicNanos();
      if (!out.ok()) return BenchFail(out.status());
      double ttft_sum = 0, tpot_sum = 0;
      int64_t last_first = start;
      int tpot_n = 0;
      for (const auto& o : *out) {
        const auto& s = o.samples[0];
        ttft_sum += (s.first_token_ns - o.arrival_ns) * 1e-6;
        last_first = std::max(last_first, s.first_token_ns);
        if (s.token_ids.size() > 1) {
          tpot_sum += (s.finish_ns - s.first_token_ns) * 1e-6 / (s.token_ids.size() - 1);
          ++tpot_n;
        }
      }
      const double prefill_s = (last_first - start) * 1e-9;
      const double wall_s = (end - start) * 1e-9;
      const double tpot = tpot_n > 0 ? tpot_sum / tpot_n : 0.0;
      if (temperature == 0.0f) greedy_tpot = tpot;
      std::printf("| %5d | %4.2g | %12.1f | %12.1f | %7.2f | %7.2f | %6.2f |", b, temperature,
                  b * *prompt_len / std::max(prefill_s, 1e-9), b * *output_len / wall_s,
                  ttft_sum / b, tpot, wall_s);
      if (temperature != 0.0f && greedy_tpot > 0.0) {
        std::printf(" TPOT %.2fx greedy", tpot / greedy_tpot);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return finish_trace();
}

}  // namespace deepinfer::cli
