// `deepinfer kvstore`: runs one KV store node (ARCHITECTURE.md §1, KV-CACHE.md §3 L2): block
// records under --dir, LRU GC under the watermarks, TTL per traffic class, the TCP block
// protocol on --port and Prometheus text on --metrics-port. Runs until SIGINT/SIGTERM.
//
// `deepinfer kvstore --dir PATH --gc-only`: only the GC of a shared directory that engines
// write directly (`deepinfer serve --kv-store-dir PATH`, store.h's shared mode; the 3FS /
// CephFS shape): every --gc-interval it rescans PATH, removes expired and over-watermark
// records by mtime and abandoned temp files, and logs the pass. No TCP service. Run one per
// directory, on the storage side; never next to a (non-shared) `deepinfer kvstore` node on the
// same directory.
//
// `deepinfer kvstore --rados rados://POOL?conf=PATH&id=CLIENT --gc-only --capacity SIZE`: the GC
// of a RADOS pool that engines write directly (`deepinfer serve --kv-store rados://...`,
// kvstore/rados_store.h): every --gc-interval it lists the pool, reads each object's metadata
// xattrs and removes expired and over-watermark leaves. Run ONE per pool (or per namespace):
// CRUSH spreads every chain over all storage nodes, so no node owns a subtree of the prefix
// forest, and the leaf-first rule needs the whole forest of a pool in one process (see
// docs/kv-store-rados.md for the cost per pass and when to shard).
#include <csignal>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "kvstore/config.h"
#include "kvstore/rados_store.h"
#include "kvstore/service.h"
#include "kvstore/store.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace deepinfer::cli {
namespace {

// Builds the store and service configs from the flags; InvalidArgument names the bad flag.
absl::Status ReadFlags(const FlagSet& flags, kvstore::KvStoreConfig* store,
                       kvstore::KvStoreServiceConfig* service) {
  store->dir = flags.GetString("dir");
  const bool rados = !flags.GetString("rados").empty();
  if (rados && !store->dir.empty()) {
    return absl::InvalidArgumentError("--dir and --rados are exclusive: pick one store");
  }
  if (rados && !flags.GetBool("gc-only")) {
    return absl::InvalidArgumentError(
        "--rados needs --gc-only (engines reach RADOS directly; this process only collects "
        "garbage)");
  }
  if (rados) store->dir = "(rados)";  // satisfies Validate(); unused
  if (store->dir.empty()) return absl::InvalidArgumentError("--dir (or --rados) is required");
  const std::string capacity = flags.GetString("capacity");
  if (capacity.empty()) return absl::InvalidArgumentError("--capacity is required (e.g. 100G)");
  auto bytes = kvstore::ParseByteSize(capacity);
  if (!bytes.ok()) return deepinfer::Annotate(bytes.status(), "--capacity");
  store->capacity_bytes = *bytes;
  auto high = flags.GetDouble("high-watermark");
  if (!high.ok()) return high.status();
  store->high_watermark = *high;
  auto low = flags.GetDouble("low-watermark");
  if (!low.ok()) return low.status();
  store->low_watermark = *low;
  for (auto [flag, cls] : {std::pair{"ttl-chat", kv::TrafficClass::kChat},
                           std::pair{"ttl-agent", kv::TrafficClass::kAgent}}) {
    auto ttl = kvstore::ParseDuration(flags.GetString(flag));
    if (!ttl.ok()) return deepinfer::Annotate(ttl.status(), std::string("--") + flag);
    store->ttl_nanos[static_cast<int>(cls)] = *ttl;
  }
  auto interval = kvstore::ParseDuration(flags.GetString("gc-interval"));
  if (!interval.ok()) return deepinfer::Annotate(interval.status(), "--gc-interval");
  store->gc_interval_nanos = *interval;
  store->sync = flags.GetBool("sync");
  for (auto [flag, field] : {std::pair{"temp-grace", &store->temp_grace_nanos},
                             std::pair{"hit-grace", &store->hit_grace_nanos}}) {
    auto grace = kvstore::ParseDuration(flags.GetString(flag));
    if (!grace.ok()) return deepinfer::Annotate(grace.status(), std::string("--") + flag);
    *field = *grace;
  }
  if (flags.GetBool("gc-only")) {
    store->shared = true;
    store->background_gc = false;  // RunGcOnly drives the passes
  }
  service->host = flags.GetString("host");
  auto port = flags.GetInt("port");
  if (!port.ok()) return port.status();
  if (*port < 0 || *port > 65535) return absl::InvalidArgumentError("--port must be in [0, 65535]");
  service->port = static_cast<int>(*port);
  auto metrics_port = flags.GetInt("metrics-port");
  if (!metrics_port.ok()) return metrics_port.status();
  if (*metrics_port < -1 || *metrics_port > 65535) {
    return absl::InvalidArgumentError("--metrics-port must be -1 (off) or in [0, 65535]");
  }
  service->metrics_port = static_cast<int>(*metrics_port);
  return store->Validate();
}

// The --gc-only loop: a pass of `gc` now and every `interval`, until a signal in `stop_signals`.
int RunGcOnly(const std::function<kvstore::GcResult()>& gc, const std::string& what,
              const kvstore::KvStoreConfig& config, const sigset_t& stop_signals) {
  std::printf("kvstore gc-only on %s (capacity %llu bytes, every %.1f s)\n", what.c_str(),
              static_cast<unsigned long long>(config.capacity_bytes),
              static_cast<double>(config.gc_interval_nanos) * 1e-9);
  std::fflush(stdout);
  for (;;) {
    const int64_t start = MonotonicNanos();
    const kvstore::GcResult r = gc();
    LOG(INFO) << "kvstore gc: " << (r.scanned ? "" : "rescan FAILED, ") << r.records << " records, "
              << r.bytes << " bytes; removed " << r.evicted_ttl << " by TTL, "
              << r.evicted_watermark << " by watermark (" << r.bytes_freed << " bytes), "
              << r.temp_files_removed << " stale temp files; kept " << r.kept_recent
              << " recently hit; " << (MonotonicNanos() - start) / 1000000 << " ms";
    struct timespec wait;
    wait.tv_sec = static_cast<time_t>(config.gc_interval_nanos / 1000000000);
    wait.tv_nsec = static_cast<long>(config.gc_interval_nanos % 1000000000);
    const int sig = sigtimedwait(&stop_signals, nullptr, &wait);
    if (sig > 0) {
      LOG(INFO) << "kvstore gc: signal " << sig << ", stopping";
      return 0;
    }
  }
}

}  // namespace

