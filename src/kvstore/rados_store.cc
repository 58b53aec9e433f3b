// The only translation unit that includes librados.h (a C header: no warnings under -Werror,
// but kept out of every other file so the rest of the tree does not depend on it).
#include "kvstore/rados_store.h"

#include <rados/librados.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/strings.h"

namespace deepinfer::kvstore {

using kv::BlockKey;

namespace {

constexpr char kMetaXattr[] = "deepinfer.meta";
constexpr char kUsedXattr[] = "deepinfer.used";
// deepinfer.meta: parent key (lo, hi LE) | traffic class (u8) | record bytes (u64 LE).
constexpr size_t kMetaBytes = 25;

rados_t Cluster(void* p) { return static_cast<rados_t>(p); }
rados_ioctx_t Io(void* p) { return static_cast<rados_ioctx_t>(p); }

// The system's wall clock as a Clock (Unix epoch nanoseconds).
class SystemWallClock : public Clock {
 public:
  int64_t NowNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

Clock* SystemClock() {
  static SystemWallClock* clock = new SystemWallClock();
  return clock;
}

// Maps a librados return code (negative errno) to the BlockStore contract's codes.
absl::Status RadosError(int r, std::string_view what, int64_t timeout_ms) {
  const int err = -r;
  const std::string msg = absl::StrCat("rados ", AbslView(what), ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case ETIMEDOUT:
      return absl::UnavailableError(absl::StrCat(msg, " (deadline ", timeout_ms, " ms)"));
    default:
      return absl::UnavailableError(msg);
  }
}

std::string UsedText(int64_t unix_nanos) {
  return absl::StrFormat("%020d", std::max<int64_t>(0, unix_nanos));
}

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

std::string EncodeMeta(const kv::BlockMeta& meta, uint64_t record_bytes) {
  std::string out;
  PutU64(out, meta.parent.lo);
  PutU64(out, meta.parent.hi);
  out.push_back(static_cast<char>(meta.traffic_class));
  PutU64(out, record_bytes);
  return out;
}

// The xattrs an object's metadata read returned.
struct ObjectMeta {
  bool meta_ok = false;
  BlockKey parent;
  kv::TrafficClass traffic_class = kv::TrafficClass::kChat;
  uint64_t record_bytes = 0;
  bool used_ok = false;
  int64_t used = 0;
};

ObjectMeta ParseXattrs(rados_xattrs_iter_t it) {
  ObjectMeta m;
  const char* name = nullptr;
  const char* value = nullptr;
  size_t len = 0;
  while (rados_getxattrs_next(it, &name, &value, &len) == 0 && name != nullptr) {
    if (std::strcmp(name, kMetaXattr) == 0 && len == kMetaBytes) {
      const uint8_t cls = static_cast<uint8_t>(value[16]);
      if (cls < kv::kNumTrafficClasses) {
        m.parent.lo = GetU64(value);
        m.parent.hi = GetU64(value + 8);
        m.traffic_class = static_cast<kv::TrafficClass>(cls);
        m.record_bytes = GetU64(value + 17);
        m.meta_ok = true;
      }
    } else if (std::strcmp(name, kUsedXattr) == 0 && len == 20) {
      m.used_ok = absl::SimpleAtoi(absl::string_view(value, len), &m.used);
    }
  }
  return m;
}

// One asynchronous read op (stat + xattrs, optionally data) and its outputs.
struct AioRead {
  rados_read_op_t op = nullptr;
  rados_completion_t comp = nullptr;
  rados_xattrs_iter_t xattrs = nullptr;
  uint64_t size = 0;
  time_t mtime = 0;
  int stat_rval = 0, xattr_rval = 0, read_rval = 0;
  std::string data;
  size_t bytes_read = 0;
  bool want_xattrs = true;

