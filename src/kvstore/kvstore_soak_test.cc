// Load test of a KV store node on loopback (issue #12 acceptance), label `soak`:
//   - the disk's own sequential write (fdatasync'd) and read (O_DIRECT) bandwidth, measured in
//     the same run, under the store's directory;
//   - 4 client threads doing 100,000 mixed put/get/longest-prefix operations with 128 KiB
//     payloads against a durable (fsync) store whose capacity forces watermark GC; every read
//     must be exactly what was written for that key, or a miss;
//   - the latency of a 1,000-key longest-prefix query.
// Prints the figures recorded in docs/performance.md. Sizes can be scaled down with
// KVSTORE_SOAK_OPS (total operations) for a quick run.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kvstore/client.h"
#include "kvstore/service.h"
#include "kvstore/test_util.h"

namespace deepinfer::kvstore {
namespace {

using kv::BlockKey;
using kv::BlockMeta;
using testing::ChainBlock;
using testing::PayloadFor;
using testing::TempDir;

constexpr size_t kPayloadBytes = 128 << 10;

int64_t TotalOps() {
  const char* v = std::getenv("KVSTORE_SOAK_OPS");  // test-only knob
  return v != nullptr ? std::max(100L, std::atol(v)) : 100000;
}

double Percentile(std::vector<int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))] * 1e-6;  // ms
}

