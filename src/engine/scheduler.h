// Scheduler: chooses what runs in each step and returns it as a StepPlan (STYLE.md habit 6:
// plan, then apply). It owns the engine-side sequence bookkeeping: block tables, state slots,
// how many tokens of each sequence are computed, and which samples are still in flight.
//
// Policy (vLLM-style continuous batching with chunked prefill):
//   1. Running sequences, oldest first: a decode token, or the next prompt chunk, within the
//      per-step token budget. When blocks run out the NEWEST running sequence is preempted
//      (blocks and slot freed, sequence re-queued at the front of the waiting queue and later
//      recomputed from its tokens).
//   2. Waiting sequences, FIFO, while the budget, max_num_seqs and free blocks allow (no
//      admission in a step that preempted).
// Prefix caching (KV-CACHE.md §2-5): on admission the scheduler looks up the longest chain of
// the sequence's complete blocks in the block pool's index, applies the hit rule (at most
// L - (window + 6) tokens on models with window state, L - 1 otherwise; a snapshot at the hit
// end restores the state, else the last block of the hit is replayed, or in exact mode the hit
// shrinks to the last exact snapshot), shares the hit blocks and computes only the rest. Blocks
// are registered in the index once an executed step has written them (OnExecuted), and state
// snapshots are taken at the prompt's last block boundary (the prefill chunk ends there) and at
// each boundary decode crosses (the latest one is kept when the sequence ends or is
// preempted). n > 1 samples wait for sample 0 to pass the prompt's last boundary and then fork
// from its snapshot.
// Async scheduling: a sequence may have up to two sampled tokens in flight (num_pending). Its
// next decode then feeds "the runner's last sample" (a placeholder resolved on the runner side),
// so planning step N+1 does not wait for step N's ids.
//
// Thread-safety: none; engine thread only.
#ifndef DEEPINFER_ENGINE_SCHEDULER_H_
#define DEEPINFER_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv_tiers.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/snapshot_cache.h"
#include "kv/state_cache.h"

namespace deepinfer::engine {

// Immutable facts of a request shared by its sequences, the engine and the runner.
struct RequestInfo {
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  uint64_t seed = 0;
  std::vector<int32_t> eos_token_ids;  // empty when ignore_eos
  int64_t arrival_ns = 0;
  uint64_t cache_salt = 0;  // kv::CacheSaltFromString(GenerateRequest::cache_salt)
  kv::TrafficClass traffic_class = kv::TrafficClass::kChat;
  // Jump-forward decoding (issue #22 part 3): after each sampled token the runner appends the
  // tokens the grammar forces (GrammarConstraint::ForcedTokens). Set by the engine when
  // EngineConfig::jump_forward is on, the request has a grammar and asks for no logprobs.
  bool jump_forward = false;
  // Speculative decoding (docs/speculative-decoding.md): the most draft tokens a step of this
  // request verifies; 0 = off.
  int max_draft_tokens = 0;
  // A step of this request may commit more than one token (jump-forward or speculation): its
  // next step is planned only once the previous one's tokens are known (no async placeholder).
  bool multi_token_steps() const { return jump_forward || max_draft_tokens > 0; }
};

enum class SeqStatus { kWaiting, kRunning, kFinished };

// One sample of a request (n > 1 gives n sequences).
struct Sequence {
  int64_t seq_id = 0;
  // FIFO order (submission order, then sample index); larger = newer.
  int64_t order = 0;
  std::shared_ptr<const RequestInfo> info;
  int sample_index = 0;
  SeqStatus status = SeqStatus::kWaiting;
  // Prompt followed by the resolved (delivered) output tokens.
  std::vector<int32_t> tokens;
  // Tokens whose KV is written or scheduled to be written by a planned step.
  int64_t num_computed = 0;
  // Sampled tokens in flight (planned but not yet post-processed).
  int num_pending = 0;
  // Draft tokens proposed for the next step (speculative decoding; set by the engine before
  // Schedule, consumed and cleared by it): they follow `tokens` and are verified by the step.
  std::vector<int32_t> draft;
  // The drafter's confidence per draft token (model::DraftProposal::confidence), parallel to
  // `draft`; empty when the drafter gives none (n-gram, scripted).
  std::vector<float> draft_confidence;
  // Per-sample counts reported on the stream (StepOutput): drafts verified / accepted, tokens
  // appended by jump-forward, steps that computed this sequence.
  int drafted_tokens = 0;
  int accepted_tokens = 0;
  int forced_tokens = 0;
  int forward_passes = 0;
  // Drafts the variable-length planner did not verify (speculative/varlen_controller.h).
  int trimmed_drafts = 0;
  // Verify steps (steps that verified >= 1 draft) and accepted drafts by draft position.
  int verify_steps = 0;
  std::array<int, kStepOutputDraftPositions> accepted_per_position{};
  std::vector<int32_t> blocks;  // block table
  int32_t state_slot = -1;
  bool registered_with_runner = false;
  // Prompt logprobs gathered so far (sample 0, prompt_logprobs >= 0) and whether delivered.
  std::vector<TokenLogprob> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  int64_t first_token_ns = 0;
  int64_t first_scheduled_ns = 0;  // first admission (StepOutput::scheduled_ns)

