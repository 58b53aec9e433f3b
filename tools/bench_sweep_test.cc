// bench --sweep pieces: the metric arithmetic on hand-made timings (values derived by hand), a
// real two-level sweep on stories260K (CSV shape and invariants that hold for any speed), and the
// gnuplot script when gnuplot is installed.
#include "tools/bench_sweep.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "engine/step_trace.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace deepinfer::cli {
namespace {

namespace fs = std::filesystem;
const std::string kStories = std::string(DEEPINFER_SHARED_DIR) + "/models/stories260K";
constexpr int64_t kMs = 1'000'000;

TEST(BenchSweepTest, PercentileInterpolatesLikeNumpy) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);  // 1 + 0.99 * 3 = rank 2.97
  std::vector<double> empty;
  EXPECT_EQ(Percentile(empty, 50), 0);
}

TEST(BenchSweepTest, MetricsOfHandMadeTimings) {
  // Request A: arrives at 0, tokens at 10, 20, 30 ms (one each), finishes at 30 ms.
  // Request B: arrives at 0, tokens at 20 ms (1) and 40 ms (2), finishes at 40 ms.
  RequestTiming a{0, 5, {{10 * kMs, 1}, {20 * kMs, 1}, {30 * kMs, 1}}, 30 * kMs};
  RequestTiming b{0, 7, {{20 * kMs, 1}, {40 * kMs, 2}}, 40 * kMs};
  const SweepRow r = ComputeSweepRow(2, {a, b}, 0, 50 * kMs);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.total_input_tokens, 12);
  EXPECT_EQ(r.total_output_tokens, 6);
  EXPECT_DOUBLE_EQ(r.duration_s, 0.05);
  EXPECT_DOUBLE_EQ(r.request_throughput, 40.0);
  EXPECT_DOUBLE_EQ(r.output_throughput, 120.0);
  EXPECT_DOUBLE_EQ(r.input_throughput, 240.0);
  EXPECT_DOUBLE_EQ(r.total_token_throughput, 360.0);
  EXPECT_DOUBLE_EQ(r.mean_ttft_ms, 15.0);
  EXPECT_DOUBLE_EQ(r.median_ttft_ms, 15.0);
  // TPOT: A (30-10)/2 = 10, B (40-20)/2 = 10.
  EXPECT_DOUBLE_EQ(r.mean_tpot_ms, 10.0);
  // ITL gaps: A 10, 10; B 20.
  EXPECT_NEAR(r.mean_itl_ms, 40.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(r.median_itl_ms, 10.0);
  EXPECT_DOUBLE_EQ(r.mean_e2el_ms, 35.0);
  EXPECT_DOUBLE_EQ(r.per_user_output_throughput, 100.0);  // 2 tokens / 20 ms each
}

std::vector<std::string> Split(const std::string& s) { return absl::StrSplit(s, ','); }

TEST(BenchSweepTest, TwoLevelSweepOnStories) {
  if (!fs::exists(kStories + "/config.json")) GTEST_SKIP() << kStories << " is absent";
  model::LoadOptions opt;
  opt.show_progress = false;
  auto m = model::LoadModel(kStories, opt);
  ASSERT_TRUE(m.ok()) << m.status();
  engine::EngineConfig config;
  config.kv_memory_bytes = 64 << 20;
  config.max_num_seqs = 4;
  auto llm = engine::LLM::Create(std::move(*m), config);
  ASSERT_TRUE(llm.ok()) << llm.status();
  engine::SamplingParams params;
  params.temperature = 0.0f;
  params.ignore_eos = true;
  params.max_tokens = 6;

  const std::string dir = (fs::temp_directory_path() / ("sweep_" + std::to_string(::getpid())))
                              .string();
  fs::create_directories(dir);
  const std::string csv_path = dir + "/sweep.csv";
  std::ofstream csv(csv_path);
  csv << SweepCsvHeader() << "\n";
  engine::StepTrace::Get().Start();
  for (int c : {1, 4}) {
    std::vector<std::vector<int32_t>> prompts(2 * c, std::vector<int32_t>{1, 50, 60, 70, 80});
    const int64_t start = MonotonicNanos();
    auto t = RunConcurrencyLevel(**llm, prompts, params, c);
    const int64_t end = MonotonicNanos();
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->size(), prompts.size());
    for (const RequestTiming& r : *t) {
      int tokens = 0;
      for (const auto& [ns, n] : r.chunks) {
        tokens += n;
        EXPECT_GE(ns, r.arrival_ns);
        EXPECT_LE(ns, r.finish_ns);
      }
      EXPECT_EQ(tokens, 6);
      EXPECT_GE(r.arrival_ns, start);
      EXPECT_LE(r.finish_ns, end);
    }
    const SweepRow row = ComputeSweepRow(c, *t, start, end);
    EXPECT_EQ(row.completed, 2 * c);
    EXPECT_EQ(row.total_output_tokens, 12 * c);
    EXPECT_EQ(row.total_input_tokens, 10 * c);
    EXPECT_GT(row.per_user_output_throughput, 0);
    EXPECT_LE(row.median_ttft_ms, row.p99_ttft_ms);
    EXPECT_LE(row.median_itl_ms, row.p99_itl_ms);
    EXPECT_LE(row.mean_ttft_ms, row.mean_e2el_ms);
    csv << SweepCsvLine(row) << "\n";
  }
  engine::StepTrace::Get().Stop();
  csv.close();

  // CSV: header with the vLLM / SGLang names, one row per level with as many fields.
  std::ifstream in(csv_path);
  std::string header, line;
  std::getline(in, header);
  const std::vector<std::string> names = Split(header);
  for (const char* want :
       {"max_concurrency", "request_throughput", "input_throughput", "output_throughput",
        "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
        "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
        "per_user_output_throughput"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  int rows = 0;
  while (std::getline(in, line)) {
    EXPECT_EQ(Split(line).size(), names.size()) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 2);

  // The engine spans of that run: every forward and sample lies inside a step of its thread,
  // and spans of one thread never partially overlap.
  const nlohmann::json trace = nlohmann::json::parse(engine::StepTrace::Get().ToJson());
  std::map<int, std::vector<std::pair<double, double>>> by_tid;
  std::map<std::string, int> count;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++count[e["name"].get<std::string>()];
    by_tid[e["tid"].get<int>()].push_back({e["ts"].get<double>(), e["dur"].get<double>()});
  }
  for (const char* name : {"schedule", "step", "forward", "sample", "post_process"}) {
    EXPECT_GT(count[name], 0) << name;
  }
  for (auto& [tid, spans] : by_tid) {
    std::vector<double> open_ends;  // stack of enclosing spans' ends
    for (const auto& [ts, dur] : spans) {  // ToJson sorts by start, parents first
      while (!open_ends.empty() && open_ends.back() <= ts) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(ts + dur, open_ends.back() + 1e-3) << "tid " << tid << " span at " << ts;
      }
      open_ends.push_back(ts + dur);
    }
  }

  // The plot, where gnuplot exists.
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    const std::string png = dir + "/sweep.png";
    absl::Status s = PlotSweep(csv_path, png, "stories260K test");
    ASSERT_TRUE(s.ok()) << s;
    std::ifstream p(png, std::ios::binary);
    char magic[8] = {};
    p.read(magic, 8);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
    const std::string svg = dir + "/sweep.svg";
    ASSERT_TRUE(PlotSweep(csv_path, svg, "stories260K test").ok());
    EXPECT_GT(fs::file_size(svg), 100u);
  }
  EXPECT_FALSE(PlotSweep(csv_path, dir + "/sweep.jpg", "x").ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::cli
