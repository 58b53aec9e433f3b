// Drafters for speculative decoding (issue #26; ../shared/spec/speculative.md §1, §7.1): a
// drafter proposes up to k tokens to follow a sequence's committed tokens; the target model
// verifies them in one forward (model_runner.cc) and commits the longest accepted prefix plus
// its own next token.
//
// The drafters here read only the token history, so the engine thread calls them just before
// planning a step (engine.cc): n-gram prompt lookup and a scripted drafter for tests. Drafters
// that need the target's hidden states (DeepSeek-V4 MTP, V4.1 DSpark) run beside the forward
// instead; docs/speculative-decoding.md says what exists of them.
//
// Thread-safety: Propose is called by the engine thread only.
#ifndef DEEPINFER_ENGINE_SPECULATIVE_DRAFTER_H_
#define DEEPINFER_ENGINE_SPECULATIVE_DRAFTER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace deepinfer::engine {

// What a drafter may look at for one sequence.
struct DraftContext {
  std::string_view request_id;
  int sample_index = 0;
  // Prompt followed by every committed output token.
  std::span<const int32_t> tokens;
  int64_t prompt_len = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to `max_tokens` (>= 1) draft tokens for the positions after ctx.tokens; fewer or none
  // when the drafter has nothing to propose. Every id must be inside the vocabulary.
  virtual std::vector<int32_t> Propose(const DraftContext& ctx, int max_tokens) = 0;
};

// N-gram prompt lookup (vLLM's `ngram` method, `prompt_lookup_min/max`): for n from max_n down
// to min_n, find the most recent earlier occurrence of the last n tokens in the history and
// propose the tokens that followed it. Needs no weights, so it gives real acceptance rates on a
// small model that repeats itself.
class NgramDrafter : public Drafter {
 public:
  // 1 <= min_n <= max_n (CHECKed; flags are validated before).
  NgramDrafter(int min_n, int max_n);
  std::vector<int32_t> Propose(const DraftContext& ctx, int max_tokens) override;

 private:
  int min_n_;
  int max_n_;
};

// Tests: proposes what a function returns (e.g. the target's own greedy continuation with
// chosen positions corrupted, to force any accepted count).
class ScriptedDrafter : public Drafter {
 public:
  using Fn = std::function<std::vector<int32_t>(const DraftContext&, int max_tokens)>;
  explicit ScriptedDrafter(Fn fn) : fn_(std::move(fn)) {}
  std::vector<int32_t> Propose(const DraftContext& ctx, int max_tokens) override {
    std::vector<int32_t> d = fn_(ctx, max_tokens);
    if (static_cast<int>(d.size()) > max_tokens) d.resize(max_tokens);
    return d;
  }

 private:
  Fn fn_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SPECULATIVE_DRAFTER_H_
