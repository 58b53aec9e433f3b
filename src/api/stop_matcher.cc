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

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, std::string());
  // Earliest complete match wins (ties: the stop listed first).
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    size_t pos = held_.find(s);
    if (pos != std::string::npos && pos < best) {
      best = pos;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (size_t len = std::min(max_len_ - 1, held_.size()); len > 0; --len) {
    std::string_view suffix(held_.data() + held_.size() - len, len);
    bool is_prefix = std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) {
      return s.size() > len && std::string_view(s).substr(0, len) == suffix;
    });
    if (is_prefix) {
      keep = len;
      break;
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  if (stopped_) return "";
  return std::exchange(held_, std::string());
}

}  // namespace deepinfer::api
