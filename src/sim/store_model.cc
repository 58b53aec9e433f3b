#include "sim/store_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace deepinfer::sim {

void StoreModel::Unlink(uint32_t n) {
  Node& x = nodes_[n];
  List& l = lru_[x.cls];
  (x.prev == kNil ? l.head : nodes_[x.prev].next) = x.next;
  (x.next == kNil ? l.tail : nodes_[x.next].prev) = x.prev;
  x.prev = x.next = kNil;
  --l.size;
}

void StoreModel::PushBack(uint32_t n) {
  Node& x = nodes_[n];
  List& l = lru_[x.cls];
  x.prev = l.tail;
  x.next = kNil;
  (l.tail == kNil ? l.head : nodes_[l.tail].next) = n;
  l.tail = n;
  ++l.size;
}

void StoreModel::Touch(uint32_t n, int64_t now_ns) {
  nodes_[n].last_access_ns = now_ns;
  if (lru_[nodes_[n].cls].tail == n) return;  // already the most recent
  Unlink(n);
  PushBack(n);
}

uint32_t StoreModel::NewNode(const kv::BlockKey& key, TrafficClass cls, int64_t now_ns) {
  uint32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
  } else {
    CHECK_LT(nodes_.size(), size_t{kNil});
    n = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[n].key = key;
  nodes_[n].last_access_ns = now_ns;
  nodes_[n].cls = cls;
  PushBack(n);
  ++stats_.inserted;
  return n;
}

void StoreModel::Drop(uint32_t n, bool lru, int64_t now_ns) {
  if (lru) {
    ++stats_.evicted_lru;
    const int64_t age = now_ns - nodes_[n].last_access_ns;
    if (stats_.min_lru_victim_age_ns < 0 || age < stats_.min_lru_victim_age_ns) {
      stats_.min_lru_victim_age_ns = age;
    }
  } else {
    ++stats_.expired_ttl;
  }
  Unlink(n);
  free_.push_back(n);
}

int64_t StoreModel::LookupPrefix(std::span<const kv::BlockKey> keys, int64_t now_ns) {
  ++stats_.lookups;
  int64_t m = 0;
  for (const kv::BlockKey& k : keys) {
    auto it = index_.find(k);
    if (it == index_.end()) break;
    const uint32_t n = it->second;
    if (now_ns - nodes_[n].last_access_ns > config_.ttl_ns[nodes_[n].cls]) {
      Drop(n, /*lru=*/false, now_ns);
      index_.erase(it);
      break;
    }
    Touch(n, now_ns);
    ++m;
  }
  stats_.hit_blocks += m;
  return m;
}

void StoreModel::Insert(std::span<const kv::BlockKey> keys, TrafficClass cls, int64_t now_ns) {
  for (const kv::BlockKey& k : keys) {
    auto [it, fresh] = index_.try_emplace(k, kNil);
    if (fresh) {
      it->second = NewNode(k, cls, now_ns);
    } else {
      ++stats_.refreshed;
      Touch(it->second, now_ns);
    }
  }
  Watermark(now_ns);
}

int64_t StoreModel::LookupThenInsert(std::span<const kv::BlockKey> keys, int64_t num_candidates,
                                     TrafficClass cls, int64_t now_ns) {
  CHECK_LE(num_candidates, static_cast<int64_t>(keys.size()));
  ++stats_.lookups;
  int64_t m = 0;
  bool scanning = num_candidates > 0;
  // The walk is bound by cache misses on a large index: issue the probes of the next keys early.
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < std::min(kAhead, keys.size()); ++i) index_.prefetch(keys[i]);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kAhead < keys.size()) index_.prefetch(keys[i + kAhead]);
    if (i + kAhead / 2 < keys.size()) {
      // ... and, once a probe has landed, the node it names.
      auto ahead = index_.find(keys[i + kAhead / 2]);
      if (ahead != index_.end()) __builtin_prefetch(&nodes_[ahead->second]);
    }
    if (scanning && static_cast<int64_t>(i) == num_candidates) scanning = false;
    auto [it, fresh] = index_.try_emplace(keys[i], kNil);
    if (fresh) {
      // LookupPrefix's first miss (while scanning), then Insert's new block.
      scanning = false;
      it->second = NewNode(keys[i], cls, now_ns);
      continue;
    }
    const uint32_t n = it->second;
    if (scanning && now_ns - nodes_[n].last_access_ns > config_.ttl_ns[nodes_[n].cls]) {
      // LookupPrefix removes the expired block and stops; Insert then stores it anew.
      scanning = false;
      Drop(n, /*lru=*/false, now_ns);
      it->second = NewNode(keys[i], cls, now_ns);
      continue;
    }
    // A hit (while scanning) and Insert's refresh touch the block at the same instant; the
    // second touch decides the LRU order, which is this one, so one touch gives the same order.
    if (scanning) ++m;
    ++stats_.refreshed;
    Touch(n, now_ns);
  }
  stats_.hit_blocks += m;
  Watermark(now_ns);
  return m;
}

