// ModelRunner: executes a StepPlan as one batched forward over mixed prefill chunks and decode
// tokens, then samples every row that ends a sequence (sampler.h).
//
// The runner keeps, per sequence, what sampling needs (parameters, prompt, every token it has
// sampled), so a decode item whose input is "the last sample" (async scheduling) is resolved
// here, not on the engine thread. Plans must be executed in step order by one thread at a time
// (the engine thread in sync mode, the runner thread in async mode).
#ifndef DEEPINFER_ENGINE_MODEL_RUNNER_H_
#define DEEPINFER_ENGINE_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "engine/grammar_constraint.h"
#include "engine/scheduler.h"
#include "engine/swap_in.h"
#include "model/model.h"

namespace deepinfer::engine {

// What one plan item produced.
struct ItemResult {
  int64_t seq_id = 0;
  bool sampled = false;
  // The tokens this step appends to the sequence, in order (when sampled): the sampled token,
  // or for a verify item the accepted drafts and the target's next token; then any tokens the
  // grammar forces (jump-forward). The engine commits them one at a time and stops at a finish.
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;         // parallel to tokens when params.logprobs >= 0
  int num_drafted = 0;                        // drafts this item verified (PlanItem::num_draft)
  int num_accepted = 0;                       // of them, accepted (a leading prefix)
  int num_forced = 0;                         // jump-forward tokens at the end of `tokens`
  // Model-side drafting (MTP, DSpark): the drafts for the positions after the last committed
  // token (empty: none) and the head's confidence per draft (model::DraftProposal).
  std::vector<int32_t> next_draft;
  std::vector<float> next_draft_confidence;
  std::vector<TokenLogprob> prompt_logprobs;  // for item.prompt_logprobs: positions in the chunk
  absl::Status status;                        // non-OK: the forward failed for this item
  // Where the item's valid KV ends (start_pos + tokens, less rejected drafts and, for models
  // with window state whose slot was restored — no KvLayout::frontier_rollback — the whole
  // verify chunk) and the admission it was planned for.
  int64_t end_pos = 0;
  int64_t admission = 0;
  // The state slot after the forward, when the item asked for a snapshot.
  PlanItem::Snapshot snapshot_kind = PlanItem::Snapshot::kNone;
  std::shared_ptr<const kv::StateSnapshot> snapshot;
};

struct StepResult {
  int64_t step_id = 0;
  std::vector<ItemResult> items;  // parallel to the plan's items
  int64_t forward_ns = 0;
  SwapInStats swap_in;  // blocks copied in from the host tier for this step
};

class ModelRunner {
 public:
  // `model` and the KV view's memory outlive the runner. `state_bytes` is the size of one
  // state slot (snapshots copy whole slots). `model_drafts`: run the model's draft head
  // (CausalLM::ProposeDrafts: MTP, DSpark) after each forward over the rows whose next token is
  // committed (keeping its state in step with the main model) and return the drafts of
  // sequences that speculate (ItemResult::next_draft).
  ModelRunner(model::CausalLM* model, const model::KvCacheView& kv, int64_t state_bytes,
              bool model_drafts = false);

  StepResult Execute(const StepPlan& plan);

  // Sampled model drafts (SpeculativeConfig::sampled_drafts, DSpark): sequences with a
  // temperature > 0 and no grammar get drafts drawn from the head's q at their temperature
  // (CausalLM::ProposeSampledDrafts, uniforms keyed by (seed, sample, output index, "draft")),
  // verified by rejection sampling (speculative/sampled_drafts.h): lossless in distribution,
  // not identical to a non-speculative run. Call before the first Execute.
  void set_sampled_drafts(bool on) { sampled_drafts_ = on; }

  // Forwards run so far (plans with at least one chunk).
  int64_t num_forwards() const { return num_forwards_; }

 private:
  struct SeqState {
    std::shared_ptr<const RequestInfo> info;
    int sample_index = 0;
    std::vector<int32_t> sampled;  // every token sampled for this sequence, in order
    bool failed = false;
    // Grammar state when params.grammar or a trigger budget is set (GrammarConstraint::Needed;
    // created on the first sampled step).
    std::unique_ptr<GrammarConstraint> grammar;
    // Sampled model drafts of the last proposal and their q rows ([tokens, vocab]).
    std::vector<int32_t> draft_tokens;
    std::vector<float> draft_q;
  };

  // After the forward of `plan` (features_ filled): feeds every speculating sequence's chunk
  // to the model's draft head and sets ItemResult::next_draft / next_draft_confidence.
  void ModelDrafts(const StepPlan& plan, const model::ForwardBatch& batch,
                 const std::vector<int>& item_of_chunk, StepResult* result);

  model::CausalLM* model_;
  model::KvCacheView kv_;
  int64_t state_bytes_ = 0;
  std::unordered_map<int64_t, SeqState> seqs_;
  model::ForwardOutput output_;
  int64_t num_forwards_ = 0;
  bool model_drafts_ = false;
  bool sampled_drafts_ = false;
  // KvLayout::frontier_rollback: a rejected verify keeps the state slot as it is (no copy
  // before the step, no restore and no recompute after it).
  bool frontier_rollback_ = false;
  std::vector<float> features_;  // draft features of the last forward (model_drafts_)
  model::DraftProposal proposal_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_MODEL_RUNNER_H_
