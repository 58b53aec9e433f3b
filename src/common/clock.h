// Monotonic clocks. All durations inside deepinfer are int64 nanoseconds from a steady clock;
// wall-clock time is used only for log timestamps.
#ifndef DEEPINFER_COMMON_CLOCK_H_
#define DEEPINFER_COMMON_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace deepinfer {

// Nanoseconds since an arbitrary fixed point (std::chrono::steady_clock). Never goes backwards.
inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A clock seam: code that makes time-based decisions (TTL, GC, latency metrics) takes a Clock*
// so tests can inject time (STYLE.md habit 10).
class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds.
  virtual int64_t NowNanos() const = 0;
  // The process-wide real steady clock (not owned by the caller; never destroyed).
  static Clock* Real();
};

// A manually advanced clock for tests. Not thread-safe against concurrent Advance().
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_nanos = 0) : now_(start_nanos) {}
  int64_t NowNanos() const override { return now_; }
  void Advance(int64_t nanos) { now_ += nanos; }
  void Set(int64_t nanos) { now_ = nanos; }

 private:
  int64_t now_;
};

// Measures elapsed time from construction (or Reset) on the monotonic clock.
class Stopwatch {
 public:
  Stopwatch() : start_(MonotonicNanos()) {}
  void Reset() { start_ = MonotonicNanos(); }
  int64_t ElapsedNanos() const { return MonotonicNanos() - start_; }
  double ElapsedSeconds() const { return ElapsedNanos() * 1e-9; }

 private:
  int64_t start_;
};

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_CLOCK_H_
