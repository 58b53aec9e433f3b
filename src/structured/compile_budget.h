// Cooperative cancellation for grammar compilation (DEEPINFER-DESIGN.md §11): the compiler
// service gives each compile a deadline, and the long-running steps (automaton construction,
// token-set precomputation) poll it, so a compile that outlives its request's timeout stops and
// frees its compiler thread instead of delaying the requests queued behind it.
#ifndef DEEPINFER_STRUCTURED_COMPILE_BUDGET_H_
#define DEEPINFER_STRUCTURED_COMPILE_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "common/clock.h"

namespace deepinfer::structured {

// A deadline in monotonic nanoseconds (common/clock.h), fixed or read through a pointer to an
// atomic owned by the caller (which must outlive the budget): the owner may move it later (a
// second request waiting for the same grammar) or set it to 0 to cancel. The default budget
// never expires. Cheap to poll (one clock read); callers poll it every few thousand steps.
class CompileBudget {
 public:
  CompileBudget() = default;
  explicit CompileBudget(int64_t deadline_nanos) : deadline_nanos_(deadline_nanos) {}
  explicit CompileBudget(const std::atomic<int64_t>* deadline_nanos)
      : shared_deadline_(deadline_nanos) {}

  bool Expired() const {
    const int64_t deadline = shared_deadline_ != nullptr
                                 ? shared_deadline_->load(std::memory_order_relaxed)
                                 : deadline_nanos_;
    return deadline != kNever && MonotonicNanos() >= deadline;
  }
  // OK, or DeadlineExceeded once the budget expired.
  absl::Status Check() const {
    if (!Expired()) return absl::OkStatus();
    return absl::DeadlineExceededError("grammar compilation ran out of time and was cancelled");
  }

  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

 private:
  int64_t deadline_nanos_ = kNever;
  const std::atomic<int64_t>* shared_deadline_ = nullptr;
};

}  // namespace deepinfer::structured

#endif  // DEEPINFER_STRUCTURED_COMPILE_BUDGET_H_