int RunKvstore(int argc, char** argv) {
  FlagSet flags("kvstore");
  flags.AddString("dir", "", "directory holding the record files (local SSD or a DFS mount)");
  flags.AddString("rados", "",
                  "with --gc-only: collect the garbage of a Ceph RADOS pool that engines write "
                  "directly, rados://POOL?conf=PATH&id=CLIENT (one GC process per pool)");
  flags.AddString("capacity", "", "bytes of records to keep, e.g. 10G, 512M, 1073741824");
  flags.AddString("high-watermark", "0.9", "GC starts above this fraction of --capacity");
  flags.AddString("low-watermark", "0.8", "GC evicts LRU records down to this fraction");
  flags.AddString("ttl-agent", "3d", "time-to-live since last use, agent traffic (3d, 12h, 30m)");
  flags.AddString("ttl-chat", "7d", "time-to-live since last use, chat traffic");
  flags.AddString("gc-interval", "10s",
                  "period of the background TTL sweep (--gc-only: of the directory rescan)");
  flags.AddString("host", "127.0.0.1", "IPv4 address to listen on (0.0.0.0 for all)");
  flags.AddString("port", "7411", "TCP port of the block protocol (0: pick one)");
  flags.AddString("metrics-port", "-1", "HTTP port for GET /metrics (-1: off, 0: pick one)");
  flags.AddBool("sync", true, "fsync every record before acknowledging it (--no-sync: don't)");
  flags.AddBool("gc-only", false,
                "only garbage-collect --dir, a directory engines write directly (`deepinfer "
                "serve --kv-store-dir`): rescan every --gc-interval, no TCP service");
  flags.AddString("temp-grace", "10m",
                  "--gc-only: temp files younger than this may be puts in progress; kept");
  flags.AddString("hit-grace", "60s",
                  "--gc-only: records hit (mtime refreshed) within this are never removed (engines "
                  "refresh a hit's mtime once it is 15 s old: keep this >= 30s)");
  if (std::optional<int> exit_code = flags.ParseCommandLine(argc, argv)) return *exit_code;
  kvstore::KvStoreConfig store_config;
  kvstore::KvStoreServiceConfig service_config;
  if (absl::Status s = ReadFlags(flags, &store_config, &service_config); !s.ok()) {
    std::fprintf(stderr, "deepinfer kvstore: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  // Block the stop signals before any thread starts so that only sigwait() receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (const std::string url = flags.GetString("rados"); !url.empty()) {
    absl::StatusOr<kvstore::RadosStoreConfig> rc = kvstore::ParseRadosUrl(url);
    if (!rc.ok()) {
      std::fprintf(stderr, "deepinfer kvstore: --rados: %s\n",
                   std::string(rc.status().message()).c_str());
      return 2;
    }
    rc->capacity_bytes = store_config.capacity_bytes;
    rc->high_watermark = store_config.high_watermark;
    rc->low_watermark = store_config.low_watermark;
    rc->ttl_nanos = store_config.ttl_nanos;
    rc->hit_grace_nanos = store_config.hit_grace_nanos;
    auto rados = kvstore::RadosStore::Open(*rc);
    if (!rados.ok()) {
      std::fprintf(stderr, "deepinfer kvstore: --rados: %s\n",
                   std::string(rados.status().message()).c_str());
      return 1;
    }
    kvstore::RadosStore* r = rados->get();
    return RunGcOnly([r] { return r->RunGc(); }, "RADOS pool " + rc->pool, store_config,
                     stop_signals);
  }
  auto store = kvstore::KvStore::Open(store_config);
  if (!store.ok()) {
    std::fprintf(stderr, "deepinfer kvstore: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  if (store_config.shared) {
    kvstore::KvStore* s = store->get();
    return RunGcOnly([s] { return s->RunGc(); }, store_config.dir, store_config, stop_signals);
  }
  auto server = kvstore::KvStoreServer::Start(store->get(), service_config);
  if (!server.ok()) {
    std::fprintf(stderr, "deepinfer kvstore: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  std::printf("kvstore listening on %s:%d", service_config.host.c_str(), (*server)->port());
  if ((*server)->metrics_port() >= 0) std::printf(", metrics on :%d", (*server)->metrics_port());
  std::printf("\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  LOG(INFO) << "kvstore: signal " << sig << ", shutting down";
  (*server)->Stop();
  return 0;
}

}  // namespace deepinfer::cli
