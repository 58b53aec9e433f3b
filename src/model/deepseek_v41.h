// DeepseekV41ForCausalLM (DeepSeek-V4.1-Flash): the forward pass of shared/spec/deepseek-v41.md
// §4 behind the engine's CausalLM interface — Engram (§4.2), single-pass mHC (§4.3), attention
// with MXFP8 windows (§4.4), CSA2 with KV-source / Reindex / Reuse roles and candidate blocks
// (§4.5), the sqrt-softplus router with `gate.bias_vl` for image tokens (§4.6, §4.7) — with the
// per-sequence state and paged caches of deepseek_v41_kv_layout.h (§6-7).
//
// Image positions (text path, no vision tower yet): positions flagged in the image mask of
// ForwardWithImages (their token must be image_token_id) are image positions: embedding
// embed[image_token_id] (a vision tower would replace it), Engram DEAD (chains stop, gate 0),
// router selection bias gate.bias_vl. Plain Forward has no image positions: an image_token_id
// in text is an ordinary token (as the official code treats ids without vision features).
//
// Numerics: activations are FP32 arrays rounded to BF16 where the official code casts (tier A of
// shared/golden/dsv41-tiny-a/README.md); LoadOptions::fp32_activations skips every BF16 rounding
// and keeps the FP8/FP4/NVFP4/MXFP simulations (tier B). Cache rows are the compact formats of
// deepseek_v41_formats.h in both tiers (lossless: cached values are quantiser outputs).
//
// One weight pass per forward: every chunk's rows go through each layer together (projections,
// mHC, norms, router and experts over all rows; attention, compressor and indexer per sequence),
// and each row's arithmetic depends only on its own sequence's tokens and caches (the linear
// kernels are row-invariant), so logits are bitwise batch-invariant.
#ifndef DEEPINFER_MODEL_DEEPSEEK_V41_H_
#define DEEPINFER_MODEL_DEEPSEEK_V41_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v41_config.h"
#include "model/deepseek_v41_engram.h"
#include "model/deepseek_v41_kv_layout.h"
#include "model/deepseek_v41_weights.h"
#include "model/model.h"

namespace deepinfer::model {

// Loads a DeepSeek-V4.1 checkpoint directory (nested config.json + safetensors, official names).
absl::StatusOr<std::unique_ptr<CausalLM>> LoadDeepseekV41(const std::string& dir,
                                                          const LoadOptions& options);

namespace dsv41 {

// Same observer as V4 (names follow shared/golden/dsv41-tiny-a/trace_040.safetensors; integer
// stages: "….attn.indexer.selected" [T, index_topk] ascending -1 padded, "….attn.candidates"
// [T, rows] 0/1, "….ffn.experts" [T, k], "….engram.hash_ids" [T, columns]).
using dsv4::Tracer;

// Per-block values at the last position of a chunk (golden "debug" fields).
struct BlockDebug41 {
  std::vector<float> stream_rms;
  std::vector<float> stream0_first8;
  std::vector<int32_t> experts;        // router order
  std::vector<float> expert_weights;   // x routed_scaling_factor
  std::vector<int32_t> selected_rows;  // compressed rows attended, ascending
  std::vector<int32_t> candidate_positions;  // mask under which the selection was made
  std::vector<int64_t> engram_hash_ids;
  std::vector<float> engram_gate;
};

// DSpark drafter (§5; shared/spec/speculative.md §3), model functions only — its wiring into
// verification belongs to the drafter interface of the speculative-decoding issue.
//
// Context: with set_dspark_context(true), every Forward also computes, for the last
// min(T, window + 6) rows of each chunk, main_x = main_norm(linear_fp8(main_proj, F)) from the
// target features F = [bf16(mean over streams entering layer l) for l in dspark_target_layers]
// and writes each stage's context KV MXFP8(RoPE(kv_norm_j(linear_fp8(wkv_j, main_x)), pos)) into
// that stage's window ring ("mtp.J.window" of the state slot). Prefill seeds the rings; each
// decode step at position p appends p. With compact truncation the features exist only for the
// kept rows, which is why the keep count is at least window + 6.
struct DsparkRequest {
  int32_t state_slot = 0;
  int64_t position = 0;  // p: last position whose context KV is in the rings (context <= p)
  int32_t token = 0;     // the token sampled for position p + 1: the block's anchor
  bool want_logits = false;  // fill DsparkDraftResult::logits / base_logits
};
struct DsparkDraftResult {
  std::vector<int32_t> tokens;            // [block_size]: drafts for positions p+2 .. p+1+block
  std::vector<float> confidence_logits;   // [block_size]: sigmoid = P(draft i accepted | < i were)
  std::vector<float> logits;              // [block_size, V]: base + Markov bias (want_logits)
  std::vector<float> base_logits;         // [block_size, V]: head(norm(h)) (want_logits)
};
// Picks draft i from its logits (FP32, [V]); empty = greedy argmax (ties to the lower id). The
// Markov chain continues from the returned token.
using DraftSampler = std::function<int32_t(int64_t draft_index, std::span<const float> logits)>;

class DeepseekV41Model final : public CausalLM {
 public:
  static absl::StatusOr<std::unique_ptr<DeepseekV41Model>> Create(
      Config config, std::unique_ptr<Checkpoint> ckpt, EngramHasher hasher,
      const LoadOptions& options);
  ~DeepseekV41Model() override;

  const ModelInfo& info() const override { return info_; }
  const KvLayout& kv_layout() const override { return layout_; }
  const Config& config() const { return cfg_; }
  const KvIndices& kv_indices() const { return kv_idx_; }

