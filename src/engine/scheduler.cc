#include "engine/scheduler.h"

#include <algorithm>
#include <span>

#include "common/check.h"
#include "common/clock.h"
#include "model/kv_layout.h"

namespace deepinfer::engine {
namespace {

using model::kBlockTokens;

int64_t BlocksFor(int64_t tokens) { return (tokens + kBlockTokens - 1) / kBlockTokens; }

bool OlderThan(const Sequence* a, const Sequence* b) { return a->order < b->order; }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, kv::BlockPool* blocks, kv::StateCache* slots,
                     kv::SnapshotCache* snapshots, KvTiers* tiers)
    : config_(config),
      blocks_(blocks),
      slots_(slots),
      snapshots_(snapshots),
      tiers_(config.prefix_caching ? tiers : nullptr) {
  CHECK(slots_->num_slots() >= config_.max_num_seqs);
}

int64_t Scheduler::MaxHitBlocks(const Sequence* seq) const {
  const int64_t L = static_cast<int64_t>(seq->tokens.size());
  // A fork of sample 0 (n > 1) and a preempted sequence coming back resume from a snapshot of
  // the same computation: no cap below L - 1 and no replay, so that neither changes outputs.
  const bool resume = seq->sample_index > 0 || seq->admitted_once;
  // Hit rule 1: leave the window (+ speculative rollback) to recompute, and the rows a
  // decoder-side bounded replay keeps (V4.1 compact: its decoder floor is then never below the
  // hit, so no snapshot's decoder windows are read).
  int64_t cap = L - 1;
  if (config_.window_tokens > 0 && !resume) {
    cap = L - std::max<int64_t>(config_.window_tokens + model::kSpeculativeRollbackTokens,
                                config_.min_recompute_tokens);
  }
  return cap < kBlockTokens ? 0 : cap / kBlockTokens;
}

void Scheduler::StartFetch(Sequence* seq) {
  if (tiers_ == nullptr || !tiers_->has_store() || seq->sample_index > 0 ||
      seq->admitted_once || seq->info->params.prompt_logprobs >= 0) {
    return;
  }
  const int64_t max_blocks = MaxHitBlocks(seq);
  if (max_blocks == 0) return;
  const std::vector<kv::BlockKey>& keys = EnsureKeys(seq, max_blocks);
  int64_t n0 = 0;
  while (n0 < max_blocks && blocks_->Find(keys[n0]) >= 0) ++n0;
  if (n0 == max_blocks) return;
  seq->fetch = tiers_->Fetch(std::vector<kv::BlockKey>(keys.begin() + n0, keys.begin() + max_blocks));
  seq->fetch_begin = n0;
}

void Scheduler::WriteBack(const Sequence* seq, int64_t j) {
  kv::BlockMeta meta;
  meta.key = seq->block_keys[j];
  meta.parent = j == 0 ? kv::kRootBlockKey : seq->block_keys[j - 1];
  meta.cache_salt = seq->info->cache_salt;
  meta.layout_id = config_.layout_id;
  meta.traffic_class = seq->info->traffic_class;
  meta.approximate = seq->approximate;
  std::copy(seq->tokens.begin() + j * kBlockTokens, seq->tokens.begin() + (j + 1) * kBlockTokens,
            meta.tokens.begin());
  const uint8_t* bytes = blocks_->base() + seq->blocks[j] * blocks_->block_bytes();
  tiers_->WriteBack(meta, std::string(reinterpret_cast<const char*>(bytes),
                                      static_cast<size_t>(blocks_->block_bytes())));
}

bool Scheduler::snapshots_enabled() const {
  return config_.prefix_caching && config_.has_state && snapshots_ != nullptr &&
         snapshots_->budget() > 0;
}

const std::vector<kv::BlockKey>& Scheduler::EnsureKeys(Sequence* seq, int64_t n) {
  CHECK(n * kBlockTokens <= static_cast<int64_t>(seq->tokens.size()));
  while (static_cast<int64_t>(seq->block_keys.size()) < n) {
    const int64_t j = static_cast<int64_t>(seq->block_keys.size());
    const kv::BlockKey parent = j == 0 ? kv::kRootBlockKey : seq->block_keys[j - 1];
    seq->block_keys.push_back(kv::ComputeBlockKey(
        parent, seq->info->cache_salt, config_.layout_id,
        std::span<const int32_t>(seq->tokens.data() + j * kBlockTokens, kBlockTokens)));
  }
  return seq->block_keys;
}

Scheduler::Hit Scheduler::Lookup(Sequence* seq) {
  Hit hit;
  if (!config_.prefix_caching) return hit;
  // Prompt logprobs need every prompt position's logits: recompute instead of reusing.
  if (seq->sample_index == 0 && seq->info->params.prompt_logprobs >= 0 &&
      !seq->prompt_logprobs_sent) {
    return hit;
  }
  const int64_t L = static_cast<int64_t>(seq->tokens.size());
  counters_.query_tokens += L;
  const bool resume = seq->sample_index > 0 || seq->admitted_once;
  const int64_t max_blocks = MaxHitBlocks(seq);
  if (max_blocks == 0) return hit;
  const std::vector<kv::BlockKey>& keys = EnsureKeys(seq, max_blocks);
  // Rule 2: the longest chain of cached blocks (exact mode: exact blocks only), first in the
  // pool (L0), then continued from the host tier (L1), where a fetch from the store lands.
  std::vector<int32_t> chain;
  bool approximate = false;
  bool stopped_on_approximate = false;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const int32_t b = blocks_->Find(keys[i]);
    if (b < 0) break;
    if (config_.exact && blocks_->approximate(b)) {
      stopped_on_approximate = true;
      break;
    }
    approximate = approximate || blocks_->approximate(b);
    chain.push_back(b);
  }
  std::vector<kv::StoredBlock> host;
  if (tiers_ != nullptr && tiers_->has_host() && !stopped_on_approximate) {
    // Each host block needs a fresh pool block; the chain's unheld blocks stop being free once
    // the hit takes them.
    int64_t room = blocks_->num_free();
    for (int32_t b : chain) room -= blocks_->ref_count(b) == 0 ? 1 : 0;
    for (int64_t i = static_cast<int64_t>(chain.size());
         i < max_blocks && static_cast<int64_t>(host.size()) < room; ++i) {
      absl::StatusOr<kv::StoredBlock> b = tiers_->ReadHost(keys[i]);
      if (!b.ok() || static_cast<int64_t>(b->payload.size()) != blocks_->block_bytes()) break;
      if (config_.exact && b->meta.approximate) break;
      approximate = approximate || b->meta.approximate;
      host.push_back(std::move(*b));
    }
  }
  int64_t n = static_cast<int64_t>(chain.size() + host.size());
  if (n == 0) return hit;
  // Shrinks the hit to its first `n` blocks.
  auto trim = [&](int64_t keep) {
    if (keep <= static_cast<int64_t>(chain.size())) {
      chain.resize(keep);
      host.clear();
    } else {
      host.resize(keep - chain.size());
    }
  };
  // Tier bookkeeping: blocks [fetch_begin + from_host, + from_store) came from the store.
  auto finish = [&] {
    const int64_t l0 = static_cast<int64_t>(chain.size());
    int64_t store_lo = 0, store_hi = 0;
    if (seq->fetch != nullptr && seq->fetch->done()) {
      store_lo = seq->fetch_begin + seq->fetch->from_host();
      store_hi = store_lo + seq->fetch->from_store();
    }
    const int64_t cached_blocks = hit.cached / kBlockTokens;
    for (int64_t i = l0; i < cached_blocks; ++i) {
      if (i >= store_lo && i < store_hi) {
        ++hit.store_blocks;
      } else {
        ++hit.host_cached_blocks;
      }
    }
    hit.blocks = std::move(chain);
    hit.host_blocks = std::move(host);
    counters_.hit_tokens += hit.cached;
    counters_.host_hit_tokens += hit.host_cached_blocks * kBlockTokens;
    counters_.store_hit_tokens += hit.store_blocks * kBlockTokens;
  };
  if (!config_.has_state) {  // no window state: plain block reuse
    hit.start = hit.cached = n * kBlockTokens;
    hit.approximate = approximate;
    finish();
    return hit;
  }
  // Rule 3: a snapshot at the hit end restores the window state.
  std::shared_ptr<const kv::StateSnapshot> snap = FindSnapshot(keys[n - 1]);
  if (config_.exact || resume) {
    // Never replay: end the hit at the last snapshot (exact mode: exact snapshot).
    auto usable = [&] { return snap != nullptr && !(config_.exact && snap->approximate); };
    while (n > 0 && !usable()) {
      --n;
      snap = n > 0 ? FindSnapshot(keys[n - 1]) : nullptr;
    }
    if (n == 0) return hit;
    trim(n);
  }
  if (snap != nullptr) {
    hit.start = hit.cached = n * kBlockTokens;
    hit.restore = std::move(snap);
    hit.approximate = approximate || hit.restore->approximate;
  } else {
    // Rule 4: replay the last block of the hit with the suffix; its block KV is reused as is.
    hit.start = hit.cached = (n - 1) * kBlockTokens;
    hit.replay_start = hit.start;
    hit.replay_until = n * kBlockTokens;
    if (hit.start > 0) {  // a replay from position 0 is an ordinary, exact prefill
      hit.replayed = kBlockTokens;
      hit.approximate = true;
      ++counters_.replays;
      counters_.replayed_tokens += kBlockTokens;
    }
    hit.approximate = hit.approximate || approximate;
  }
  finish();
  return hit;
}

