// KvTiers: the engine's side of the KV tiers below its block pool (KV-CACHE.md §3): write-back
// of complete blocks to L1 (a kv::HostTier arena in host shared memory) and L2 (a
// kv::BlockStore: a `deepinfer kvstore` node, a record directory, ...), and fetches of a
// waiting request's blocks from L2 into L1.
//
// The engine thread never waits on a tier:
//  - WriteBack queues a block's bytes (copied by the caller) for a writer thread that encodes a
//    checksummed BlockRecord and stores it in L1, then L2. The queue is bounded: when the tiers
//    are slower than the engine a write is dropped and counted. A key becomes visible in a tier
//    only once its record is completely there (HostTier publishes a slot after filling it;
//    stores write a whole record before it is listed).
//  - Fetch starts a fetch thread on a chain of block keys: keys already in L1 are skipped, the
//    rest is matched in L2 (metadata only, LongestPrefix) and read in chain order into L1 until
//    the first failure. The engine polls the returned ticket and schedules the request once it
//    is done or past its deadline; a failure or timeout only shortens the hit.
//  - ReadL1 reads a block back for swap-in and verifies it (header, checksums, key = hash of
//    parent, salt, layout and tokens, the key asked for): a bad record is a miss and is erased.
// L2 without L1 is not supported: fetched blocks land in L1 (Create refuses it).
//
// Thread-safety: all methods may be called from any thread.
#ifndef DEEPINFER_ENGINE_KV_TIERS_H_
#define DEEPINFER_ENGINE_KV_TIERS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kv/block_hash.h"
#include "kv/block_record.h"
#include "kv/block_store.h"
#include "kv/host_tier.h"
#include "kv/snapshot_cache.h"

namespace deepinfer::engine {

// Where the tiers are. Pointers are not owned and outlive the engine.
struct KvTierOptions {
  kv::HostTier* host_tier = nullptr;  // L1; nullptr = none
  kv::BlockStore* store = nullptr;    // L2; nullptr = none (requires host_tier)
  // SWA state snapshots in host shared memory (kv/snapshot_record.h), so an engine restarted on
  // this machine finds its predecessor's (KV-CACHE.md §4). nullptr = snapshots stay in the
  // engine's memory only. Slots must hold kSnapshotRecordHeaderBytes + the model's state bytes.
  kv::HostTier* snapshot_tier = nullptr;
  // How long a request waits in the queue for its fetch before it is scheduled anyway.
  int64_t fetch_timeout_ms = 2000;
  // Blocks queued for write-back at most; further writes are dropped (and counted).
  int write_queue_blocks = 1024;
  int num_fetch_threads = 2;
  bool enabled() const {
    return host_tier != nullptr || store != nullptr || snapshot_tier != nullptr;
  }
};

// Counters (cumulative unless named a depth).
struct KvTierStats {
  int64_t writes = 0;             // blocks written to every configured tier
  int64_t write_bytes = 0;        // record bytes written (per tier written)
  int64_t dropped_writes = 0;     // queue full
  int64_t l1_write_failures = 0;  // HostTier::Put failed
  int64_t l2_write_failures = 0;  // BlockStore::Put failed
  int64_t write_queue_depth = 0;  // blocks queued now (or being written)
  int64_t fetch_queue_depth = 0;  // fetches queued now (or running)
  int64_t fetches = 0;            // fetches started
  int64_t fetch_failures = 0;     // an L2 read or match failed (not a plain miss)
  int64_t fetched_blocks = 0;     // blocks copied from L2 into L1
  int64_t fetched_bytes = 0;
  int64_t fetch_nanos = 0;        // time spent in fetches (all threads)
  int64_t l1_bad_records = 0;     // records in L1 that failed verification (erased)
  int64_t snapshot_writes = 0;    // snapshots stored in the shared-memory arena
  int64_t snapshot_reads = 0;     // snapshots found there (after a miss in memory)
};

// One fetch, filled by a fetch thread and polled by the engine thread.
class FetchTicket {
 public:
  explicit FetchTicket(int64_t deadline_ns) : deadline_ns_(deadline_ns) {}
  bool done() const { return done_.load(std::memory_order_acquire); }
  int64_t deadline_ns() const { return deadline_ns_; }
  // Leading blocks of the chain the fetch copied from L2 into L1 (valid once done).
  int64_t from_store() const { return from_store_.load(std::memory_order_acquire); }
  // Leading blocks found in L1 before asking L2 (valid once done).
  int64_t from_host() const { return from_host_.load(std::memory_order_acquire); }

 private:
  friend class KvTiers;
  const int64_t deadline_ns_;
  std::atomic<int64_t> from_host_{0};
  std::atomic<int64_t> from_store_{0};
  std::atomic<bool> done_{false};
};

class KvTiers {
 public:
  // Starts the writer and fetch threads. InvalidArgument when a store is given without a host
  // tier, or for non-positive queue / thread counts.
  // `layout_id` / `state_bytes`: the model's (snapshot records are checked against them).
  static absl::StatusOr<std::unique_ptr<KvTiers>> Create(const KvTierOptions& options,
                                                         uint64_t layout_id = 0,
                                                         size_t state_bytes = 0);
  // Finishes queued writes (bounded by a few seconds), then joins the threads.
  ~KvTiers();
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  bool has_host() const { return options_.host_tier != nullptr; }
  bool has_store() const { return options_.store != nullptr; }

  // Queues block `meta` with its payload (the pool's bytes of the block). False when dropped.
  bool WriteBack(const kv::BlockMeta& meta, std::string payload);
  // Starts a fetch of `chain` (consecutive chain keys, in order) into L1; the ticket is done
  // at once when there is no store.
  std::shared_ptr<FetchTicket> Fetch(std::vector<kv::BlockKey> chain);
  // The verified block `key` from L1, or NotFound (a bad record is erased and counted).
  absl::StatusOr<kv::StoredBlock> ReadHost(const kv::BlockKey& key);
  bool has_snapshots() const { return options_.snapshot_tier != nullptr; }
  // Queues a snapshot for the shared-memory arena (dropped, and counted, when the queue is full).
  void WriteSnapshot(const kv::BlockKey& key, std::shared_ptr<const kv::StateSnapshot> snapshot);
  // The verified snapshot for boundary `key` from the arena, or null.
  std::shared_ptr<const kv::StateSnapshot> ReadSnapshot(const kv::BlockKey& key);
  // Waits up to `timeout_ms` until every queued write has been attempted (graceful shutdown,
  // tests). Returns whether the queue drained.
  bool Flush(int64_t timeout_ms);
  KvTierStats Stats() const;

 private:
  KvTiers(const KvTierOptions& options, uint64_t layout_id, size_t state_bytes);
  struct Write {
    kv::BlockMeta meta;
    std::string payload;
    std::shared_ptr<const kv::StateSnapshot> snapshot;  // set: a snapshot under meta.key
  };
  struct FetchJob {
    std::vector<kv::BlockKey> chain;
    std::shared_ptr<FetchTicket> ticket;
  };
  void WriterLoop();
  void FetchLoop();
  void RunFetch(FetchJob& job);

  const KvTierOptions options_;
  const uint64_t layout_id_;
  const size_t state_bytes_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled on every change of the fields below
  std::deque<Write> writes_ ABSL_GUARDED_BY(mu_);
  std::deque<FetchJob> fetches_ ABSL_GUARDED_BY(mu_);
  int64_t writes_in_progress_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fetches_in_progress_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  KvTierStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_KV_TIERS_H_
