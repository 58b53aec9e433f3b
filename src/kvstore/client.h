// KvStoreClient: kv::BlockStore over the KV store service's TCP protocol (protocol.h).
//
// Records are encoded on the client and verified again after a GET (header, payload checksum,
// key = hash of parent/salt/layout/tokens, and the key asked for), so bytes damaged anywhere on
// the way are a miss, never data.
// Connections are pooled: each call takes an idle connection (or dials a new one), and returns
// it after a complete exchange; a connection that failed mid-call is closed. All ops are
// idempotent, so a call that fails on a pooled connection (e.g. the server restarted) is retried
// once on a fresh connection. Transport failures are Unavailable.
// Thread-safety: safe for concurrent use by any number of threads.
#ifndef DEEPINFER_KVSTORE_CLIENT_H_
#define DEEPINFER_KVSTORE_CLIENT_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kv/block_store.h"
#include "kvstore/protocol.h"

namespace deepinfer::kvstore {

struct KvStoreClientConfig {
  std::string host = "127.0.0.1";
  int port = 0;
  // Send/receive timeout per call, milliseconds.
  int timeout_ms = 30000;
  // Idle connections kept for reuse.
  size_t max_idle_connections = 32;
};

class KvStoreClient : public kv::BlockStore {
 public:
  // Dials once to check the server is reachable: Unavailable naming host:port otherwise.
  static absl::StatusOr<std::unique_ptr<KvStoreClient>> Connect(const KvStoreClientConfig& config);
  // A client that dials on first use: every call fails with Unavailable while the server is
  // down and works once it is up (an engine keeps serving with a store that is down at start).
  static std::unique_ptr<KvStoreClient> Create(const KvStoreClientConfig& config);
  ~KvStoreClient() override;
  KvStoreClient(const KvStoreClient&) = delete;
  KvStoreClient& operator=(const KvStoreClient&) = delete;

  absl::Status Put(const kv::BlockMeta& meta, std::string_view payload) override;
  absl::StatusOr<kv::StoredBlock> Get(const kv::BlockKey& key) override;
  absl::StatusOr<size_t> LongestPrefix(std::span<const kv::BlockKey> chain) override;
  absl::Status Delete(const kv::BlockKey& key) override;
  absl::StatusOr<kv::BlockStoreStats> Stats() override;

  // Sends an already encoded record (used to push records fetched from elsewhere unchanged).
  absl::Status PutRecord(std::string_view record);
  // The server's Prometheus text.
  absl::StatusOr<std::string> MetricsText();

 private:
  explicit KvStoreClient(const KvStoreClientConfig& config) : config_(config) {}
  absl::StatusOr<int> Dial();
  // One request/response exchange; the server's error status is returned as is.
  absl::StatusOr<std::string> Call(wire::Op op, std::string_view a, std::string_view b = {});

  const KvStoreClientConfig config_;
  std::mutex mu_;
  std::vector<int> idle_;  // guarded by mu_
};

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_CLIENT_H_
