// Microbenchmarks of the KV store node: the 1,000-key longest-prefix query (issue #12: under
// 1 ms on loopback), in process and over the TCP service, and 128 KiB put/get round trips over
// loopback without fsync (the service's own overhead; the disk figures are in the soak test).
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "kvstore/client.h"
#include "kvstore/service.h"
#include "kvstore/test_util.h"

namespace deepinfer::kvstore {
namespace {

using kv::BlockKey;
using kv::BlockMeta;

struct Node {
  testing::TempDir dir;
  std::unique_ptr<KvStore> store;
  std::unique_ptr<KvStoreServer> server;
  std::unique_ptr<KvStoreClient> client;
  std::vector<BlockKey> chain;
};

std::unique_ptr<Node> StartNode(int chain_keys) {
  auto node = std::make_unique<Node>();
  KvStoreConfig c;
  c.dir = node->dir.path();
  c.capacity_bytes = size_t{8} << 30;
  c.sync = false;
  c.background_gc = false;
  node->store = std::move(*KvStore::Open(c));
  node->server = std::move(*KvStoreServer::Start(node->store.get(), KvStoreServiceConfig{}));
  KvStoreClientConfig cc;
  cc.port = node->server->port();
  node->client = std::move(*KvStoreClient::Connect(cc));
  BlockKey parent = kv::kRootBlockKey;
  for (int i = 0; i < chain_keys; ++i) {
    const BlockMeta m = testing::ChainBlock(1, i, parent);
    (void)node->store->Put(m, "x");
    node->chain.push_back(m.key);
    parent = m.key;
  }
  return node;
}

void BM_LongestPrefix1000InProcess(benchmark::State& state) {
  auto node = StartNode(1000);
  for (auto _ : state) benchmark::DoNotOptimize(node->store->LongestPrefix(node->chain));
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_LongestPrefix1000InProcess)->Unit(benchmark::kMicrosecond);

void BM_LongestPrefix1000Loopback(benchmark::State& state) {
  auto node = StartNode(1000);
  for (auto _ : state) benchmark::DoNotOptimize(node->client->LongestPrefix(node->chain));
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_LongestPrefix1000Loopback)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Get128KiBLoopback(benchmark::State& state) {
  auto node = StartNode(0);
  const BlockMeta m = testing::ChainBlock(2, 0, kv::kRootBlockKey);
  (void)node->client->Put(m, testing::PayloadFor(m.key, 128 << 10));
  for (auto _ : state) benchmark::DoNotOptimize(node->client->Get(m.key));
  state.SetBytesProcessed(state.iterations() * (128 << 10));
}
BENCHMARK(BM_Get128KiBLoopback)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace deepinfer::kvstore

BENCHMARK_MAIN();