  AioRead() = default;
  AioRead(const AioRead&) = delete;
  AioRead& operator=(const AioRead&) = delete;
  ~AioRead() {
    if (xattrs != nullptr) rados_getxattrs_end(xattrs);
    if (op != nullptr) rados_release_read_op(op);
    if (comp != nullptr) rados_aio_release(comp);
  }
  // Submits; `read_bytes` > 0 also reads [0, read_bytes). Returns librados' submit code.
  int Submit(rados_ioctx_t io, const std::string& name, size_t read_bytes,
             std::optional<uint64_t> assert_version = std::nullopt) {
    op = rados_create_read_op();
    if (assert_version) rados_read_op_assert_version(op, *assert_version);
    rados_read_op_stat(op, &size, &mtime, &stat_rval);
    if (want_xattrs) rados_read_op_getxattrs(op, &xattrs, &xattr_rval);
    if (read_bytes > 0) {
      data.resize(read_bytes);
      rados_read_op_read(op, 0, read_bytes, data.data(), &bytes_read, &read_rval);
    }
    int r = rados_aio_create_completion2(nullptr, nullptr, &comp);
    if (r < 0) return r;
    return rados_aio_read_op_operate(op, io, comp, name.c_str(), 0);
  }
  // Waits; the op's return code (0, -ENOENT, -ETIMEDOUT, ...).
  int Wait() {
    rados_aio_wait_for_complete(comp);
    return rados_aio_get_return_value(comp);
  }
  uint64_t version() const { return rados_aio_get_version(comp); }
};

}  // namespace

// A last-use write in flight.
struct RadosStore::Pending {
  rados_write_op_t op = nullptr;
  rados_completion_t comp = nullptr;
  std::string used;
  ~Pending() {
    if (comp != nullptr) {
      rados_aio_wait_for_complete(comp);
      rados_aio_release(comp);
    }
    if (op != nullptr) rados_release_write_op(op);
  }
};

std::string RadosStore::ObjectName(const BlockKey& key) { return key.ToHex(); }

absl::StatusOr<std::unique_ptr<RadosStore>> RadosStore::Open(const RadosStoreConfig& config,
                                                             Clock* wall_clock) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<RadosStore> store(
      new RadosStore(config, wall_clock != nullptr ? wall_clock : SystemClock()));
  RETURN_IF_ERROR(store->Connect());
  return store;
}

RadosStore::RadosStore(const RadosStoreConfig& config, Clock* clock)
    : config_(config), clock_(clock) {}

absl::Status RadosStore::Connect() {
  rados_t cluster = nullptr;
  int r = rados_create(&cluster, config_.client_id.c_str());
  if (r < 0) return RadosError(r, "create handle", config_.timeout_ms);
  cluster_ = cluster;
  r = rados_conf_read_file(cluster,
                           config_.conf_path.empty() ? nullptr : config_.conf_path.c_str());
  if (r < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rados: cannot read ceph.conf '",
                                                   config_.conf_path, "': ", std::strerror(-r)));
  }
  const std::string secs = std::to_string((config_.timeout_ms + 999) / 1000);
  for (const char* opt : {"rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"}) {
    r = rados_conf_set(cluster, opt, secs.c_str());
    if (r < 0) return RadosError(r, absl::StrCat("conf_set ", opt), config_.timeout_ms);
  }
  if (!config_.keyring.empty()) {
    r = rados_conf_set(cluster, "keyring", config_.keyring.c_str());
    if (r < 0) return RadosError(r, "conf_set keyring", config_.timeout_ms);
  }
  // librados logs to stderr by default; the daemons' debug levels do not concern the engine.
  (void)rados_conf_set(cluster, "log_to_stderr", "false");
  (void)rados_conf_set(cluster, "err_to_stderr", "false");
  (void)rados_conf_set(cluster, "log_file", "");
  // No admin socket per client handle (two handles of one process would collide on its path).
  (void)rados_conf_set(cluster, "admin_socket", "");
  r = rados_connect(cluster);
  if (r < 0) {
    return RadosError(
        r, absl::StrCat("connect (client.", config_.client_id, ", conf '", config_.conf_path, "')"),
        config_.timeout_ms);
  }
  rados_ioctx_t io = nullptr;
  r = rados_ioctx_create(cluster, config_.pool.c_str(), &io);
  if (r < 0)
    return RadosError(r, absl::StrCat("open pool '", config_.pool, "'"), config_.timeout_ms);
  io_ = io;
  if (!config_.name_space.empty()) rados_ioctx_set_namespace(io, config_.name_space.c_str());
  return absl::OkStatus();
}

