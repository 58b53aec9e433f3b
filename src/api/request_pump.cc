// A generation request's life after its parameters are built: submission to the backend, the
// streaming pump (client disconnects, early stop) and the finished request's log line + metrics.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/errors.h"
#include "api/server_internal.h"
#include "common/clock.h"
#include "common/logging.h"

namespace deepinfer::api {

using OJson = nlohmann::ordered_json;
using engine::StepOutput;

absl::StatusOr<std::shared_ptr<engine::RequestStream>> ApiServer::Impl::Submit(
    engine::GenerateRequest request) {
  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      s->backend_->Submit(std::move(request));
  if (stream.ok()) return stream;
  const absl::Status& st = stream.status();
  if (st.code() == absl::StatusCode::kFailedPrecondition) {
    return absl::UnavailableError(
        absl::StrCat("the engine is not accepting requests: ", st.message()));
  }
  if (st.code() == absl::StatusCode::kResourceExhausted) {
    return WithErrorCode(absl::ResourceExhaustedError(absl::StrCat(
                             "The server is overloaded: ", st.message(), ". Retry later.")),
                         "overloaded");
  }
  return st;
}

ApiServer::Impl::PumpEnd ApiServer::Impl::Pump(engine::RequestStream& stream,
                                               http::ResponseWriter& w,
                                               const std::function<bool(StepOutput&)>& on_output,
                                               const std::function<bool()>& done) {
  const int poll_ms = std::max(1, s->options_.poll_interval_ms);
  int64_t last_check = MonotonicNanos();
  for (;;) {
    if (done()) {
      if (!stream.finished()) s->backend_->Abort(stream.request_id());
      return PumpEnd::kDone;
    }
    std::optional<StepOutput> out = stream.Next(std::chrono::milliseconds(poll_ms));
    if (out) {
      if (!on_output(*out)) {
        s->backend_->Abort(stream.request_id());
        return PumpEnd::kClientGone;
      }
    } else if (stream.finished()) {
      // Next() may time out just before the last message is pushed: finished() is then true with
      // that message still queued, so end only once the queue is drained too.
      std::vector<StepOutput> rest = stream.Drain();
      for (StepOutput& r : rest) {
        if (done()) break;
        if (!on_output(r)) {
          s->backend_->Abort(stream.request_id());
          return PumpEnd::kClientGone;
        }
      }
      return PumpEnd::kDone;
    }
    int64_t now = MonotonicNanos();
    if (!out || now - last_check > int64_t{poll_ms} * 1000000) {
      last_check = now;
      if (w.ClientClosed()) {
        s->backend_->Abort(stream.request_id());
        return PumpEnd::kClientGone;
      }
    }
  }
}

namespace {

// Speculative decoding's per-request fields (only for requests that verified drafts): verify
// steps, acceptance rate = accepted / verified drafts, mean accepted length = 1 + accepted /
// verify steps (vLLM's definitions, spec speculative.md §6), accepted drafts by position.
std::string SpecDecodeLogFields(const RequestRecord& r) {
  const int64_t steps = r.Decoding(5);
  if (steps == 0) return "";
  const int64_t drafted = r.Decoding(0), accepted = r.Decoding(1);
  std::string pos;
  for (int j = 0; j < engine::kStepOutputDraftPositions; ++j) {
    absl::StrAppend(&pos, j ? "," : "", r.Decoding(RequestRecord::kAcceptedAt + j));
  }
  return absl::StrFormat(" verify_steps=%d acceptance_rate=%.3f mean_accepted_len=%.3f "
                         "accepted_per_pos=%s",
                         steps, drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0,
                         1.0 + static_cast<double>(accepted) / steps, pos);
}

}  // namespace

void ApiServer::Impl::Finish(const RequestRecord& r, int status) {
  const int64_t now = MonotonicNanos();
  const double total_s = r.arrival_ns > 0 ? (now - r.arrival_ns) * 1e-9 : 0.0;
  const double ttft_s = r.first_token_ns > 0 ? (r.first_token_ns - r.arrival_ns) * 1e-9 : -1;
  const double tpot_s = r.generated_tokens > 1 && r.last_token_ns > r.first_token_ns
                            ? (r.last_token_ns - r.first_token_ns) * 1e-9 /
                                  static_cast<double>(r.generated_tokens - 1)
                            : -1;
  prompt_tokens->Inc(static_cast<double>(r.prompt_tokens));
  generation_tokens->Inc(static_cast<double>(r.generated_tokens));
  if (ttft_s >= 0) ttft->Observe(ttft_s);
  if (tpot_s >= 0) tpot->Observe(tpot_s);
  e2e->Observe(total_s);
  request_metrics->Observe(r, status, total_s);
  LOG(INFO) << "request " << r.id << " " << r.route << " status=" << status
            << " prompt_tokens=" << r.prompt_tokens << " cached_tokens=" << r.cached_tokens
            << " cached_host_tokens=" << r.cached_host_tokens
            << " cached_store_tokens=" << r.cached_store_tokens
            << " replayed_tokens=" << r.replayed_tokens
            << " generated_tokens=" << r.generated_tokens
            << " forward_passes=" << r.Decoding(3) << " forced_tokens=" << r.Decoding(2)
            << " drafted_tokens=" << r.Decoding(0) << " accepted_tokens=" << r.Decoding(1)
            << " trimmed_drafts=" << r.Decoding(4) << SpecDecodeLogFields(r)
            << " ttft_ms=" << (ttft_s >= 0 ? absl::StrCat(ttft_s * 1e3) : std::string("none"))
            << " tpot_ms=" << (tpot_s >= 0 ? tpot_s * 1e3 : 0.0) << " total_ms=" << total_s * 1e3;
}

}  // namespace deepinfer::api
