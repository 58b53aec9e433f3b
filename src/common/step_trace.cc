#include "common/step_trace.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace deepinfer {
namespace {

// Small stable thread numbers: Chrome's viewer shows one row per tid.
int ThisThreadTid() {
  static std::atomic<int> next{1};
  thread_local const int tid = next.fetch_add(1, std::memory_order_relaxed);
  return tid;
}

}  // namespace

StepTrace& StepTrace::Get() {
  static StepTrace* trace = new StepTrace();
  return *trace;
}

void StepTrace::Start(int64_t max_events) {
  absl::MutexLock lock(&mu_);
  events_.clear();
  max_events_ = max_events;
  dropped_ = 0;
  enabled_.store(true, std::memory_order_relaxed);
}

void StepTrace::Stop() { enabled_.store(false, std::memory_order_relaxed); }

void StepTrace::Record(const char* name, int64_t begin_ns, int64_t end_ns) {
  if (!enabled()) return;
  const int tid = ThisThreadTid();
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(events_.size()) >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{name, begin_ns, end_ns, tid});
}

std::vector<StepTrace::Event> StepTrace::Events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

int64_t StepTrace::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

std::string StepTrace::ToJson() const {
  std::vector<Event> events = Events();
  // Parents before children at equal start (longer first), as viewers expect.
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns > b.end_ns;
  });
  const int64_t t0 = events.empty() ? 0 : events.front().begin_ns;
  nlohmann::json list = nlohmann::json::array();
  std::vector<int> tids;
  for (const Event& e : events) {
    if (std::find(tids.begin(), tids.end(), e.tid) == tids.end()) tids.push_back(e.tid);
    list.push_back({{"name", e.name},
                    {"cat", "engine"},
                    {"ph", "X"},
                    {"ts", (e.begin_ns - t0) * 1e-3},
                    {"dur", (e.end_ns - e.begin_ns) * 1e-3},
                    {"pid", 1},
                    {"tid", e.tid}});
  }
  for (int tid : tids) {
    list.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", tid},
                    {"args", {{"name", absl::StrCat("thread ", tid)}}}});
  }
  nlohmann::json doc = {{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

absl::Status StepTrace::WriteJson(const std::string& path) const {
  std::ofstream out(path, std::ios::binary);
  out << ToJson() << "\n";
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write trace file ", path));
  return absl::OkStatus();
}

TraceSpan::TraceSpan(const char* name) : name_(name) {
  if (StepTrace::Get().enabled()) begin_ns_ = MonotonicNanos();
}

void TraceSpan::End() {
  if (begin_ns_ == 0) return;
  StepTrace::Get().Record(name_, begin_ns_, MonotonicNanos());
  begin_ns_ = 0;
}

}  // namespace deepinfer
