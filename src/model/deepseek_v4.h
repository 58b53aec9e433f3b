// DeepseekV4ForCausalLM (V4-Flash family): the forward pass of shared/spec/deepseek-v4.md §3
// (mHC, SWA/CSA/HCA attention with the Lightning Indexer, hash/score-routed MoE, HC head, MTP)
// with the decode-time state of §4, behind the engine's CausalLM interface.
//
// Decode state (declared through kv_layout()):
//   paged, per compressed layer L: "layers.L.compressed_kv" (128/ratio rows of head_dim values
//     per 128-token block) and, for ratio-4 layers, "layers.L.indexer_k" (128/ratio rows of
//     index_head_dim values). Compressed row b of a layer with ratio m lives in the block of
//     position b*m, row b mod (128/m). Row bytes (deepseek_v4_kv_rows.h, docs/kv-format.md §6):
//     with BF16 activations the compact lossless formats of spec §4 — main rows
//     (head_dim − rope_dim) e4m3 + rope_dim BF16 + one E8M0 scale per 64, padded to 8 bytes
//     (584 B for V4-Flash, 200 B for the tiny models), indexer keys MXFP4 (68 B for 128 dims);
//     with LoadOptions::fp32_activations FP32 rows (its RoPE values are not BF16). The two
//     layouts have different layout_ids. Attention and the indexer decode the rows they read
//     once per chunk per sequence into FP32 scratch, so the arithmetic (and every logit) is the
//     same as with FP32 rows.
//   per-sequence state slot: "layers.L.window" (R = window + kSpeculativeRollbackTokens
//     slots x head_dim FP32 ring, slot = pos mod R; a query reads only the window's positions,
//     the spare slots hold verified drafts and MTP chain rows past the committed frontier) for
//     every layer and "mtp.J.window" for the MTP block; "layers.L.compressor" and
//     "layers.L.indexer_compressor": the compressor's per-token (a, g+ape) inputs, position-
//     indexed rings (entry p mod size) covering the positions the next pool reads and a verify
//     span past the frontier: overlap (m = 4) 2m + kSpeculativeRollbackTokens entries (the
//     previous block, the current one), non-overlap m + kSpeculativeRollbackTokens entries
//     (the current block), pooled in place when a block completes. So
//     chunked prefill and token-by-token decode pool exactly the same numbers as one pass, and
//     speculative rollback is a frontier reset (KvLayout::frontier_rollback: no entry a later
//     query reads is ever overwritten by a rejected draft).
//   The per-sequence state is FP32 in both layouts.
//
// Numerics: activations are FP32 arrays rounded to BF16 exactly where the official code casts
// (tier A of shared/golden/dsv4-tiny-a/README.md); LoadOptions::fp32_activations skips every BF16
// rounding but keeps the FP8/FP4 simulation (tier B).
#ifndef DEEPINFER_MODEL_DEEPSEEK_V4_H_
#define DEEPINFER_MODEL_DEEPSEEK_V4_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/model.h"

namespace deepinfer::model {

// Loads a DeepSeek-V4 checkpoint directory (config.json + safetensors in the official layout).
// Errors: NotFound (no config.json / weights / a tensor), InvalidArgument (bad config, a tensor
// with the wrong dtype or shape; the message names the tensor and file).
absl::StatusOr<std::unique_ptr<CausalLM>> LoadDeepseekV4(const std::string& dir,
                                                         const LoadOptions& options);

namespace dsv4 {

// Observer of intermediate values, for stage-by-stage tests against
// shared/golden/dsv4-tiny-a/trace_040.safetensors. Names follow the trace ("layers.1.attn.q",
// "mtp.0.ffn.out", ...); arrays are [chunk tokens, ...] row-major (compressor/indexer rows:
// the rows completed in this chunk). An implementation may overwrite the values (teacher
// forcing): the forward continues with whatever the arrays hold after the call.
class Tracer {
 public:
  virtual ~Tracer() = default;
  virtual void Floats(const std::string& name, std::span<float> values) = 0;
  // Integer stages: "….attn.indexer.selected" [T, index_topk] (-1 padded, descending score)
  // and "….ffn.experts" [T, k].
  virtual void Ints(const std::string& name, std::span<int32_t> values) = 0;
};

// Per-block values at the last position of a chunk (golden "debug" fields).
struct BlockDebug {
  std::vector<float> stream_rms;      // [hc_mult] RMS of each residual stream after the block
  std::vector<float> stream0_first8;  // first 8 values of stream 0
  std::vector<int32_t> experts;       // routed experts in router order
  std::vector<float> expert_weights;  // already x routed_scaling_factor
  std::vector<int32_t> indexer_rows;  // CSA: selected compressed rows, descending score
};

// Row storage of the paged caches. kAuto: compact rows with BF16 activations, FP32 rows with
// LoadOptions::fp32_activations. kFp32: FP32 rows in either mode (tests compare the two).
enum class KvRowStorage { kAuto, kFp32 };

class DeepseekV4Model final : public CausalLM {
 public:
  // Use LoadDeepseekV4 / Create.
  static absl::StatusOr<std::unique_ptr<DeepseekV4Model>> Create(
      Config config, std::unique_ptr<Checkpoint> ckpt, const LoadOptions& options,
      KvRowStorage row_storage = KvRowStorage::kAuto);

  const ModelInfo& info() const override { return info_; }
  const KvLayout& kv_layout() const override { return layout_; }
  const Config& config() const { return cfg_; }
  const Weights& weights() const { return *w_; }

