// `make bench` (ctest label bench; not a test): put/get latency and throughput of 128-token
// DeepSeek-V4-Flash block records (450,944-byte payload, docs/kv-format.md §6) on RadosStore
// against the throwaway Ceph cluster (scripts/ceph-test-cluster.sh: 3 OSDs on this machine, EC
// k=2 m=1), next to the directory store (kvstore::KvStore) on this machine's disk, with and
// without fsync; and LongestPrefix on RADOS: one lookup window of 64 async reads vs one read at a
// time, with the pool at two sizes (the cost must not grow with the pool). Prints one table;
// figures go to docs/performance.md with `uptime`'s load average.
// Flags: --blocks N (default 200), --threads T (default 8). Ignores Google Benchmark flags.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "kv/block_record.h"
#include "kvstore/ceph_test_cluster.h"
#include "kvstore/rados_store.h"
#include "kvstore/store.h"
#include "kvstore/test_util.h"

namespace deepinfer::kvstore {
namespace {

constexpr size_t kV4FlashBlockPayload = 450944;

struct Latencies {
  std::vector<double> us;
  double wall_s = 0;
  size_t bytes = 0;
  size_t errors = 0;
  double Pct(double p) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, static_cast<size_t>(p * static_cast<double>(us.size())))];
  }
};

void Row(const char* store, const char* op, int threads, Latencies& l) {
  std::printf("%-24s %-6s %3d  %8.0f  %8.0f  %8.0f  %8.1f  %7.0f  %zu\n", store, op, threads,
              l.Pct(0.5), l.Pct(0.9), l.Pct(0.99), static_cast<double>(l.bytes) / l.wall_s / 1e6,
              static_cast<double>(l.us.size()) / l.wall_s, l.errors);
  std::fflush(stdout);
}

// Runs `op(i)` for i in [0, n) on `threads` threads; per-op latencies.
template <typename F>
Latencies Run(int n, int threads, size_t bytes_per_op, F op) {
  Latencies l;
  std::vector<std::vector<double>> per(threads);
  std::atomic<int> next{0};
  std::atomic<size_t> errors{0};
  Stopwatch wall;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int i; (i = next.fetch_add(1)) < n;) {
        Stopwatch sw;
        if (!op(i)) ++errors;
        per[t].push_back(static_cast<double>(sw.ElapsedNanos()) / 1000.0);
      }
    });
  }
  for (auto& t : ts) t.join();
  l.wall_s = wall.ElapsedSeconds();
  for (auto& v : per) l.us.insert(l.us.end(), v.begin(), v.end());
  l.bytes = static_cast<size_t>(n) * bytes_per_op;
  l.errors = errors.load();
  return l;
}

std::vector<kv::BlockMeta> Blocks(uint64_t chain, int n) {
  std::vector<kv::BlockMeta> out;
  kv::BlockKey parent = kv::kRootBlockKey;
  for (int i = 0; i < n; ++i) {
    out.push_back(testing::ChainBlock(chain, i, parent));
    parent = out.back().key;
  }
  return out;
}

void PutGet(const char* name, kv::BlockStore* s, uint64_t chain, int n, int threads) {
  const size_t rec = kv::kBlockRecordHeaderBytes + kV4FlashBlockPayload;
  const std::string payload = testing::PayloadFor({chain, chain}, kV4FlashBlockPayload);
  for (int t : {1, threads}) {
    const auto blocks = Blocks(chain + static_cast<uint64_t>(t) * 1000, n);
    Latencies put = Run(n, t, rec, [&](int i) { return s->Put(blocks[i], payload).ok(); });
    Row(name, "put", t, put);
    Latencies get = Run(n, t, rec, [&](int i) {
      auto b = s->Get(blocks[i].key);
      return b.ok() && b->payload.size() == kV4FlashBlockPayload;
    });
    Row(name, "get", t, get);
  }
}

int Main(int argc, char** argv) {
  int n = 200, threads = 8;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--blocks") == 0) n = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
  }
  testing::CephTestCluster cluster;
  if (!cluster.ok()) {
    std::fprintf(stderr, "rados_bench: the Ceph test cluster did not start\n");
    return 1;
  }
  std::printf("ceph test cluster (1 mon, 1 mgr, 3 memstore OSDs, EC k=2 m=1) up in %.1f s\n",
              cluster.start_seconds());
  std::printf("records of %zu bytes (V4-Flash 128-token block), %d per run\n",
              kv::kBlockRecordHeaderBytes + kV4FlashBlockPayload, n);
  std::printf("%-24s %-6s %3s  %8s  %8s  %8s  %8s  %7s  %s\n", "store", "op", "thr", "p50 us",
              "p90 us", "p99 us", "MB/s", "ops/s", "errors");
  for (bool sync : {true, false}) {
    testing::TempDir dir;
    KvStoreConfig c;
    c.dir = dir.path();
    c.capacity_bytes = uint64_t{64} << 30;
    c.background_gc = false;
    c.sync = sync;
    auto store = KvStore::Open(c);
    if (!store.ok()) return 1;
    PutGet(sync ? "dir (fdatasync)" : "dir (--no-sync)", store->get(), 10, n, threads);
  }
  RadosStoreConfig rc = cluster.Config("bench");
  auto rados = RadosStore::Open(rc);
  if (!rados.ok()) {
    std::fprintf(stderr, "rados_bench: %s\n", rados.status().ToString().c_str());
    return 1;
  }
  PutGet("rados EC 2+1 (memstore)", rados->get(), 20, n, threads);

  // LongestPrefix: a 64-block chain present (small records), pool at two sizes.
  const auto chain = Blocks(30, 64);
  for (const auto& m : chain) (void)(*rados)->Put(m, "x");
  std::vector<kv::BlockKey> keys;
  for (const auto& m : chain) keys.push_back(m.key);
  for (int fill : {0, 4000}) {
    const auto filler = Blocks(40, fill);
    Run(fill, threads, 0, [&](int i) { return (*rados)->Put(filler[i], "y").ok(); });
    for (int batch : {64, 1}) {
      RadosStoreConfig lc = rc;
      lc.lookup_batch = batch;
      auto s = RadosStore::Open(lc);
      if (!s.ok()) return 1;
      Latencies l = Run(100, 1, 0, [&](int) {
        auto r = (*s)->LongestPrefix(keys);
        return r.ok() && *r == keys.size();
      });
      std::printf(
          "LongestPrefix(64 present), lookup_batch %2d, pool of %5d objects: p50 %.0f us, "
          "p99 %.0f us, errors %zu\n",
          batch, 64 + 2 * n + fill, l.Pct(0.5), l.Pct(0.99), l.errors);
    }
  }
  // One GC pass over the namespace (listing + one metadata read per object, nothing due).
  Stopwatch gc_sw;
  const GcResult g = (*rados)->RunGc();
  std::printf("GC pass over %llu objects (%s): %.2f s, %.0f objects/s\n",
              static_cast<unsigned long long>(g.records), g.scanned ? "scanned" : "scan FAILED",
              gc_sw.ElapsedSeconds(), static_cast<double>(g.records) / gc_sw.ElapsedSeconds());
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace deepinfer::kvstore

int main(int argc, char** argv) { return deepinfer::kvstore::Main(argc, argv); }
