// KvStore: one KV store node's storage engine (the L2 tier of KV-CACHE.md §3,
// DEEPINFER-DESIGN.md §4). It keeps block records (kv/block_record.h) as files under a
// directory — a local SSD or a distributed file system mount, which provides replication or
// erasure coding — and garbage-collects them.
//
// Layout (docs/kv-format.md §3):
//   DIR/tmp/<key hex>.<n>.tmp     records being written (removed at startup)
//   DIR/<h0h1>/<h2h3>/<key hex>.kvb   one record per file, fan-out by the key's first 4 hex digits
// A put writes the temp file, fdatasyncs it, renames it into place and fsyncs the directory;
// a crash at any point leaves either the complete record or no record under the final name.
// Every read verifies the whole record against the requested key; a record failing any check
// (or a file that vanished) is a miss and is deleted.
//
// GC (RunGc, and a background thread unless disabled):
//   - TTL: a record unused for longer than its traffic class's TTL is deleted;
//   - watermark: when usage exceeds high_watermark * capacity, least-recently-used records are
//     evicted until usage <= low_watermark * capacity.
// Recency is refreshed on every hit (Get, LongestPrefix). Both rules remove only *leaves* of the
// stored prefix forest (records none of whose children are stored), oldest first: a shared
// prefix is never evicted before its suffixes, so every stored chain stays reachable from its
// root. A prefix whose TTL passed goes as soon as its last suffix has gone.
//
// After a restart, recency is rebuilt from file modification times (the last write).
// Thread-safety: all public methods are thread-safe. File I/O happens outside the index lock.
#ifndef DEEPINFER_KVSTORE_STORE_H_
#define DEEPINFER_KVSTORE_STORE_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "kv/block_store.h"
#include "kvstore/config.h"
#include "kvstore/env.h"

namespace deepinfer::kvstore {

// What one GC pass removed.
struct GcResult {
  uint64_t evicted_ttl = 0;
  uint64_t evicted_watermark = 0;
  uint64_t bytes_freed = 0;
};

class KvStore : public kv::BlockStore {
 public:
  // Opens (creating if needed) the store at config.dir: removes leftover temp files, indexes
  // every record file by its header (files with a bad header, size or name are deleted).
  // `env` and `clock` are not owned and must outlive the store. InvalidArgument for a bad
  // config; the Env's error when the directory cannot be created or listed.
  static absl::StatusOr<std::unique_ptr<KvStore>> Open(const KvStoreConfig& config,
                                                       Env* env = Env::Posix(),
                                                       Clock* clock = Clock::Real());
  ~KvStore() override;
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // kv::BlockStore.
  absl::Status Put(const kv::BlockMeta& meta, std::string_view payload) override;
  absl::StatusOr<kv::StoredBlock> Get(const kv::BlockKey& key) override;
  absl::StatusOr<size_t> LongestPrefix(std::span<const kv::BlockKey> chain) override;
  absl::Status Delete(const kv::BlockKey& key) override;
  absl::StatusOr<kv::BlockStoreStats> Stats() override;

  // Stores an encoded record as is (the service's PUT). InvalidArgument when it fails a record
  // check; ResourceExhausted when larger than the capacity or the disk is full; the Env's
  // error otherwise (temp file removed).
  absl::Status PutRecord(std::string_view record);
  // The verified record bytes of `key` (the service's GET). NotFound on miss; Unavailable when
  // the disk fails the read (the record is kept).
  absl::StatusOr<std::string> GetRecord(const kv::BlockKey& key);

  // One synchronous GC pass (TTL, then watermark). Thread-safe against everything else.
  GcResult RunGc();

  // Metrics in Prometheus text exposition format 0.0.4 (names deepinfer_kvstore_*).
  std::string MetricsText();

  // Path of the record file for `key` (for tests and tools).
  std::string RecordPath(const kv::BlockKey& key) const;

 private:
  struct Entry {
    kv::BlockKey parent;
    uint64_t bytes = 0;
    kv::TrafficClass traffic_class = kv::TrafficClass::kChat;
    int64_t last_access = 0;  // clock nanos
    uint64_t seq = 0;         // tie-break for equal clock readings: touch order
  };
  // Leaf sets are ordered oldest first.
  using LeafOrder = std::pair<std::pair<int64_t, uint64_t>, kv::BlockKey>;

  KvStore(const KvStoreConfig& config, Env* env, Clock* clock);
  absl::Status Recover();
  void GcLoop();
  // Index mutations; all EXCLUSIVE_LOCKS_REQUIRED(mu_).
  bool InsertLocked(const kv::BlockKey& key, const kv::BlockKey& parent, uint64_t bytes,
                    kv::TrafficClass cls, int64_t last_access);
  void RemoveLocked(const kv::BlockKey& key);
  void TouchLocked(const kv::BlockKey& key, Entry& e, int64_t now);
  bool IsLeafLocked(const kv::BlockKey& key) const;
  // Removes a corrupt/vanished record from the index and the disk.
  void DropCorrupt(const kv::BlockKey& key);
  void RemoveFiles(const std::vector<std::string>& paths);
  std::string TempPath(const kv::BlockKey& key);

  const KvStoreConfig config_;
  Env* const env_;
  Clock* const clock_;
  std::atomic<uint64_t> temp_seq_{0};

  std::mutex mu_;
  std::unordered_map<kv::BlockKey, Entry, kv::BlockKeyHash> index_;  // guarded by mu_
  // Number of stored records whose parent is the key (whether or not the key is stored).
  std::unordered_map<kv::BlockKey, int32_t, kv::BlockKeyHash> child_count_;  // guarded by mu_
  // Stored records with no stored child, per traffic class, least recently used first.
  std::array<std::set<LeafOrder>, kv::kNumTrafficClasses> leaves_;  // guarded by mu_
  std::unordered_set<std::string> made_dirs_;                       // guarded by mu_
  uint64_t used_bytes_ = 0;                                         // guarded by mu_
  uint64_t seq_ = 0;                                                // guarded by mu_
  bool stop_ = false;                                               // guarded by mu_
  bool gc_wanted_ = false;                                          // guarded by mu_
  std::condition_variable gc_cv_;  // signalled on stop_ / gc_wanted_
  std::mutex gc_mu_;               // serialises GC passes

  // Counters (monotonic, relaxed).
  std::atomic<uint64_t> hits_{0}, misses_{0}, puts_{0}, evicted_watermark_{0}, evicted_ttl_{0},
      evicted_corrupt_{0}, deleted_{0}, gc_runs_{0}, gc_nanos_{0}, read_errors_{0},
      write_errors_{0}, bytes_read_{0}, bytes_written_{0};

  std::thread gc_thread_;
};

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_STORE_H_