  // model.h. Errors (InvalidArgument, checked for every chunk before anything is written):
  // empty chunk, token outside the vocabulary, positions beyond max_position_embeddings, bad or
  // shared state slot, block table too short / out of range, bad replay range.
  absl::Status Forward(const ForwardBatch& batch, const KvCacheView& kv,
                       ForwardOutput* out) override;
  // Forward with image positions: image_masks is empty or has one entry per chunk, each empty
  // (no image positions) or one 0/1 flag per token. InvalidArgument when a flagged token is not
  // image_token_id or a mask has the wrong length.
  absl::Status ForwardWithImages(const ForwardBatch& batch,
                                 std::span<const std::vector<uint8_t>> image_masks,
                                 const KvCacheView& kv, ForwardOutput* out);

  // Decoder-side bounded replay at prefill (§7; defaults from DEEPINFER_YOCO_PREFILL_TRUNCATION_
  // MODE / _KEEP_TOKENS). With `compact`, the layers after the last KV source run only on rows
  // at or after the decoder floor, their windows starting there (approximate: exact when
  // keep_tokens >= n_replay_layers * (window - 1) + 1). The floor is prefill_end - keep_tokens
  // for every chunk of a sequence whose SequenceChunk::prefill_end is set (chunks wholly below
  // it skip those layers); without it, a kLast chunk longer than keep_tokens is cut at its own
  // end - keep_tokens. keep_tokens is raised to window + 6 at least. It also sets
  // kv_layout().min_recompute_tokens (a prefix hit leaves the kept rows to recompute, so the
  // decoder windows of a snapshot are never read): call it before an engine takes the model.
  // Not thread-safe against Forward.
  void set_prefill_truncation(bool compact, int64_t keep_tokens);
  // Rows kept by compact truncation; 0 when it is off ("none").
  int64_t prefill_truncation_keep() const;

  // DSpark (see DsparkRequest). set_dspark_context: Forward writes the stages' context rings
  // (off by default; a no-op on a model without DSpark stages). Not thread-safe against Forward.
  void set_dspark_context(bool on);
  bool dspark_context() const;
  // One draft block per request: block inputs [token, noise x (block-1)] at positions
  // p+1 .. p+block, the DSpark stages (bidirectional inside the block, keys = the stage's
  // context ring positions max(0, p-window+1) .. p plus the block rows, never cached), base
  // logits head_fp32 . norm(h), then the sequential Markov chain and the confidence head
  // proj_fp32 . [h_i ; markov_embed[prev_i]]. The rings must hold positions
  // max(0, p-window+1) .. p (set_dspark_context during the forwards up to p). Errors:
  // FailedPrecondition (no DSpark stages), InvalidArgument (slot, position, token).
  absl::Status DsparkDraft(std::span<const DsparkRequest> requests, const KvCacheView& kv,
                           const DraftSampler& sample, std::vector<DsparkDraftResult>* out);

  // The engine's draft seam (model.h) for DSpark (speculative.md §3.7; docs/speculative-
  // decoding.md). Features: per token [bf16(mean over streams entering layer l) for l in
  // dspark_target_layers] (targets x hidden floats), zeros for rows that compact truncation
  // skipped (their positions are never read: the kept rows are >= window + 6). ProposeDrafts
  // writes the context KV of the fed (committed) positions into the stages' rings ("mtp.J.window"
  // of the state slot's dropped region; only the last window + 6 of them can still be read), then
  // runs one greedy DsparkDraft with context <= the last fed position and the last next token as
  // anchor, returning its first min(max_drafts, block) drafts with confidence = sigmoid(logit),
  // the head's P(d_j accepted | d_1..d_{j-1} accepted). No drafts (OK) when the block would pass
  // max_position_embeddings. The Forward never writes the rings on this path, so rejected verify
  // rows leave no trace. A model without DSpark stages reports 0 / 0 and FailedPrecondition.
  int64_t draft_feature_floats() const override;
  int max_model_drafts() const override;
  std::string_view draft_head() const override;
  absl::Status ForwardWithDraftFeatures(const ForwardBatch& batch, const KvCacheView& kv,
                                        ForwardOutput* out, std::vector<float>* features) override;
  absl::Status ProposeDrafts(int64_t start_pos, std::span<const float> features,
                             std::span<const int32_t> next_tokens, int32_t state_slot,
                             const KvCacheView& kv, int max_drafts, DraftProposal* out) override;
  // The same block with sampled drafts: slot j's q_j = softmax((base + Markov bias)_j / T) in
  // double, rounded to float and renormalised, is what d_j is drawn from and what out->q holds.
  absl::Status ProposeSampledDrafts(int64_t start_pos, std::span<const float> features,
                                    std::span<const int32_t> next_tokens, int32_t state_slot,
                                    const KvCacheView& kv, int max_drafts, float temperature,
                                    std::span<const double> uniforms, DraftProposal* out) override;

  // Test hooks (not thread-safe); observe one-chunk forwards only.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  void set_debug(std::vector<BlockDebug41>* debug) { debug_ = debug; }

 private:
  struct Impl;
  DeepseekV41Model() = default;
  absl::Status ValidateChunk(const SequenceChunk& chunk, const KvCacheView& kv) const;
  // ProposeDrafts (temperature 0: greedy) and ProposeSampledDrafts.
  absl::Status ProposeDraftsImpl(int64_t start_pos, std::span<const float> features,
                                 std::span<const int32_t> next_tokens, int32_t state_slot,
                                 const KvCacheView& kv, int max_drafts, float temperature,
                                 std::span<const double> uniforms, DraftProposal* out);

  Config cfg_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Weights41> w_;
  ModelInfo info_;
  KvLayout layout_;
  KvIndices kv_idx_;
  Tracer* tracer_ = nullptr;
  std::vector<BlockDebug41>* debug_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv41
}  // namespace deepinfer::model

#endif  // DEEPINFER_MODEL_DEEPSEEK_V41_H_
