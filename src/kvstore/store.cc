#include "kvstore/store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"

namespace deepinfer::kvstore {

using kv::BlockKey;

namespace {

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

constexpr char kRecordSuffixText[] = ".kvb";
constexpr std::string_view kRecordSuffix = kRecordSuffixText;

// "<host>.<pid>.<random>": distinct for every store object of every process on every host
// sharing a directory (the random part separates two stores of one process, and a pid reused
// after a crash). The host name is reduced to [A-Za-z0-9-], at most 32 characters.
std::string MakeWriterId() {
  char raw[256] = {};
  if (gethostname(raw, sizeof(raw) - 1) != 0) raw[0] = '\0';
  std::string host;
  for (const char* c = raw; *c != '\0' && host.size() < 32; ++c) {
    const bool keep = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                      (*c >= '0' && *c <= '9') || *c == '-';
    host.push_back(keep ? *c : '-');
  }
  if (host.empty()) host = "host";
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return absl::StrCat(host, ".", getpid(), ".", absl::Hex(r, absl::kZeroPad16));
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvStore>> KvStore::Open(const KvStoreConfig& config, Env* env,
                                                       Clock* clock) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<KvStore> store(new KvStore(config, env, clock));
  RETURN_IF_ERROR(store->Recover());
  if (config.background_gc) store->gc_thread_ = std::thread([s = store.get()] { s->GcLoop(); });
  return store;
}

KvStore::KvStore(const KvStoreConfig& config, Env* env, Clock* clock)
    : config_(config), env_(env), clock_(clock), writer_id_(MakeWriterId()) {}

KvStore::~KvStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  gc_cv_.notify_all();
  if (gc_thread_.joinable()) gc_thread_.join();
}

std::string KvStore::RecordPath(const BlockKey& key) const {
  const std::string hex = key.ToHex();
  return absl::StrCat(config_.dir, "/", hex.substr(0, 2), "/", hex.substr(2, 2), "/", hex,
                      kRecordSuffixText);
}

std::string KvStore::TempPath(const BlockKey& key) {
  return absl::StrCat(config_.dir, "/tmp/", key.ToHex(), ".", writer_id_, ".",
                      temp_seq_.fetch_add(1), ".tmp");
}

uint64_t KvStore::RemoveStaleTemps() {
  const std::string tmp = config_.dir + "/tmp";
  auto temps = env_->ListDir(tmp);
  if (!temps.ok()) {
    LOG(WARNING) << "kvstore: " << temps.status().message();
    return 0;
  }
  uint64_t removed = 0;
  for (const DirEntry& t : *temps) {
    if (t.is_dir) continue;
    const std::string path = absl::StrCat(tmp, "/", t.name);
    if (config_.shared) {
      // Another process may be filling it: only a file untouched for the grace is abandoned.
      // (A writer slower than the grace loses its put: its rename fails, it publishes nothing.)
      auto mtime = env_->ModifiedUnixNanos(path);
      if (!mtime.ok() || env_->NowUnixNanos() - *mtime <= config_.temp_grace_nanos) continue;
    }
    if (env_->RemoveFile(path).ok()) ++removed;
  }
  return removed;
}

absl::Status KvStore::ScanRecords(std::vector<ScannedRecord>* out, uint64_t* dropped) {
  const std::string& dir = config_.dir;
  ASSIGN_OR_RETURN(auto level0, env_->ListDir(dir));
  for (const DirEntry& d0 : level0) {
    if (!d0.is_dir || d0.name.size() != 2 || !IsHex(d0.name)) continue;
    const std::string p0 = absl::StrCat(dir, "/", d0.name);
    ASSIGN_OR_RETURN(auto level1, env_->ListDir(p0));
    for (const DirEntry& d1 : level1) {
      if (!d1.is_dir || d1.name.size() != 2 || !IsHex(d1.name)) continue;
      const std::string p1 = absl::StrCat(p0, "/", d1.name);
      {
        std::lock_guard<std::mutex> lock(dirs_mu_);
        made_dirs_.insert(p1);
      }
      ASSIGN_OR_RETURN(auto files, env_->ListDir(p1));
      for (const DirEntry& f : files) {
        if (f.is_dir || f.name.size() != 32 + kRecordSuffix.size() ||
            !f.name.ends_with(kRecordSuffix)) {
          continue;
        }
        const std::string path = absl::StrCat(p1, "/", f.name);
        const std::optional<BlockKey> key =
            BlockKey::FromHex(std::string_view(f.name).substr(0, 32));
        auto header = env_->ReadFile(path, kv::kBlockRecordHeaderBytes);
        if (!header.ok() && absl::IsNotFound(header.status())) continue;  // deleted meanwhile
        auto size = env_->FileSize(path);
        bool ok = key.has_value() && header.ok() && size.ok();
        absl::StatusOr<kv::BlockRecordHeader> h = absl::DataLossError("unread");
        if (ok) h = kv::DecodeBlockRecordHeader(*header);
        ok = ok && h.ok() && h->meta.key == *key && RecordPath(*key) == path &&
             *size == kv::kBlockRecordHeaderBytes + h->payload_bytes;
        if (!ok) {
          // A final name only ever receives whole records by rename, in shared mode too: a
          // failing file is damaged, not in progress.
          ++*dropped;
          (void)env_->RemoveFile(path);
          counters_.evicted_corrupt.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        ScannedRecord r;
        r.key = *key;
        r.parent = h->meta.parent;
        r.bytes = *size;
        r.traffic_class = h->meta.traffic_class;
        if (auto mtime = env_->ModifiedUnixNanos(path); mtime.ok()) r.mtime = *mtime;
        out->push_back(r);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status KvStore::Recover() {
  const std::string& dir = config_.dir;
  RETURN_IF_ERROR(Annotate(env_->CreateDirs(dir + "/tmp"), "kvstore --dir"));
  // Temp files are puts that never completed: never data. In shared mode, young ones may be
  // other processes' puts in progress and are left alone.
  const uint64_t temps = RemoveStaleTemps();
  if (config_.shared) {
    LOG(INFO) << "kvstore: opened shared directory " << dir << " (writer " << writer_id_
              << (temps ? ", removed " : "") << (temps ? std::to_string(temps) : "")
              << (temps ? " stale temp files" : "") << ")";
    return absl::OkStatus();
  }
  std::vector<ScannedRecord> records;
  uint64_t dropped = 0;
  RETURN_IF_ERROR(ScanRecords(&records, &dropped));
  const int64_t clock_now = clock_->NowNanos();
  const int64_t wall_now = env_->NowUnixNanos();
  std::lock_guard<std::mutex> lock(mu_);
  for (const ScannedRecord& r : records) {
    const int64_t age = r.mtime != 0 ? std::max<int64_t>(0, wall_now - r.mtime) : 0;
    InsertLocked(r.key, r.parent, r.bytes, r.traffic_class, clock_now - age);
  }
  LOG(INFO) << "kvstore: opened " << dir << " with " << index_.size() << " records, " << used_bytes_
            << " bytes" << (dropped ? ", dropped " : "")
            << (dropped ? std::to_string(dropped) + " bad files" : "");
  return absl::OkStatus();
}

bool KvStore::IsLeafLocked(const BlockKey& key) const {
  auto it = child_count_.find(key);
  return it == child_count_.end() || it->second == 0;
}

bool KvStore::InsertLocked(const BlockKey& key, const BlockKey& parent, uint64_t bytes,
                           kv::TrafficClass cls, int64_t last_access) {
  auto [it, inserted] = index_.try_emplace(key);
  if (!inserted) return false;
  Entry& e = it->second;
  e.parent = parent;
  e.bytes = bytes;
  e.traffic_class = cls;
  e.last_access = last_access;
  e.seq = ++seq_;
  used_bytes_ += bytes;
  if (parent != kv::kRootBlockKey) {
    const int32_t n = ++child_count_[parent];
    if (n == 1) {  // the parent stops being a leaf
      if (auto p = index_.find(parent); p != index_.end()) {
        leaves_[static_cast<int>(p->second.traffic_class)].erase(
            {{p->second.last_access, p->second.seq}, parent});
      }
    }
  }
  if (IsLeafLocked(key)) leaves_[static_cast<int>(cls)].insert({{e.last_access, e.seq}, key});
  return true;
}

void KvStore::RemoveLocked(const BlockKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  const Entry e = it->second;
  if (IsLeafLocked(key)) {
    leaves_[static_cast<int>(e.traffic_class)].erase({{e.last_access, e.seq}, key});
  }
  index_.erase(it);
  used_bytes_ -= e.bytes;
  if (e.parent != kv::kRootBlockKey) {
    auto c = child_count_.find(e.parent);
    if (c != child_count_.end() && --c->second == 0) {
      child_count_.erase(c);
      if (auto p = index_.find(e.parent); p != index_.end()) {  // the parent becomes a leaf
        leaves_[static_cast<int>(p->second.traffic_class)].insert(
            {{p->second.last_access, p->second.seq}, e.parent});
      }
    }
  }
}

void KvStore::TouchLocked(const BlockKey& key, Entry& e, int64_t now) {
  const bool leaf = IsLeafLocked(key);
  auto& set = leaves_[static_cast<int>(e.traffic_class)];
  if (leaf) set.erase({{e.last_access, e.seq}, key});
  e.last_access = std::max(e.last_access, now);
  e.seq = ++seq_;
  if (leaf) set.insert({{e.last_access, e.seq}, key});
}

absl::Status KvStore::Put(const kv::BlockMeta& meta, std::string_view payload) {
  ASSIGN_OR_RETURN(std::string record, kv::EncodeBlockRecord(meta, payload));
  return PutRecord(record);
}

absl::Status KvStore::PutRecord(std::string_view record) {
  auto decoded = kv::DecodeBlockRecord(record);
  if (!decoded.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvstore put: record rejected: ", decoded.status().message()));
  }
  const kv::BlockMeta& meta = decoded->meta;
  if (record.size() > config_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("kvstore put: record of ", record.size(),
                                                     " bytes exceeds the capacity ",
                                                     config_.capacity_bytes));
  }
  const std::string path = RecordPath(meta.key);
  const std::string parent_dir = path.substr(0, path.find_last_of('/'));
  if (config_.shared) {
    // Another writer may have stored the block: then refresh its recency instead of writing
    // it again. (Two writers racing past this check both publish a whole record by rename;
    // the later replaces the earlier, both are the block's record.)
    if (auto mtime = env_->ModifiedUnixNanos(path); mtime.ok()) {
      (void)env_->SetModifiedUnixNanos(path, env_->NowUnixNanos());
      counters_.puts.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(meta.key); it != index_.end()) {
      TouchLocked(meta.key, it->second, clock_->NowNanos());
      counters_.puts.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
  }
  bool need_dir;
  {
    std::lock_guard<std::mutex> lock(dirs_mu_);
    need_dir = !made_dirs_.contains(parent_dir);
  }
  if (need_dir) {
    RETURN_IF_ERROR(env_->CreateDirs(parent_dir));
    std::lock_guard<std::mutex> lock(dirs_mu_);
    made_dirs_.insert(parent_dir);
  }
  // temp file + fdatasync + rename + directory fsync: the final name only ever holds a
  // complete, durable record.
  const std::string temp = TempPath(meta.key);
  absl::Status s = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto file, env_->NewWritableFile(temp));
    RETURN_IF_ERROR(file->Append(record));
    if (config_.sync) RETURN_IF_ERROR(file->Sync());
    RETURN_IF_ERROR(file->Close());
    RETURN_IF_ERROR(env_->RenameFile(temp, path));
    if (config_.sync) RETURN_IF_ERROR(env_->SyncDir(parent_dir));
    return absl::OkStatus();
  }();
  if (!s.ok()) {
    (void)env_->RemoveFile(temp);
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    return Annotate(s, absl::StrCat("kvstore put ", meta.key.ToHex()));
  }
  counters_.puts.fetch_add(1, std::memory_order_relaxed);
  bytes_written_.fetch_add(record.size(), std::memory_order_relaxed);
  if (config_.shared) return absl::OkStatus();  // the directory is the index
  std::lock_guard<std::mutex> lock(mu_);
  InsertLocked(meta.key, meta.parent, record.size(), meta.traffic_class, clock_->NowNanos());
  if (used_bytes_ > config_.high_watermark * static_cast<double>(config_.capacity_bytes)) {
    gc_wanted_ = true;
    gc_cv_.notify_one();
  }
  return absl::OkStatus();
}

void KvStore::DropCorrupt(const BlockKey& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RemoveLocked(key);
  }
  (void)env_->RemoveFile(RecordPath(key));
  counters_.evicted_corrupt.fetch_add(1, std::memory_order_relaxed);
}

absl::StatusOr<std::string> KvStore::GetRecord(const BlockKey& key) {
  if (!config_.shared) {  // shared mode: the file may be another process's, read it anyway
    std::lock_guard<std::mutex> lock(mu_);
    if (!index_.contains(key)) {
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      return absl::NotFoundError(absl::StrCat("kvstore: no block ", key.ToHex()));
    }
  }
  auto bytes = env_->ReadFile(RecordPath(key));
  if (!bytes.ok()) {
    if (absl::IsNotFound(bytes.status())) {  // removed under us (GC, or by hand)
      std::lock_guard<std::mutex> lock(mu_);
      RemoveLocked(key);
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      return absl::NotFoundError(absl::StrCat("kvstore: block ", key.ToHex(), " vanished"));
    }
    read_errors_.fetch_add(1, std::memory_order_relaxed);
    return Annotate(bytes.status(), "kvstore get");
  }
  if (auto d = kv::DecodeBlockRecord(*bytes, key); !d.ok()) {
    LOG(WARNING) << "kvstore: dropping corrupt record " << key.ToHex() << ": "
                 << d.status().message();
    DropCorrupt(key);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return absl::NotFoundError(
        absl::StrCat("kvstore: block ", key.ToHex(), " was corrupt and is deleted"));
  }
  if (config_.shared) {
    // Recency for the GC in other processes. NotFound: the GC removed it after our read; the
    // verified bytes are still the block's.
    (void)env_->SetModifiedUnixNanos(RecordPath(key), env_->NowUnixNanos());
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      TouchLocked(key, it->second, clock_->NowNanos());
    }
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(bytes->size(), std::memory_order_relaxed);
  return std::move(*bytes);
}

absl::StatusOr<kv::StoredBlock> KvStore::Get(const BlockKey& key) {
  ASSIGN_OR_RETURN(std::string record, GetRecord(key));
  ASSIGN_OR_RETURN(kv::DecodedBlockRecord d, kv::DecodeBlockRecord(record, key));
  return kv::StoredBlock{d.meta, std::string(d.payload)};
}

absl::StatusOr<size_t> KvStore::LongestPrefix(std::span<const BlockKey> chain) {
  if (config_.shared) return SharedLongestPrefix(chain);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry*> found;
  found.reserve(chain.size());
  for (const BlockKey& k : chain) {
    auto it = index_.find(k);
    if (it == index_.end()) break;
    found.push_back(&it->second);
  }
  // Touch the suffix first so that, on equal clock readings, prefixes are the most recent.
  const int64_t now = clock_->NowNanos();
  for (size_t i = found.size(); i-- > 0;) TouchLocked(chain[i], *found[i], now);
  return found.size();
}

absl::Status KvStore::Delete(const BlockKey& key) {
  bool present;
  {
    std::lock_guard<std::mutex> lock(mu_);
    present = index_.contains(key);
    RemoveLocked(key);
  }
  if (!present && !config_.shared) return absl::OkStatus();
  absl::Status s = env_->RemoveFile(RecordPath(key));
  if (s.ok() || present) counters_.deleted.fetch_add(1, std::memory_order_relaxed);
  if (!s.ok() && !absl::IsNotFound(s)) return Annotate(s, "kvstore delete");
  return absl::OkStatus();
}

absl::StatusOr<kv::BlockStoreStats> KvStore::Stats() {
  kv::BlockStoreStats st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st.records = index_.size();
    st.bytes = used_bytes_;
  }
  st.capacity_bytes = config_.capacity_bytes;
  counters_.CopyTo(&st);
  return st;
}

void KvStore::RemoveFiles(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    absl::Status s = env_->RemoveFile(p);
    if (!s.ok() && !absl::IsNotFound(s)) LOG(WARNING) << "kvstore gc: " << s.message();
  }
}

GcResult KvStore::RunGc() {
  std::lock_guard<std::mutex> gc_lock(gc_mu_);
  const int64_t start = MonotonicNanos();
  GcResult result;
  std::vector<std::string> paths;
  if (!config_.shared || SharedRescan(&result)) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_->NowNanos();
    // Removes `key` (a leaf of `set`); false when shared mode keeps it (then only taken out of
    // `set` for this pass, so its parent stays a non-leaf) or another process removed it.
    auto evict = [&](const BlockKey& key, std::set<LeafOrder>& set) -> bool {
      const Entry& e = index_.at(key);
      const uint64_t bytes = e.bytes;
      if (config_.shared) {
        const Unlink u = SharedUnlinkLocked(key, e);
        if (u == Unlink::kKept) {
          set.erase({{e.last_access, e.seq}, key});
          ++result.kept_recent;
          return false;
        }
        RemoveLocked(key);
        if (u == Unlink::kGone) return false;
      } else {
        paths.push_back(RecordPath(key));
        RemoveLocked(key);
      }
      result.bytes_freed += bytes;
      return true;
    };
    // TTL: removing a leaf can expose its parent (possibly of another class) as a new
    // expired leaf, so repeat until a pass removes nothing.
    for (bool progress = true; progress;) {
      progress = false;
      for (int c = 0; c < kv::kNumTrafficClasses; ++c) {
        auto& set = leaves_[c];
        while (!set.empty() && now - set.begin()->first.first > config_.ttl_nanos[c]) {
          if (evict(set.begin()->second, set)) ++result.evicted_ttl;
          progress = true;
        }
      }
    }
    const double capacity = static_cast<double>(config_.capacity_bytes);
    if (used_bytes_ > config_.high_watermark * capacity) {
      const double low = config_.low_watermark * capacity;
      while (used_bytes_ > low) {
        int oldest = -1;
        for (int c = 0; c < kv::kNumTrafficClasses; ++c) {
          if (leaves_[c].empty()) continue;
          if (oldest < 0 || *leaves_[c].begin() < *leaves_[oldest].begin()) oldest = c;
        }
        // Without shared-mode keeps unreachable while records exist: a forest has leaves.
        if (oldest < 0) break;
        if (evict(leaves_[oldest].begin()->second, leaves_[oldest])) ++result.evicted_watermark;
      }
    }
    gc_wanted_ = false;
    result.records = index_.size();
    result.bytes = used_bytes_;
  }
  RemoveFiles(paths);
  counters_.evicted_ttl.fetch_add(result.evicted_ttl, std::memory_order_relaxed);
  counters_.evicted_watermark.fetch_add(result.evicted_watermark, std::memory_order_relaxed);
  counters_.gc_runs.fetch_add(1, std::memory_order_relaxed);
  counters_.gc_nanos.fetch_add(static_cast<uint64_t>(MonotonicNanos() - start), std::memory_order_relaxed);
  return result;
}

