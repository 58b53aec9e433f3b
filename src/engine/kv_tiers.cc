#include "engine/kv_tiers.h"

#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "kv/snapshot_record.h"

namespace deepinfer::engine {

absl::StatusOr<std::unique_ptr<KvTiers>> KvTiers::Create(const KvTierOptions& options,
                                                         uint64_t layout_id,
                                                         size_t state_bytes) {
  if (options.snapshot_tier != nullptr &&
      options.snapshot_tier->slot_bytes() < kv::kSnapshotRecordHeaderBytes + state_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV tiers: snapshot arena slots hold ", options.snapshot_tier->slot_bytes(),
        " bytes; this model's snapshots need ", kv::kSnapshotRecordHeaderBytes + state_bytes));
  }
  if (options.store != nullptr && options.host_tier == nullptr) {
    return absl::InvalidArgumentError(
        "KV tiers: an L2 store needs an L1 host tier to fetch into (set --host-kv-memory)");
  }
  if (options.write_queue_blocks < 1 || options.num_fetch_threads < 1 ||
      options.fetch_timeout_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV tiers: write_queue_blocks (", options.write_queue_blocks, ") and num_fetch_threads (",
        options.num_fetch_threads, ") must be >= 1 and fetch_timeout_ms (",
        options.fetch_timeout_ms, ") >= 0"));
  }
  return std::unique_ptr<KvTiers>(new KvTiers(options, layout_id, state_bytes));
}

KvTiers::KvTiers(const KvTierOptions& options, uint64_t layout_id, size_t state_bytes)
    : options_(options), layout_id_(layout_id), state_bytes_(state_bytes) {
  threads_.emplace_back([this] { WriterLoop(); });
  if (options_.store != nullptr) {
    for (int i = 0; i < options_.num_fetch_threads; ++i) {
      threads_.emplace_back([this] { FetchLoop(); });
    }
  }
}

KvTiers::~KvTiers() {
  {
    // Give queued writes a bounded chance to land (a restarted engine then finds them).
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (!(writes_.empty() && writes_in_progress_ == 0) &&
           !cv_.WaitWithDeadline(&mu_, deadline)) {
    }
    stop_ = true;
  }
  cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
  for (FetchJob& job : fetches_) job.ticket->done_.store(true, std::memory_order_release);
}

bool KvTiers::WriteBack(const kv::BlockMeta& meta, std::string payload) {
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int64_t>(writes_.size()) >= options_.write_queue_blocks) {
      ++stats_.dropped_writes;
      return false;
    }
    writes_.push_back(Write{meta, std::move(payload)});
  }
  cv_.SignalAll();
  return true;
}

void KvTiers::WriterLoop() {
  while (true) {
    Write w;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && writes_.empty()) cv_.Wait(&mu_);
      if (stop_) {  // the destructor already gave the queue its chance
        stats_.dropped_writes += static_cast<int64_t>(writes_.size());
        writes_.clear();
        return;
      }
      w = std::move(writes_.front());
      writes_.pop_front();
      ++writes_in_progress_;
    }
    if (w.snapshot != nullptr) {
      const std::string record = kv::EncodeSnapshotRecord(w.meta.key, layout_id_, *w.snapshot);
      const bool ok = options_.snapshot_tier->Put(w.meta.key, record).ok();
      absl::MutexLock lock(&mu_);
      --writes_in_progress_;
      if (ok) ++stats_.snapshot_writes;
      cv_.SignalAll();
      continue;
    }
    bool l1_failed = false, l2_failed = false;
    int64_t bytes = 0;
    absl::StatusOr<std::string> record = kv::EncodeBlockRecord(w.meta, w.payload);
    if (!record.ok()) {
      LOG(WARNING) << "KV write-back: cannot encode block " << w.meta.key.ToHex() << ": "
                   << record.status();
      l1_failed = l2_failed = true;
    } else {
      if (options_.host_tier != nullptr) {
        absl::Status s = options_.host_tier->Put(w.meta.key, *record);
        l1_failed = !s.ok();
        if (!l1_failed) bytes += static_cast<int64_t>(record->size());
      }
      if (options_.store != nullptr) {
        absl::Status s = options_.store->Put(w.meta, w.payload);
        l2_failed = !s.ok();
        if (l2_failed) {
          LOG(WARNING) << "KV write-back to the store failed for " << w.meta.key.ToHex() << ": "
                       << s;
        } else {
          bytes += static_cast<int64_t>(record->size());
        }
      }
    }
    {
      absl::MutexLock lock(&mu_);
      --writes_in_progress_;
      if (!l1_failed && !l2_failed) ++stats_.writes;
      if (l1_failed && options_.host_tier != nullptr) ++stats_.l1_write_failures;
      if (l2_failed && options_.store != nullptr) ++stats_.l2_write_failures;
      stats_.write_bytes += bytes;
    }
    cv_.SignalAll();
  }
}

std::shared_ptr<FetchTicket> KvTiers::Fetch(std::vector<kv::BlockKey> chain) {
  auto ticket = std::make_shared<FetchTicket>(MonotonicNanos() +
                                              options_.fetch_timeout_ms * int64_t{1000000});
  if (options_.store == nullptr || chain.empty()) {
    ticket->done_.store(true, std::memory_order_release);
    return ticket;
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.fetches;
    fetches_.push_back(FetchJob{std::move(chain), ticket});
  }
  cv_.SignalAll();
  return ticket;
}

