// BlockStore: the interface the engine (stage 2) uses to reach the L2 KV store
// (KV-CACHE.md §3). Implemented by kvstore::KvStoreClient (remote node over TCP) and by
// kvstore::KvStore itself (in-process, for tests and single-machine deployments).
//
// Semantics every implementation keeps:
//   - A miss is NotFound; a corrupt or mismatched record is also a miss (and is deleted).
//   - Put is idempotent: storing a key that is present keeps one copy and refreshes its recency.
//   - Recency is refreshed on every hit (Get, and the found prefix of LongestPrefix), so the GC's
//     LRU order follows use.
//   - Transport or disk failures are Unavailable / Internal / ResourceExhausted as documented
//     per method; callers treat them as misses for reads and drop the write.
// Thread-safety: implementations are safe for concurrent use from any number of threads.
#ifndef DEEPINFER_KV_BLOCK_STORE_H_
#define DEEPINFER_KV_BLOCK_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/block_hash.h"
#include "kv/block_record.h"

namespace deepinfer::kv {

// A block read back from a store: its checked meta and payload.
struct StoredBlock {
  BlockMeta meta;
  std::string payload;
};

// Counters of a store (cumulative since it started, except records/bytes which are current).
struct BlockStoreStats {
  uint64_t records = 0;
  uint64_t bytes = 0;           // bytes of record files (headers + payloads)
  uint64_t capacity_bytes = 0;  // 0 when unbounded
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t puts = 0;
  uint64_t evicted_watermark = 0;  // records removed by the LRU watermark GC
  uint64_t evicted_ttl = 0;        // records removed for exceeding their class's TTL
  uint64_t evicted_corrupt = 0;    // records removed because a check failed
  uint64_t deleted = 0;            // records removed by Delete
  uint64_t gc_runs = 0;
  uint64_t gc_nanos = 0;  // total time spent in GC passes
};

// The monotonic counters of BlockStoreStats, shared by the stores that implement BlockStore
// (relaxed atomics: each is a count on its own, never read together as a snapshot).
struct BlockStoreCounters {
  std::atomic<uint64_t> hits{0}, misses{0}, puts{0}, evicted_watermark{0}, evicted_ttl{0},
      evicted_corrupt{0}, deleted{0}, gc_runs{0}, gc_nanos{0};
  // Copies every counter into its BlockStoreStats field (records / bytes / capacity untouched).
  void CopyTo(BlockStoreStats* st) const {
    st->hits = hits.load();
    st->misses = misses.load();
    st->puts = puts.load();
    st->evicted_watermark = evicted_watermark.load();
    st->evicted_ttl = evicted_ttl.load();
    st->evicted_corrupt = evicted_corrupt.load();
    st->deleted = deleted.load();
    st->gc_runs = gc_runs.load();
    st->gc_nanos = gc_nanos.load();
  }
};

class BlockStore {
 public:
  virtual ~BlockStore() = default;

  // Stores one block (meta.key must be the hash of its inputs: else InvalidArgument).
  // ResourceExhausted when the record cannot fit at all (larger than the capacity) or the
  // disk is full; Unavailable when a remote store is unreachable.
  virtual absl::Status Put(const BlockMeta& meta, std::string_view payload) = 0;

  // Reads block `key`: NotFound on a miss (absent, expired, or corrupt and now deleted).
  virtual absl::StatusOr<StoredBlock> Get(const BlockKey& key) = 0;

  // Number of leading keys of `chain` (a hash chain, block 0 first) that are present: the
  // longest cached prefix, in blocks. Refreshes the recency of the found blocks.
  virtual absl::StatusOr<size_t> LongestPrefix(std::span<const BlockKey> chain) = 0;

  // Removes block `key`; OK when it was absent.
  virtual absl::Status Delete(const BlockKey& key) = 0;

  virtual absl::StatusOr<BlockStoreStats> Stats() = 0;
};

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_BLOCK_STORE_H_