  // Prefix cache. Sample 0 of the same request (nullptr for sample 0 itself); it outlives us.
  const Sequence* first_sample = nullptr;
  // Chain keys of the complete blocks of `tokens` computed so far (lazily; tokens only grow).
  std::vector<kv::BlockKey> block_keys;
  // Leading blocks of `blocks` taken from, or offered to, the prefix index.
  int64_t num_registered = 0;
  // Tokens whose KV executed (post-processed) steps have written.
  int64_t num_executed = 0;
  // Incremented at each admission; results of steps planned before it are ignored.
  int64_t admission = 0;
  // The KV this sequence computes descends from a replayed window state.
  bool approximate = false;
  // Window floor and cached-KV end of a bounded replay (model.h SequenceChunk); 0 = none.
  int64_t replay_start = 0;
  int64_t replay_until = 0;
  // Snapshot to load into the state slot before the first item after admission.
  std::shared_ptr<const kv::StateSnapshot> restore;
  // Latest snapshot taken at a boundary that decode crossed, and that boundary (tokens).
  std::shared_ptr<const kv::StateSnapshot> decode_snapshot;
  int64_t decode_snapshot_at = 0;
  // What the first admission's hit gave (reported on the stream), and whether any admission
  // of this sequence started from approximate state (sticky, reported).
  bool admitted_once = false;
  bool output_approximate = false;
  int cached_tokens = 0;
  int replayed_tokens = 0;
  int cached_host_tokens = 0;
  int cached_store_tokens = 0;
  // Fetch of the prompt's blocks from the KV store (kv_tiers.h); admission waits for it.
  std::shared_ptr<FetchTicket> fetch;
  int64_t fetch_begin = 0;  // first block index of the fetched chain
  // Blocks swapped in from the host tier: copied into the pool before the first item's forward.
  std::vector<std::pair<int32_t, std::string>> swap_ins;

