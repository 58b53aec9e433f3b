#include "kvstore/fault_env.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace deepinfer::kvstore {

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  absl::Status Append(std::string_view data) override {
    if (absl::Status s = env_->Check(FaultInjectionEnv::Op::kAppend, path_); !s.ok()) {
      if (!env_->crashed()) {  // an injected error: a short write precedes it
        const std::string_view half = data.substr(0, data.size() / 2);
        if (base_->Append(half).ok()) env_->Appended(path_, half.size());
      }
      return s;
    }
    absl::Status s = base_->Append(data);
    if (s.ok()) env_->Appended(path_, data.size());
    return s;
  }
  absl::Status Sync() override {
    if (absl::Status s = env_->Check(FaultInjectionEnv::Op::kSync, path_); !s.ok()) return s;
    absl::Status s = base_->Sync();
    if (s.ok()) env_->Synced(path_);
    return s;
  }
  absl::Status Close() override { return base_->Close(); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

void FaultInjectionEnv::CrashAfter(int64_t n, bool torn_tail, uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  crash_at_ = ops_ + n;
  torn_tail_ = torn_tail;
  rng_ = seed | 1;
}

void FaultInjectionEnv::FailOp(Op op, int err, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_[op] = Fault{err, count};
}

void FaultInjectionEnv::SetTornRename(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  torn_rename_ = on;
}

void FaultInjectionEnv::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.clear();
  torn_rename_ = false;
}

bool FaultInjectionEnv::crashed() {
  std::lock_guard<std::mutex> lock(mu_);
  return crashed_;
}

int64_t FaultInjectionEnv::mutating_ops() {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}

absl::Status FaultInjectionEnv::Check(Op op, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (crashed_) return absl::UnavailableError(absl::StrCat("simulated crash (", path, ")"));
  if (op != Op::kRead) {
    if (crash_at_ >= 0 && ops_ >= crash_at_) {
      CrashLocked();
      return absl::UnavailableError(absl::StrCat("simulated crash at ", path));
    }
    ++ops_;
  }
  auto it = faults_.find(op);
  if (it != faults_.end() && it->second.count != 0) {
    if (it->second.count > 0) --it->second.count;
    return ErrnoToStatus(it->second.err, absl::StrCat("injected fault on ", path));
  }
  return absl::OkStatus();
}

void FaultInjectionEnv::CrashLocked() {
  crashed_ = true;
  // What the page cache held but the disk did not: the tail past the last sync.
  for (const auto& [path, st] : files_) {
    if (st.size <= st.synced) continue;
    uint64_t keep = st.synced;
    if (torn_tail_) {
      rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull;
      keep += (rng_ >> 33) % (st.size - st.synced);
    }
    (void)truncate(path.c_str(), static_cast<off_t>(keep));
  }
}

void FaultInjectionEnv::Appended(const std::string& path, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[path].size += n;
}

void FaultInjectionEnv::Synced(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[path].synced = files_[path].size;
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  if (absl::Status s = Check(Op::kCreate, path); !s.ok()) return s;
  auto base = base_->NewWritableFile(path);
  if (!base.ok()) return base.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path] = FileState{};
  }
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, path, std::move(*base)));
}

absl::StatusOr<std::string> FaultInjectionEnv::ReadFile(const std::string& path, size_t max_bytes) {
  if (absl::Status s = Check(Op::kRead, path); !s.ok()) return s;
  return base_->ReadFile(path, max_bytes);
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  if (absl::Status s = Check(Op::kRename, from); !s.ok()) return s;
  bool torn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    torn = torn_rename_;
  }
  if (torn) {
    auto size = base_->FileSize(from);
    if (size.ok()) (void)truncate(from.c_str(), static_cast<off_t>(*size / 2));
  }
  absl::Status s = base_->RenameFile(from, to);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(from);
    if (it != files_.end()) {
      files_[to] = it->second;
      files_.erase(from);
    }
  }
  return s;
}

absl::Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  if (absl::Status s = Check(Op::kRemove, path); !s.ok()) return s;
  absl::Status s = base_->RemoveFile(path);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(path);
  }
  return s;
}

absl::Status FaultInjectionEnv::CreateDirs(const std::string& path) {
  if (crashed()) return absl::UnavailableError("simulated crash");
  return base_->CreateDirs(path);
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& path) {
  if (absl::Status s = Check(Op::kSyncDir, path); !s.ok()) return s;
  return base_->SyncDir(path);
}

absl::StatusOr<std::vector<DirEntry>> FaultInjectionEnv::ListDir(const std::string& path) {
  if (crashed()) return absl::UnavailableError("simulated crash");
  return base_->ListDir(path);
}

absl::StatusOr<uint64_t> FaultInjectionEnv::FileSize(const std::string& path) {
  if (crashed()) return absl::UnavailableError("simulated crash");
  return base_->FileSize(path);
}

absl::StatusOr<int64_t> FaultInjectionEnv::ModifiedUnixNanos(const std::string& path) {
  if (crashed()) return absl::UnavailableError("simulated crash");
  return base_->ModifiedUnixNanos(path);
}

absl::Status FaultInjectionEnv::SetModifiedUnixNanos(const std::string& path, int64_t unix_nanos) {
  if (crashed()) return absl::UnavailableError("simulated crash");
  return base_->SetModifiedUnixNanos(path, unix_nanos);
}

}  // namespace deepinfer::kvstore
