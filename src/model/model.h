// CausalLM: the interface between the engine and a model architecture (Llama, DeepSeek-V4).
//
// The engine owns all KV memory and decides what runs in a step; the model runs one batched
// forward over a mix of prefill chunks and decode tokens (one SequenceChunk per sequence) and
// writes each sequence's new KV into the blocks / state slot the engine assigned. The model
// never allocates KV memory and keeps no per-sequence state of its own, so preemption, abort and
// prefix caching are pure engine bookkeeping.
//
// Invariants every architecture must hold (tested per architecture):
//  - Chunking invariance: processing a sequence as one chunk, or as consecutive chunks of any
//    sizes (including 1 = token-by-token decode), gives the same logits.
//  - Batch independence: a sequence's logits do not depend on which other sequences share the
//    batch; with DEEPINFER_BATCH_INVARIANT=1 they are bitwise identical.
// Thread-safety: Forward() is called by one thread at a time (the engine thread / runner); it
// may use the kernel thread pool internally.
#ifndef DEEPINFER_MODEL_MODEL_H_
#define DEEPINFER_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/kv_layout.h"

namespace deepinfer::model {

// Static facts about a loaded model that the engine, tokenizer glue and server need.
struct ModelInfo {
  std::string architecture;        // "LlamaForCausalLM", "DeepseekV4ForCausalLM"
  std::string model_type;          // config.json model_type ("llama", "deepseek_v4")
  int64_t vocab_size = 0;          // logits per row
  int64_t max_context = 0;         // max_position_embeddings (tokens)
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  int64_t num_parameters = 0;      // total parameters (logical elements)
  int64_t weight_bytes = 0;        // bytes of weights as loaded
  int64_t active_weight_bytes_per_token = 0;  // bytes read per decoded token (MoE: active experts)
};

// Lets the engine fill cached blocks while a forward runs (KV-CACHE.md §3 "swap-in"): a model
// that supports it (CausalLM::supports_paged_gate) calls BeforeRead(c) before it first reads
// paged cache `c` (an index into KvLayout::paged) in a forward, and calls them in increasing c;
// the call returns once cache c of every block being swapped in is in place.
class PagedCacheGate {
 public:
  virtual ~PagedCacheGate() = default;
  virtual void BeforeRead(int paged_index) const = 0;
};

// Where the engine's KV memory is. Block b's bytes start at block_base + b * layout.BlockBytes();
// slot s's at state_base + s * layout.StateBytes(). Both arenas are 64-byte aligned.
struct KvCacheView {
  uint8_t* block_base = nullptr;
  int64_t num_blocks = 0;
  uint8_t* state_base = nullptr;
  int64_t num_state_slots = 0;
  // Non-null while blocks are being swapped in during this forward (see PagedCacheGate).
  const PagedCacheGate* gate = nullptr;
  void BeforeRead(int paged_index) const {
    if (gate != nullptr) gate->BeforeRead(paged_index);
  }
};

// Which logits a chunk wants.
enum class LogitsMode {
  kNone,  // none (middle chunk of a chunked prefill)
  kLast,  // the last token's row only (normal generation)
  kAll,   // every token's row (scoring / prompt_logprobs / tests)
};

// One sequence's part of a step: tokens at positions [start_pos, start_pos + tokens.size()).
struct SequenceChunk {
  // Tokens of this sequence already in the KV cache; the first new token's position.
  int64_t start_pos = 0;
  // New token ids. Non-empty.
  std::span<const int32_t> tokens;
  // Block ids covering positions [0, start_pos + tokens.size()): ceil(end / kBlockTokens)
  // entries. Position p lives in block block_table[p / kBlockTokens], row p % kBlockTokens.
  std::span<const int32_t> block_table;
  // This sequence's state slot (ignored when the layout has no state). When start_pos == 0 the
  // model initialises the slot; otherwise it continues from what the slot holds.
  int32_t state_slot = -1;
  LogitsMode logits = LogitsMode::kLast;
  // Bounded replay (KV-CACHE.md §5 rule 4). When `replay_until` > start_pos, this chunk starts
  // a replay at `replay_start` (<= start_pos; the state slot is initialised there, as at
  // position 0, when start_pos == replay_start): positions [replay_start, replay_until) already
  // have their block KV in the cache, which is read but never overwritten, and the query at
  // position i attends window keys max(replay_start, i - window + 1) .. i only. The replay
  // rebuilds the window rings and compressor carry. Later chunks of the same sequence pass the
  // same replay_start (their window floor) with replay_until <= start_pos. Architectures without
  // per-sequence state (Llama) require replay_start == 0.
  int64_t replay_start = 0;
  int64_t replay_until = 0;
  // Length of the prompt this chunk's sequence is prefilling (the position where sampling
  // starts; every chunk of the sequence, decode steps included, passes the same value), or 0
  // when unknown. Decoder-side bounded replay (V4.1 compact truncation, KV-CACHE.md §5.5) then
  // truncates at prefill_end - keep for all chunks alike, so its result does not depend on how
  // the prompt was chunked or where a prefix hit ended. With 0 a kLast chunk is truncated on its
  // own. The engine passes 0 when it needs every prompt row's logits.
  int64_t prefill_end = 0;
};

struct ForwardBatch {
  std::vector<SequenceChunk> chunks;
};

// A draft block proposed by a model's own draft head after a forward (DeepSeek-V4 MTP chain,
// V4.1 DSpark; ../shared/spec/speculative.md §2-3): the tokens to verify next step and, per
// token, the head's estimate c_j in [0, 1] that d_j is accepted given d_1..d_{j-1} were (§5.1;
// MTP: the probability the MTP head gave d_j; DSpark: the sigmoid of its confidence logit). The
// variable-length verification planner consumes the confidences.
struct DraftProposal {
  std::vector<int32_t> tokens;
  std::vector<float> confidence;  // parallel to tokens
  // Sampled drafts only (ProposeSampledDrafts): [tokens, vocab] the distribution q_j each draft
  // was drawn from (spec §4.3), for lossless rejection sampling. Empty for greedy drafts.
  std::vector<float> q;
};

// Logits of a forward: rows in batch order (chunk 0's rows first), each chunk contributing
// 0 (kNone), 1 (kLast) or tokens.size() (kAll) rows of vocab_size floats.
struct ForwardOutput {
  std::vector<float> logits;          // [num_rows, vocab_size], row-major
  std::vector<int64_t> chunk_row_begin;  // [num_chunks + 1]: rows of chunk i are [begin[i], begin[i+1])
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelInfo& info() const = 0;
  virtual const KvLayout& kv_layout() const = 0;

