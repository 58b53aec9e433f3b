#include "kvstore/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace deepinfer::kvstore {

absl::Status ErrnoToStatus(int err, std::string_view what) {
  const std::string msg = absl::StrCat(AbslView(what), ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      return absl::ResourceExhaustedError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case EINVAL:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(msg);
    default:  // EIO, ESTALE, ETIMEDOUT, ...: the device or mount failed this operation
      return absl::UnavailableError(msg);
  }
}

namespace {

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Append(std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoToStatus(errno, absl::StrCat("write ", path_));
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }
  absl::Status Sync() override {
    if (fdatasync(fd_) != 0) return ErrnoToStatus(errno, absl::StrCat("fdatasync ", path_));
    return absl::OkStatus();
  }
  absl::Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && close(fd) != 0) return ErrnoToStatus(errno, absl::StrCat("close ", path_));
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return ErrnoToStatus(err, absl::StrCat("fstat ", path));
    }
    const size_t want = std::min(max_bytes, static_cast<size_t>(st.st_size));
    std::string out(want, '\0');
    size_t done = 0;
    while (done < want) {
      const ssize_t n = pread(fd, out.data() + done, want - done, static_cast<off_t>(done));
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        close(fd);
        return ErrnoToStatus(err, absl::StrCat("pread ", path));
      }
      if (n == 0) break;  // shrank under us: return what is there; record checks catch it
      done += static_cast<size_t>(n);
    }
    close(fd);
    out.resize(done);
    return out;
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("rename ", from, " -> ", to));
    }
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) return ErrnoToStatus(errno, absl::StrCat("unlink ", path));
    return absl::OkStatus();
  }

  absl::Status CreateDirs(const std::string& path) override {
    if (path.empty()) return absl::OkStatus();
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a directory"));
    }
    const size_t slash = path.find_last_of('/');
    if (slash != std::string::npos && slash > 0) {
      if (absl::Status s = CreateDirs(path.substr(0, slash)); !s.ok()) return s;
    }
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open dir ", path));
    const int rc = fsync(fd);
    const int err = errno;
    close(fd);
    if (rc != 0) return ErrnoToStatus(err, absl::StrCat("fsync dir ", path));
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& path) override {
    DIR* d = opendir(path.c_str());
    if (d == nullptr) return ErrnoToStatus(errno, absl::StrCat("opendir ", path));
    std::vector<DirEntry> out;
    while (struct dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool is_dir = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {  // some network file systems do not fill d_type
        struct stat st;
        is_dir = stat((path + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      }
      out.push_back({name, is_dir});
    }
    closedir(d);
    return out;
  }

  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat ", path));
    return static_cast<uint64_t>(st.st_size);
  }

  absl::StatusOr<int64_t> ModifiedUnixNanos(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat ", path));
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }

  absl::Status SetModifiedUnixNanos(const std::string& path, int64_t unix_nanos) override {
    struct timespec times[2];
    times[0].tv_sec = 0;
    times[0].tv_nsec = UTIME_OMIT;
    times[1].tv_sec = static_cast<time_t>(unix_nanos / 1000000000);
    times[1].tv_nsec = static_cast<long>(unix_nanos % 1000000000);
    if (utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("utimensat ", path));
    }
    return absl::OkStatus();
  }

  int64_t NowUnixNanos() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

Env* Env::Posix() {
  static Env* env = new PosixEnv();
  return env;
}

}  // namespace deepinfer::kvstore
