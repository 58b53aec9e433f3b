// Discrete-event queue of the simulator (cluster.md SIM-3): a min-heap ordered by
// (time, priority, insertion sequence), so equal-time events pop in a fixed order and runs are
// reproducible. The clock never decreases (INV-3, CHECKed).
//
// Events are small PODs (kind + two payload words) dispatched by the caller's switch, not
// std::function, to keep millions of events cheap. Thread-safety: single-threaded.
#ifndef DEEPINFER_SIM_EVENT_QUEUE_H_
#define DEEPINFER_SIM_EVENT_QUEUE_H_

#include <cstdint>
#include <queue>
#include <vector>

#include "common/check.h"

namespace deepinfer::sim {

// One scheduled event. `time_ns` is simulated time.
struct Event {
  int64_t time_ns = 0;
  int priority = 0;  // lower first at equal time
  uint64_t seq = 0;  // insertion order, assigned by the queue
  int kind = 0;
  uint64_t a = 0, b = 0;
};

// Min-heap of events with a monotone clock.
class EventQueue {
 public:
  // Schedules `e` (its seq is overwritten). CHECKs that it is not in the past.
  void Push(Event e) {
    CHECK_GE(e.time_ns, now_ns_) << "event scheduled in the past";
    e.seq = next_seq_++;
    heap_.push(e);
  }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // Removes and returns the earliest event and advances the clock to it.
  Event Pop() {
    CHECK(!heap_.empty());
    Event e = heap_.top();
    heap_.pop();
    CHECK_GE(e.time_ns, now_ns_);  // INV-3
    now_ns_ = e.time_ns;
    return e;
  }
  int64_t now_ns() const { return now_ns_; }

 private:
  struct Later {
    bool operator()(const Event& x, const Event& y) const {
      if (x.time_ns != y.time_ns) return x.time_ns > y.time_ns;
      if (x.priority != y.priority) return x.priority > y.priority;
      return x.seq > y.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  int64_t now_ns_ = 0;
  uint64_t next_seq_ = 0;
};

}  // namespace deepinfer::sim

#endif  // DEEPINFER_SIM_EVENT_QUEUE_H_
