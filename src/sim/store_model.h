// Model of the DATA kvstore for the simulator (cluster.md §1.6, SIM-4, OUT-4): block records
// with a capacity, LRU under a high/low watermark, TTL per traffic class counted from last
// access, prefix lookup that stops at the first miss and refreshes recency along the chain read
// (VER-9).
//
// Every block is accounted for (INV "every block accounted for"):
//   inserted == resident + evicted_lru + expired_ttl
// CheckInvariants() verifies it together with the byte total.
//
// Representation (for speed at EXP-2 scale, ~10^8 lookups a run): an open-addressing index
// (absl::flat_hash_map, key -> slot) over a slab of nodes that carry the recency and form one
// intrusive doubly linked LRU list per class (slots recycled LIFO). Nothing iterates the index, so
// its layout never reaches an output (SIM-3 determinism).
//
// Time is an input (ns). Thread-safety: single-threaded.
#ifndef DEEPINFER_SIM_STORE_MODEL_H_
#define DEEPINFER_SIM_STORE_MODEL_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "kv/block_hash.h"

namespace deepinfer::sim {

// Traffic classes (ENT-1 step 3).
enum TrafficClass : int { kChat = 0, kAgent = 1, kNumClasses = 2 };

// Store parameters.
struct StoreConfig {
  int64_t capacity_bytes = int64_t{1} << 60;  // usable capacity
  int64_t block_bytes = 113920;               // V4.1: ~890 B/token x 128 (cluster.md BD-3)
  double high_watermark = 0.95;               // GC starts above this fill
  double low_watermark = 0.90;                // ... and evicts LRU down to this
  std::array<int64_t, kNumClasses> ttl_ns = {7LL * 86400 * 1'000'000'000,   // chat 7 d [SEED]
                                             3LL * 86400 * 1'000'000'000};  // agent 3 d [SEED]
};

// Counters of one store.
struct StoreStats {
  int64_t inserted = 0, evicted_lru = 0, expired_ttl = 0, refreshed = 0;
  int64_t lookups = 0, hit_blocks = 0;
  int64_t min_lru_victim_age_ns = -1;
};

// The store model; see the file comment.
class StoreModel {
 public:
  explicit StoreModel(StoreConfig config) : config_(config) {}
  StoreModel(const StoreModel&) = delete;
  StoreModel& operator=(const StoreModel&) = delete;

  // HIT-2 prefix lookup at `now_ns`: the number m of leading keys present and not expired;
  // refreshes last-access of those m blocks (VER-9). Expired blocks met on the way are removed
  // (reason ttl) and end the scan.
  int64_t LookupPrefix(std::span<const kv::BlockKey> keys, int64_t now_ns);

  // Stores (or refreshes) every key at `now_ns` with class `cls`, then runs the watermark GC.
  // A refreshed block keeps its class and its TTL is not checked (the write renews it).
  void Insert(std::span<const kv::BlockKey> keys, TrafficClass cls, int64_t now_ns);

  // One request (the simulator's hot path): exactly LookupPrefix(keys.first(num_candidates))
  // followed by Insert(keys), in one pass over `keys` (one index probe per key), with the same
  // result, counters, LRU order and evictions. Requires num_candidates <= keys.size(); the
  // candidates are a prefix of the stored keys, as HIT-1's candidates are of a request's blocks.
  int64_t LookupThenInsert(std::span<const kv::BlockKey> keys, int64_t num_candidates,
                           TrafficClass cls, int64_t now_ns);

  // Periodic GC: TTL expiry of every class, then the watermark LRU.
  void Gc(int64_t now_ns);

  int64_t resident_blocks() const { return static_cast<int64_t>(index_.size()); }
  int64_t used_bytes() const { return resident_blocks() * config_.block_bytes; }
  // Age (now - last access) of the least recently used resident block; 0 when empty. This is the
  // effective retention age of OUT-4.
  int64_t OldestAgeNs(int64_t now_ns) const;
  const StoreStats& stats() const { return stats_; }
  const StoreConfig& config() const { return config_; }

  // Block accounting; Internal error naming the broken equation.
  absl::Status CheckInvariants() const;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Node {
    kv::BlockKey key;
    int64_t last_access_ns = 0;
    uint32_t prev = kNil, next = kNil;  // LRU neighbours in lru_[cls]
    TrafficClass cls = kChat;
  };
  struct List {
    uint32_t head = kNil, tail = kNil;  // head = least recently used
    int64_t size = 0;
  };
  using Index = absl::flat_hash_map<kv::BlockKey, uint32_t, kv::BlockKeyHash>;

  void Unlink(uint32_t n);
  void PushBack(uint32_t n);
  void Touch(uint32_t n, int64_t now_ns);
  uint32_t NewNode(const kv::BlockKey& key, TrafficClass cls, int64_t now_ns);
  // Unlinks and frees node `n`; the caller erases it from index_.
  void Drop(uint32_t n, bool lru, int64_t now_ns);
  void ExpireClass(int cls, int64_t now_ns);
  void Watermark(int64_t now_ns);

  StoreConfig config_;
  Index index_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  std::array<List, kNumClasses> lru_;
  StoreStats stats_;
};

}  // namespace deepinfer::sim

#endif  // DEEPINFER_SIM_STORE_MODEL_H_
