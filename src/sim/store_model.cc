#include "sim/store_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace deepinfer::sim {

void StoreModel::Touch(Entry& e, const kv::BlockKey& key, int64_t now_ns) {
  e.last_access_ns = now_ns;
  auto& list = lru_[e.cls];
  list.splice(list.end(), list, e.pos);
}

void StoreModel::Remove(std::unordered_map<kv::BlockKey, Entry, kv::BlockKeyHash>::iterator it,
                        bool lru, int64_t now_ns) {
  if (lru) {
    ++stats_.evicted_lru;
    const int64_t age = now_ns - it->second.last_access_ns;
    if (stats_.min_lru_victim_age_ns < 0 || age < stats_.min_lru_victim_age_ns) {
      stats_.min_lru_victim_age_ns = age;
    }
  } else {
    ++stats_.expired_ttl;
  }
  lru_[it->second.cls].erase(it->second.pos);
  index_.erase(it);
}

int64_t StoreModel::LookupPrefix(std::span<const kv::BlockKey> keys, int64_t now_ns) {
  ++stats_.lookups;
  int64_t m = 0;
  for (const kv::BlockKey& k : keys) {
    auto it = index_.find(k);
    if (it == index_.end()) break;
    if (now_ns - it->second.last_access_ns > config_.ttl_ns[it->second.cls]) {
      Remove(it, /*lru=*/false, now_ns);
      break;
    }
    Touch(it->second, k, now_ns);
    ++m;
  }
  stats_.hit_blocks += m;
  return m;
}

void StoreModel::Insert(std::span<const kv::BlockKey> keys, TrafficClass cls, int64_t now_ns) {
  for (const kv::BlockKey& k : keys) {
    auto it = index_.find(k);
    if (it != index_.end()) {
      ++stats_.refreshed;
      Touch(it->second, k, now_ns);
      continue;
    }
    auto& list = lru_[cls];
    list.push_back(k);
    index_.emplace(k, Entry{now_ns, cls, std::prev(list.end())});
    ++stats_.inserted;
  }
  Watermark(now_ns);
}

void StoreModel::ExpireClass(int cls, int64_t now_ns) {
  auto& list = lru_[cls];
  while (!list.empty()) {
    auto it = index_.find(list.front());
    CHECK(it != index_.end());
    if (now_ns - it->second.last_access_ns <= config_.ttl_ns[cls]) break;
    Remove(it, /*lru=*/false, now_ns);
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
      if (lru_[c].empty()) continue;
      const int64_t t = index_.find(lru_[c].front())->second.last_access_ns;
      if (victim < 0 || t < oldest) victim = c, oldest = t;
    }
    if (victim < 0) break;
    Remove(index_.find(lru_[victim].front()), /*lru=*/true, now_ns);
  }
}

void StoreModel::Gc(int64_t now_ns) {
  for (int c = 0; c < kNumClasses; ++c) ExpireClass(c, now_ns);
  Watermark(now_ns);
}

int64_t StoreModel::OldestAgeNs(int64_t now_ns) const {
  int64_t oldest = -1;
  for (int c = 0; c < kNumClasses; ++c) {
    if (lru_[c].empty()) continue;
    const int64_t t = index_.find(lru_[c].front())->second.last_access_ns;
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
  size_t listed = 0;
  for (const auto& l : lru_) listed += l.size();
  if (listed != index_.size()) {
    return absl::InternalError(
        absl::StrCat("store: LRU lists hold ", listed, " blocks, index ", index_.size()));
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::sim
