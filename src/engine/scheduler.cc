#include "engine/scheduler.h"

#include <algorithm>

#include "common/check.h"
#include "model/kv_layout.h"

namespace deepinfer::engine {
namespace {

using model::kBlockTokens;

int64_t BlocksFor(int64_t tokens) { return (tokens + kBlockTokens - 1) / kBlockTokens; }

bool OlderThan(const Sequence* a, const Sequence* b) { return a->order < b->order; }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, kv::BlockPool* blocks, kv::StateCache* slots)
    : config_(config), blocks_(blocks), slots_(slots) {
  CHECK(slots_->num_slots() >= config_.max_num_seqs);
}

void Scheduler::AddWaiting(Sequence* seq) {
  CHECK(seq->status == SeqStatus::kWaiting);
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, OlderThan), seq);
}

void Scheduler::Remove(Sequence* seq) {
  if (seq->status == SeqStatus::kFinished) return;
  if (seq->status == SeqStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else {
    auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  blocks_->Release(seq->blocks);
  seq->blocks.clear();
  if (seq->state_slot >= 0) slots_->Free(seq->state_slot);
  seq->state_slot = -1;
  seq->status = SeqStatus::kFinished;
}

void Scheduler::Preempt(Sequence* seq) {
  CHECK(seq->status == SeqStatus::kRunning);
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  blocks_->Release(seq->blocks);
  seq->blocks.clear();
  slots_->Free(seq->state_slot);
  seq->state_slot = -1;
  // Recompute from scratch: KV of the resolved tokens is rebuilt; in-flight samples are resolved
  // before the sequence is admitted again.
  seq->num_computed = 0;
  if (!seq->prompt_logprobs_sent) seq->prompt_logprobs.clear();
  seq->status = SeqStatus::kWaiting;
  AddWaiting(seq);
  ++num_preemptions_;
}

bool Scheduler::EnsureBlocks(Sequence* seq, int64_t end) {
  const int64_t need = BlocksFor(end) - static_cast<int64_t>(seq->blocks.size());
  if (need <= 0) return true;
  return blocks_->Allocate(need, &seq->blocks);
}

PlanItem Scheduler::MakeItem(Sequence* seq, int64_t n) {
  PlanItem item;
  item.seq_id = seq->seq_id;
  item.start_pos = seq->num_computed;
  const int64_t known = static_cast<int64_t>(seq->tokens.size());
  if (seq->num_computed < known) {
    CHECK(seq->num_pending == 0) << "seq " << seq->seq_id << " recomputes with samples in flight";
    CHECK(seq->num_computed + n <= known);
    item.tokens.assign(seq->tokens.begin() + seq->num_computed,
                       seq->tokens.begin() + seq->num_computed + n);
    item.sample = seq->num_computed + n == known;
  } else {
    // Decode of the newest in-flight sample.
    CHECK(n == 1 && seq->num_pending >= 1 && seq->num_computed == seq->logical_len() - 1);
    item.use_last_sample = true;
    item.sample = true;
  }
  item.prompt_logprobs = seq->sample_index == 0 && seq->info->params.prompt_logprobs >= 0 &&
                         !seq->prompt_logprobs_sent && item.start_pos < seq->prompt_len();
  item.state_slot = seq->state_slot;
  seq->num_computed += n;
  item.block_table.assign(seq->blocks.begin(), seq->blocks.begin() + BlocksFor(seq->num_computed));
  if (item.sample) ++seq->num_pending;
  return item;
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  plan.step_id = next_step_id_++;
  int64_t budget = config_.max_num_batched_tokens;

  // 1. Running sequences, oldest first. Preemption takes the newest, which (iterating oldest
  // first) is never one already placed in this plan.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t known = static_cast<int64_t>(seq->tokens.size());
    int64_t n = 0;
    if (seq->num_computed < known) {
      n = std::min(known - seq->num_computed, budget);
    } else if (seq->num_pending > 0 && seq->num_computed == seq->logical_len() - 1 &&
               seq->logical_output() < seq->info->params.max_tokens &&
               seq->logical_len() < config_.max_context) {
      n = 1;
    }
    if (n == 0) {  // waiting for in-flight samples, or at its length limit
      ++i;
      continue;
    }
    // Shrink a prompt chunk to the blocks that are free; a single token needs one block.
    const int64_t have = static_cast<int64_t>(seq->blocks.size()) * kBlockTokens;
    const int64_t room = have + blocks_->num_free() * kBlockTokens - seq->num_computed;
    if (room >= 1) n = std::min(n, room);
    bool placed = false;
    while (true) {
      if (room >= 1 && EnsureBlocks(seq, seq->num_computed + n)) {
        placed = true;
        break;
      }
      Sequence* victim = running_.back();
      Preempt(victim);
      ++plan.num_preempted;
      if (victim == seq) break;
      // Retry with the blocks the victim freed.
      const int64_t room2 = have + blocks_->num_free() * kBlockTokens - seq->num_computed;
      if (room2 >= 1) {
        n = std::min(n, room2);
        if (EnsureBlocks(seq, seq->num_computed + n)) {
          placed = true;
          break;
        }
      }
    }
    if (!placed) continue;  // seq itself was preempted; running_[i] is now the next one
    if (!seq->registered_with_runner) {
      plan.new_seqs.push_back({seq->seq_id, seq->info, seq->sample_index});
      seq->registered_with_runner = true;
    }
    plan.items.push_back(MakeItem(seq, n));
    budget -= n;
    ++i;
  }

  // 2. Admission, FIFO.
  while (budget > 0 && plan.num_preempted == 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    if (seq->num_pending > 0) break;  // preempted with samples in flight: resolve them first
    const int64_t known = static_cast<int64_t>(seq->tokens.size());
    CHECK(seq->num_computed == 0);
    int64_t n = std::min(known, budget);
    n = std::min(n, blocks_->num_free() * kBlockTokens);
    if (n < 1) break;
    std::optional<int32_t> slot = slots_->Allocate();
    CHECK(slot.has_value()) << "state slots are sized max_num_seqs";
    CHECK(EnsureBlocks(seq, n));
    waiting_.pop_front();
    seq->state_slot = *slot;
    seq->status = SeqStatus::kRunning;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, OlderThan), seq);
    if (!seq->registered_with_runner) {
      plan.new_seqs.push_back({seq->seq_id, seq->info, seq->sample_index});
      seq->registered_with_runner = true;
    }
    plan.items.push_back(MakeItem(seq, n));
    budget -= n;
  }
  return plan;
}

}  // namespace deepinfer::engine
