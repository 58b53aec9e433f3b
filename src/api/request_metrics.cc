#include "api/request_metrics.h"

#include "api/server_internal.h"

namespace deepinfer::api {
namespace {

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,  0.8,   1.0,   1.5,   2.0,  2.5,
                                                    5.0,  10.0, 15.0,  20.0,  30.0,  40.0, 50.0,
                                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                                                    7680.0};

}  // namespace

std::string_view FinishedReason(std::optional<engine::FinishReason> engine_finish,
                                int http_status) {
  if (http_status == 499 || http_status == 503) return "abort";
  if (http_status >= 400) return "error";
  if (!engine_finish) return "stop";
  switch (*engine_finish) {
    case engine::FinishReason::kLength:
      return "length";
    case engine::FinishReason::kError:
      return "error";
    default:
      return "stop";
  }
}

std::vector<double> Buckets125(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(static_cast<double>(m * scale));
    }
  }
}

RequestMetrics::RequestMetrics(http::MetricsRegistry* r, const std::string& model_name,
                               int64_t max_model_len) {
  const http::Labels model = {{"model_name", model_name}};
  prompt_tokens_ =
      r->GetCounter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", model);
  generation_tokens_ = r->GetCounter("vllm:generation_tokens_total",
                                     "Number of generation tokens processed.", model);
  const char* success = "vllm:request_success_total";
  const char* success_help = "Count of successfully processed requests.";
  auto reason = [&](const char* why) {
    return r->GetCounter(success, success_help,
                         {{"model_name", model_name}, {"finished_reason", why}});
  };
  success_stop_ = reason("stop");
  success_length_ = reason("length");
  success_abort_ = reason("abort");
  success_error_ = reason("error");
  const std::vector<double> counts = Buckets125(max_model_len);
  request_prompt_tokens_ = r->GetHistogram("vllm:request_prompt_tokens",
                                           "Number of prefill tokens processed.", counts, model);
  request_generation_tokens_ = r->GetHistogram(
      "vllm:request_generation_tokens", "Number of generation tokens processed.", counts, model);
  ttft_ = r->GetHistogram("vllm:time_to_first_token_seconds",
                          "Histogram of time to first token in seconds.", kTtftBuckets, model);
  inter_token_ = r->GetHistogram("vllm:inter_token_latency_seconds",
                                 "Histogram of inter-token latency in seconds.",
                                 kTokenLatencyBuckets, model);
  time_per_output_token_ = r->GetHistogram(
      "vllm:time_per_output_token_seconds",
      "Histogram of time per output token in seconds. The older name of "
      "vllm:inter_token_latency_seconds (the same observations).",
      kTokenLatencyBuckets, model);
  request_tpot_ = r->GetHistogram("vllm:request_time_per_output_token_seconds",
                                  "Histogram of time_per_output_token_seconds per request.",
                                  kTokenLatencyBuckets, model);
  e2e_ = r->GetHistogram("vllm:e2e_request_latency_seconds",
                         "Histogram of e2e request latency in seconds.", kRequestLatencyBuckets,
                         model);
  decode_ = r->GetHistogram("vllm:request_decode_time_seconds",
                            "Histogram of time spent in DECODE phase for request.",
                            kRequestLatencyBuckets, model);
  queue_ = r->GetHistogram("vllm:request_queue_time_seconds",
                           "Histogram of time spent in WAITING phase for request.",
                           kRequestLatencyBuckets, model);
  prefill_ = r->GetHistogram("vllm:request_prefill_time_seconds",
                             "Histogram of time spent in PREFILL phase for request.",
                             kRequestLatencyBuckets, model);
  inference_ = r->GetHistogram("vllm:request_inference_time_seconds",
                               "Histogram of time spent in RUNNING phase for request.",
                               kRequestLatencyBuckets, model);
}

void RequestMetrics::Observe(const RequestRecord& r, int http_status, double e2e_s) {
  prompt_tokens_->Inc(static_cast<double>(r.prompt_tokens));
  generation_tokens_->Inc(static_cast<double>(r.generated_tokens));
  const std::string_view why = FinishedReason(r.finish, http_status);
  (why == "stop"     ? success_stop_
   : why == "length" ? success_length_
   : why == "abort"  ? success_abort_
                     : success_error_)
      ->Inc();
  request_prompt_tokens_->Observe(static_cast<double>(r.prompt_tokens));
  request_generation_tokens_->Observe(static_cast<double>(r.generated_tokens));
  e2e_->Observe(e2e_s);
  if (r.first_token_ns > 0 && r.arrival_ns > 0) {
    ttft_->Observe((r.first_token_ns - r.arrival_ns) * 1e-9);
    decode_->Observe(std::max<int64_t>(0, r.last_token_ns - r.first_token_ns) * 1e-9);
  }
  // vLLM's phases: WAITING = engine arrival -> first scheduled, PREFILL = first scheduled ->
  // first token, RUNNING = first scheduled -> last token.
  if (r.scheduled_ns > 0 && r.engine_arrival_ns > 0) {
    queue_->Observe(std::max<int64_t>(0, r.scheduled_ns - r.engine_arrival_ns) * 1e-9);
    if (r.first_token_ns > 0) {
      prefill_->Observe(std::max<int64_t>(0, r.first_token_ns - r.scheduled_ns) * 1e-9);
      inference_->Observe(std::max<int64_t>(0, r.last_token_ns - r.scheduled_ns) * 1e-9);
    }
  }
  for (float gap : r.inter_token_s) {
    inter_token_->Observe(gap);
    time_per_output_token_->Observe(gap);
  }
  if (r.generated_tokens > 1 && r.last_token_ns > r.first_token_ns) {
    request_tpot_->Observe((r.last_token_ns - r.first_token_ns) * 1e-9 /
                           static_cast<double>(r.generated_tokens - 1));
  }
}

}  // namespace deepinfer::api
