// FaultInjectionEnv: an Env wrapper for crash-safety tests of the KV store (after leveldb's
// db/fault_injection_test.cc). It forwards to a real Env on a real directory and can:
//   - crash: after N more mutating operations the "process dies": that operation and every
//     later one fail with Unavailable, and every file written through this Env loses its
//     unsynced tail (dropped, or with `torn_tail` cut at a pseudo-random point inside it, as a
//     torn write leaves it). A crash at a rename is "killed between write and rename".
//   - fail operations of one kind with an errno (ENOSPC, EIO, ...), optionally a bounded number
//     of times; a failing Append first writes half of its data (a short write).
//   - tear renames: the rename succeeds but the file keeps only a prefix, as a file system that
//     lost acknowledged data would leave it. Readers must see a miss, never a partial record.
// Test-only. Thread-safe.
#ifndef DEEPINFER_KVSTORE_FAULT_ENV_H_
#define DEEPINFER_KVSTORE_FAULT_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kvstore/env.h"

namespace deepinfer::kvstore {

class FaultInjectionEnv : public Env {
 public:
  enum class Op { kCreate, kAppend, kSync, kRename, kRemove, kRead, kSyncDir };

  // `base` is not owned and must outlive this Env.
  explicit FaultInjectionEnv(Env* base) : base_(base) {}

  // Crash once `n` further mutating operations have started (n = 0: the next one fails).
  void CrashAfter(int64_t n, bool torn_tail = false, uint64_t seed = 1);
  // The next `count` operations of kind `op` fail with `err` (count < 0: all of them).
  void FailOp(Op op, int err, int count = -1);
  void SetTornRename(bool on);
  // Clears injected failures (not a crash that happened).
  void ClearFaults();
  bool crashed();
  int64_t mutating_ops();

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& path) override;
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override;
  absl::StatusOr<int64_t> ModifiedUnixNanos(const std::string& path) override;
  absl::Status SetModifiedUnixNanos(const std::string& path, int64_t unix_nanos) override;
  int64_t NowUnixNanos() override { return base_->NowUnixNanos(); }

 private:
  friend class FaultWritableFile;
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  // Accounts one operation of kind `op`: returns the injected error or crash status, if any.
  absl::Status Check(Op op, const std::string& path);
  void CrashLocked();
  void Appended(const std::string& path, uint64_t n);
  void Synced(const std::string& path);

  Env* const base_;
  std::mutex mu_;
  int64_t ops_ = 0;           // guarded by mu_
  int64_t crash_at_ = -1;     // guarded by mu_
  bool torn_tail_ = false;    // guarded by mu_
  uint64_t rng_ = 1;          // guarded by mu_
  bool crashed_ = false;      // guarded by mu_
  bool torn_rename_ = false;  // guarded by mu_
  struct Fault {
    int err = 0;
    int count = 0;
  };
  std::map<Op, Fault> faults_;              // guarded by mu_
  std::map<std::string, FileState> files_;  // guarded by mu_
};

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_FAULT_ENV_H_
