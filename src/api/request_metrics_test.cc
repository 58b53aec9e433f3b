// vLLM's per-request series: bucket layout from vllm/v1/metrics/loggers.py (build_1_2_5_buckets),
// finished_reason mapping, and what one finished request adds (values computed by hand).
#include "api/request_metrics.h"

#include <string>

#include "api/engine_metrics.h"
#include "api/server_internal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::api {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RequestMetricsTest, Buckets125AsVllm) {
  EXPECT_THAT(Buckets125(100), ElementsAre(1, 2, 5, 10, 20, 50, 100));
  EXPECT_THAT(Buckets125(512), ElementsAre(1, 2, 5, 10, 20, 50, 100, 200, 500));
  EXPECT_TRUE(Buckets125(0).empty());
}

TEST(RequestMetricsTest, FinishedReasonFromEngineFinishAndStatus) {
  using engine::FinishReason;
  EXPECT_EQ(FinishedReason(FinishReason::kStop, 200), "stop");
  EXPECT_EQ(FinishedReason(FinishReason::kLength, 200), "length");
  EXPECT_EQ(FinishedReason(FinishReason::kAbort, 200), "stop");  // a stop string ended it
  EXPECT_EQ(FinishedReason(std::nullopt, 200), "stop");
  EXPECT_EQ(FinishedReason(FinishReason::kAbort, 499), "abort");
  EXPECT_EQ(FinishedReason(std::nullopt, 503), "abort");
  EXPECT_EQ(FinishedReason(FinishReason::kError, 500), "error");
}

// Three token messages at 1.0 s, 1.08 s and 1.35 s after an arrival at 0.5 s: TTFT 0.5 s, two
// inter-token gaps (0.08 s, 0.27 s), decode 0.35 s, mean TPOT 0.175 s (values off the bucket
// bounds, so rounding cannot move them).
TEST(RequestMetricsTest, OneRequestAddsItsTokensAndTimes) {
  http::MetricsRegistry reg;
  RequestMetrics m(&reg, "demo", 100);
  RequestRecord r;
  const int64_t s = 1000000000;
  for (int64_t t : {s, s + 8 * s / 100, s + 35 * s / 100}) {
    engine::StepOutput o;
    o.arrival_ns = s / 2;
    o.scheduled_ns = s * 6 / 10;  // 0.1 s waiting, 0.4 s prefill, 0.75 s running
    o.first_token_ns = s;
    o.now_ns = t;
    o.prompt_tokens = 7;
    o.token_ids = {1};
    if (t == s + 35 * s / 100) o.finish = engine::FinishReason::kLength;
    r.Observe(o);
  }
  m.Observe(r, 200, 0.9);
  const std::string text = reg.RenderText();
  for (const char* line : {
           "# TYPE vllm:prompt_tokens_total counter\n",
           "vllm:prompt_tokens_total{model_name=\"demo\"} 7\n",
           "vllm:generation_tokens_total{model_name=\"demo\"} 3\n",
           "vllm:request_success_total{model_name=\"demo\",finished_reason=\"length\"} 1\n",
           "vllm:request_success_total{model_name=\"demo\",finished_reason=\"stop\"} 0\n",
           "# TYPE vllm:time_to_first_token_seconds histogram\n",
           "vllm:time_to_first_token_seconds_bucket{model_name=\"demo\",le=\"0.25\"} 0\n",
           "vllm:time_to_first_token_seconds_bucket{model_name=\"demo\",le=\"0.5\"} 1\n",
           "vllm:time_to_first_token_seconds_sum{model_name=\"demo\"} 0.5\n",
           "vllm:inter_token_latency_seconds_count{model_name=\"demo\"} 2\n",
           "vllm:inter_token_latency_seconds_bucket{model_name=\"demo\",le=\"0.1\"} 1\n",
           "vllm:inter_token_latency_seconds_bucket{model_name=\"demo\",le=\"0.3\"} 2\n",
           "vllm:time_per_output_token_seconds_count{model_name=\"demo\"} 2\n",
           "vllm:request_time_per_output_token_seconds_bucket{model_name=\"demo\",le=\"0.15\"} 0\n",
           "vllm:request_time_per_output_token_seconds_bucket{model_name=\"demo\",le=\"0.2\"} 1\n",
           "vllm:e2e_request_latency_seconds_bucket{model_name=\"demo\",le=\"0.8\"} 0\n",
           "vllm:e2e_request_latency_seconds_bucket{model_name=\"demo\",le=\"1\"} 1\n",
           "vllm:request_decode_time_seconds_bucket{model_name=\"demo\",le=\"0.3\"} 0\n",
           "vllm:request_decode_time_seconds_bucket{model_name=\"demo\",le=\"0.5\"} 1\n",
           "# TYPE vllm:request_queue_time_seconds histogram\n",
           "vllm:request_queue_time_seconds_bucket{model_name=\"demo\",le=\"0.3\"} 1\n",
           "vllm:request_prefill_time_seconds_bucket{model_name=\"demo\",le=\"0.3\"} 0\n",
           "vllm:request_prefill_time_seconds_bucket{model_name=\"demo\",le=\"0.5\"} 1\n",
           "vllm:request_inference_time_seconds_bucket{model_name=\"demo\",le=\"0.5\"} 0\n",
           "vllm:request_inference_time_seconds_bucket{model_name=\"demo\",le=\"0.8\"} 1\n",
           "vllm:request_prompt_tokens_bucket{model_name=\"demo\",le=\"5\"} 0\n",
           "vllm:request_prompt_tokens_bucket{model_name=\"demo\",le=\"10\"} 1\n",
           "vllm:request_generation_tokens_bucket{model_name=\"demo\",le=\"2\"} 0\n",
           "vllm:request_generation_tokens_bucket{model_name=\"demo\",le=\"5\"} 1\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line)) << line;
  }
}

TEST(RequestMetricsTest, EngineStateUnderVllmNames) {
  http::MetricsRegistry reg;
  EngineMetrics m(&reg, "demo");
  engine::EngineStats st;
  st.num_running = 3;
  st.num_waiting = 2;
  st.kv_blocks_used = 30;
  st.kv_blocks_total = 120;
  st.num_preemptions = 4;
  m.Update(st);
  const std::string text = reg.RenderText();
  for (const char* line : {
           "# TYPE vllm:num_requests_running gauge\n", "vllm:num_requests_running{model_name=\"demo\"} 3\n",
           "vllm:num_requests_waiting{model_name=\"demo\"} 2\n",
           "vllm:kv_cache_usage_perc{model_name=\"demo\"} 0.25\n",
           "vllm:gpu_cache_usage_perc{model_name=\"demo\"} 0.25\n",
           "# TYPE vllm:num_preemptions_total counter\n",
           "vllm:num_preemptions_total{model_name=\"demo\"} 4\n"}) {
    EXPECT_THAT(text, HasSubstr(line)) << line;
  }
}

}  // namespace
}  // namespace deepinfer::api
