// SnapshotCache: SWA state snapshots at block boundaries (KV-CACHE.md §4), in host memory under
// a byte budget, least recently used first out.
//
// A snapshot is a copy of one sequence's whole state slot (window rings, compressor carry; the
// bytes of the model's KvLayout state) taken when the sequence had computed exactly the tokens
// of a block boundary. It is keyed by the chain key of the block that ends at that boundary
// (kv/block_hash.h), so it belongs to exactly one prefix (and cache salt, and layout). Restoring
// it into a fresh slot lets a prefix-cache hit continue at the boundary with no replay.
// Snapshots are immutable and shared: a reader that holds one keeps it alive after eviction.
//
// Thread-safety: none; owned by the engine thread (snapshots themselves may be read anywhere).
#ifndef DEEPINFER_KV_SNAPSHOT_CACHE_H_
#define DEEPINFER_KV_SNAPSHOT_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace deepinfer::kv {

// One state snapshot: the slot's bytes and whether they descend from a replayed (approximate)
// window state.
struct StateSnapshot {
  std::vector<uint8_t> bytes;
  bool approximate = false;
};

class SnapshotCache {
 public:
  // `budget_bytes` <= 0 keeps nothing (Put drops every snapshot).
  explicit SnapshotCache(int64_t budget_bytes) : budget_(budget_bytes) {}

  // Stores `snapshot` under `key`, replacing an older one, and evicts least recently used
  // snapshots until the total fits the budget. A snapshot larger than the budget is dropped.
  // An exact snapshot is never replaced by an approximate one for the same key.
  void Put(const BlockKey& key, std::shared_ptr<const StateSnapshot> snapshot);
  // The snapshot for `key` (marked most recently used), or nullptr.
  std::shared_ptr<const StateSnapshot> Get(const BlockKey& key);
  // Whether a snapshot for `key` exists (does not touch recency).
  bool Contains(const BlockKey& key) const { return map_.count(key) > 0; }
  // Drops every snapshot.
  void Clear();

  int64_t size() const { return static_cast<int64_t>(map_.size()); }
  int64_t bytes() const { return bytes_; }
  int64_t budget() const { return budget_; }
  int64_t num_evicted() const { return num_evicted_; }

 private:
  struct Item {
    BlockKey key;
    std::shared_ptr<const StateSnapshot> snapshot;
  };
  void EvictOne();

  const int64_t budget_;
  int64_t bytes_ = 0;
  int64_t num_evicted_ = 0;
  std::list<Item> lru_;  // front = most recent
  std::unordered_map<BlockKey, std::list<Item>::iterator, BlockKeyHash> map_;
};

}  // namespace deepinfer::kv

#endif  // DEEPINFER_KV_SNAPSHOT_CACHE_H_
