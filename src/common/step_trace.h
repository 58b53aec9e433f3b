// StepTrace: a process-wide recorder of engine-step spans (schedule, step, forward, sample,
// post_process) and of the model's per-layer spans (layer; in common so the model layer can
// record too) written as a Chrome-trace JSON (the Trace Event Format's "X" complete events,
// ts/dur in microseconds; open in chrome://tracing or ui.perfetto.dev), for `deepinfer bench
// --trace FILE` (issue #30). Off by default: a span then costs one relaxed atomic load, so the
// engine loop keeps its hooks unconditionally.
#ifndef DEEPINFER_COMMON_STEP_TRACE_H_
#define DEEPINFER_COMMON_STEP_TRACE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace deepinfer {

class StepTrace {
 public:
  // One complete span, MonotonicNanos clock; `tid` is a small per-thread number (1, 2, ...).
  struct Event {
    const char* name;  // a string literal
    int64_t begin_ns;
    int64_t end_ns;
    int tid;
  };

  // The process's recorder.
  static StepTrace& Get();

  // Clears the events and starts recording (at most `max_events`; later spans are dropped and
  // counted, so a long run cannot exhaust memory).
  void Start(int64_t max_events = 4'000'000);
  // Stops recording; the events stay until the next Start().
  void Stop();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Records a span of the calling thread (no-op when disabled).
  void Record(const char* name, int64_t begin_ns, int64_t end_ns);

  std::vector<Event> Events() const;
  int64_t dropped() const;
  // {"traceEvents": [...], "displayTimeUnit": "ms"}: one "X" event per span (pid 1, tid as
  // recorded, ts relative to the first span) plus "M" thread_name events.
  std::string ToJson() const;
  // Writes ToJson() to `path`. Errors: InvalidArgument naming the path when it cannot be written.
  absl::Status WriteJson(const std::string& path) const;

 private:
  std::atomic<bool> enabled_{false};
  mutable absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  int64_t max_events_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// RAII span: records [construction, End() or destruction) into StepTrace::Get() when tracing was
// enabled at construction. `name` must be a string literal.
class TraceSpan {
 public:
  explicit TraceSpan(const char* name);
  ~TraceSpan() { End(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  // Ends the span early (idempotent).
  void End();

 private:
  const char* name_;
  int64_t begin_ns_ = 0;  // 0: not recording
};

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_STEP_TRACE_H_
