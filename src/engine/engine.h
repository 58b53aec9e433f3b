// Engine: continuous batching over one CausalLM (ARCHITECTURE.md §3-4, §8; DEEPINFER-DESIGN.md §8).
//
// One engine thread owns every request, the block pool and the state cache. Each step it
// (1) takes new submissions and aborts, (2) asks the scheduler for a plan (decode tokens for
// running sequences, prompt chunks for prefilling ones, under max_num_batched_tokens and
// max_num_seqs; FIFO admission; preempting the newest sequence when blocks run out),
// (3) hands the plan to the model runner (forward + sampling on a runner thread), and
// (4) post-processes results: stop conditions, stream outputs, freeing finished sequences.
// With async_scheduling the engine plans step N+1 while the runner executes step N; step N's
// sampled ids are resolved on the runner side, so planning never waits for them. Outputs are
// identical with and without async scheduling (sampling randomness is keyed per request).
//
// Thread-safety: Submit, Abort, Stats and Shutdown may be called from any thread.
#ifndef DEEPINFER_ENGINE_ENGINE_H_
#define DEEPINFER_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv_tiers.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "engine/speculative/drafter.h"
#include "engine/speculative/varlen_controller.h"
#include "engine/speculative/verify_planner.h"
#include "kv/block_pool.h"
#include "model/model.h"

