// A small Prometheus text-format metrics registry (exposition format 0.0.4): counters, gauges and
// histograms, each optionally split by a fixed set of labels. Transport-level and generic: the
// api/ layer decides which metrics exist, every role renders them on GET /metrics.
//
//   MetricsRegistry registry;
//   Counter* ok = registry.GetCounter("deepinfer_requests_total", "Finished requests.",
//                                     {{"endpoint", "chat"}, {"status", "200"}});
//   ok->Inc();
//   Histogram* ttft = registry.GetHistogram("deepinfer_ttft_seconds", "Time to first token.",
//                                           Histogram::LatencyBucketsSeconds());
//   ttft->Observe(0.012);
//   std::string text = registry.RenderText();
//
// Thread-safety: all methods of all classes are thread-safe. Counter/Gauge/Histogram updates are
// lock-free (atomics); Get*() and RenderText() take the registry mutex. Metric objects are owned
// by the registry and live as long as it; the returned pointers stay valid.
#ifndef DEEPINFER_HTTP_METRICS_H_
#define DEEPINFER_HTTP_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace deepinfer::http {

// Label set of one series, e.g. {{"endpoint", "chat"}, {"status", "200"}}. Order is kept as given.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing value (Prometheus `counter`).
class Counter {
 public:
  // Adds `v` (>= 0; negative values are ignored: counters never go down).
  void Inc(double v = 1.0);
  // Raises the value to `total` when that is larger (smaller values are ignored: counters never
  // go down). For counts kept elsewhere as running totals, e.g. the engine's counters mirrored
  // at each scrape.
  void SetTotal(double total);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that can go up and down (Prometheus `gauge`).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A cumulative histogram (Prometheus `histogram`): upper bounds are given in increasing order;
// an implicit +Inf bucket is added. Observations are counted in the first bucket whose upper
// bound is >= the value (Prometheus `le` semantics).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);

  // Snapshot for rendering/tests: per-bucket (non-cumulative) counts, [bounds + 1] entries.
  std::vector<uint64_t> BucketCounts() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

  // Latency buckets in seconds from 1 ms to 60 s (roughly x2.5 steps), for TTFT / end-to-end.
  static std::vector<double> LatencyBucketsSeconds();
  // Finer buckets from 0.5 ms to 5 s, for inter-token latency (TPOT).
  static std::vector<double> TokenLatencyBucketsSeconds();

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // [bounds_.size() + 1]
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Return the series `name`{labels}, creating the family (with `help`) and the series on first
  // use. A name must always be used with the same kind; mixing kinds is a bug (CHECK). For
  // histograms the bounds of the first call win.
  Counter* GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& upper_bounds, const Labels& labels = {});

  // The whole registry in Prometheus text exposition format 0.0.4: families sorted by name,
  // series in creation order, `# HELP` and `# TYPE` lines, histograms as cumulative `_bucket`
  // series with `le` plus `_sum` and `_count`.
  std::string RenderText() const;

  // Content-Type for RenderText()'s output.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Series {
    std::string labels_text;  // rendered `{a="b",c="d"}` or empty
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Kind kind;
    std::string help;
    std::vector<Series> series;
  };
  Series* FindOrAdd(const std::string& name, const std::string& help, Kind kind,
                    const Labels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace deepinfer::http

#endif  // DEEPINFER_HTTP_METRICS_H_