// Sequential write (1 MiB writes, fdatasync at the end) and O_DIRECT read of `bytes`.
void MeasureDisk(const std::string& dir, size_t bytes, double* write_gbs, double* read_gbs) {
  const std::string path = dir + "/seq.bin";
  constexpr size_t kChunk = 1 << 20;
  void* buf = nullptr;
  ASSERT_EQ(posix_memalign(&buf, 4096, kChunk), 0);
  std::memset(buf, 0x5A, kChunk);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  Stopwatch sw;
  for (size_t done = 0; done < bytes; done += kChunk) {
    ASSERT_EQ(write(fd, buf, kChunk), static_cast<ssize_t>(kChunk));
  }
  ASSERT_EQ(fdatasync(fd), 0);
  *write_gbs = bytes / sw.ElapsedSeconds() * 1e-9;
  close(fd);
  fd = open(path.c_str(), O_RDONLY | O_DIRECT);
  const bool direct = fd >= 0;
  if (!direct) fd = open(path.c_str(), O_RDONLY);  // file systems without O_DIRECT
  ASSERT_GE(fd, 0);
  sw.Reset();
  size_t got = 0;
  for (;;) {
    const ssize_t n = read(fd, buf, kChunk);
    ASSERT_GE(n, 0);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  *read_gbs = got / sw.ElapsedSeconds() * 1e-9;
  close(fd);
  unlink(path.c_str());
  free(buf);
  std::printf("disk: sequential write %.3f GB/s (fdatasync), read %.3f GB/s (%s), %.1f GiB\n",
              *write_gbs, *read_gbs, direct ? "O_DIRECT" : "page cache", bytes / double(1 << 30));
}

TEST(KvStoreSoakTest, HundredThousandMixedOpsOn128KiBBlocks) {
  TempDir dir;
  double disk_write = 0, disk_read = 0;
  MeasureDisk(dir.path(), size_t{2} << 30, &disk_write, &disk_read);

  KvStoreConfig c;
  c.dir = dir.path() + "/store";
  c.capacity_bytes = size_t{2} << 30;  // ~16k records: the run writes far more, so GC evicts
  c.sync = true;
  c.gc_interval_nanos = 100'000'000;
  ASSERT_OK_AND_ASSIGN(auto store, KvStore::Open(c));
  ASSERT_OK_AND_ASSIGN(auto server, KvStoreServer::Start(store.get(), KvStoreServiceConfig{}));
  KvStoreClientConfig cc;
  cc.port = server->port();
  ASSERT_OK_AND_ASSIGN(auto client, KvStoreClient::Connect(cc));

  constexpr int kThreads = 4;
  const int64_t total_ops = TotalOps();
  const int64_t max_keys = total_ops;  // upper bound on puts
  std::unique_ptr<std::atomic<bool>[]> written(new std::atomic<bool>[max_keys]);
  for (int64_t i = 0; i < max_keys; ++i) written[i] = false;
  std::atomic<int64_t> next_key{0};
  std::atomic<int64_t> hits{0}, misses{0}, wrong{0}, errors{0}, bytes_moved{0};
  std::vector<std::vector<int64_t>> put_lat(kThreads), get_lat(kThreads), pre_lat(kThreads);

  Stopwatch wall;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t + 17);
      for (int64_t i = 0; i < total_ops / kThreads; ++i) {
        const int op = static_cast<int>(rng() % 10);
        const int64_t known = next_key.load();
        if (op < 4 || known == 0) {  // put a new block
          const int64_t k = next_key.fetch_add(1);
          const BlockMeta m = ChainBlock(k, 0, kv::kRootBlockKey);
          const std::string payload = PayloadFor(m.key, kPayloadBytes);
          Stopwatch sw;
          absl::Status s = client->Put(m, payload);
          put_lat[t].push_back(sw.ElapsedNanos());
          if (s.ok()) {
            written[k] = true;
            bytes_moved += kPayloadBytes;
          } else {
            ++errors;
          }
        } else if (op < 8) {  // get a block some thread has written (it may be evicted)
          const int64_t k = static_cast<int64_t>(rng() % known);
          if (!written[k]) continue;
          const BlockKey key = ChainBlock(k, 0, kv::kRootBlockKey).key;
          Stopwatch sw;
          auto got = client->Get(key);
          get_lat[t].push_back(sw.ElapsedNanos());
          if (got.ok()) {
            ++hits;
            bytes_moved += kPayloadBytes;
            if (got->meta.key != key || got->payload != PayloadFor(key, kPayloadBytes)) ++wrong;
          } else if (absl::IsNotFound(got.status())) {
            ++misses;
          } else {
            ++errors;
          }
        } else {  // longest prefix over 8 keys
          std::vector<BlockKey> chain;
          for (int j = 0; j < 8; ++j) {
            chain.push_back(
                ChainBlock(static_cast<int64_t>(rng() % known), 0, kv::kRootBlockKey).key);
          }
          Stopwatch sw;
          if (!client->LongestPrefix(chain).ok()) ++errors;
          pre_lat[t].push_back(sw.ElapsedNanos());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = wall.ElapsedSeconds();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);

  std::vector<int64_t> puts, gets, pres, all;
  for (int t = 0; t < kThreads; ++t) {
    puts.insert(puts.end(), put_lat[t].begin(), put_lat[t].end());
    gets.insert(gets.end(), get_lat[t].begin(), get_lat[t].end());
    pres.insert(pres.end(), pre_lat[t].begin(), pre_lat[t].end());
  }
  all = puts;
  all.insert(all.end(), gets.begin(), gets.end());
  all.insert(all.end(), pres.begin(), pres.end());
  ASSERT_OK_AND_ASSIGN(kv::BlockStoreStats st, client->Stats());
  std::printf(
      "load: %zu ops (%zu put, %zu get: %lld hit / %lld miss, %zu prefix) in %.1f s, "
      "4 threads, 128 KiB payloads, fsync on\n",
      all.size(), puts.size(), gets.size(), static_cast<long long>(hits.load()),
      static_cast<long long>(misses.load()), pres.size(), seconds);
  std::printf("load: payload throughput %.3f GB/s (put+get), %.0f ops/s\n",
              bytes_moved.load() / seconds * 1e-9, all.size() / seconds);
  std::printf(
      "load: latency ms p50/p99: put %.2f/%.2f get %.2f/%.2f prefix %.3f/%.3f all %.2f/%.2f\n",
      Percentile(puts, 0.5), Percentile(puts, 0.99), Percentile(gets, 0.5), Percentile(gets, 0.99),
      Percentile(pres, 0.5), Percentile(pres, 0.99), Percentile(all, 0.5), Percentile(all, 0.99));
  std::printf(
      "load: store %llu records, %.2f GiB, evicted %llu (watermark), gc %.2f s in %llu runs\n",
      static_cast<unsigned long long>(st.records), st.bytes / double(1 << 30),
      static_cast<unsigned long long>(st.evicted_watermark), st.gc_nanos * 1e-9,
      static_cast<unsigned long long>(st.gc_runs));

  // A 1,000-key chain, 600 present.
  std::vector<BlockKey> chain;
  BlockKey parent = kv::kRootBlockKey;
  for (int i = 0; i < 1000; ++i) {
    const BlockMeta m = ChainBlock(1u << 30, i, parent);
    if (i < 600) {
      ASSERT_OK(client->Put(m, "x"));
    }
    chain.push_back(m.key);
    parent = m.key;
  }
  std::vector<int64_t> lp;
  for (int i = 0; i < 1000; ++i) {
    Stopwatch sw;
    ASSERT_OK_AND_ASSIGN(size_t n, client->LongestPrefix(chain));
    lp.push_back(sw.ElapsedNanos());
    ASSERT_EQ(n, 600u);
  }
  std::printf("prefix: 1000-key longest-prefix over loopback: p50 %.3f ms, p99 %.3f ms\n",
              Percentile(lp, 0.5), Percentile(lp, 0.99));
  server->Stop();
}

}  // namespace
}  // namespace deepinfer::kvstore