RadosStore::~RadosStore() {
  Flush();
  if (io_ != nullptr) rados_ioctx_destroy(Io(io_));
  if (cluster_ != nullptr) rados_shutdown(Cluster(cluster_));
}

void RadosStore::ReapLocked(bool wait) {
  std::erase_if(pending_, [wait](const std::unique_ptr<Pending>& p) {
    return wait || rados_aio_is_complete(p->comp);
  });
}

void RadosStore::Flush() {
  std::vector<std::unique_ptr<Pending>> all;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    all.swap(pending_);
  }
  all.clear();  // ~Pending waits for each
}

void RadosStore::RefreshAsync(const BlockKey& key) {
  auto p = std::make_unique<Pending>();
  p->used = UsedText(clock_->NowNanos());
  p->op = rados_create_write_op();
  // Never recreate an object the GC (or a reader that found it corrupt) removed meanwhile.
  rados_write_op_assert_exists(p->op);
  rados_write_op_setxattr(p->op, kUsedXattr, p->used.data(), p->used.size());
  if (rados_aio_create_completion2(nullptr, nullptr, &p->comp) < 0) {
    p->comp = nullptr;
    return;
  }
  const std::string name = ObjectName(key);
  if (rados_aio_write_op_operate(p->op, Io(io_), p->comp, name.c_str(), nullptr,
                                 LIBRADOS_OPERATION_FULL_TRY) < 0) {
    rados_aio_release(p->comp);
    p->comp = nullptr;
    return;
  }
  std::lock_guard<std::mutex> lock(pending_mu_);
  ReapLocked(/*wait=*/false);
  pending_.push_back(std::move(p));
}

absl::Status RadosStore::RemoveIfVersion(const std::string& name, uint64_t version) {
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_assert_version(op, version);
  rados_write_op_remove(op);
  const int r =
      rados_write_op_operate2(op, Io(io_), name.c_str(), nullptr, LIBRADOS_OPERATION_FULL_FORCE);
  rados_release_write_op(op);
  if (r == 0) return absl::OkStatus();
  if (r == -ENOENT) return absl::NotFoundError(name);
  if (r == -ERANGE || r == -EOVERFLOW) return absl::AbortedError(name + " changed");
  return RadosError(r, absl::StrCat("remove ", name), config_.timeout_ms);
}

absl::Status RadosStore::Put(const kv::BlockMeta& meta, std::string_view payload) {
  ASSIGN_OR_RETURN(std::string record, kv::EncodeBlockRecord(meta, payload));
  if (config_.capacity_bytes > 0 && record.size() > config_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rados put: record of ", record.size(),
                                                     " bytes exceeds the capacity ",
                                                     config_.capacity_bytes));
  }
  const std::string name = ObjectName(meta.key);
  const std::string meta_x = EncodeMeta(meta, record.size());
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string used = UsedText(clock_->NowNanos());
    rados_write_op_t op = rados_create_write_op();
    // One atomic op: the object appears complete with its metadata, or not at all.
    rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, nullptr);
    rados_write_op_write_full(op, record.data(), record.size());
    rados_write_op_setxattr(op, kMetaXattr, meta_x.data(), meta_x.size());
    rados_write_op_setxattr(op, kUsedXattr, used.data(), used.size());
    int r =
        rados_write_op_operate2(op, Io(io_), name.c_str(), nullptr, LIBRADOS_OPERATION_FULL_TRY);
    rados_release_write_op(op);
    if (r == -EEXIST) {
      // Stored already (by us or another engine): refresh its last use instead.
      op = rados_create_write_op();
      rados_write_op_assert_exists(op);
      rados_write_op_setxattr(op, kUsedXattr, used.data(), used.size());
      r = rados_write_op_operate2(op, Io(io_), name.c_str(), nullptr, LIBRADOS_OPERATION_FULL_TRY);
      rados_release_write_op(op);
      if (r == -ENOENT) continue;  // removed in between: write it
    }
    if (r < 0) return RadosError(r, absl::StrCat("put ", name), config_.timeout_ms);
    counters_.puts.fetch_add(1, std::memory_order_relaxed);
    size_t hint = read_hint_.load(std::memory_order_relaxed);
    while (record.size() > hint &&
           !read_hint_.compare_exchange_weak(hint, record.size(), std::memory_order_relaxed)) {
    }
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat("rados put ", name, ": removed concurrently twice"));
}

