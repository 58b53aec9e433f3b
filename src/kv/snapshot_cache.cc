#include "kv/snapshot_cache.h"

#include "common/check.h"

namespace deepinfer::kv {

void SnapshotCache::Put(const BlockKey& key, std::shared_ptr<const StateSnapshot> snapshot) {
  CHECK(snapshot != nullptr);
  const int64_t size = static_cast<int64_t>(snapshot->bytes.size());
  if (size > budget_) return;
  auto it = map_.find(key);
  if (it != map_.end()) {
    if (snapshot->approximate && !it->second->snapshot->approximate) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
    bytes_ -= static_cast<int64_t>(it->second->snapshot->bytes.size());
    lru_.erase(it->second);
    map_.erase(it);
  }
  lru_.push_front(Item{key, std::move(snapshot)});
  map_[key] = lru_.begin();
  bytes_ += size;
  while (bytes_ > budget_) EvictOne();
}

std::shared_ptr<const StateSnapshot> SnapshotCache::Get(const BlockKey& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->snapshot;
}

void SnapshotCache::EvictOne() {
  CHECK(!lru_.empty());
  const Item& last = lru_.back();
  bytes_ -= static_cast<int64_t>(last.snapshot->bytes.size());
  map_.erase(last.key);
  lru_.pop_back();
  ++num_evicted_;
}

void SnapshotCache::Clear() {
  lru_.clear();
  map_.clear();
  bytes_ = 0;
}

}  // namespace deepinfer::kv