bool Scheduler::SiblingReady(const Sequence* seq) const {
  if (seq->first_sample == nullptr || !config_.prefix_caching) return true;
  const Sequence* first = seq->first_sample;
  if (first->status == SeqStatus::kFinished) return true;
  const int64_t boundary = (seq->prompt_len() - 1) / kBlockTokens * kBlockTokens;
  if (boundary == 0) return true;
  return first->status == SeqStatus::kRunning && first->num_executed >= boundary;
}

int64_t Scheduler::CutAtSnapshot(const Sequence* seq, int64_t n) const {
  if (!snapshots_enabled()) return n;
  const int64_t known = static_cast<int64_t>(seq->tokens.size());
  const int64_t boundary = (known - 1) / kBlockTokens * kBlockTokens;
  if (seq->num_computed < boundary && seq->num_computed + n > boundary) {
    return boundary - seq->num_computed;
  }
  return n;
}

std::shared_ptr<const kv::StateSnapshot> Scheduler::FindSnapshot(const kv::BlockKey& key) {
  if (!snapshots_enabled()) return nullptr;
  std::shared_ptr<const kv::StateSnapshot> snap = snapshots_->Get(key);
  if (snap == nullptr && tiers_ != nullptr && tiers_->has_snapshots()) {
    // A snapshot taken by an earlier engine on this machine (shared memory survives restarts).
    snap = tiers_->ReadSnapshot(key);
    if (snap != nullptr) snapshots_->Put(key, snap);
  }
  return snap;
}

