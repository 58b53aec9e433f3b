// RadosStore: kv::BlockStore on a Ceph RADOS pool (librados), the L2 KV tier on a real
// distributed, erasure-coded store (DEEPINFER-DESIGN.md §4 keeps block KV on 3FS with 10+2 EC;
// an EC RADOS pool is Ceph's equivalent). Layout and rules: docs/kv-store-rados.md.
//
//   - One object per block record, named by the key's 32 hex digits (BlockKey::ToHex), holding
//     the record bytes of docs/kv-format.md §2 unchanged. Every Get verifies the whole record
//     against the key (header and payload checksums, key = hash of parent/salt/layout/tokens).
//   - A Put is one atomic RADOS write op: exclusive create + write_full + two xattrs, so an
//     object is either absent or complete with its metadata (RADOS has no rename; a compound op
//     is all-or-nothing). A Put of a stored block only refreshes its last use.
//   - Metadata lives in xattrs (EC pools have no omap): `deepinfer.meta` (parent key, traffic
//     class, record bytes: what the GC needs without reading the data) and `deepinfer.used`
//     (last use, 20-digit decimal Unix nanoseconds of the store's clock).
//   - LongestPrefix reads metadata only: one asynchronous stat+xattr read per chain key, issued
//     lookup_batch at a time, so its cost is O(chain length) and independent of the pool's size.
//   - Recency: a hit (Get, the found prefix of LongestPrefix, a re-put) rewrites `deepinfer.used`
//     asynchronously when it is older than refresh_nanos (guarded by assert_exists, so it never
//     recreates an object the GC removed).
//   - Failures: ENOENT is a miss; a record failing a check is a miss and is removed (guarded by
//     the object version read, so a concurrent good re-put is never removed); a timeout
//     (timeout_ms, librados' rados_osd_op_timeout) or any other cluster error is Unavailable;
//     a full pool (ENOSPC/EDQUOT) is ResourceExhausted (writes use FULL_TRY: they fail, never
//     block, on a full cluster; GC removes use FULL_FORCE).
//   - GC (RunGc; `deepinfer kvstore --rados URL --gc-only` runs it every --gc-interval, one
//     worker per pool): lists the pool, reads every object's metadata (gc_batch in flight),
//     rebuilds the prefix forest and removes, like KvStore, only leaves: TTL per traffic class,
//     then least recently used down to low_watermark * capacity when usage exceeds
//     high_watermark * capacity. Each removal is guarded by the object version seen by the
//     scan (assert_version): an object hit or re-put since is kept. A pass whose listing or
//     metadata reads fail removes nothing.
// The clock is wall-clock Unix nanoseconds shared by every host (engines write last-use
// times, the GC compares them): hosts need synchronised clocks (skew well under hit_grace).
// Tests pass a FakeClock.
// Thread-safety: all public methods are thread-safe (librados handles are).
#ifndef DEEPINFER_KVSTORE_RADOS_STORE_H_
#define DEEPINFER_KVSTORE_RADOS_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "kv/block_store.h"
#include "kvstore/rados_config.h"
#include "kvstore/store.h"

namespace deepinfer::kvstore {

class RadosStore : public kv::BlockStore {
 public:
  // Connects to the cluster of `config` and opens its pool. Unavailable (naming the monitor
  // or pool) when the cluster cannot be reached within timeout_ms or the pool is missing;
  // InvalidArgument for a bad config. `wall_clock` (Unix epoch nanoseconds; nullptr = the
  // system clock) is not owned and must outlive the store.
  static absl::StatusOr<std::unique_ptr<RadosStore>> Open(const RadosStoreConfig& config,
                                                          Clock* wall_clock = nullptr);
  ~RadosStore() override;
  RadosStore(const RadosStore&) = delete;
  RadosStore& operator=(const RadosStore&) = delete;

  // kv::BlockStore.
  absl::Status Put(const kv::BlockMeta& meta, std::string_view payload) override;
  absl::StatusOr<kv::StoredBlock> Get(const kv::BlockKey& key) override;
  absl::StatusOr<size_t> LongestPrefix(std::span<const kv::BlockKey> chain) override;
  absl::Status Delete(const kv::BlockKey& key) override;
  // Counters of this process; records/bytes are the pool's (from the manager: seconds stale).
  absl::StatusOr<kv::BlockStoreStats> Stats() override;

  // One GC pass (see above). Waits for this process's pending last-use writes first.
  GcResult RunGc();
  // Waits until every asynchronous last-use write issued so far has completed.
  void Flush();

  // The object name of `key` (its 32 hex digits).
  static std::string ObjectName(const kv::BlockKey& key);
  // Tests and tools: writes `bytes` as the object of `key` in one write_full, with the metadata
  // xattrs of `meta` when given (a record as another writer or a damaged disk would leave it).
  absl::Status WriteRawObject(const kv::BlockKey& key, std::string_view bytes,
                              const kv::BlockMeta* meta);
  // Tests and tools: whether the object of `key` exists (a stat; no recency change).
  absl::StatusOr<bool> ObjectExists(const kv::BlockKey& key);

  const RadosStoreConfig& config() const { return config_; }

 private:
  struct Pending;
  RadosStore(const RadosStoreConfig& config, Clock* clock);
  absl::Status Connect();
  // Fire-and-forget last-use write for `key` (guarded by assert_exists).
  void RefreshAsync(const kv::BlockKey& key);
  // Removes `name` if its version is still `version` (FULL_FORCE). OK, NotFound when gone,
  // Aborted when it changed, else Unavailable.
  absl::Status RemoveIfVersion(const std::string& name, uint64_t version);
  void ReapLocked(bool wait);

  const RadosStoreConfig config_;
  Clock* const clock_;
  void* cluster_ = nullptr;  // rados_t
  void* io_ = nullptr;       // rados_ioctx_t
  // Bytes read by a Get's first round trip: the largest record seen (records of one model all
  // have one size), so a Get is one read op.
  std::atomic<size_t> read_hint_{64 * 1024};

  std::mutex pending_mu_;
  std::vector<std::unique_ptr<Pending>> pending_;  // guarded by pending_mu_
  std::mutex gc_mu_;                               // serialises GC passes

  kv::BlockStoreCounters counters_;
};

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_RADOS_STORE_H_