void KvStore::GcLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      gc_cv_.wait_for(lock, std::chrono::nanoseconds(config_.gc_interval_nanos),
                      [this] { return stop_ || gc_wanted_; });
      if (stop_) return;
    }
    RunGc();
  }
}

std::string KvStore::MetricsText() {
  auto st = Stats();
  const kv::BlockStoreStats s = st.ok() ? *st : kv::BlockStoreStats{};
  std::string out;
  auto metric = [&out](const char* name, const char* type, const char* help,
                       const std::string& labels, auto value, bool header = true) {
    if (header)
      absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
    absl::StrAppend(&out, name, labels, " ", value, "\n");
  };
  metric("deepinfer_kvstore_records", "gauge", "Block records stored.", "", s.records);
  metric("deepinfer_kvstore_bytes", "gauge", "Bytes of stored record files.", "", s.bytes);
  metric("deepinfer_kvstore_capacity_bytes", "gauge", "Configured capacity.", "", s.capacity_bytes);
  metric("deepinfer_kvstore_hits_total", "counter", "Gets that returned a block.", "", s.hits);
  metric("deepinfer_kvstore_misses_total", "counter", "Gets that found no (valid) block.", "",
         s.misses);
  metric("deepinfer_kvstore_puts_total", "counter", "Puts acknowledged.", "", s.puts);
  metric("deepinfer_kvstore_evictions_total", "counter", "Records removed, by reason.",
         "{reason=\"watermark\"}", s.evicted_watermark);
  metric("deepinfer_kvstore_evictions_total", "", "", "{reason=\"ttl\"}", s.evicted_ttl, false);
  metric("deepinfer_kvstore_evictions_total", "", "", "{reason=\"corrupt\"}", s.evicted_corrupt,
         false);
  metric("deepinfer_kvstore_evictions_total", "", "", "{reason=\"deleted\"}", s.deleted, false);
  metric("deepinfer_kvstore_gc_runs_total", "counter", "GC passes.", "", s.gc_runs);
  metric("deepinfer_kvstore_gc_seconds_total", "counter", "Time spent in GC passes.", "",
         s.gc_nanos * 1e-9);
  metric("deepinfer_kvstore_read_errors_total", "counter", "Record reads the disk failed.", "",
         read_errors_.load());
  metric("deepinfer_kvstore_write_errors_total", "counter", "Record writes the disk failed.", "",
         write_errors_.load());
  metric("deepinfer_kvstore_read_bytes_total", "counter", "Record bytes served.", "",
         bytes_read_.load());
  metric("deepinfer_kvstore_written_bytes_total", "counter", "Record bytes written.", "",
         bytes_written_.load());
  return out;
}

}  // namespace deepinfer::kvstore
