// Grammar-constrained sampling hook (issue #11, DEEPINFER-DESIGN.md §11): per sample, a
// GrammarMatcher that follows the tokens sampled so far and masks the logits of the next step.
//
// Termination within the token budget: when the tokens left (max_tokens - generated) are no
// more than the bytes still needed to complete the grammar, only tokens that shorten the
// shortest completion (single-byte tokens, or EOS once complete) stay allowed, so a constrained
// request ends with a complete document whenever max_tokens allows one at all.
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
  explicit GrammarConstraint(std::shared_ptr<const structured::CompiledGrammar> grammar);

  // Advances the matcher over output tokens it has not seen yet. Returns false if one of them
  // is not allowed by the grammar (cannot happen for tokens sampled under the mask).
  bool Sync(std::span<const int32_t> output);

  // Sets disallowed logits to -inf. logits: [vocab] (the model's vocabulary; ids beyond the
  // grammar's vocabulary are disallowed). `remaining_tokens` = tokens still allowed to generate.
  void MaskLogits(std::span<float> logits, int64_t remaining_tokens);

  // True once the grammar accepted EOS (the document is complete).
  bool Terminated() const { return matcher_.IsTerminated(); }
  bool CanTerminate() const { return matcher_.CanTerminate(); }

 private:
  structured::GrammarMatcher matcher_;
  std::vector<uint32_t> mask_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_GRAMMAR_CONSTRAINT_H_