  // Runs one batched forward. Errors: InvalidArgument for a malformed batch (token id out of
  // vocabulary, position beyond max_context, block table too short, bad slot). On error no
  // output is produced, but KV rows of the batch's positions may have been partially written.
  virtual absl::Status Forward(const ForwardBatch& batch, const KvCacheView& kv,
                               ForwardOutput* out) = 0;

  // Whether Forward calls KvCacheView::BeforeRead before reading each paged cache (then the
  // engine overlaps swap-in copies with the forward; otherwise it copies before the forward).
  virtual bool supports_paged_gate() const { return false; }

  // --- MTP drafting (speculative decoding with the model's own MTP block, DeepSeek-V4;
  // ../shared/spec/speculative.md §2). Architectures without one keep these defaults. ---

  // Floats of one token's final residual streams (before the HC head; 0 = no MTP block).
  virtual int64_t mtp_stream_floats() const { return 0; }
  // Forward (same contract) that also returns the final residual streams of every token of
  // every chunk in batch order, [total chunk tokens, mtp_stream_floats()] FP32.
  virtual absl::Status ForwardWithStreams(const ForwardBatch& batch, const KvCacheView& kv,
                                          ForwardOutput* out, std::vector<float>* streams) {
    return absl::UnimplementedError("this architecture has no MTP block");
  }
  // The MTP block over positions [start_pos, start_pos + T): `streams` are the main model's
  // final streams there ([T, mtp_stream_floats()]), `next_tokens` the token after each position.
  // Continues the MTP window ring in `state_slot` (positions fed in order, like the main
  // model). `logits` gets the last row: the distribution of the token after the last next
  // token. Errors: InvalidArgument for malformed input.
  virtual absl::Status MtpLastLogits(int64_t start_pos, std::span<const float> streams,
                                     std::span<const int32_t> next_tokens, int32_t state_slot,
                                     const KvCacheView& kv, std::vector<float>* logits) {
    return absl::UnimplementedError("this architecture has no MTP block");
  }

