// The BlockStore conformance suite (kv/block_store_conformance.h) on the directory store
// (kvstore::KvStore in process) and on the store node (KvStoreClient -> KvStoreServer ->
// KvStore over loopback TCP). The RADOS instantiation is in rados_store_test.cc (it needs the
// throwaway Ceph cluster). Backend-specific tests beside these: fault_env_test.cc (disk full,
// torn writes, crashes through FaultEnv), service_test.cc (the wire protocol),
// shared_store_test.cc.
#include "kv/block_store_conformance.h"

#include <filesystem>
#include <fstream>
#include <memory>

#include "kvstore/client.h"
#include "kvstore/service.h"
#include "kvstore/store.h"
#include "kvstore/test_util.h"

namespace deepinfer::kvstore {
namespace {

using kv::conformance::Limits;

// A BlockStore that forwards to another (a second "client" of an in-process store).
class Forward : public kv::BlockStore {
 public:
  explicit Forward(kv::BlockStore* s) : s_(s) {}
  absl::Status Put(const kv::BlockMeta& m, std::string_view p) override { return s_->Put(m, p); }
  absl::StatusOr<kv::StoredBlock> Get(const kv::BlockKey& k) override { return s_->Get(k); }
  absl::StatusOr<size_t> LongestPrefix(std::span<const kv::BlockKey> c) override {
    return s_->LongestPrefix(c);
  }
  absl::Status Delete(const kv::BlockKey& k) override { return s_->Delete(k); }
  absl::StatusOr<kv::BlockStoreStats> Stats() override { return s_->Stats(); }

 private:
  kv::BlockStore* const s_;
};

KvStoreConfig DirConfig(const std::string& dir, const Limits& l) {
  KvStoreConfig c;
  c.dir = dir;
  c.capacity_bytes = l.capacity_bytes;
  c.high_watermark = l.high_watermark;
  c.low_watermark = l.low_watermark;
  c.ttl_nanos[static_cast<int>(kv::TrafficClass::kChat)] = l.ttl_chat;
  c.ttl_nanos[static_cast<int>(kv::TrafficClass::kAgent)] = l.ttl_agent;
  c.background_gc = false;  // the suite drives GC with its clock
  c.sync = false;           // durability: fault_env_test.cc
  return c;
}

absl::Status WriteFile(const std::string& path, std::string_view bytes) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  return f ? absl::OkStatus() : absl::InternalError("cannot write " + path);
}

// The directory store, in process.
class DirBackend {
 public:
  DirBackend(FakeClock* clock, const Limits& limits) {
    auto s = KvStore::Open(DirConfig(dir_.path(), limits), Env::Posix(), clock);
    EXPECT_OK(s.status());
    if (s.ok()) store_ = std::move(*s);
  }
  kv::BlockStore* store() { return store_.get(); }
  std::unique_ptr<kv::BlockStore> NewClient() { return std::make_unique<Forward>(store_.get()); }
  void RunGc() { store_->RunGc(); }
  absl::Status WriteRaw(const kv::BlockKey& k, std::string_view bytes) {
    return WriteFile(store_->RecordPath(k), bytes);
  }
  absl::StatusOr<bool> RawExists(const kv::BlockKey& k) {
    return std::filesystem::exists(store_->RecordPath(k));
  }

 private:
  testing::TempDir dir_;
  std::unique_ptr<KvStore> store_;
};

// A store node: KvStore behind KvStoreServer, reached by KvStoreClient over loopback.
class NodeBackend {
 public:
  NodeBackend(FakeClock* clock, const Limits& limits) {
    auto s = KvStore::Open(DirConfig(dir_.path(), limits), Env::Posix(), clock);
    EXPECT_OK(s.status());
    if (!s.ok()) return;
    node_store_ = std::move(*s);
    auto server = KvStoreServer::Start(node_store_.get(), KvStoreServiceConfig{});
    EXPECT_OK(server.status());
    if (!server.ok()) return;
    server_ = std::move(*server);
    client_ = NewClient();
  }
  ~NodeBackend() {
    client_.reset();
    if (server_) server_->Stop();
  }
  kv::BlockStore* store() { return client_.get(); }
  std::unique_ptr<kv::BlockStore> NewClient() {
    KvStoreClientConfig c;
    c.port = server_->port();
    auto client = KvStoreClient::Connect(c);
    EXPECT_OK(client.status());
    return client.ok() ? std::move(*client) : nullptr;
  }
  void RunGc() { node_store_->RunGc(); }
  absl::Status WriteRaw(const kv::BlockKey& k, std::string_view bytes) {
    return WriteFile(node_store_->RecordPath(k), bytes);
  }
  absl::StatusOr<bool> RawExists(const kv::BlockKey& k) {
    return std::filesystem::exists(node_store_->RecordPath(k));
  }

 private:
  testing::TempDir dir_;
  std::unique_ptr<KvStore> node_store_;
  std::unique_ptr<KvStoreServer> server_;
  std::unique_ptr<kv::BlockStore> client_;
};

}  // namespace
}  // namespace deepinfer::kvstore

namespace deepinfer::kv::conformance {
INSTANTIATE_TYPED_TEST_SUITE_P(DirStore, BlockStoreConformance,
                               ::testing::Types<kvstore::DirBackend>);
INSTANTIATE_TYPED_TEST_SUITE_P(StoreNode, BlockStoreConformance,
                               ::testing::Types<kvstore::NodeBackend>);
}  // namespace deepinfer::kv::conformance
