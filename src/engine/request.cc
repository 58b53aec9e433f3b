#include "engine/request.h"

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
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !queue_.empty() || open_samples_ == 0; });
  if (queue_.empty()) return std::nullopt;
  StepOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

std::optional<StepOutput> RequestStream::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !queue_.empty() || open_samples_ == 0; });
  if (queue_.empty()) return std::nullopt;
  StepOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

std::vector<StepOutput> RequestStream::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StepOutput> out(std::make_move_iterator(queue_.begin()),
                              std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_samples_ == 0;
}

void RequestStream::Push(StepOutput output) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(open_samples_ > 0) << "push to finished stream " << request_id_;
    if (output.finish.has_value()) --open_samples_;
    queue_.push_back(std::move(output));
  }
  cv_.notify_all();
}

}  // namespace deepinfer::engine