void Scheduler::PutSnapshot(const kv::BlockKey& key,
                            std::shared_ptr<const kv::StateSnapshot> snapshot) {
  if (tiers_ != nullptr && tiers_->has_snapshots()) tiers_->WriteSnapshot(key, snapshot);
  snapshots_->Put(key, std::move(snapshot));
}

void Scheduler::StoreDecodeSnapshot(Sequence* seq) {
  if (seq->decode_snapshot != nullptr && snapshots_enabled()) {
    const int64_t j = seq->decode_snapshot_at / kBlockTokens;
    PutSnapshot(EnsureKeys(seq, j)[j - 1], std::move(seq->decode_snapshot));
  }
  seq->decode_snapshot = nullptr;
  seq->decode_snapshot_at = 0;
}

void Scheduler::OnExecuted(Sequence* seq, int64_t admission, int64_t end,
                           PlanItem::Snapshot kind,
                           std::shared_ptr<const kv::StateSnapshot> snapshot) {
  if (seq->status != SeqStatus::kRunning || seq->admission != admission) return;
  seq->num_executed = std::max(seq->num_executed, end);
  if (config_.prefix_caching) {
    const int64_t complete =
        std::min<int64_t>(seq->num_executed / kBlockTokens, static_cast<int64_t>(seq->blocks.size()));
    if (seq->num_registered < complete) {
      const std::vector<kv::BlockKey>& keys = EnsureKeys(seq, complete);
      for (int64_t j = seq->num_registered; j < complete; ++j) {
        const bool stored =
            blocks_->Register(seq->blocks[j], keys[j], j == 0 ? kv::kRootBlockKey : keys[j - 1],
                              j == 0 ? -1 : seq->blocks[j - 1], seq->approximate);
        // Blocks this sequence computed go down the tiers (a duplicate's owner wrote its own).
        if (stored && tiers_ != nullptr) WriteBack(seq, j);
      }
      seq->num_registered = complete;
    }
  }
  if (snapshot == nullptr || !snapshots_enabled() || end % kBlockTokens != 0) return;
  if (kind == PlanItem::Snapshot::kStore) {
    const int64_t j = end / kBlockTokens;
    PutSnapshot(EnsureKeys(seq, j)[j - 1], std::move(snapshot));
  } else if (kind == PlanItem::Snapshot::kKeep) {
    seq->decode_snapshot = std::move(snapshot);
    seq->decode_snapshot_at = end;
  }
}