void StoreModel::ExpireClass(int cls, int64_t now_ns) {
  List& l = lru_[cls];
  // The list is walked in recency order, not memory order: keep a cursor kAhead nodes past the
  // head (always after it, or nil) and prefetch its index probe and its successor, so the misses
  // of the next removals overlap.
  constexpr int kAhead = 8;
  uint32_t ahead = l.head;
  auto advance = [&] {
    if (ahead == kNil) return;
    ahead = nodes_[ahead].next;
    if (ahead == kNil) return;
    index_.prefetch(nodes_[ahead].key);
    if (nodes_[ahead].next != kNil) __builtin_prefetch(&nodes_[nodes_[ahead].next]);
  };
  for (int k = 0; k < kAhead; ++k) advance();
  while (l.head != kNil) {
    const uint32_t n = l.head;
    if (now_ns - nodes_[n].last_access_ns <= config_.ttl_ns[cls]) break;
    CHECK_EQ(index_.erase(nodes_[n].key), size_t{1});
    Drop(n, /*lru=*/false, now_ns);
    advance();
  }
}

void StoreModel::Watermark(int64_t now_ns) {
  const double cap = static_cast<double>(config_.capacity_bytes);
  if (static_cast<double>(used_bytes()) <= config_.high_watermark * cap) return;
  while (static_cast<double>(used_bytes()) > config_.low_watermark * cap) {
    // The globally least recently used block: the older of the class list heads.
    int victim = -1;
    int64_t oldest = 0;
    for (int c = 0; c < kNumClasses; ++c) {
      if (lru_[c].head == kNil) continue;
      const int64_t t = nodes_[lru_[c].head].last_access_ns;
      if (victim < 0 || t < oldest) victim = c, oldest = t;
    }
    if (victim < 0) break;
    const uint32_t n = lru_[victim].head;
    CHECK_EQ(index_.erase(nodes_[n].key), size_t{1});
    Drop(n, /*lru=*/true, now_ns);
  }
}

void StoreModel::Gc(int64_t now_ns) {
  for (int c = 0; c < kNumClasses; ++c) ExpireClass(c, now_ns);
  Watermark(now_ns);
}

int64_t StoreModel::OldestAgeNs(int64_t now_ns) const {
  int64_t oldest = -1;
  for (int c = 0; c < kNumClasses; ++c) {
    if (lru_[c].head == kNil) continue;
    const int64_t t = nodes_[lru_[c].head].last_access_ns;
    if (oldest < 0 || t < oldest) oldest = t;
  }
  return oldest < 0 ? 0 : now_ns - oldest;
}

absl::Status StoreModel::CheckInvariants() const {
  const int64_t resident = resident_blocks();
  if (stats_.inserted != resident + stats_.evicted_lru + stats_.expired_ttl) {
    return absl::InternalError(absl::StrCat("store: inserted ", stats_.inserted, " != resident ",
                                            resident, " + evicted_lru ", stats_.evicted_lru,
                                            " + expired_ttl ", stats_.expired_ttl));
  }
  int64_t listed = 0;
  for (const List& l : lru_) listed += l.size;
  if (listed != resident) {
    return absl::InternalError(
        absl::StrCat("store: LRU lists hold ", listed, " blocks, index ", resident));
  }
  if (static_cast<int64_t>(nodes_.size() - free_.size()) != resident) {
    return absl::InternalError(absl::StrCat("store: ", nodes_.size() - free_.size(),
                                            " live nodes, index ", resident));
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::sim