namespace deepinfer::engine {

// Speculative decoding (issue #26, docs/speculative-decoding.md): a drafter proposes up to
// num_speculative_tokens tokens per step and the target verifies them in the same forward.
// Greedy and seeded sampled outputs are identical to speculation off (sample-and-compare with
// the sampler's position-keyed RNG, spec §4.2).
struct SpeculativeConfig {
  enum class Method {
    kNone,
    kNgram,   // n-gram prompt lookup (NgramDrafter)
    kMtp,     // the model's MTP block (DeepSeek-V4), chained on its own output (spec §2)
    kCustom,  // `drafter` below (tests: ScriptedDrafter)
    kDspark,  // the model's DSpark block (DeepSeek-V4.1): a block of drafts per step (spec §3)
  };
  Method method = Method::kNone;
  // Drafts verified per step (k_max), 1..kMaxSpeculativeTokens; 0 = the method's default,
  // resolved by Engine::Create: 1 for kMtp (MTP-1, spec §2.1), the model's DSpark block for
  // kDspark (5 in the release, capped at kMaxSpeculativeTokens), 3 for kNgram / kCustom.
  int num_speculative_tokens = 0;
  // N-gram sizes tried, longest first (vLLM's prompt_lookup_min / prompt_lookup_max names; the
  // CLI applies vLLM's defaults, 5 / 5, these are the engine API's).
  int prompt_lookup_min = 2;
  int prompt_lookup_max = 5;
  // Method::kCustom: the drafter (shared so tests can keep a handle).
  std::shared_ptr<Drafter> drafter;
  // kDspark only: requests with a temperature > 0 (and no grammar) draw their drafts from the
  // DSpark head's q at that temperature and are verified by rejection sampling (spec §4.2-4.3;
  // higher acceptance than greedy drafts, the output law is the target's but seeded outputs are
  // no longer identical to speculation off). Off: greedy drafts, sample-and-compare.
  bool sampled_drafts = false;
  // Confidence-scheduled variable-length verification (spec §5; speculative/varlen_controller.h):
  // off | sync_greedy_stop (Algorithm 1) | async_budget (budget from stale confidences, split by
  // current ones). Outputs are the same in every mode (sample-and-compare); only how many drafts
  // each step verifies changes.
  VarlenMode varlen = VarlenMode::kOff;
  // Step time vs target tokens for the planner; null with profile_cost_table false: verify-all
  // (counted in EngineStats::spec_planner_no_table).
  std::shared_ptr<const CostTable> cost_table;
  // Time real verify forwards at start-up over an M grid instead (a few seconds at most).
  bool profile_cost_table = false;
  // Fewer speculating sequences in a step than this: verify the full block (spec §5.8).
  int varlen_min_concurrency = 0;
  // Plan variable lengths only where they measured faster than full blocks (committed tokens
  // per ms per concurrency bucket; VarlenController "benefit gate", spec §5.8). The CLI turns
  // it on (--speculative-varlen-gate measured); off here so planner tests see every step planned.
  bool varlen_benefit_gate = false;
  // Tests: called on the engine thread with every planned step (E12).
  std::function<void(const VarlenStepTrace&)> varlen_observer;
};
// The most drafts a step verifies: the window rings' spare slots (model::
// kSpeculativeRollbackTokens = anchor + 5 drafts).
inline constexpr int kMaxSpeculativeTokens = 5;

struct EngineConfig {
  // Bytes for KV: max_num_seqs state slots (if the model has state) plus as many 128-token
  // blocks as fit in the rest. Must leave room for at least one block.
  int64_t kv_memory_bytes = int64_t{1} << 30;
  // Maximum sequences (samples) running at once; also the number of state slots.
  int max_num_seqs = 64;
  // Token budget per step: decode tokens + prompt-chunk tokens. Long prompts are chunked.
  int max_num_batched_tokens = 2048;
  // Maximum requests waiting for admission; Submit returns ResourceExhausted beyond it.
  int max_waiting_requests = 100000;
  // Overlap planning/post-processing with the forward (DEEPINFER-DESIGN.md §8).
  bool async_scheduling = true;
  // Prefix caching over the block pool (KV-CACHE.md §2-6): complete blocks stay cached after
  // their last user and later requests with the same prefix reuse them.
  bool enable_prefix_caching = true;
  // kReplay: the hit rule of KV-CACHE.md §5 with bounded replay when no SWA snapshot exists
  // (blocks computed after a replay are marked approximate). kExact: only exact blocks are
  // reused and the hit ends at a snapshot (never replays); outputs equal an uncached run.
  enum class PrefixCacheMode { kReplay, kExact };
  PrefixCacheMode prefix_cache_mode = PrefixCacheMode::kReplay;
  // Host-memory budget for SWA state snapshots (bytes, LRU). 0 = no snapshots (every DeepSeek
  // hit then replays, or misses in exact mode).
  int64_t snapshot_memory_bytes = int64_t{1} << 30;
  // Receives every block the prefix index stores or removes (KV events for prefix-aware
  // routers, e.g. stage 3's entrypoint or llm-d). Called on the engine thread; must not block.
  // Not owned; outlives the engine. nullptr = none.
  kv::PrefixIndexObserver* prefix_index_observer = nullptr;
  // KV tiers below the block pool (host shared memory L1, KV store L2; kv_tiers.h): complete
  // blocks are written back, and a prompt's blocks missing from the pool are fetched and
  // swapped in. Needs enable_prefix_caching. Default: none.
  KvTierOptions tiers;
  // Jump-forward decoding (issue #22 part 3): when a request's grammar forces the next text,
  // its tokens are appended in the same step (no forward pass each). Requests that ask for
  // logprobs are never jumped (forced tokens have no sampled distribution).
  bool jump_forward = true;
  SpeculativeConfig speculative;
};

// A snapshot of engine counters.
struct EngineStats {
  int num_running = 0;  // sequences holding KV (prefilling or decoding)
  int num_waiting = 0;  // sequences waiting for admission (new or preempted)
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  int64_t state_slots_used = 0;
  int64_t state_slots_total = 0;
  int64_t num_steps = 0;  // forwards run
  int64_t num_preemptions = 0;
  int64_t total_prompt_tokens = 0;  // prompt tokens computed (recomputation included)
  int64_t total_output_tokens = 0;  // tokens generated and delivered
  int64_t num_finished_requests = 0;
  // Forward passes the model ran (steps with at least one chunk): with jump-forward or
  // speculation fewer than output tokens.
  int64_t num_forward_passes = 0;
  // Output tokens appended by jump-forward (grammar-forced, no forward pass of their own).
  int64_t jump_forward_tokens = 0;
  // Speculative decoding (spec §6): verify items run, draft tokens verified and accepted, and
  // accepted drafts by position (index j = draft j + 1; kMaxSpeculativeTokens entries). Mean
  // acceptance length = 1 + accepted / verify items; acceptance rate = accepted / drafted.
  int64_t spec_verify_steps = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position = std::vector<int64_t>(kMaxSpeculativeTokens);
  // Variable-length verification (spec §6): steps the planner split, the verification budget
  // B* summed over them and the last one, the drafts they could have verified (Σ cap), steps
  // the min-concurrency gate sent to full blocks, and fallbacks: planned without a cost table
  // (verify-all), sequences without a stale confidence row (neutral 1.0).
  int64_t spec_varlen_steps = 0;
  int64_t spec_verify_budget_total = 0;
  int64_t spec_verify_budget_last = 0;
  int64_t spec_varlen_candidates_total = 0;
  int64_t spec_varlen_gated_steps = 0;
  // Steps the benefit gate verified with full blocks (full blocks measured faster).
  int64_t spec_varlen_benefit_gated_steps = 0;
  int64_t spec_planner_no_table = 0;
  int64_t spec_planner_no_stale_row = 0;
  // Prefix cache (tokens): prompt tokens looked up, tokens served from the cache, tokens
  // recomputed by bounded replays, replays run, blocks evicted, blocks cached (evictable or in
  // use), snapshots held and their bytes.
  int64_t prefix_cache_query_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prefix_cache_replayed_tokens = 0;
  int64_t prefix_cache_replays = 0;
  int64_t prefix_cache_evicted_blocks = 0;
  int64_t prefix_cache_blocks = 0;
  int64_t snapshots = 0;
  int64_t snapshot_bytes = 0;
  int64_t snapshot_evictions = 0;
  // KV tiers: prompt tokens served from L1 / L2, and the tiers' own counters.
  int64_t prefix_cache_host_hit_tokens = 0;
  int64_t prefix_cache_store_hit_tokens = 0;
  // Swap-in from the host tier (bytes copied; copy time; time forwards waited for the copy, so
  // 1 - wait / copy is the part of the copy the forwards hid).
  int64_t swap_in_bytes = 0;
  int64_t swap_in_copy_ns = 0;
  int64_t swap_in_wait_ns = 0;
  KvTierStats tiers;
};

class Engine {
 public:
  // Takes ownership of the model and starts the engine (and runner) threads. Errors:
  // InvalidArgument for a bad config (non-positive sizes, speculative settings out of range,
  // kCustom without a drafter, kMtp on a model without an MTP block or with more than 1 draft,
  // kDspark on a model without a DSpark block or with more drafts than its block) or a budget
  // too small for one block (naming the bytes needed).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<model::CausalLM> model,
                                                        const EngineConfig& config);
  // Aborts whatever is still running and joins the threads.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its output stream. Errors (nothing is queued):
  //   InvalidArgument: empty prompt, token id outside the vocabulary, bad SamplingParams (named),
  //                    logit_bias id outside the vocabulary;
  //   AlreadyExists:   request_id of a live request;
  //   OutOfRange:      prompt length >= the model's max context;
  //   ResourceExhausted: prompt + max_tokens can never fit in the KV budget (message gives the
  //                    blocks needed and available), the waiting queue is full, or the engine is
  //                    shut down (FailedPrecondition);
  //   FailedPrecondition: params.so_args set (the engine takes only compiled grammars; LLM
  //                    compiles so_args before submitting).
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(GenerateRequest request);

  // Aborts a live request at any point: its samples finish with FinishReason::kAbort and all its
  // blocks and state slots are freed. Unknown ids are ignored (the request may have finished).
  void Abort(const std::string& request_id);

  EngineStats Stats() const;

  // Empties the prefix cache (vLLM's /reset_prefix_cache): every cached block that no running
  // sequence holds is freed, blocks in use stop being shared, and all snapshots are dropped.
  // Runs on the engine thread before its next step; returns once done (or at shutdown).
  void ResetPrefixCache();

  // Stops accepting requests, waits up to `timeout_ns` for live requests to finish, then aborts
  // the rest and joins the threads. Idempotent.
  void Shutdown(int64_t timeout_ns = 0);

  const model::ModelInfo& model_info() const;
  const EngineConfig& config() const;

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_ENGINE_H_