void Scheduler::OnVerified(Sequence* seq, int64_t admission, int64_t valid_end) {
  if (seq->status != SeqStatus::kRunning || seq->admission != admission) return;
  CHECK(valid_end <= seq->num_computed);
  seq->num_computed = valid_end;
}

void Scheduler::ResetPrefixCache() {
  blocks_->ClearIndex();
  if (snapshots_ != nullptr) snapshots_->Clear();
  for (Sequence* seq : running_) seq->decode_snapshot = nullptr;
}

void Scheduler::AddWaiting(Sequence* seq) {
  CHECK(seq->status == SeqStatus::kWaiting);
  if (config_.prefix_caching && !seq->admitted_once) StartFetch(seq);
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
  StoreDecodeSnapshot(seq);
  blocks_->Release(seq->blocks);
  seq->blocks.clear();
  if (seq->state_slot >= 0) slots_->Free(seq->state_slot);
  seq->state_slot = -1;
  seq->restore = nullptr;
  seq->status = SeqStatus::kFinished;
}

void Scheduler::Preempt(Sequence* seq) {
  CHECK(seq->status == SeqStatus::kRunning);
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  // Its registered blocks stay cached (evictable) and its latest decode boundary state becomes
  // a snapshot, so re-admission hits them like any other request.
  StoreDecodeSnapshot(seq);
  blocks_->Release(seq->blocks);
  seq->blocks.clear();
  slots_->Free(seq->state_slot);
  seq->state_slot = -1;
  seq->restore = nullptr;
  seq->num_registered = 0;
  seq->num_executed = 0;
  seq->approximate = false;
  seq->replay_start = seq->replay_until = 0;
  // Recompute what the cache does not give back: KV of the resolved tokens is rebuilt;
  // in-flight samples are resolved before the sequence is admitted again.
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

int64_t Scheduler::DraftsFor(Sequence* seq, int64_t n, int64_t budget) {
  const int64_t known = static_cast<int64_t>(seq->tokens.size());
  if (seq->draft.empty() || seq->num_pending > 0 || seq->num_computed + n != known) return 0;
  int64_t l = std::min<int64_t>(static_cast<int64_t>(seq->draft.size()), budget - n);
  l = std::min<int64_t>(l, seq->info->max_draft_tokens);
  // A step commits at most l + 1 tokens: never past max_tokens (spec §4.8), and every verified
  // position stays inside the model's context.
  l = std::min<int64_t>(l, seq->info->params.max_tokens - seq->num_output_resolved() - 1);
  l = std::min<int64_t>(l, config_.max_context - 1 - known);
  if (config_.has_state) {
    // Window state is rolled back by restoring the slot copied before the step, which then
    // recomputes the chunk: keep verify chunks to the anchor + drafts.
    if (n != 1) return 0;
    // A state snapshot is taken only at a block boundary the step ends on: keep the drafts
    // inside the block (the runner drops the snapshot when a draft is rejected).
    if (snapshots_enabled()) {
      if (known % kBlockTokens == 0) return 0;
      l = std::min<int64_t>(l, BlocksFor(known) * kBlockTokens - known);
    }
  }
  if (l <= 0) return 0;
  // Drafts never preempt anyone: verify fewer when blocks are short.
  const int64_t have = static_cast<int64_t>(seq->blocks.size()) * kBlockTokens;
  l = std::min<int64_t>(l, have + blocks_->num_free() * kBlockTokens - known);
  if (l <= 0 || !EnsureBlocks(seq, known + l)) return 0;
  return l;
}

PlanItem Scheduler::MakeItem(Sequence* seq, int64_t n, int64_t num_draft) {
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
    if (num_draft > 0) {
      CHECK(item.sample && num_draft <= static_cast<int64_t>(seq->draft.size()));
      item.tokens.insert(item.tokens.end(), seq->draft.begin(), seq->draft.begin() + num_draft);
      item.num_draft = static_cast<int>(num_draft);
      n += num_draft;
    }
  } else {
    // Decode of the newest in-flight sample.
    CHECK(n == 1 && seq->num_pending >= 1 && seq->num_computed == seq->logical_len() - 1);
    item.use_last_sample = true;
    item.sample = true;
  }
  item.prompt_logprobs = seq->sample_index == 0 && seq->info->params.prompt_logprobs >= 0 &&
                         !seq->prompt_logprobs_sent && item.start_pos < seq->prompt_len();
  item.state_slot = seq->state_slot;
  item.replay_start = seq->replay_start;
  item.replay_until = seq->replay_until;
  item.prefill_end = seq->info->params.prompt_logprobs >= 0 ? 0 : seq->prompt_len();
  item.restore = std::move(seq->restore);
  seq->restore = nullptr;
  item.swap_ins = std::move(seq->swap_ins);
  seq->swap_ins.clear();
  item.admission = seq->admission;
  item.snapshot_approximate = seq->approximate;
  seq->num_computed += n;
  if (snapshots_enabled() && seq->num_computed % kBlockTokens == 0) {
    // A prefill chunk ending at the last boundary before the known tokens' end (CutAtSnapshot
    // put it there) stores its state; any other step ending at a boundary (decode crossing it,
    // a chunk that happens to end there) keeps it for when the sequence ends or is preempted.
    const int64_t boundary =
        (static_cast<int64_t>(seq->tokens.size()) - 1) / kBlockTokens * kBlockTokens;
    item.snapshot = seq->num_computed == boundary && !item.sample ? PlanItem::Snapshot::kStore
                                                                  : PlanItem::Snapshot::kKeep;
  }
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
      n = CutAtSnapshot(seq, std::min(known - seq->num_computed, budget));
    } else if (!seq->info->multi_token_steps() && seq->num_pending > 0 &&
               seq->num_computed == seq->logical_len() - 1 &&
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
    const int64_t drafts = DraftsFor(seq, n, budget);
    plan.items.push_back(MakeItem(seq, n, drafts));
    seq->draft.clear();
    seq->draft_confidence.clear();
    budget -= n + drafts;
    ++i;
  }

  // 2. Admission, FIFO (a later sample of a request whose sample 0 has not yet written the
  // prompt waits without holding up the queue behind it).
  for (auto it = waiting_.begin(); budget > 0 && plan.num_preempted == 0 &&
                                   it != waiting_.end() &&
                                   static_cast<int>(running_.size()) < config_.max_num_seqs;) {
    Sequence* seq = *it;
    if (seq->num_pending > 0) break;  // preempted with samples in flight: resolve them first
    if (!SiblingReady(seq) || (seq->fetch != nullptr && !seq->fetch->done() &&
                               MonotonicNanos() < seq->fetch->deadline_ns())) {
      ++it;  // waits for sample 0, or for its blocks to arrive from the store
      continue;
    }
    const int64_t known = static_cast<int64_t>(seq->tokens.size());
    CHECK(seq->num_computed == 0 && seq->blocks.empty());
    Hit hit = Lookup(seq);
    // Take the hit's blocks before allocating, so that allocation cannot evict them.
    for (int32_t b : hit.blocks) blocks_->IncRef(b);
    seq->blocks = hit.blocks;
    std::vector<int32_t> fresh;  // pool blocks for the host-tier part of the hit
    CHECK(blocks_->Allocate(static_cast<int64_t>(hit.host_blocks.size()), &fresh));
    seq->blocks.insert(seq->blocks.end(), fresh.begin(), fresh.end());
    seq->num_computed = hit.start;
    int64_t n = std::min(known - hit.start, budget);
    n = std::min(n, (static_cast<int64_t>(seq->blocks.size()) + blocks_->num_free()) *
                            kBlockTokens -
                        hit.start);
    n = CutAtSnapshot(seq, n);
    if (n < 1) {
      blocks_->Release(seq->blocks);  // the fresh blocks are not registered yet: simply freed
      seq->blocks.clear();
      seq->num_computed = 0;
      break;
    }
    // Swap-in: register the fresh blocks now; their bytes are copied in before the forward of
    // this plan, the first that can read them.
    for (size_t k = 0; k < fresh.size(); ++k) {
      const int64_t j = static_cast<int64_t>(hit.blocks.size() + k);
      const kv::BlockMeta& meta = hit.host_blocks[k].meta;
      blocks_->Register(fresh[k], meta.key, meta.parent, j == 0 ? -1 : seq->blocks[j - 1],
                        meta.approximate);
      seq->swap_ins.emplace_back(fresh[k], std::move(hit.host_blocks[k].payload));
    }
    std::optional<int32_t> slot = slots_->Allocate();
    CHECK(slot.has_value()) << "state slots are sized max_num_seqs";
    CHECK(EnsureBlocks(seq, hit.start + n));
    it = waiting_.erase(it);
    ++seq->admission;
    seq->num_registered = static_cast<int64_t>(hit.blocks.size() + fresh.size());
    seq->fetch = nullptr;
    seq->num_executed = hit.start;
    seq->approximate = hit.approximate;
    seq->output_approximate = seq->output_approximate || hit.approximate;
    seq->replay_start = hit.replay_start;
    seq->replay_until = hit.replay_until;
    seq->restore = std::move(hit.restore);
    if (!seq->admitted_once) {
      seq->admitted_once = true;
      seq->first_scheduled_ns = MonotonicNanos();
      seq->cached_tokens = static_cast<int>(std::min<int64_t>(hit.cached, seq->prompt_len()));
      seq->replayed_tokens = static_cast<int>(hit.replayed);
      seq->cached_host_tokens = static_cast<int>(hit.host_cached_blocks * kBlockTokens);
      seq->cached_store_tokens = static_cast<int>(hit.store_blocks * kBlockTokens);
    }
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