absl::StatusOr<kv::StoredBlock> RadosStore::Get(const BlockKey& key) {
  const std::string name = ObjectName(key);
  AioRead rd;
  int r = rd.Submit(Io(io_), name, read_hint_.load(std::memory_order_relaxed));
  if (r >= 0) r = rd.Wait();
  if (r == -ENOENT) {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return absl::NotFoundError(absl::StrCat("rados: no block ", name));
  }
  if (r < 0) return RadosError(r, absl::StrCat("get ", name), config_.timeout_ms);
  const uint64_t version = rd.version();
  std::string bytes;
  if (rd.size > rd.bytes_read) {
    // Larger than the hint: read the rest of this same version.
    AioRead rest;
    rest.want_xattrs = false;
    r = rest.Submit(Io(io_), name, rd.size, version);
    if (r >= 0) r = rest.Wait();
    if (r == -ENOENT || r == -ERANGE || r == -EOVERFLOW) {  // removed or replaced meanwhile
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      return absl::NotFoundError(absl::StrCat("rados: block ", name, " changed during the read"));
    }
    if (r < 0) return RadosError(r, absl::StrCat("get ", name), config_.timeout_ms);
    rest.data.resize(rest.bytes_read);
    bytes = std::move(rest.data);
    size_t hint = read_hint_.load(std::memory_order_relaxed);
    while (bytes.size() > hint &&
           !read_hint_.compare_exchange_weak(hint, bytes.size(), std::memory_order_relaxed)) {
    }
  } else {
    rd.data.resize(rd.bytes_read);
    bytes = std::move(rd.data);
  }
  auto decoded = kv::DecodeBlockRecord(bytes, key);
  if (!decoded.ok()) {
    // Damaged, partial or another block's record: a miss, and removed unless it was replaced
    // since this read (a concurrent re-put of the good record).
    LOG(WARNING) << "rados: dropping object " << name << ": " << decoded.status().message();
    (void)RemoveIfVersion(name, version);
    counters_.evicted_corrupt.fetch_add(1, std::memory_order_relaxed);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return absl::NotFoundError(absl::StrCat("rados: block ", name, " failed its checks"));
  }
  const ObjectMeta m = ParseXattrs(rd.xattrs);
  if (!m.used_ok || clock_->NowNanos() - m.used > config_.refresh_nanos) RefreshAsync(key);
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  kv::StoredBlock out;
  out.meta = decoded->meta;
  out.payload = std::string(decoded->payload);
  return out;
}

