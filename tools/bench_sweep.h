// `deepinfer bench --sweep`: runs the engine at several concurrency levels and reports, per
// level, the serving metrics under the names vLLM's `vllm bench serve` (request_throughput,
// output_throughput, total_token_throughput, {mean,median,p99}_{ttft,tpot,itl,e2el}_ms) and
// SGLang's `bench_serving` (input_throughput) use, so a CSV row compares with their result files
// column for column, plus per_user_output_throughput (tokens/s one stream sees after its first
// token) for the Pareto plot of per-user against total throughput (issue #30).
#ifndef DEEPINFER_TOOLS_BENCH_SWEEP_H_
#define DEEPINFER_TOOLS_BENCH_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/llm.h"

namespace deepinfer::cli {

// What one request saw (MonotonicNanos clock).
struct RequestTiming {
  int64_t arrival_ns = 0;
  int prompt_tokens = 0;
  // (time, new tokens) per streamed message that carried tokens, in order.
  std::vector<std::pair<int64_t, int>> chunks;
  int64_t finish_ns = 0;
};

// One concurrency level's metrics (times in ms, throughputs per second).
struct SweepRow {
  int max_concurrency = 0;
  int completed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0, input_throughput = 0, output_throughput = 0,
         total_token_throughput = 0;
  double mean_ttft_ms = 0, median_ttft_ms = 0, p99_ttft_ms = 0;
  double mean_tpot_ms = 0, median_tpot_ms = 0, p99_tpot_ms = 0;
  double mean_itl_ms = 0, median_itl_ms = 0, p99_itl_ms = 0;
  double mean_e2el_ms = 0, median_e2el_ms = 0, p99_e2el_ms = 0;
  // Mean over requests of (output tokens - 1) / (finish - first token); 0 when none qualifies.
  double per_user_output_throughput = 0;
};

// Computes the metrics of `requests`, run between start_ns and end_ns. TTFT: first chunk -
// arrival; TPOT: (finish - first token) / (tokens - 1) per request with >= 2 tokens; ITL: the
// gaps between consecutive token-carrying messages (a message with k tokens counts its gap once,
// as vLLM does for multi-token chunks); percentiles by linear interpolation (numpy's default).
SweepRow ComputeSweepRow(int max_concurrency, const std::vector<RequestTiming>& requests,
                         int64_t start_ns, int64_t end_ns);

// The linear-interpolation percentile (0..100) of `values` (sorted in place); 0 when empty.
double Percentile(std::vector<double>& values, double pct);

// CSV header line and one row (no trailing newline), comma-separated, same column order.
std::string SweepCsvHeader();
std::string SweepCsvLine(const SweepRow& row);

// Submits `num_requests` prompts through LLM::Submit (streams, so per-message times are seen),
// at most `max_concurrency` in flight (a new one starts when one finishes), and returns each
// request's timings. Errors: the first Submit / stream error.
absl::StatusOr<std::vector<RequestTiming>> RunConcurrencyLevel(
    engine::LLM& llm, const std::vector<std::vector<int32_t>>& prompts,
    const engine::SamplingParams& params, int max_concurrency);

// Writes a gnuplot script plotting `csv_path` (per_user_output_throughput against
// total_token_throughput, points labelled with their concurrency) to `plot_path` (.png or .svg,
// by extension) and runs `gnuplot`. Errors: InvalidArgument for another extension; Unavailable
// when gnuplot is not installed or fails (the message has its exit status).
absl::Status PlotSweep(const std::string& csv_path, const std::string& plot_path,
                       const std::string& title);

}  // namespace deepinfer::cli

#endif  // DEEPINFER_TOOLS_BENCH_SWEEP_H_
