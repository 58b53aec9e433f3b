// KvStore: one KV store node's storage engine (the L2 tier of KV-CACHE.md §3,
// DEEPINFER-DESIGN.md §4). It keeps block records (kv/block_record.h) as files under a
// directory — a local SSD or a distributed file system mount, which provides replication or
// erasure coding — and garbage-collects them.
//
// Layout (docs/kv-format.md §3):
//   DIR/tmp/<key hex>.<writer id>.<n>.tmp   records being written; writer id =
//                                 <host>.<pid>.<random 64-bit hex>, unique per process
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
//
// Shared-directory mode (KvStoreConfig::shared; the `--kv-store-dir` engines plus one
// `deepinfer kvstore --dir PATH --gc-only` process on a local SSD or a DFS mount, see
// store_shared.cc). Several processes, on one or several hosts, use the directory at once, so
// no process may believe an in-memory picture of it:
//   - temp names carry the writer id (above), so writers never truncate each other's files;
//     a record is published only by rename(2), so a final name holds a complete record or
//     nothing;
//   - Put stats the final name first and skips the write when another writer already stored
//     the block; Get reads the file whatever this process has seen, LongestPrefix stats one
//     file per block (presence only: a damaged record is found, deleted and missed by Get);
//   - recency is the file's mtime: every Get hit sets it to now, a LongestPrefix hit when it is
//     older than hit_grace / 4 (a hot prefix costs no metadata write per lookup);
//   - open deletes only temp files older than temp_grace (other processes' puts in progress
//     are younger); there is no index outside GC passes, so opening is O(1);
//   - each RunGc pass rescans the directory, rebuilds the prefix forest with mtimes as
//     recency, deletes temp files older than temp_grace, and applies TTL and watermark as
//     above; just before unlinking a record it re-stats it and keeps it when its mtime changed
//     since the scan or is younger than hit_grace (a reader touched it, or a writer re-put it).
// The race left: a reader that touches a record between the GC's re-stat and its unlink. It
// then reads the complete old inode (unlink does not disturb an open file) or gets ENOENT,
// i.e. a miss; never a partial record, since records are only ever renamed into place whole
// and every read verifies checksums and the key (= hash of parent, salt, layout, tokens).
// Deleting under a reader costs a hit, never correctness. Likewise a scan racing a writer can
// miss a new child and evict its parent, leaving a chain with a hole (the child is unreachable
// and ages out); the parent was then touched (the writer hit it, or just wrote it) within the
// grace unless the writer stalled for longer, so the re-stat keeps it in practice.
// In shared mode Stats().records/bytes are those of the last GC pass (0 in a process that runs
// none); mtimes are compared with this host's wall clock, so hosts need synchronised clocks
// (skew well under hit_grace).
//
// Thread-safety: all public methods are thread-safe. File I/O happens outside the index lock
// (except a shared-mode GC pass's re-stat/unlink of the records it evicts).
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
  // Shared mode: records that were due but kept because their mtime showed a recent hit or
  // re-put; temp files older than temp_grace removed; false when the rescan failed (the pass
  // then removes nothing: a partial view could take a parent for a leaf).
  uint64_t kept_recent = 0;
  uint64_t temp_files_removed = 0;
  bool scanned = true;
  // Records and bytes stored after the pass.
  uint64_t records = 0;
  uint64_t bytes = 0;
};

class KvStore : public kv::BlockStore {
 public:
  // Opens (creating if needed) the store at config.dir: removes leftover temp files, indexes
  // every record file by its header (files with a bad header, size or name are deleted).
  // Shared mode: removes only temp files older than temp_grace and indexes nothing.
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

  // One synchronous GC pass (TTL, then watermark; shared mode: rescan first). Thread-safe
  // against everything else.
  GcResult RunGc();

  // Metrics in Prometheus text exposition format 0.0.4 (names deepinfer_kvstore_*).
  std::string MetricsText();

  // Path of the record file for `key` (for tests and tools).
  std::string RecordPath(const kv::BlockKey& key) const;
  // "<host>.<pid>.<random hex>": this store's part of its temp file names (for tests).
  const std::string& writer_id() const { return writer_id_; }

 private:
  struct Entry {
    kv::BlockKey parent;
    uint64_t bytes = 0;
    kv::TrafficClass traffic_class = kv::TrafficClass::kChat;
    int64_t last_access = 0;  // clock nanos
    uint64_t seq = 0;         // tie-break for equal clock readings: touch order
    int64_t mtime = 0;        // shared mode: the file's mtime at the GC scan (wall nanos)
  };
  // A record file found by a directory scan.
  struct ScannedRecord {
    kv::BlockKey key, parent;
    uint64_t bytes = 0;
    kv::TrafficClass traffic_class = kv::TrafficClass::kChat;
    int64_t mtime = 0;  // wall nanos; 0 when it could not be read
  };
  // Leaf sets are ordered oldest first.
  using LeafOrder = std::pair<std::pair<int64_t, uint64_t>, kv::BlockKey>;

  KvStore(const KvStoreConfig& config, Env* env, Clock* clock);
  absl::Status Recover();
  // Lists every record file, checks its header, name and size; deletes failing files (counted
  // in *dropped). The Env's error when a directory cannot be listed. No lock held.
  absl::Status ScanRecords(std::vector<ScannedRecord>* out, uint64_t* dropped);
  // Deletes files in DIR/tmp; shared mode: only those older than temp_grace. Returns the count.
  uint64_t RemoveStaleTemps();
  void GcLoop();
  // Shared mode (store_shared.cc).
  absl::StatusOr<size_t> SharedLongestPrefix(std::span<const kv::BlockKey> chain);
  // Rebuilds the index from a rescan; false (and an empty index) when the scan failed.
  bool SharedRescan(GcResult* result);
  // A GC pass's last look at a record it is about to evict: re-stats it and unlinks it unless
  // its mtime changed since the scan or is younger than hit_grace (or the stat/unlink fails
  // with an I/O error). kGone: another process removed it first.
  enum class Unlink { kRemoved, kGone, kKept };
  Unlink SharedUnlinkLocked(const kv::BlockKey& key, const Entry& e);
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
  const std::string writer_id_;
  std::atomic<uint64_t> temp_seq_{0};

  std::mutex mu_;
  std::unordered_map<kv::BlockKey, Entry, kv::BlockKeyHash> index_;  // guarded by mu_
  // Number of stored records whose parent is the key (whether or not the key is stored).
  std::unordered_map<kv::BlockKey, int32_t, kv::BlockKeyHash> child_count_;  // guarded by mu_
  // Stored records with no stored child, per traffic class, least recently used first.
  std::array<std::set<LeafOrder>, kv::kNumTrafficClasses> leaves_;  // guarded by mu_
  std::mutex dirs_mu_;                                              // never held with mu_
  std::unordered_set<std::string> made_dirs_;                       // guarded by dirs_mu_
  uint64_t used_bytes_ = 0;                                         // guarded by mu_
  uint64_t seq_ = 0;                                                // guarded by mu_
  bool stop_ = false;                                               // guarded by mu_
  bool gc_wanted_ = false;                                          // guarded by mu_
  std::condition_variable gc_cv_;  // signalled on stop_ / gc_wanted_
  std::mutex gc_mu_;               // serialises GC passes

  // Counters (monotonic, relaxed).
  kv::BlockStoreCounters counters_;
  std::atomic<uint64_t> read_errors_{0}, write_errors_{0}, bytes_read_{0}, bytes_written_{0};

  std::thread gc_thread_;
};

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_STORE_H_
