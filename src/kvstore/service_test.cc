#include "kvstore/service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/client.h"
#include "kvstore/test_util.h"

namespace deepinfer::kvstore {
namespace {

using ::deepinfer::testing::StatusIs;
using kv::BlockKey;
using kv::BlockMeta;
using testing::ChainBlock;
using ::testing::HasSubstr;
using testing::PayloadFor;
using testing::TempDir;

int DialLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class KvServiceTest : public ::testing::Test {
 protected:
  void StartServer(uint64_t capacity = 1ull << 32, bool background_gc = false) {
    KvStoreConfig c;
    c.dir = dir_.path();
    c.capacity_bytes = capacity;
    c.sync = false;
    c.background_gc = background_gc;
    c.gc_interval_nanos = 50'000'000;
    ASSERT_OK_AND_ASSIGN(store_, KvStore::Open(c));
    KvStoreServiceConfig sc;
    sc.metrics_port = 0;
    ASSERT_OK_AND_ASSIGN(server_, KvStoreServer::Start(store_.get(), sc));
    KvStoreClientConfig cc;
    cc.port = server_->port();
    ASSERT_OK_AND_ASSIGN(client_, KvStoreClient::Connect(cc));
  }

  TempDir dir_;
  std::unique_ptr<KvStore> store_;
  std::unique_ptr<KvStoreServer> server_;
  std::unique_ptr<KvStoreClient> client_;
};

TEST_F(KvServiceTest, AllOperationsOverLoopback) {
  StartServer();
  std::vector<BlockKey> chain;
  BlockKey parent = kv::kRootBlockKey;
  for (int i = 0; i < 4; ++i) {
    const BlockMeta m = ChainBlock(1, i, parent, kv::TrafficClass::kAgent);
    ASSERT_OK(client_->Put(m, PayloadFor(m.key, 5000)));
    chain.push_back(m.key);
    parent = m.key;
  }
  const BlockMeta tail = ChainBlock(1, 4, parent);
  chain.push_back(tail.key);
  ASSERT_OK_AND_ASSIGN(size_t n, client_->LongestPrefix(chain));
  EXPECT_EQ(n, 4u);
  ASSERT_OK_AND_ASSIGN(kv::StoredBlock got, client_->Get(chain[2]));
  EXPECT_EQ(got.payload, PayloadFor(chain[2], 5000));
  EXPECT_EQ(got.meta.parent, chain[1]);
  EXPECT_EQ(got.meta.traffic_class, kv::TrafficClass::kAgent);
  EXPECT_THAT(client_->Get(tail.key), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(client_->Delete(chain[3]));
  EXPECT_EQ(*client_->LongestPrefix(chain), 3u);
  EXPECT_THAT(client_->PutRecord("not a record"), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(kv::BlockStoreStats st, client_->Stats());
  EXPECT_EQ(st.records, 3u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.deleted, 1u);
  ASSERT_OK_AND_ASSIGN(std::string text, client_->MetricsText());
  EXPECT_THAT(text, HasSubstr("\ndeepinfer_kvstore_records 3\n"));
}

TEST_F(KvServiceTest, LongestPrefixOfAThousandKeys) {
  StartServer();
  std::vector<BlockKey> chain;
  BlockKey parent = kv::kRootBlockKey;
  for (int i = 0; i < 1000; ++i) {
    const BlockMeta m = ChainBlock(2, i, parent);
    if (i < 700) {
      ASSERT_OK(store_->Put(m, "p"));
    }
    chain.push_back(m.key);
    parent = m.key;
  }
  EXPECT_EQ(*client_->LongestPrefix(chain), 700u);
}

TEST_F(KvServiceTest, PrometheusMetricsEndpoint) {
  StartServer();
  const BlockMeta m = ChainBlock(1, 0, kv::kRootBlockKey);
  ASSERT_OK(client_->Put(m, "abc"));
  int fd = DialLoopback(server_->metrics_port());
  ASSERT_GE(fd, 0);
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string resp = ReadAll(fd);
  close(fd);
  EXPECT_THAT(resp, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(resp, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(resp, HasSubstr("\ndeepinfer_kvstore_records 1\n"));
  EXPECT_THAT(resp, HasSubstr("deepinfer_kvstore_evictions_total{reason=\"watermark\"} 0"));

  fd = DialLoopback(server_->metrics_port());
  const std::string bad = "GET /nope HTTP/1.1\r\n\r\n";
  ASSERT_EQ(send(fd, bad.data(), bad.size(), 0), static_cast<ssize_t>(bad.size()));
  resp = ReadAll(fd);
  close(fd);
  EXPECT_THAT(resp, ::testing::StartsWith("HTTP/1.1 404"));
}

TEST_F(KvServiceTest, MalformedFramesDoNotHurtTheServer) {
  StartServer();
  // An oversized length prefix: the server answers InvalidArgument and hangs up.
  int fd = DialLoopback(server_->port());
  ASSERT_GE(fd, 0);
  const char huge[5] = {'\xff', '\xff', '\xff', '\x7f', 1};
  ASSERT_EQ(send(fd, huge, 5, 0), 5);
  const std::string resp = ReadAll(fd);
  close(fd);
  ASSERT_GE(resp.size(), 5u);
  EXPECT_EQ(static_cast<uint8_t>(resp[4]),
            static_cast<uint8_t>(absl::StatusCode::kInvalidArgument));
  // An unknown op and a short key on a healthy connection.
  fd = DialLoopback(server_->port());
  ASSERT_OK(wire::WriteFrame(fd, 99));
  uint8_t code = 0;
  std::string body;
  ASSERT_OK(wire::ReadFrame(fd, &code, &body));
  EXPECT_EQ(code, static_cast<uint8_t>(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(wire::WriteFrame(fd, static_cast<uint8_t>(wire::Op::kGet), "short"));
  ASSERT_OK(wire::ReadFrame(fd, &code, &body));
  EXPECT_EQ(code, static_cast<uint8_t>(absl::StatusCode::kInvalidArgument));
  close(fd);
  // Still serving.
  const BlockMeta m = ChainBlock(1, 0, kv::kRootBlockKey);
  ASSERT_OK(client_->Put(m, "abc"));
  EXPECT_OK(client_->Get(m.key).status());
}

TEST_F(KvServiceTest, ClientReportsUnreachableServer) {
  StartServer();
  const int port = server_->port();
  server_->Stop();
  KvStoreClientConfig cc;
  cc.port = port;
  EXPECT_THAT(KvStoreClient::Connect(cc), StatusIs(absl::StatusCode::kUnavailable));
  // The pooled connection of the existing client is dead too.
  const BlockMeta m = ChainBlock(1, 0, kv::kRootBlockKey);
  EXPECT_THAT(client_->Put(m, "x"), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(KvServiceTest, ClientSurvivesServerRestart) {
  StartServer();
  const BlockMeta m = ChainBlock(1, 0, kv::kRootBlockKey);
  ASSERT_OK(client_->Put(m, "abc"));
  const int port = server_->port();
  server_->Stop();
  KvStoreServiceConfig sc;
  sc.port = port;
  ASSERT_OK_AND_ASSIGN(server_, KvStoreServer::Start(store_.get(), sc));
  // The pooled connection died with the old server; the call is retried on a new one.
  ASSERT_OK_AND_ASSIGN(kv::StoredBlock got, client_->Get(m.key));
  EXPECT_EQ(got.payload, "abc");
}

// The default-suite version of the load test (kvstore_soak_test runs 100k operations):
// 4 client threads, 2,000 mixed put/get/exists operations on 128 KiB blocks, with a capacity
// small enough that the background GC evicts concurrently. Every read is exactly what was
// written for its key, or a miss.
TEST_F(KvServiceTest, ConcurrentMixedLoadReturnsOnlyWrittenBytesOrMisses) {
  constexpr size_t kPayloadBytes = 128 << 10;
  constexpr int kThreads = 4;
  constexpr int kOpsPerThread = 500;
  constexpr int kKeys = 300;
  StartServer(/*capacity=*/150 * (kPayloadBytes + 600), /*background_gc=*/true);
  std::vector<BlockMeta> metas;
  for (int i = 0; i < kKeys; ++i) metas.push_back(ChainBlock(1000 + i, 0, kv::kRootBlockKey));
  std::atomic<int> hits{0}, misses{0}, wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      for (int i = 0; i < kOpsPerThread; ++i) {
        const BlockMeta& m = metas[rng() % kKeys];
        const int op = static_cast<int>(rng() % 10);
        if (op < 4) {
          if (!client_->Put(m, PayloadFor(m.key, kPayloadBytes)).ok()) ++errors;
        } else if (op < 8) {
          auto got = client_->Get(m.key);
          if (got.ok()) {
            ++hits;
            if (got->payload != PayloadFor(m.key, kPayloadBytes) || got->meta.key != m.key) ++wrong;
          } else if (absl::IsNotFound(got.status())) {
            ++misses;
          } else {
            ++errors;
          }
        } else {
          const BlockKey one[] = {m.key};
          if (!client_->LongestPrefix(one).ok()) ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(hits + misses, [&] {
    int gets = 0;
    for (int t = 0; t < kThreads; ++t) {
      std::mt19937 rng(t + 1);
      for (int i = 0; i < kOpsPerThread; ++i) {
        (void)rng();
        if (const int op = static_cast<int>(rng() % 10); op >= 4 && op < 8) ++gets;
      }
    }
    return gets;
  }());
  store_->RunGc();
  ASSERT_OK_AND_ASSIGN(kv::BlockStoreStats st, client_->Stats());
  EXPECT_LE(st.bytes, st.capacity_bytes * 0.9);
  EXPECT_GT(st.evicted_watermark, 0u);
}

}  // namespace
}  // namespace deepinfer::kvstore
