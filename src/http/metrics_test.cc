#include "http/metrics.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::http {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, CounterAndGaugeRenderInPrometheusTextFormat) {
  MetricsRegistry r;
  r.GetCounter("req_total", "Requests.", {{"status", "200"}})->Inc(3);
  r.GetCounter("req_total", "Requests.", {{"status", "400"}})->Inc();
  r.GetCounter("req_total", "Requests.", {{"status", "200"}})->Inc(2);  // same series
  r.GetGauge("running", "Running requests.")->Set(7);
  r.GetGauge("running", "Running requests.")->Add(-2.5);
  // Expected text written by hand from the exposition format 0.0.4 rules.
  EXPECT_EQ(r.RenderText(),
            "# HELP req_total Requests.\n"
            "# TYPE req_total counter\n"
            "req_total{status=\"200\"} 5\n"
            "req_total{status=\"400\"} 1\n"
            "# HELP running Running requests.\n"
            "# TYPE running gauge\n"
            "running 4.5\n");
}

TEST(MetricsTest, CounterIgnoresNegativeIncrements) {
  Counter c;
  c.Inc(2);
  c.Inc(-1);
  EXPECT_EQ(c.value(), 2);
}

TEST(MetricsTest, CounterSetTotalFollowsARunningTotalAndNeverGoesDown) {
  Counter c;
  c.SetTotal(10);
  EXPECT_EQ(c.value(), 10);
  c.SetTotal(7);  // an older snapshot: ignored
  EXPECT_EQ(c.value(), 10);
  c.Inc(2);
  c.SetTotal(15);
  EXPECT_EQ(c.value(), 15);
}

TEST(MetricsTest, ColonNamesRenderAsGiven) {
  MetricsRegistry r;
  r.GetCounter("vllm:prefix_cache_hits_total", "Hits.", {{"model_name", "demo"}})->SetTotal(256);
  EXPECT_EQ(r.RenderText(),
            "# HELP vllm:prefix_cache_hits_total Hits.\n"
            "# TYPE vllm:prefix_cache_hits_total counter\n"
            "vllm:prefix_cache_hits_total{model_name=\"demo\"} 256\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithLeSemantics) {
  MetricsRegistry r;
  Histogram* h = r.GetHistogram("lat_seconds", "Latency.", {0.1, 1}, {{"ep", "x"}});
  h->Observe(0.05);
  h->Observe(0.1);  // le="0.1" includes the bound itself
  h->Observe(0.5);
  h->Observe(3);
  EXPECT_EQ(r.RenderText(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{ep=\"x\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{ep=\"x\",le=\"1\"} 3\n"
            "lat_seconds_bucket{ep=\"x\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{ep=\"x\"} 3.65\n"
            "lat_seconds_count{ep=\"x\"} 4\n");
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  MetricsRegistry r;
  r.GetCounter("c", "h", {{"path", "a\"b\\c\nd"}})->Inc();
  EXPECT_THAT(r.RenderText(), HasSubstr("c{path=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  Counter* c = r.GetCounter("c", "h");
  Histogram* h = r.GetHistogram("h", "h", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Inc();
        h->Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->count(), 40000u);
  EXPECT_EQ(h->BucketCounts()[0], 40000u);
  EXPECT_EQ(h->sum(), 20000);
}

}  // namespace
}  // namespace deepinfer::http
