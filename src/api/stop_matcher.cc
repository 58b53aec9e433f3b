#include "api/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace deepinfer::api {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (s.empty()) continue;
    max_len_ = std::max(max_len_, s.size());
    stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::Push(std::string_view text) { return Resolve(text, /*final=*/false); }

std::string StopMatcher::Flush() { return Resolve("", /*final=*/true); }

std::string StopMatcher::Resolve(std::string_view text, bool final) {
  if (stopped_) return "";
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, std::string());
  // Earliest complete match; at equal positions the shorter one (it completes first).
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  if (armed_) {
    for (const std::string& s : stops_) {
      const size_t p = held_.find(s);
      if (p != std::string::npos && (p < best || (p == best && s.size() < best_stop->size()))) {
        best = p;
        best_stop = &s;
      }
    }
  }
  // Earliest position whose suffix is a proper prefix of some stop string: a live partial match
  // that more text could complete (none at the end of the stream).
  size_t live = held_.size();
  if (!final) {
    const size_t from = held_.size() >= max_len_ ? held_.size() - max_len_ + 1 : 0;
    for (size_t q = from; q < held_.size() && q < live; ++q) {
      const std::string_view tail = std::string_view(held_).substr(q);
      for (const std::string& s : stops_) {
        if (s.size() > tail.size() && std::string_view(s).substr(0, tail.size()) == tail) {
          live = q;
          break;
        }
      }
    }
  }
  if (best_stop != nullptr && best <= live) {
    // No partial match that starts earlier can still complete: the stream ends here.
    stopped_ = true;
    matched_ = *best_stop;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // A complete match with an earlier live partial one is held (with everything after the
  // partial's start) until the partial completes or dies.
  const size_t emit = best_stop != nullptr ? std::min(best, live) : live;
  std::string out = held_.substr(0, emit);
  held_.erase(0, emit);
  return out;
}

}  // namespace deepinfer::api
