#include "tools/bench_sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"

namespace deepinfer::cli {
namespace {

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

double Percentile(std::vector<double>& values, double pct) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = pct / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

SweepRow ComputeSweepRow(int max_concurrency, const std::vector<RequestTiming>& requests,
                         int64_t start_ns, int64_t end_ns) {
  SweepRow row;
  row.max_concurrency = max_concurrency;
  row.duration_s = std::max(1e-9, (end_ns - start_ns) * 1e-9);
  std::vector<double> ttft, tpot, itl, e2el, per_user;
  for (const RequestTiming& r : requests) {
    if (r.chunks.empty()) continue;
    ++row.completed;
    int tokens = 0;
    for (const auto& [t, n] : r.chunks) tokens += n;
    row.total_input_tokens += r.prompt_tokens;
    row.total_output_tokens += tokens;
    const int64_t first = r.chunks.front().first;
    ttft.push_back((first - r.arrival_ns) * 1e-6);
    e2el.push_back((r.finish_ns - r.arrival_ns) * 1e-6);
    for (size_t i = 1; i < r.chunks.size(); ++i) {
      itl.push_back((r.chunks[i].first - r.chunks[i - 1].first) * 1e-6);
    }
    if (tokens > 1 && r.finish_ns > first) {
      const double decode_ms = (r.finish_ns - first) * 1e-6;
      tpot.push_back(decode_ms / (tokens - 1));
      per_user.push_back((tokens - 1) / (decode_ms * 1e-3));
    }
  }
  row.request_throughput = row.completed / row.duration_s;
  row.input_throughput = row.total_input_tokens / row.duration_s;
  row.output_throughput = row.total_output_tokens / row.duration_s;
  row.total_token_throughput =
      (row.total_input_tokens + row.total_output_tokens) / row.duration_s;
  auto fill = [](std::vector<double>& v, double* mean, double* median, double* p99) {
    *mean = Mean(v);
    *median = Percentile(v, 50);
    *p99 = Percentile(v, 99);
  };
  fill(ttft, &row.mean_ttft_ms, &row.median_ttft_ms, &row.p99_ttft_ms);
  fill(tpot, &row.mean_tpot_ms, &row.median_tpot_ms, &row.p99_tpot_ms);
  fill(itl, &row.mean_itl_ms, &row.median_itl_ms, &row.p99_itl_ms);
  fill(e2el, &row.mean_e2el_ms, &row.median_e2el_ms, &row.p99_e2el_ms);
  row.per_user_output_throughput = Mean(per_user);
  return row;
}

std::string SweepCsvHeader() {
  return "max_concurrency,completed,duration,total_input_tokens,total_output_tokens,"
         "request_throughput,input_throughput,output_throughput,total_token_throughput,"
         "mean_ttft_ms,median_ttft_ms,p99_ttft_ms,mean_tpot_ms,median_tpot_ms,p99_tpot_ms,"
         "mean_itl_ms,median_itl_ms,p99_itl_ms,mean_e2el_ms,median_e2el_ms,p99_e2el_ms,"
         "per_user_output_throughput";
}

std::string SweepCsvLine(const SweepRow& r) {
  return absl::StrFormat(
      "%d,%d,%.4f,%d,%d,%.4f,%.2f,%.2f,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
      "%.3f,%.3f,%.2f",
      r.max_concurrency, r.completed, r.duration_s, r.total_input_tokens, r.total_output_tokens,
      r.request_throughput, r.input_throughput, r.output_throughput, r.total_token_throughput,
      r.mean_ttft_ms, r.median_ttft_ms, r.p99_ttft_ms, r.mean_tpot_ms, r.median_tpot_ms,
      r.p99_tpot_ms, r.mean_itl_ms, r.median_itl_ms, r.p99_itl_ms, r.mean_e2el_ms,
      r.median_e2el_ms, r.p99_e2el_ms, r.per_user_output_throughput);
}

absl::StatusOr<std::vector<RequestTiming>> RunConcurrencyLevel(
    engine::LLM& llm, const std::vector<std::vector<int32_t>>& prompts,
    const engine::SamplingParams& params, int max_concurrency) {
  const int n = static_cast<int>(prompts.size());
  std::vector<RequestTiming> out(n);
  struct Active {
    int index;
    std::shared_ptr<engine::RequestStream> stream;
  };
  std::vector<Active> active;
  int next = 0;
  auto launch = [&]() -> absl::Status {
    absl::StatusOr<std::vector<std::shared_ptr<engine::RequestStream>>> s =
        llm.Submit({prompts[next]}, {params});
    if (!s.ok()) return s.status();
    out[next].prompt_tokens = static_cast<int>(prompts[next].size());
    active.push_back({next, (*s)[0]});
    ++next;
    return absl::OkStatus();
  };
  while (next < n && static_cast<int>(active.size()) < max_concurrency) {
    if (absl::Status s = launch(); !s.ok()) return s;
  }
  // Message times come from the engine (now_ns), so this polling loop's latency does not enter
  // the metrics; it only delays the start of a replacement request by up to ~0.2 ms.
  while (!active.empty()) {
    bool any = false;
    for (size_t a = 0; a < active.size();) {
      RequestTiming& t = out[active[a].index];
      for (engine::StepOutput& m : active[a].stream->Drain()) {
        any = true;
        if (!m.error.ok()) return m.error;
        t.arrival_ns = m.arrival_ns;
        if (!m.token_ids.empty()) {
          t.chunks.emplace_back(m.now_ns, static_cast<int>(m.token_ids.size()));
        }
        if (m.finish) t.finish_ns = m.now_ns;
      }
      if (active[a].stream->finished() && t.finish_ns != 0) {
        active.erase(active.begin() + a);
        if (next < n) {
          if (absl::Status s = launch(); !s.ok()) return s;
        }
      } else {
        ++a;
      }
    }
    if (!any) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return out;
}

absl::Status PlotSweep(const std::string& csv_path, const std::string& plot_path,
                       const std::string& title) {
  auto ends_with = [&](const char* ext) {
    const std::string e(ext);
    return plot_path.size() > e.size() &&
           plot_path.compare(plot_path.size() - e.size(), e.size(), e) == 0;
  };
  std::string terminal;
  if (ends_with(".png")) {
    terminal = "pngcairo size 900,600";
  } else if (ends_with(".svg")) {
    terminal = "svg size 900,600";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--sweep-plot: '", plot_path, "' must end in .png or .svg"));
  }
  const std::string script_path = plot_path + ".gp";
  {
    std::ofstream gp(script_path, std::ios::binary);
    // Columns: 1 max_concurrency, 9 total_token_throughput, 22 per_user_output_throughput.
    gp << "set terminal " << terminal << "\n"
       << "set output '" << plot_path << "'\n"
       << "set datafile separator ','\n"
       << "set title \"" << title << "\" noenhanced\n"
       << "set xlabel 'total tokens/s (input + output)'\n"
       << "set ylabel 'per-user output tokens/s'\n"
       << "set grid\n"
       << "set key off\n"
       << "plot '" << csv_path << "' every ::1 using 9:22 with linespoints pt 7 ps 1.2, \\\n"
       << "     '' every ::1 using 9:22:(sprintf('c=%d', $1)) with labels offset 1.5,0.8\n";
    if (!gp) return absl::InvalidArgumentError(absl::StrCat("cannot write ", script_path));
  }
  const std::string cmd = absl::StrCat("gnuplot '", script_path, "' 2>&1");
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "gnuplot failed (exit status ", rc, ") on ", script_path,
        "; install it with scripts/install-deps.sh (Debian gnuplot-nox)"));
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::cli
