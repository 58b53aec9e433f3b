// Per-request series on GET /metrics under vLLM's names, types, units, buckets and label
// (model_name), next to our deepinfer_* request series (api/openai_server.cc), so vLLM's Grafana
// dashboard and scrapers written against vLLM read a deepinfer server unchanged. Names, help and
// bucket boundaries follow vLLM's v1 PrometheusStatLogger (vllm/v1/metrics/loggers.py):
//   vllm:prompt_tokens_total, vllm:generation_tokens_total          counters (tokens)
//   vllm:request_success_total{finished_reason="stop|length|abort|error"}  counter (requests)
//   vllm:request_prompt_tokens, vllm:request_generation_tokens      histograms, 1-2-5 buckets up
//                                                                   to the max model length
//   vllm:time_to_first_token_seconds                                histogram (arrival -> first)
//   vllm:inter_token_latency_seconds and its older name
//   vllm:time_per_output_token_seconds                             histograms, one observation
//                                                                   per gap between token messages
//   vllm:request_time_per_output_token_seconds                      histogram, a request's mean gap
//   vllm:e2e_request_latency_seconds                                histogram (arrival -> end)
//   vllm:request_decode_time_seconds                                histogram (first -> last token)
//   vllm:request_queue_time_seconds                                 histogram (arrival -> scheduled)
//   vllm:request_prefill_time_seconds                               histogram (scheduled -> first)
//   vllm:request_inference_time_seconds                             histogram (scheduled -> last)
// Counted when a request finishes (vLLM counts tokens per engine step: rates over minutes
// agree). Not exported yet: vllm:request_queue_time_seconds, vllm:request_prefill_time_seconds
// and vllm:request_inference_time_seconds need the time the engine first scheduled a request,
// which StepOutput does not carry.
//
// Thread-safety: Observe() may be called from any thread (the metrics are atomics).
#ifndef DEEPINFER_API_REQUEST_METRICS_H_
#define DEEPINFER_API_REQUEST_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "http/metrics.h"

namespace deepinfer::api {

struct RequestRecord;  // server_internal.h

// vLLM's finished_reason for a request that ended with `http_status` after the engine reported
// `engine_finish` for sample 0 (nullopt: none seen). 499 (the client left) and 503 (cut off by
// shutdown) are "abort", other errors "error"; a 200 whose engine finish is an abort (or missing)
// was ended by the API itself (a stop string, a finished grammar), which is "stop".
std::string_view FinishedReason(std::optional<engine::FinishReason> engine_finish,
                                int http_status);

// vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to `max_value` inclusive.
std::vector<double> Buckets125(int64_t max_value);

class RequestMetrics {
 public:
  // Registers every family in `registry` (not owned; must outlive this object). `model_name` is
  // the served model id (label model_name); `max_model_len` bounds the token-count buckets.
  RequestMetrics(http::MetricsRegistry* registry, const std::string& model_name,
                 int64_t max_model_len);

  // One finished generation request: its record, the HTTP status it ended with and the time
  // from arrival to now in seconds.
  void Observe(const RequestRecord& r, int http_status, double e2e_s);

 private:
  http::Counter* prompt_tokens_;
  http::Counter* generation_tokens_;
  http::Counter* success_stop_;
  http::Counter* success_length_;
  http::Counter* success_abort_;
  http::Counter* success_error_;
  http::Histogram* request_prompt_tokens_;
  http::Histogram* request_generation_tokens_;
  http::Histogram* ttft_;
  http::Histogram* inter_token_;
  http::Histogram* time_per_output_token_;
  http::Histogram* request_tpot_;
  http::Histogram* e2e_;
  http::Histogram* decode_;
  http::Histogram* queue_;
  http::Histogram* prefill_;
  http::Histogram* inference_;
};

}  // namespace deepinfer::api

#endif  // DEEPINFER_API_REQUEST_METRICS_H_
