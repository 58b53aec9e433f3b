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
// the reasoning the request ends with finish reason length (vLLM behaves the same).
// Single-threaded: owned by the engine's runner for one sample.
#ifndef DEEPINFER_ENGINE_GRAMMAR_CONSTRAINT_H_
#define DEEPINFER_ENGINE_GRAMMAR_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "structured/matcher.h"

namespace deepinfer::engine {

class GrammarConstraint {
 public:
  // `after_token_ids` (SamplingParams::grammar_after_token_ids): the grammar starts after this
  // id sequence appears in the output (empty: at once); until then only `blocked_before` ids are
  // masked.
  explicit GrammarConstraint(std::shared_ptr<const structured::CompiledGrammar> grammar,
                             std::vector<int32_t> after_token_ids = {},
                             std::vector<int32_t> blocked_before = {});

  // Advances the matcher over output tokens it has not seen yet (tokens up to and including the
  // trigger sequence are not grammar input). Returns false if one of them is not allowed by the
  // grammar (cannot happen for tokens sampled under the mask).
  bool Sync(std::span<const int32_t> output);

  // Sets disallowed logits to -inf. logits: [vocab] (the model's vocabulary; ids beyond the
  // grammar's vocabulary are disallowed). `remaining_tokens` = tokens still allowed to generate.
  // Before the trigger only `blocked_before` ids are masked.
  void MaskLogits(std::span<float> logits, int64_t remaining_tokens);

  // True once the trigger sequence was generated (always true without one).
  bool Active() const { return active_; }
  // True once the grammar accepted EOS (the document is complete).
  bool Terminated() const { return matcher_.IsTerminated(); }
  bool CanTerminate() const { return active_ && matcher_.CanTerminate(); }

 private:
  structured::GrammarMatcher matcher_;
  std::vector<uint32_t> mask_;
  std::vector<int32_t> after_;
  std::vector<int32_t> blocked_before_;
  bool active_ = true;
  size_t scanned_ = 0;  // output tokens searched for the trigger so far
  size_t offset_ = 0;   // output index of the first grammar token (after the trigger)
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_GRAMMAR_CONSTRAINT_H_
