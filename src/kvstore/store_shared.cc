// KvStore's shared-directory mode (KvStoreConfig::shared; the rules and the races are in
// store.h): presence lookups on the file system, recency in mtimes, and the GC's rescan and
// last-moment re-check. The put/get paths of shared mode are in store.cc, next to the
// single-user ones they differ from by a branch.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "kvstore/store.h"

namespace deepinfer::kvstore {

using kv::BlockKey;

absl::StatusOr<size_t> KvStore::SharedLongestPrefix(std::span<const BlockKey> chain) {
  // One stat per block. A hit refreshes the mtime only when it is older than a quarter of the
  // hit grace, so the GC sees every hit as at most hit_grace / 4 old and keeps the record for
  // at least 3/4 of the grace after it: a hot prefix costs one metadata write per
  // hit_grace / 4, not one per lookup.
  const int64_t now = env_->NowUnixNanos();
  const int64_t touch_after = config_.hit_grace_nanos / 4;
  size_t n = 0;
  for (const BlockKey& key : chain) {
    const std::string path = RecordPath(key);
    absl::StatusOr<int64_t> mtime = env_->ModifiedUnixNanos(path);
    if (!mtime.ok()) {
      if (!absl::IsNotFound(mtime.status())) read_errors_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    // NotFound here: the GC removed it between the stat and the touch: a miss.
    if (now - *mtime > touch_after && !env_->SetModifiedUnixNanos(path, now).ok()) break;
    ++n;
  }
  return n;
}

bool KvStore::SharedRescan(GcResult* result) {
  result->temp_files_removed = RemoveStaleTemps();
  std::vector<ScannedRecord> records;
  uint64_t dropped = 0;
  const absl::Status scan = ScanRecords(&records, &dropped);
  const int64_t clock_now = clock_->NowNanos();
  const int64_t wall_now = env_->NowUnixNanos();
  std::lock_guard<std::mutex> lock(mu_);
  index_.clear();
  child_count_.clear();
  for (auto& set : leaves_) set.clear();
  used_bytes_ = 0;
  if (!scan.ok()) {
    LOG(WARNING) << "kvstore gc: rescan of " << config_.dir
                 << " failed, removing nothing this pass: " << scan.message();
    result->scanned = false;
    return false;
  }
  if (dropped > 0) LOG(WARNING) << "kvstore gc: deleted " << dropped << " damaged record files";
  for (const ScannedRecord& r : records) {
    // Recency in this store's clock, from the file's age (FakeClock-driven tests stay
    // consistent with real mtimes).
    const int64_t age = r.mtime != 0 ? std::max<int64_t>(0, wall_now - r.mtime) : 0;
    if (InsertLocked(r.key, r.parent, r.bytes, r.traffic_class, clock_now - age)) {
      index_.at(r.key).mtime = r.mtime;
    }
  }
  return true;
}

KvStore::Unlink KvStore::SharedUnlinkLocked(const BlockKey& key, const Entry& e) {
  const std::string path = RecordPath(key);
  absl::StatusOr<int64_t> mtime = env_->ModifiedUnixNanos(path);
  if (!mtime.ok()) {
    if (absl::IsNotFound(mtime.status())) return Unlink::kGone;
    LOG(WARNING) << "kvstore gc: keeping " << path << ": " << mtime.status().message();
    return Unlink::kKept;
  }
  // Touched since the scan (a hit, or a writer re-put it), or recently: a reader may be about
  // to fetch it. The remaining window (a touch between this stat and the unlink) costs that
  // reader a miss, never wrong data (store.h).
  if (*mtime != e.mtime || env_->NowUnixNanos() - *mtime < config_.hit_grace_nanos) {
    return Unlink::kKept;
  }
  const absl::Status s = env_->RemoveFile(path);
  if (s.ok()) return Unlink::kRemoved;
  if (absl::IsNotFound(s)) return Unlink::kGone;
  LOG(WARNING) << "kvstore gc: " << s.message();
  return Unlink::kKept;
}

}  // namespace deepinfer::kvstore