  // One batched forward (model.h). Each layer runs once over the concatenation of all chunks'
  // tokens: embedding, mHC, norms, every projection, the router, the MoE (tokens grouped by
  // routed expert across the whole batch) and the head read their weights once per call; only
  // attention and the compressor / indexer / window state loop over the chunks. Each row's
  // arithmetic is independent of the other rows, so a chunk's logits are bitwise the same alone
  // or inside any batch. Errors (InvalidArgument, checked for every chunk before anything is
  // written): empty chunk, token outside the vocabulary, positions beyond
  // max_position_embeddings, bad state slot or two chunks sharing one, block table too short or
  // naming a block outside the arena.
  absl::Status Forward(const ForwardBatch& batch, const KvCacheView& kv,
                       ForwardOutput* out) override;
  // Each layer's attention calls kv.BeforeRead for its compressed-KV and indexer caches first.
  bool supports_paged_gate() const override { return true; }

  // MTP drafting through the CausalLM interface (serving): streams are [hc_mult * hidden] per
  // token; MtpLastLogits is ForwardMtp with LogitsMode::kLast. No MTP block: 0 / errors.
  int64_t mtp_stream_floats() const override;
  absl::Status ForwardWithStreams(const ForwardBatch& batch, const KvCacheView& kv,
                                  ForwardOutput* out, std::vector<float>* streams) override;
  absl::Status MtpLastLogits(int64_t start_pos, std::span<const float> streams,
                             std::span<const int32_t> next_tokens, int32_t state_slot,
                             const KvCacheView& kv, std::vector<float>* logits) override;
  // Draft head = the MTP block (spec speculative.md §2.4): features are the MTP streams.
  // ProposeDrafts feeds the committed rows (the first pass), then chains the block on its own
  // output — row j + 1 pairs the MTP block's output streams G of row j with draft j, one
  // position further — for up to max_drafts (<= kMaxMtpDrafts) greedy drafts, each with its
  // softmax probability as confidence; it stops after an EOS draft. Chained rows write
  // provisional MTP ring entries past the committed frontier, in the ring's spare slots.
  static constexpr int kMaxMtpDrafts = kSpeculativeRollbackTokens - 1;
  int64_t draft_feature_floats() const override { return mtp_stream_floats(); }
  int max_model_drafts() const override;
  std::string_view draft_head() const override { return cfg_.num_mtp_layers > 0 ? "mtp" : ""; }
  absl::Status ForwardWithDraftFeatures(const ForwardBatch& batch, const KvCacheView& kv,
                                        ForwardOutput* out, std::vector<float>* features) override {
    return ForwardWithStreams(batch, kv, out, features);
  }
  absl::Status ProposeDrafts(int64_t start_pos, std::span<const float> features,
                             std::span<const int32_t> next_tokens, int32_t state_slot,
                             const KvCacheView& kv, int max_drafts, DraftProposal* out) override;

  // Forward of one chunk (Forward over a one-chunk batch) that also returns the final residual
  // streams (before the HC head), [T, hc_mult, hidden] FP32, for MTP. `logits` gets 0, 1 or T
  // rows as chunk.logits says.
  absl::Status ForwardChunk(const SequenceChunk& chunk, const KvCacheView& kv,
                            std::vector<float>* logits, std::vector<float>* final_streams);

  // MTP block (spec §3.9) over positions [start_pos, start_pos + T): input = the main model's
  // final streams at those positions ([T, hc_mult, hidden]) and the next token of each position
  // (`next_tokens`, T ids). Uses (and continues) the MTP window ring in `state_slot`; when
  // start_pos == 0 the ring is restarted. Positions must be fed in order without gaps, like the
  // main model. Returns logits for the token after next, rows per `mode`.
  absl::Status ForwardMtp(int64_t start_pos, std::span<const float> main_streams,
                          std::span<const int32_t> next_tokens, int32_t state_slot,
                          const KvCacheView& kv, LogitsMode mode, std::vector<float>* logits);

  // Test hooks (not thread-safe; set before a forward, cleared with nullptr). They observe
  // forwards of one chunk (ForwardChunk, ForwardMtp, Forward of a one-chunk batch); a Forward
  // over several chunks does not call them.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  // When set, the forward fills one BlockDebug per block (main layers, then MTP when it runs)
  // for the last token of the chunk.
  void set_debug(std::vector<BlockDebug>* debug) { debug_ = debug; }

  ~DeepseekV4Model() override;

 private:
  struct Impl;
  DeepseekV4Model() = default;
  absl::Status ValidateChunk(const SequenceChunk& chunk, const KvCacheView& kv) const;
  // The batched forward behind Forward and ForwardChunk: logits rows per chunk into `out`, and
  // the final streams of every row ([rows, hc_mult, hidden]) when `final_streams` is given.
  absl::Status Run(std::span<const SequenceChunk> chunks, const KvCacheView& kv, ForwardOutput* out,
                   std::vector<float>* final_streams);
  // ForwardMtp that also returns the MTP block's output streams G of every row
  // ([T, hc_mult, hidden], before its HC head) when `block_out` is given (chaining re-feeds G).
  absl::Status RunMtp(int64_t start_pos, std::span<const float> main_streams,
                      std::span<const int32_t> next_tokens, int32_t state_slot,
                      const KvCacheView& kv, LogitsMode mode, std::vector<float>* logits,
                      std::vector<float>* block_out);

  Config cfg_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Weights> w_;
  ModelInfo info_;
  KvLayout layout_;
  bool bf16_ = true;
  Tracer* tracer_ = nullptr;
  std::vector<BlockDebug>* debug_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
}  // namespace deepinfer::model

#endif  // DEEPINFER_MODEL_DEEPSEEK_V4_H_
