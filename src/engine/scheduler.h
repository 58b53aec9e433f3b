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

#include "engine/request.h"
#include "engine/sampling_params.h"
#include "kv/block_pool.h"
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
  std::vector<int32_t> blocks;  // block table
  int32_t state_slot = -1;
  bool registered_with_runner = false;
  // Prompt logprobs gathered so far (sample 0, prompt_logprobs >= 0) and whether delivered.
  std::vector<TokenLogprob> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  int64_t first_token_ns = 0;

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
  std::vector<int32_t> block_table;  // covers [0, start_pos + num_tokens)
  int32_t state_slot = -1;
  bool sample = false;           // the chunk ends at the sequence's end: sample the next token
  bool prompt_logprobs = false;  // return logprobs of prompt tokens inside this chunk
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
};

class Scheduler {
 public:
  // `blocks` and `slots` are owned by the caller and outlive the scheduler; `slots` has at least
  // max_num_seqs slots.
  Scheduler(const SchedulerConfig& config, kv::BlockPool* blocks, kv::StateCache* slots);

  // Adds a waiting sequence (order must exceed every earlier one).
  void AddWaiting(Sequence* seq);
  // Builds the next step's plan and applies its bookkeeping (blocks, computed counts, pending
  // samples, preemptions). An empty plan means nothing can run now.
  StepPlan Schedule();
  // Removes a sequence from the queues and frees its blocks and slot (finish or abort). Its
  // in-flight samples are ignored when they arrive. Idempotent.
  void Remove(Sequence* seq);

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  bool EnsureBlocks(Sequence* seq, int64_t end);
  void Preempt(Sequence* seq);
  PlanItem MakeItem(Sequence* seq, int64_t n);

  SchedulerConfig config_;
  kv::BlockPool* blocks_;
  kv::StateCache* slots_;
  std::vector<Sequence*> running_;  // by order, oldest first
  std::deque<Sequence*> waiting_;   // by order, oldest first
  int64_t next_step_id_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_SCHEDULER_H_