  int prompt_len() const { return static_cast<int>(info->prompt.size()); }
  int64_t num_output_resolved() const { return static_cast<int64_t>(tokens.size()) - prompt_len(); }
  // Tokens including in-flight samples.
  int64_t logical_len() const { return static_cast<int64_t>(tokens.size()) + num_pending; }
  int64_t logical_output() const { return logical_len() - prompt_len(); }
};

// One sequence's part of a step.
struct PlanItem {
  int64_t seq_id = 0;
  int64_t start_pos = 0;
  // Known input tokens; empty when use_last_sample (then the one input token is the runner's
  // latest sample of this sequence).
  std::vector<int32_t> tokens;
  bool use_last_sample = false;
  // The last `num_draft` of `tokens` are draft tokens to verify (speculative decoding): the
  // chunk then needs the logits of its last num_draft + 1 rows and commits 1..num_draft + 1
  // tokens; the KV of rejected drafts is rolled back (Scheduler::OnVerified).
  int num_draft = 0;
  std::vector<int32_t> block_table;  // covers [0, start_pos + num_tokens)
  int32_t state_slot = -1;
  bool sample = false;           // the chunk ends at the sequence's end: sample the next token
  bool prompt_logprobs = false;  // return logprobs of prompt tokens inside this chunk
  // Bounded replay fields of model::SequenceChunk.
  int64_t replay_start = 0;
  int64_t replay_until = 0;
  // model::SequenceChunk::prefill_end: the prompt length, 0 for prompt-logprob requests.
  int64_t prefill_end = 0;
  // Loaded into the state slot before the forward (a prefix-cache hit's snapshot).
  std::shared_ptr<const kv::StateSnapshot> restore;
  // Block payloads to copy into the pool before the forward (host-tier swap-in).
  std::vector<std::pair<int32_t, std::string>> swap_ins;
  // Copy the state slot after the forward (the chunk ends at a block boundary).
  enum class Snapshot { kNone, kStore, kKeep };
  Snapshot snapshot = Snapshot::kNone;
  bool snapshot_approximate = false;
  int64_t admission = 0;  // Sequence::admission when planned
  int num_tokens() const { return use_last_sample ? 1 : static_cast<int>(tokens.size()); }
};

// Registration of a sequence with the runner (first time it is planned).
struct RunnerSeqInit {
  int64_t seq_id = 0;
  std::shared_ptr<const RequestInfo> info;
  int sample_index = 0;
};

struct StepPlan {
  int64_t step_id = 0;
  std::vector<RunnerSeqInit> new_seqs;  // register before running the items
  std::vector<PlanItem> items;
  std::vector<int64_t> released_seqs;  // forget after running the items
  int num_preempted = 0;
  int64_t num_tokens() const {
    int64_t n = 0;
    for (const PlanItem& it : items) n += it.num_tokens();
    return n;
  }
};

struct SchedulerConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int64_t max_context = 0;
  // Prefix caching (engine.h EngineConfig). `layout_id` and `window_tokens` come from the
  // model's KvLayout; `has_state`: the layout has per-sequence state (snapshots apply).
  bool prefix_caching = false;
  bool exact = false;
  uint64_t layout_id = 0;
  int64_t window_tokens = 0;
  // KvLayout::min_recompute_tokens: a hit also leaves this many tokens to recompute.
  int64_t min_recompute_tokens = 0;
  bool has_state = false;
};

// Prefix-cache counters (cumulative, tokens unless named otherwise).
struct PrefixCacheCounters {
  int64_t query_tokens = 0;
  int64_t hit_tokens = 0;
  int64_t replayed_tokens = 0;
  int64_t replays = 0;
  int64_t host_hit_tokens = 0;
  int64_t store_hit_tokens = 0;
};

class Scheduler {
 public:
  // `blocks`, `slots` and `snapshots` are owned by the caller and outlive the scheduler; `slots`
  // has at least max_num_seqs slots. `snapshots` may be null (no snapshots).
  Scheduler(const SchedulerConfig& config, kv::BlockPool* blocks, kv::StateCache* slots,
            kv::SnapshotCache* snapshots = nullptr, KvTiers* tiers = nullptr);