absl::StatusOr<size_t> RadosStore::LongestPrefix(std::span<const BlockKey> chain) {
  size_t found = 0;
  const size_t batch = static_cast<size_t>(config_.lookup_batch);
  const int64_t now = clock_->NowNanos();
  std::vector<BlockKey> refresh;
  while (found < chain.size()) {
    const size_t n = std::min(batch, chain.size() - found);
    std::vector<std::unique_ptr<AioRead>> ops;
    ops.reserve(n);
    int submit_error = 0;
    for (size_t i = 0; i < n; ++i) {
      ops.push_back(std::make_unique<AioRead>());
      const int r = ops.back()->Submit(Io(io_), ObjectName(chain[found + i]), 0);
      if (r < 0) {
        submit_error = r;
        ops.back()->comp = nullptr;  // nothing in flight
        ops.pop_back();
        break;
      }
    }
    std::vector<int> rc(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) rc[i] = ops[i]->Wait();
    size_t run = 0;
    int stop = 0;
    for (; run < ops.size(); ++run) {
      if (rc[run] != 0) {
        stop = rc[run];
        break;
      }
      const ObjectMeta m = ParseXattrs(ops[run]->xattrs);
      if (!m.used_ok || now - m.used > config_.refresh_nanos) refresh.push_back(chain[found + run]);
    }
    if (run == ops.size() && submit_error != 0) stop = submit_error;
    found += run;
    if (stop != 0) {
      if (stop != -ENOENT && found == 0) {
        return RadosError(stop, "longest prefix", config_.timeout_ms);
      }
      break;
    }
    if (run < n) break;
  }
  // Suffix first, so that the prefix carries the later last-use time.
  for (auto it = refresh.rbegin(); it != refresh.rend(); ++it) RefreshAsync(*it);
  return found;
}

absl::Status RadosStore::Delete(const BlockKey& key) {
  const std::string name = ObjectName(key);
  // FULL_FORCE: a delete frees space, so it must go through on a full pool (a plain
  // rados_remove waits there until the deadline).
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_remove(op);
  const int r = rados_write_op_operate2(op, Io(io_), name.c_str(), nullptr,
                                        LIBRADOS_OPERATION_FULL_FORCE);
  rados_release_write_op(op);
  if (r == 0) counters_.deleted.fetch_add(1, std::memory_order_relaxed);
  if (r == 0 || r == -ENOENT) return absl::OkStatus();
  return RadosError(r, absl::StrCat("delete ", name), config_.timeout_ms);
}

absl::StatusOr<kv::BlockStoreStats> RadosStore::Stats() {
  kv::BlockStoreStats st;
  rados_pool_stat_t ps{};
  if (rados_ioctx_pool_stat(Io(io_), &ps) == 0) {
    st.records = ps.num_objects;
    st.bytes = ps.num_bytes;
  }
  st.capacity_bytes = config_.capacity_bytes;
  counters_.CopyTo(&st);
  return st;
}

absl::Status RadosStore::WriteRawObject(const BlockKey& key, std::string_view bytes,
                                        const kv::BlockMeta* meta) {
  const std::string name = ObjectName(key);
  const std::string used = UsedText(clock_->NowNanos());
  std::string meta_x;
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_write_full(op, bytes.data(), bytes.size());
  if (meta != nullptr) {
    meta_x = EncodeMeta(*meta, bytes.size());
    rados_write_op_setxattr(op, kMetaXattr, meta_x.data(), meta_x.size());
    rados_write_op_setxattr(op, kUsedXattr, used.data(), used.size());
  }
  const int r = rados_write_op_operate2(op, Io(io_), name.c_str(), nullptr, 0);
  rados_release_write_op(op);
  if (r < 0) return RadosError(r, absl::StrCat("write ", name), config_.timeout_ms);
  return absl::OkStatus();
}

absl::StatusOr<bool> RadosStore::ObjectExists(const BlockKey& key) {
  uint64_t size = 0;
  time_t mtime = 0;
  const int r = rados_stat(Io(io_), ObjectName(key).c_str(), &size, &mtime);
  if (r == 0) return true;
  if (r == -ENOENT) return false;
  return RadosError(r, "stat", config_.timeout_ms);
}

