// Env: the file-system seam of the KV store node (leveldb's Env pattern, STYLE.md habit 10).
// The store reaches the disk only through this interface, so tests can swap in
// FaultInjectionEnv (fault_env.h) to kill the process between write and rename, tear writes or
// fail with ENOSPC / EIO. Env::Posix() is the real implementation (plain open/pwrite/pread/
// fsync/rename), which works unchanged on local SSDs and on distributed file system mounts
// (3FS FUSE, CephFS, Lustre) that provide POSIX rename atomicity.
//
// Error codes: ENOENT -> NotFound, ENOSPC/EDQUOT -> ResourceExhausted, EIO and other device
// errors -> Unavailable, EEXIST -> AlreadyExists; the message names the path.
// Thread-safety: Env methods may be called concurrently; a WritableFile is used by one thread.
#ifndef DEEPINFER_KVSTORE_ENV_H_
#define DEEPINFER_KVSTORE_ENV_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace deepinfer::kvstore {

// A file being written sequentially. Close() is implied by destruction (errors then ignored).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(std::string_view data) = 0;
  // Makes the appended data durable (fsync/fdatasync).
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
};

struct DirEntry {
  std::string name;
  bool is_dir = false;
};

class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX Env (not owned; never destroyed).
  static Env* Posix();

  // Creates or truncates `path` for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Reads up to `max_bytes` from the start of `path` (the whole file by default).
  virtual absl::StatusOr<std::string> ReadFile(
      const std::string& path, size_t max_bytes = std::numeric_limits<size_t>::max()) = 0;
  // Atomically replaces `to` with `from` (rename(2)).
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // mkdir -p; OK when it exists.
  virtual absl::Status CreateDirs(const std::string& path) = 0;
  // fsyncs a directory so that renames/creates inside it are durable.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  virtual absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& path) = 0;
  virtual absl::StatusOr<uint64_t> FileSize(const std::string& path) = 0;
  // Last modification time, Unix epoch nanoseconds.
  virtual absl::StatusOr<int64_t> ModifiedUnixNanos(const std::string& path) = 0;
  // Sets the last modification time of `path` (utimensat; the access time is left alone). The
  // shared-directory store keeps recency in mtimes (store.h). NotFound when it does not exist.
  virtual absl::Status SetModifiedUnixNanos(const std::string& path, int64_t unix_nanos) = 0;
  // Current wall-clock time, Unix epoch nanoseconds (to compare with ModifiedUnixNanos).
  virtual int64_t NowUnixNanos() = 0;
};

// Maps an errno to the canonical status code documented above, with "what: strerror".
absl::Status ErrnoToStatus(int err, std::string_view what);

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_ENV_H_