void KvTiers::FetchLoop() {
  while (true) {
    FetchJob job;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && fetches_.empty()) cv_.Wait(&mu_);
      if (stop_) return;
      job = std::move(fetches_.front());
      fetches_.pop_front();
      ++fetches_in_progress_;
    }
    const int64_t t0 = MonotonicNanos();
    RunFetch(job);
    job.ticket->done_.store(true, std::memory_order_release);
    absl::MutexLock lock(&mu_);
    --fetches_in_progress_;
    stats_.fetch_nanos += MonotonicNanos() - t0;
  }
}

void KvTiers::RunFetch(FetchJob& job) {
  const std::vector<kv::BlockKey>& chain = job.chain;
  size_t i = 0;
  while (i < chain.size() && options_.host_tier->Contains(chain[i])) ++i;
  job.ticket->from_host_.store(static_cast<int64_t>(i), std::memory_order_release);
  if (i == chain.size() || MonotonicNanos() > job.ticket->deadline_ns()) return;
  const std::span<const kv::BlockKey> rest(chain.data() + i, chain.size() - i);
  absl::StatusOr<size_t> present = options_.store->LongestPrefix(rest);
  if (!present.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.fetch_failures;
    return;
  }
  int64_t fetched = 0;
  for (size_t k = 0; k < *present; ++k) {
    if (MonotonicNanos() > job.ticket->deadline_ns()) break;  // the request has moved on
    absl::StatusOr<kv::StoredBlock> b = options_.store->Get(rest[k]);
    if (!b.ok()) {
      if (b.status().code() != absl::StatusCode::kNotFound) {
        absl::MutexLock lock(&mu_);
        ++stats_.fetch_failures;
      }
      break;
    }
    absl::StatusOr<std::string> record = kv::EncodeBlockRecord(b->meta, b->payload);
    if (!record.ok() || b->meta.key != rest[k]) {
      // The store returned a block that is not the one asked for (its tokens or parent do not
      // hash to the key): a failure, never data.
      absl::MutexLock lock(&mu_);
      ++stats_.fetch_failures;
      break;
    }
    if (!options_.host_tier->Put(rest[k], *record).ok()) break;
    ++fetched;
    absl::MutexLock lock(&mu_);
    ++stats_.fetched_blocks;
    stats_.fetched_bytes += static_cast<int64_t>(record->size());
  }
  job.ticket->from_store_.store(fetched, std::memory_order_release);
}

absl::StatusOr<kv::StoredBlock> KvTiers::ReadHost(const kv::BlockKey& key) {
  if (options_.host_tier == nullptr) return absl::NotFoundError("no host tier");
  absl::StatusOr<kv::PinnedSlot> pin = options_.host_tier->Acquire(key);
  if (!pin.ok()) return pin.status();
  absl::StatusOr<kv::DecodedBlockRecord> rec = kv::DecodeBlockRecord(pin->view(), key);
  if (!rec.ok()) {
    pin->Release();
    (void)options_.host_tier->Erase(key);
    absl::MutexLock lock(&mu_);
    ++stats_.l1_bad_records;
    return absl::NotFoundError(absl::StrCat("bad host-tier record: ", rec.status().message()));
  }
  kv::StoredBlock out;
  out.meta = rec->meta;
  out.payload = std::string(rec->payload);
  return out;
}

void KvTiers::WriteSnapshot(const kv::BlockKey& key,
                            std::shared_ptr<const kv::StateSnapshot> snapshot) {
  if (options_.snapshot_tier == nullptr || snapshot == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int64_t>(writes_.size()) >= options_.write_queue_blocks) {
      ++stats_.dropped_writes;
      return;
    }
    Write w;
    w.meta.key = key;
    w.snapshot = std::move(snapshot);
    writes_.push_back(std::move(w));
  }
  cv_.SignalAll();
}

std::shared_ptr<const kv::StateSnapshot> KvTiers::ReadSnapshot(const kv::BlockKey& key) {
  if (options_.snapshot_tier == nullptr) return nullptr;
  absl::StatusOr<kv::PinnedSlot> pin = options_.snapshot_tier->Acquire(key);
  if (!pin.ok()) return nullptr;
  absl::StatusOr<kv::StateSnapshot> snap =
      kv::DecodeSnapshotRecord(pin->view(), key, layout_id_, state_bytes_);
  pin->Release();
  absl::MutexLock lock(&mu_);
  if (!snap.ok()) {
    ++stats_.l1_bad_records;
    return nullptr;
  }
  ++stats_.snapshot_reads;
  return std::make_shared<const kv::StateSnapshot>(std::move(*snap));
}

bool KvTiers::Flush(int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  while (!(writes_.empty() && writes_in_progress_ == 0)) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) {
      return writes_.empty() && writes_in_progress_ == 0;
    }
  }
  return true;
}

KvTierStats KvTiers::Stats() const {
  absl::MutexLock lock(&mu_);
  KvTierStats s = stats_;
  s.write_queue_depth = static_cast<int64_t>(writes_.size()) + writes_in_progress_;
  s.fetch_queue_depth = static_cast<int64_t>(fetches_.size()) + fetches_in_progress_;
  return s;
}

}  // namespace deepinfer::engine
