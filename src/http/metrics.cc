#include "http/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/check.h"

namespace deepinfer::http {
namespace {

void AtomicAdd(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

// Prometheus label values escape backslash, double quote and newline.
std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// HELP text escapes backslash and newline.
std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    out += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
  }
  out += "}";
  return out;
}

// Go-style float formatting as Prometheus prints it: integers without a fraction, +Inf/-Inf/NaN.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.9g", v);
  }
  return buf;
}

// `labels_text` is `{a="b"}` or empty; returns it with `le="x"` appended.
std::string WithLe(const std::string& labels_text, const std::string& le) {
  if (labels_text.empty()) return "{le=\"" + le + "\"}";
  return labels_text.substr(0, labels_text.size() - 1) + ",le=\"" + le + "\"}";
}

}  // namespace

void Counter::Inc(double v) {
  if (!(v > 0)) return;
  AtomicAdd(value_, v);
}

void Counter::SetTotal(double total) {
  double cur = value_.load(std::memory_order_relaxed);
  while (total > cur && !value_.compare_exchange_weak(cur, total, std::memory_order_relaxed)) {
  }
}

void Gauge::Add(double v) { AtomicAdd(value_, v); }

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  CHECK(std::is_sorted(bounds_.begin(), bounds_.end())) << "histogram bounds must increase";
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

std::vector<uint64_t> Histogram::BucketCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<double> Histogram::LatencyBucketsSeconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
}

std::vector<double> Histogram::TokenLatencyBucketsSeconds() {
  return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};
}

MetricsRegistry::Series* MetricsRegistry::FindOrAdd(const std::string& name,
                                                    const std::string& help, Kind kind,
                                                    const Labels& labels) {
  auto [it, inserted] = families_.try_emplace(name);
  Family& family = it->second;
  if (inserted) {
    family.kind = kind;
    family.help = help;
  }
  CHECK(family.kind == kind) << "metric " << name << " registered with two kinds";
  std::string labels_text = RenderLabels(labels);
  for (Series& s : family.series) {
    if (s.labels_text == labels_text) return &s;
  }
  family.series.emplace_back();
  family.series.back().labels_text = std::move(labels_text);
  return &family.series.back();
}

Counter* MetricsRegistry::GetCounter(const std::string& name, const std::string& help,
                                     const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Series* s = FindOrAdd(name, help, Kind::kCounter, labels);
  if (!s->counter) s->counter = std::make_unique<Counter>();
  return s->counter.get();
}

Gauge* MetricsRegistry::GetGauge(const std::string& name, const std::string& help,
                                 const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Series* s = FindOrAdd(name, help, Kind::kGauge, labels);
  if (!s->gauge) s->gauge = std::make_unique<Gauge>();
  return s->gauge.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name, const std::string& help,
                                         const std::vector<double>& upper_bounds,
                                         const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Series* s = FindOrAdd(name, help, Kind::kHistogram, labels);
  if (!s->histogram) {
    // All series of a family share the bounds of the family's first series.
    const Family& family = families_.at(name);
    const std::vector<double>& bounds = family.series.front().histogram
                                            ? family.series.front().histogram->upper_bounds()
                                            : upper_bounds;
    s->histogram = std::make_unique<Histogram>(bounds);
  }
  return s->histogram.get();
}

std::string MetricsRegistry::RenderText() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    const char* type = family.kind == Kind::kCounter ? "counter"
                       : family.kind == Kind::kGauge ? "gauge"
                                                     : "histogram";
    out += "# HELP " + name + " " + EscapeHelp(family.help) + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const Series& s : family.series) {
      switch (family.kind) {
        case Kind::kCounter:
          out += name + s.labels_text + " " + FormatValue(s.counter->value()) + "\n";
          break;
        case Kind::kGauge:
          out += name + s.labels_text + " " + FormatValue(s.gauge->value()) + "\n";
          break;
        case Kind::kHistogram: {
          const Histogram& h = *s.histogram;
          std::vector<uint64_t> counts = h.BucketCounts();
          uint64_t cumulative = 0;
          for (size_t i = 0; i < counts.size(); ++i) {
            cumulative += counts[i];
            std::string le =
                i < h.upper_bounds().size() ? FormatValue(h.upper_bounds()[i]) : "+Inf";
            out += name + "_bucket" + WithLe(s.labels_text, le) + " " + std::to_string(cumulative) +
                   "\n";
          }
          out += name + "_sum" + s.labels_text + " " + FormatValue(h.sum()) + "\n";
          // _count equals the +Inf bucket of the same snapshot, as Prometheus requires.
          out += name + "_count" + s.labels_text + " " + std::to_string(cumulative) + "\n";
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace deepinfer::http
