#include "engine/request.h"

#include "absl/time/time.h"
#include "common/check.h"

namespace deepinfer::engine {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

std::optional<StepOutput> RequestStream::Next(std::chrono::nanoseconds timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  while (queue_.empty() && open_samples_ != 0 && !cv_.WaitWithDeadline(&mu_, deadline)) {
  }
  if (queue_.empty()) return std::nullopt;
  StepOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

std::optional<StepOutput> RequestStream::Next() {
  absl::MutexLock lock(&mu_);
  while (queue_.empty() && open_samples_ != 0) cv_.Wait(&mu_);
  if (queue_.empty()) return std::nullopt;
  StepOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

std::vector<StepOutput> RequestStream::Drain() {
  absl::MutexLock lock(&mu_);
  std::vector<StepOutput> out(std::make_move_iterator(queue_.begin()),
                              std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool RequestStream::finished() const {
  absl::MutexLock lock(&mu_);
  return open_samples_ == 0;
}

void RequestStream::Push(StepOutput output) {
  {
    absl::MutexLock lock(&mu_);
    CHECK(open_samples_ > 0) << "push to finished stream " << request_id_;
    if (output.finish.has_value()) --open_samples_;
    queue_.push_back(std::move(output));
  }
  cv_.SignalAll();
}

}  // namespace deepinfer::engine