  // --- Model-side draft heads in general (MTP, DSpark): what the engine's runner calls. ---

  // Which draft head ForwardWithDraftFeatures / ProposeDrafts run: "mtp" (DeepSeek-V4's MTP
  // block), "dspark" (V4.1's DSpark block), empty = none. The engine checks the configured
  // speculative method against it.
  virtual std::string_view draft_head() const { return {}; }
  // Floats per token the draft head reads from the target forward ("draft features": V4 MTP the
  // final residual streams, V4.1 DSpark the mean over streams of its target layers' inputs);
  // 0 = the architecture has no draft head.
  virtual int64_t draft_feature_floats() const { return 0; }
  // The most drafts one ProposeDrafts call can return (V4 MTP: chain length; DSpark: its block).
  virtual int max_model_drafts() const { return 0; }
  // Forward (same contract as Forward) that also returns every chunk token's draft features in
  // batch order, [total chunk tokens, draft_feature_floats()] FP32.
  virtual absl::Status ForwardWithDraftFeatures(const ForwardBatch& batch, const KvCacheView& kv,
                                                ForwardOutput* out, std::vector<float>* features) {
    return absl::UnimplementedError("this architecture has no draft head");
  }
  // Feeds committed positions [start_pos, start_pos + T) to the draft head's state in
  // `state_slot` (features [T, draft_feature_floats()] of those positions; `next_tokens[t]` is
  // the committed token after position start_pos + t; positions are fed in order, exactly once,
  // like the main model's), then proposes up to `max_drafts` (0: feed only) greedy drafts after
  // the last next token. Drafting must leave the slot as a run that fed the same positions
  // without drafting would (provisional entries only past the committed frontier).
  // Errors: InvalidArgument for malformed input, FailedPrecondition without a draft head.
  virtual absl::Status ProposeDrafts(int64_t start_pos, std::span<const float> features,
                                     std::span<const int32_t> next_tokens, int32_t state_slot,
                                     const KvCacheView& kv, int max_drafts, DraftProposal* out) {
    return absl::UnimplementedError("this architecture has no draft head");
  }
  // ProposeDrafts with sampled drafts (spec §3.5; DSpark): draft j is drawn from q_j =
  // softmax(logits_j / temperature) (temperature > 0) by inverse CDF (ids ascending) at
  // uniforms[j] (uniforms.size() >= max_drafts), the chain continuing from the sampled token,
  // and out->q gets every q_j. Same feeding contract and errors as ProposeDrafts.
  virtual absl::Status ProposeSampledDrafts(int64_t start_pos, std::span<const float> features,
                                            std::span<const int32_t> next_tokens,
                                            int32_t state_slot, const KvCacheView& kv,
                                            int max_drafts, float temperature,
                                            std::span<const double> uniforms, DraftProposal* out) {
    return absl::UnimplementedError("this architecture has no sampled draft head");
  }
};

// Options shared by all architectures when loading.
struct LoadOptions {
  // FP32 activations everywhere (no BF16 rounding of activations; FP8/FP4 simulation kept):
  // the "engine kind B" debug mode of shared/golden/dsv4-tiny-a/README.md.
  bool fp32_activations = false;
  // Log progress (bytes mapped / total) while loading.
  bool show_progress = true;
};

// Loads the model in Hugging Face directory `dir` (config.json + safetensors), choosing the
// architecture from config.json "architectures". Errors: NotFound (no config.json / weights),
// Unimplemented (unsupported architecture; the message lists the supported ones),
// InvalidArgument / DataLoss (malformed config or checkpoint, naming the file and tensor).
absl::StatusOr<std::unique_ptr<CausalLM>> LoadModel(const std::string& dir,
                                                    const LoadOptions& options = {});

}  // namespace deepinfer::model

#endif  // DEEPINFER_MODEL_MODEL_H_