GcResult RadosStore::RunGc() {
  Flush();
  std::lock_guard<std::mutex> gc_lock(gc_mu_);
  const int64_t start = MonotonicNanos();
  GcResult result;
  auto finish = [&] {
    counters_.evicted_ttl.fetch_add(result.evicted_ttl, std::memory_order_relaxed);
    counters_.evicted_watermark.fetch_add(result.evicted_watermark, std::memory_order_relaxed);
    counters_.gc_runs.fetch_add(1, std::memory_order_relaxed);
    counters_.gc_nanos.fetch_add(static_cast<uint64_t>(MonotonicNanos() - start), std::memory_order_relaxed);
    return result;
  };
  // 1. List the pool (only names that are block keys: the pool may hold nothing else of ours).
  std::vector<std::pair<BlockKey, std::string>> names;
  rados_list_ctx_t ctx = nullptr;
  int r = rados_nobjects_list_open(Io(io_), &ctx);
  if (r < 0) {
    LOG(WARNING) << "rados gc: list: " << std::strerror(-r);
    result.scanned = false;
    return finish();
  }
  for (;;) {
    const char* entry = nullptr;
    const char* locator = nullptr;
    const char* nspace = nullptr;
    size_t entry_size = 0, key_size = 0, nspace_size = 0;
    r = rados_nobjects_list_next2(ctx, &entry, &locator, &nspace, &entry_size, &key_size,
                                  &nspace_size);
    if (r < 0) break;
    const std::string name(entry, entry_size);
    if (std::optional<BlockKey> k = BlockKey::FromHex(name); k.has_value()) {
      names.emplace_back(*k, name);
    }
  }
  rados_nobjects_list_close(ctx);
  if (r != -ENOENT) {
    LOG(WARNING) << "rados gc: list: " << std::strerror(-r) << "; pass removes nothing";
    result.scanned = false;
    return finish();
  }
  // 2. Metadata of every object, gc_batch reads in flight.
  struct Node {
    BlockKey key, parent;
    uint64_t bytes = 0;
    kv::TrafficClass cls = kv::TrafficClass::kChat;
    int64_t used = 0;
    uint64_t version = 0;
    int children = 0;
    bool gone = false;     // out of the leaf sets for this pass (removed or kept)
    bool removed = false;  // no longer stored
  };
  std::vector<Node> nodes;
  nodes.reserve(names.size());
  const size_t batch = static_cast<size_t>(config_.gc_batch);
  for (size_t b = 0; b < names.size(); b += batch) {
    const size_t n = std::min(batch, names.size() - b);
    std::vector<std::unique_ptr<AioRead>> ops;
    for (size_t i = 0; i < n; ++i) {
      ops.push_back(std::make_unique<AioRead>());
      // Objects lacking valid metadata xattrs are judged by their header instead.
      if (ops.back()->Submit(Io(io_), names[b + i].second, 0) < 0) {
        result.scanned = false;
        ops.back()->comp = nullptr;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      AioRead& op = *ops[i];
      if (op.comp == nullptr) continue;
      const int rc = op.Wait();
      if (rc == -ENOENT) continue;  // removed since the listing
      if (rc < 0) {
        LOG(WARNING) << "rados gc: read " << names[b + i].second << ": " << std::strerror(-rc);
        result.scanned = false;
        continue;
      }
      ObjectMeta m = ParseXattrs(op.xattrs);
      const std::string& name = names[b + i].second;
      const uint64_t version = op.version();
      if (!m.meta_ok || m.record_bytes != op.size) {
        // No (or inconsistent) metadata: another writer's object, or damage. The header decides.
        AioRead hdr;
        hdr.want_xattrs = false;
        int hr = hdr.Submit(Io(io_), name, kv::kBlockRecordHeaderBytes, version);
        if (hr >= 0) hr = hdr.Wait();
        if (hr == -ENOENT || hr == -ERANGE || hr == -EOVERFLOW) continue;  // gone or changed
        if (hr < 0) {
          result.scanned = false;
          continue;
        }
        hdr.data.resize(hdr.bytes_read);
        auto h = kv::DecodeBlockRecordHeader(hdr.data);
        if (!h.ok() || h->meta.key != names[b + i].first ||
            hdr.size != kv::kBlockRecordHeaderBytes + h->payload_bytes) {
          if (RemoveIfVersion(name, version).ok()) {
            counters_.evicted_corrupt.fetch_add(1, std::memory_order_relaxed);
          }
          continue;
        }
        m.parent = h->meta.parent;
        m.traffic_class = h->meta.traffic_class;
        m.record_bytes = hdr.size;
      }
      Node node;
      node.key = names[b + i].first;
      node.parent = m.parent;
      node.bytes = op.size;
      node.cls = m.traffic_class;
      // Without a last-use xattr: the object's modification time (whole seconds).
      node.used = m.used_ok ? m.used : static_cast<int64_t>(op.mtime) * kNanosPerSecond;
      node.version = version;
      nodes.push_back(node);
    }
  }
  if (!result.scanned) {
    LOG(WARNING) << "rados gc: metadata reads failed; pass removes nothing";
    return finish();
  }
  // 3. The prefix forest: only leaves (no stored child) are removed, oldest first.
  std::unordered_map<BlockKey, size_t, kv::BlockKeyHash> index;
  uint64_t used_bytes = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    index.emplace(nodes[i].key, i);
    used_bytes += nodes[i].bytes;
  }
  for (const Node& n : nodes) {
    if (auto p = index.find(n.parent); p != index.end() && n.parent != kv::kRootBlockKey) {
      ++nodes[p->second].children;
    }
  }
  using Leaf = std::pair<int64_t, size_t>;  // (last use, node index)
  std::array<std::set<Leaf>, kv::kNumTrafficClasses> leaves;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].children == 0) leaves[static_cast<int>(nodes[i].cls)].insert({nodes[i].used, i});
  }
  const int64_t now = clock_->NowNanos();
  // Removes leaf `i` (taken out of its set either way); true when it was removed. A removed
  // leaf may expose its parent as a new leaf.
  auto evict = [&](size_t i) -> bool {
    Node& n = nodes[i];
    leaves[static_cast<int>(n.cls)].erase({n.used, i});
    n.gone = true;
    if (now - n.used < config_.hit_grace_nanos) {
      ++result.kept_recent;
      return false;  // used moments ago: its fetch may be under way
    }
    absl::Status s = RemoveIfVersion(ObjectName(n.key), n.version);
    const bool removed = s.ok() || absl::IsNotFound(s);
    if (!removed) {
      if (!absl::IsAborted(s)) LOG(WARNING) << "rados gc: " << s.message();
      ++result.kept_recent;  // hit or re-put since the scan (or the remove failed): kept
      return false;
    }
    n.removed = true;
    used_bytes -= n.bytes;
    if (s.ok()) result.bytes_freed += n.bytes;
    if (auto p = index.find(n.parent); p != index.end() && n.parent != kv::kRootBlockKey) {
      Node& parent = nodes[p->second];
      if (--parent.children == 0 && !parent.gone) {
        leaves[static_cast<int>(parent.cls)].insert({parent.used, p->second});
      }
    }
    return s.ok();
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int c = 0; c < kv::kNumTrafficClasses; ++c) {
      while (!leaves[c].empty() && now - leaves[c].begin()->first > config_.ttl_nanos[c]) {
        if (evict(leaves[c].begin()->second)) ++result.evicted_ttl;
        progress = true;
      }
    }
  }
  const double capacity = static_cast<double>(config_.capacity_bytes);
  if (config_.capacity_bytes > 0 && used_bytes > config_.high_watermark * capacity) {
    while (used_bytes > config_.low_watermark * capacity) {
      int oldest = -1;
      for (int c = 0; c < kv::kNumTrafficClasses; ++c) {
        if (leaves[c].empty()) continue;
        if (oldest < 0 || *leaves[c].begin() < *leaves[oldest].begin()) oldest = c;
      }
      if (oldest < 0) break;
      if (evict(leaves[oldest].begin()->second)) ++result.evicted_watermark;
    }
  }
  for (const Node& n : nodes) result.records += n.removed ? 0 : 1;
  result.bytes = used_bytes;
  return finish();
}

}  // namespace deepinfer::kvstore
