// Grammar-constrained sampling hook (issue #11, DEEPINFER-DESIGN.md §11): per sample, a
// GrammarMatcher that follows the tokens sampled so far and masks the logits of the next step.
//
// Termination within the token budget: when the tokens left (max_tokens - generated) are no
// more than the bytes still needed to complete the grammar, only tokens that shorten the
// shortest completion (single-byte tokens, or EOS once complete) stay allowed, so a constrained
// request ends with a complete document whenever max_tokens allows one at all.
//
// Deferred start (reasoning models): with a trigger sequence (the end-of-thinking token), the
// tokens before and including it are free; the grammar constrains what follows. The budget
// steering above then counts the tokens left after the reasoning; when max_tokens runs out during
// the reasoning the request ends with finish reason length (vLLM behaves the same), unless the
// trigger is forced:
//
// Forced trigger (token-count-aware start): with a trigger budget N, once N tokens were generated
// before the trigger only the trigger's next id is allowed (a reasoning budget ends with
// `</think>`); with the reserve on, the same happens once the tokens left would no longer fit the
// trigger, the shortest complete grammar document and EOS (counted in bytes, an upper bound on
// its tokens: every byte has a token, a control token counts its reserved spelling), so a forced
// tool call after reasoning is never swallowed by the reasoning. Without a grammar (budget only)
// the tokens after the trigger are free.
// Single-threaded: owned by the engine's runner for one sample.
#ifndef DEEPINFER_ENGINE_GRAMMAR_CONSTRAINT_H_
#define DEEPINFER_ENGINE_GRAMMAR_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/sampling_params.h"
#include "structured/matcher.h"

namespace deepinfer::engine {

class GrammarConstraint {
 public:
  // `after_token_ids` (SamplingParams::grammar_after_token_ids): the grammar starts after this
  // id sequence appears in the output (empty: at once); until then only `blocked_before` ids are
  // masked. `grammar` may be null only with a trigger (then nothing is constrained after it).
  explicit GrammarConstraint(std::shared_ptr<const structured::CompiledGrammar> grammar,
                             std::vector<int32_t> after_token_ids = {},
                             std::vector<int32_t> blocked_before = {});
  // From the request's parameters: grammar, grammar_after_token_ids, grammar_blocked_before,
  // grammar_trigger_budget and grammar_trigger_reserve (SamplingParams). Needs a grammar or a
  // trigger budget (Needed()).
  explicit GrammarConstraint(const SamplingParams& params);
  // Whether `params` asks for a constraint at all (a grammar or a trigger budget).
  static bool Needed(const SamplingParams& params) {
    return params.grammar != nullptr ||
           (params.grammar_trigger_budget >= 0 && !params.grammar_after_token_ids.empty());
  }

  // Forces the trigger after `budget` tokens before it (-1: never). With `reserve`, also once
  // the tokens left would no longer fit the trigger plus the shortest grammar document and EOS.
  void SetTriggerLimits(int64_t budget, bool reserve);

  // Advances the matcher over output tokens it has not seen yet (tokens up to and including the
  // trigger sequence are not grammar input). Returns false if one of them is not allowed by the
  // grammar (cannot happen for tokens sampled under the mask).
  bool Sync(std::span<const int32_t> output);

  // Sets disallowed logits to -inf. logits: [vocab] (the model's vocabulary; ids beyond the
  // grammar's vocabulary are disallowed). `remaining_tokens` = tokens still allowed to generate.
  // Before the trigger only `blocked_before` ids are masked.
  void MaskLogits(std::span<float> logits, int64_t remaining_tokens);

  // Jump-forward decoding (issue #22 part 3): the tokens of the text the grammar forces after
  // the output synced so far (call Sync first), at most `max_tokens`; they are not accepted
  // here (Sync accepts them once they are in the output). The text is
  // structured::GrammarMatcher::ForcedBytes; its tokens are the greedy longest matches over the
  // grammar's vocabulary (lowest id among equal spellings). Token boundary: tokenization stops
  // at the first token whose remaining forced text is a proper prefix of a longer vocabulary
  // token, which is held back with everything after it, so a forced token never blocks a
  // longer token the model could choose. Empty before the trigger, after EOS, or when nothing
  // is forced.
  std::vector<int32_t> ForcedTokens(int64_t max_tokens);

  // True once the trigger sequence was generated (always true without one).
  bool Active() const { return active_; }
  // True once the grammar accepted EOS (the document is complete); false without a grammar.
  bool Terminated() const { return has_grammar_ && matcher_.IsTerminated(); }
  bool CanTerminate() const { return active_ && (!has_grammar_ || matcher_.CanTerminate()); }

 private:
  // The trigger id to force now, or -1 (not active yet and a limit reached).
  int32_t ForcedTriggerId(int64_t remaining_tokens) const;

  // Without a grammar (budget only) the matcher runs an empty placeholder grammar that
  // nothing consults (has_grammar_ false).
  structured::GrammarMatcher matcher_;
  bool has_grammar_ = true;
  std::vector<uint32_t> mask_;
  std::vector<int32_t> after_;
  std::vector<int32_t> blocked_before_;
  bool active_ = true;
  size_t scanned_ = 0;  // output tokens searched for the trigger so far
  size_t offset_ = 0;   // output index of the first grammar token (after the trigger)
  int64_t trigger_budget_ = -1;   // tokens allowed before the trigger (-1: unlimited)
  int64_t trigger_reserve_ = -1;  // force the trigger when remaining <= this (-1: never)
  std::vector<int32_t> tail_;     // inactive: the last after_.size() - 1 output ids
  int64_t before_tokens_ = 0;     // inactive: output tokens generated so far
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_GRAMMAR_CONSTRAINT_H_
