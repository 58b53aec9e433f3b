#include "engine/grammar_constraint.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace deepinfer::engine {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const structured::CompiledGrammar> grammar,
                                     std::vector<int32_t> after_token_ids,
                                     std::vector<int32_t> blocked_before)
    : matcher_(std::move(grammar)),
      after_(std::move(after_token_ids)),
      blocked_before_(std::move(blocked_before)),
      active_(after_.empty()) {
  mask_.resize(matcher_.grammar().vocab().mask_words());
}

bool GrammarConstraint::Sync(std::span<const int32_t> output) {
  if (!active_) {
    // Find the first complete occurrence of the trigger (it may straddle Sync calls).
    const size_t n = after_.size();
    for (size_t end = std::max(scanned_, n); end <= output.size(); ++end) {
      if (std::equal(after_.begin(), after_.end(), output.begin() + (end - n))) {
        active_ = true;
        offset_ = end;
        break;
      }
    }
    if (!active_) {
      scanned_ = output.size() + 1;
      return true;
    }
  }
  while (offset_ + matcher_.num_accepted_tokens() < output.size()) {
    if (matcher_.IsTerminated()) return true;  // tokens after EOS (ignored)
    if (!matcher_.AcceptToken(output[offset_ + matcher_.num_accepted_tokens()])) return false;
  }
  return true;
}

void GrammarConstraint::MaskLogits(std::span<float> logits, int64_t remaining_tokens) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  if (!active_) {
    for (int32_t id : blocked_before_) {
      if (id >= 0 && id < static_cast<int64_t>(logits.size())) logits[id] = kNegInf;
    }
    return;
  }
  matcher_.FillNextTokenBitmask(mask_);
  const auto& vocab = matcher_.grammar().vocab().vocab();
  const int64_t distance = matcher_.MinBytesToTerminate();
  if (remaining_tokens > 0 && distance > 0 && remaining_tokens <= distance + 1) {
    // Steer: keep only single-byte tokens that shorten the shortest completion.
    std::vector<uint32_t> steer(mask_.size(), 0);
    bool any = false;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (!((mask_[id >> 5] >> (id & 31)) & 1) || vocab.token_bytes[id].size() != 1) continue;
      const int64_t d = matcher_.MinBytesToTerminateAfter(id);
      if (d >= 0 && d < distance) {
        steer[id >> 5] |= 1u << (id & 31);
        any = true;
      }
    }
    if (any) mask_.swap(steer);
  } else if (distance == 0 && remaining_tokens == 1) {
    // Last token and the document is complete: end it.
    std::fill(mask_.begin(), mask_.end(), 0u);
    for (int32_t id : vocab.eos_ids) mask_[id >> 5] |= 1u << (id & 31);
  }
  const int64_t n = static_cast<int64_t>(logits.size());
  const int64_t v = vocab.size();
  for (int64_t id = 0; id < n; ++id) {
    if (id >= v || !((mask_[id >> 5] >> (id & 31)) & 1)) logits[id] = kNegInf;
  }
}

}  // namespace deepinfer::engine