  // Adds a waiting sequence (order must exceed every earlier one).
  void AddWaiting(Sequence* seq);
  // Builds the next step's plan and applies its bookkeeping (blocks, computed counts, pending
  // samples, preemptions). An empty plan means nothing can run now.
  StepPlan Schedule();
  // Removes a sequence from the queues and frees its blocks and slot (finish or abort). Its
  // in-flight samples are ignored when they arrive. Idempotent.
  void Remove(Sequence* seq);
  // Records that an executed step wrote `seq`'s KV up to position `end` (exclusive), for the
  // item planned at admission `admission`: registers the blocks that are now complete and
  // stores or keeps the state snapshot the item took (null when it took none).
  void OnExecuted(Sequence* seq, int64_t admission, int64_t end, PlanItem::Snapshot kind,
                  std::shared_ptr<const kv::StateSnapshot> snapshot);
  // After a verify step (PlanItem::num_draft > 0) of admission `admission`: only the KV of
  // positions below `valid_end` is valid (rejected drafts wrote the rest), so computing resumes
  // there. No-op for a stale admission.
  void OnVerified(Sequence* seq, int64_t admission, int64_t valid_end);
  // Empties the prefix index and the snapshot cache (Engine::ResetPrefixCache).
  void ResetPrefixCache();
  const PrefixCacheCounters& prefix_counters() const { return counters_; }

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  // What an admission starts from.
  struct Hit {
    std::vector<int32_t> blocks;  // cached blocks to share, [0, blocks.size() * 128)
    int64_t start = 0;            // first position to compute
    int64_t replay_start = 0, replay_until = 0;
    std::shared_ptr<const kv::StateSnapshot> restore;
    bool approximate = false;
    int64_t cached = 0, replayed = 0;
    // Blocks after `blocks` read from the host tier (swapped into new pool blocks on
    // admission), and how many of them the request's fetch brought from the store.
    std::vector<kv::StoredBlock> host_blocks;
    // Of the cached blocks below L0: how many came from the host tier / from the store.
    int64_t host_cached_blocks = 0;
    int64_t store_blocks = 0;
  };
  bool EnsureBlocks(Sequence* seq, int64_t end);
  void Preempt(Sequence* seq);
  // `num_draft` of seq->draft follow the n known tokens (a verify chunk).
  PlanItem MakeItem(Sequence* seq, int64_t n, int64_t num_draft = 0);
  // How many of seq->draft a chunk of the n tokens from num_computed may verify.
  int64_t DraftsFor(Sequence* seq, int64_t n, int64_t budget);
  // Keys of the first `n` complete blocks of seq->tokens.
  const std::vector<kv::BlockKey>& EnsureKeys(Sequence* seq, int64_t n);
  // The hit rule for `seq` (no references taken).
  Hit Lookup(Sequence* seq);
  // Whether sample `seq` (> 0) may be admitted: sample 0 has written the prompt's blocks up to
  // its last boundary (then the fork shares them and restores its snapshot).
  bool SiblingReady(const Sequence* seq) const;
  // Shortens a prompt chunk of n tokens so that it ends at the snapshot boundary.
  int64_t CutAtSnapshot(const Sequence* seq, int64_t n) const;
  bool snapshots_enabled() const;
  // The snapshot at boundary `key`: the engine's cache, else the tiers' shared-memory arena.
  std::shared_ptr<const kv::StateSnapshot> FindSnapshot(const kv::BlockKey& key);
  // Stores a snapshot in the engine's cache and (asynchronously) the shared-memory arena.
  void PutSnapshot(const kv::BlockKey& key, std::shared_ptr<const kv::StateSnapshot> snapshot);
  // Stores a sequence's kept decode snapshot (finish, abort, preemption).
  void StoreDecodeSnapshot(Sequence* seq);
  // Blocks the hit rule may cover for `seq` (cap / 128) and whether the cap is relaxed.
  int64_t MaxHitBlocks(const Sequence* seq) const;
  // Starts the fetch of the prompt's blocks missing from the pool (new sample-0 sequences).
  void StartFetch(Sequence* seq);
  // Writes a newly registered block back to the tiers.
  void WriteBack(const Sequence* seq, int64_t j);

  SchedulerConfig config_;
  kv::BlockPool* blocks_;
  kv::StateCache* slots_;
  kv::SnapshotCache* snapshots_;
  KvTiers* tiers_;
  PrefixCacheCounters counters_;
  std::vector<Sequence*> running_;  // by order, oldest first
  std::deque<Sequence*> waiting_;   // by order, oldest first
  int64_t next_step_id_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SCHEDULER_H_
