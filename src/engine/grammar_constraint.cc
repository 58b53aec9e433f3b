#include "engine/grammar_constraint.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include "common/check.h"
#include "structured/compiler.h"

namespace deepinfer::engine {

namespace {
// The empty grammar over an empty vocabulary: the matcher of a constraint without a grammar
// (a trigger budget only), never asked for a mask.
std::shared_ptr<const structured::CompiledGrammar> PlaceholderGrammar() {
  static const auto* const grammar = [] {
    auto vocab = std::make_shared<structured::VocabularyIndex>(structured::Vocabulary{});
    structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kRegex, "", {}};
    absl::StatusOr<structured::Grammar> g = structured::BuildGrammar(spec);
    CHECK(g.ok()) << g.status();
    auto compiled = structured::CompiledGrammar::Compile(*g, vocab);
    CHECK(compiled.ok()) << compiled.status();
    return new std::shared_ptr<const structured::CompiledGrammar>(*std::move(compiled));
  }();
  return *grammar;
}
}  // namespace

GrammarConstraint::GrammarConstraint(std::shared_ptr<const structured::CompiledGrammar> grammar,
                                     std::vector<int32_t> after_token_ids,
                                     std::vector<int32_t> blocked_before)
    : matcher_(grammar != nullptr ? grammar : PlaceholderGrammar()),
      has_grammar_(grammar != nullptr),
      after_(std::move(after_token_ids)),
      blocked_before_(std::move(blocked_before)),
      active_(after_.empty()) {
  CHECK(has_grammar_ || !after_.empty()) << "a GrammarConstraint needs a grammar or a trigger";
  if (has_grammar_) mask_.resize(matcher_.grammar().vocab().mask_words());
}

GrammarConstraint::GrammarConstraint(const SamplingParams& params)
    : GrammarConstraint(params.grammar, params.grammar_after_token_ids,
                        params.grammar_blocked_before) {
  SetTriggerLimits(params.grammar_trigger_budget, params.grammar_trigger_reserve);
}

void GrammarConstraint::SetTriggerLimits(int64_t budget, bool reserve) {
  if (after_.empty()) return;  // no trigger: nothing to force
  trigger_budget_ = budget;
  trigger_reserve_ = -1;
  if (reserve && has_grammar_) {
    // The trigger, the shortest document (its bytes bound its tokens from above) and EOS.
    trigger_reserve_ = static_cast<int64_t>(after_.size()) + matcher_.MinBytesToTerminate() + 1;
  }
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
      before_tokens_ = static_cast<int64_t>(output.size());
      const size_t keep = std::min(output.size(), n - 1);
      tail_.assign(output.end() - static_cast<std::ptrdiff_t>(keep), output.end());
      return true;
    }
  }
  if (!has_grammar_) return true;
  while (offset_ + matcher_.num_accepted_tokens() < output.size()) {
    if (matcher_.IsTerminated()) return true;  // tokens after EOS (ignored)
    if (!matcher_.AcceptToken(output[offset_ + matcher_.num_accepted_tokens()])) return false;
  }
  return true;
}

int32_t GrammarConstraint::ForcedTriggerId(int64_t remaining_tokens) const {
  const bool over_budget = trigger_budget_ >= 0 && before_tokens_ >= trigger_budget_;
  const bool no_room = trigger_reserve_ >= 0 && remaining_tokens <= trigger_reserve_;
  if (!over_budget && !no_room) return -1;
  // Continue a partly generated trigger: the longest output suffix that is a trigger prefix.
  for (size_t k = std::min(tail_.size(), after_.size() - 1); k > 0; --k) {
    if (std::equal(tail_.end() - static_cast<std::ptrdiff_t>(k), tail_.end(), after_.begin())) {
      return after_[k];
    }
  }
  return after_[0];
}

void GrammarConstraint::MaskLogits(std::span<float> logits, int64_t remaining_tokens) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  if (!active_) {
    const int32_t forced = ForcedTriggerId(remaining_tokens);
    if (forced >= 0 && forced < static_cast<int64_t>(logits.size())) {
      const float keep = logits[forced];
      std::fill(logits.begin(), logits.end(), kNegInf);
      // Finite even where the model put -inf: the trigger is due (logit_bias still applies).
      logits[forced] = std::isfinite(keep) ? keep : 0.0f;
      return;
    }
    for (int32_t id : blocked_before_) {
      if (id >= 0 && id < static_cast<int64_t>(logits.size())) logits[id] = kNegInf;
    }
    return;
  }
  if (!has_grammar_) return;  // budget only: free after the trigger
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

std::vector<int32_t> GrammarConstraint::ForcedTokens(int64_t max_tokens) {
  std::vector<int32_t> out;
  if (!active_ || matcher_.IsTerminated() || max_tokens <= 0) return out;
  // 64 bytes per token is more than any vocabulary's longest ordinary token needs.
  const std::string forced =
      matcher_.ForcedBytes(static_cast<size_t>(std::min<int64_t>(max_tokens, 4096) * 64));
  if (forced.empty()) return out;
  const structured::VocabularyIndex& index = matcher_.grammar().vocab();
  const auto& bytes = index.vocab().token_bytes;
  const std::vector<int32_t>& sorted = index.sorted();
  // First sorted position whose spelling is >= `key`.
  auto lower = [&](std::string_view key) {
    return std::lower_bound(sorted.begin(), sorted.end(), key,
                            [&](int32_t id, std::string_view k) {
                              return std::string_view(bytes[id]) < k;
                            });
  };
  size_t pos = 0;
  while (pos < forced.size() && static_cast<int64_t>(out.size()) < max_tokens) {
    const std::string_view rest = std::string_view(forced).substr(pos);
    // A longer token spelled rest + more could be the model's choice here: hold back.
    auto it = lower(rest);
    while (it != sorted.end() && std::string_view(bytes[*it]).starts_with(rest)) {
      if (bytes[*it].size() > rest.size()) return out;
      ++it;
    }
    int32_t best = -1;
    size_t best_len = 0;
    for (size_t len = std::min<size_t>(rest.size(), 64); len >= 1 && best < 0; --len) {
      const std::string_view key = rest.substr(0, len);
      auto e = lower(key);
      if (e != sorted.end() && std::string_view(bytes[*e]) == key) {
        best = *e;
        best_len = len;
      }
    }
    if (best < 0) return out;  // no token spells the next byte (cannot happen for valid text)
    out.push_back(best);
    pos += best_len;
  }
  return out;
}

}  // namespace deepinfer::engine
