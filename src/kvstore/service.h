// KvStoreServer: serves one KvStore over TCP with the protocol of protocol.h, plus an optional
// minimal HTTP/1.1 endpoint answering `GET /metrics` with the store's Prometheus text.
//
// Threads: one acceptor per listening socket and one thread per client connection (a store
// node has a handful of long-lived clients: fetchers and engines, which pool connections).
// The service layer only unpacks requests, forwards them to the KvStore and packs the answer
// (STYLE.md habit 9); all policy lives in KvStore.
// Thread-safety: Start/Stop from one owner thread; the store must outlive the server.
#ifndef DEEPINFER_KVSTORE_SERVICE_H_
#define DEEPINFER_KVSTORE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/store.h"

namespace deepinfer::kvstore {

struct KvStoreServiceConfig {
  std::string host = "127.0.0.1";  // address to bind ("0.0.0.0" for all interfaces)
  int port = 0;                    // 0: an ephemeral port (see KvStoreServer::port())
  int metrics_port = -1;           // -1: no HTTP metrics endpoint; 0: ephemeral
};

class KvStoreServer {
 public:
  // Binds and starts serving. InvalidArgument for a bad host; Unavailable when the port cannot
  // be bound (message names host:port).
  static absl::StatusOr<std::unique_ptr<KvStoreServer>> Start(KvStore* store,
                                                              const KvStoreServiceConfig& config);
  ~KvStoreServer();
  KvStoreServer(const KvStoreServer&) = delete;
  KvStoreServer& operator=(const KvStoreServer&) = delete;

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  // Closes the listeners and all connections and joins every thread. Idempotent.
  void Stop();

 private:
  explicit KvStoreServer(KvStore* store) : store_(store) {}
  void AcceptLoop(int listen_fd, bool metrics);
  void ServeConnection(int fd);
  void ServeMetrics(int fd);

  KvStore* const store_;
  int listen_fd_ = -1;
  int metrics_fd_ = -1;
  int port_ = 0;
  int metrics_port_ = -1;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> acceptors_;
  std::mutex mu_;
  std::vector<int> conn_fds_;  // guarded by mu_
  // Connection threads by id; finished ones are joined by the acceptor (finished_) so a
  // long-running node does not accumulate dead thread objects.
  std::map<uint64_t, std::thread> conn_threads_;  // guarded by mu_
  std::vector<uint64_t> finished_;                // guarded by mu_
  uint64_t next_conn_id_ = 0;                     // guarded by mu_
};

// Binds a listening TCP socket on host:port (port 0 = ephemeral); returns the fd and writes
// the bound port. Shared with tests.
absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port);

}  // namespace deepinfer::kvstore

#endif  // DEEPINFER_KVSTORE_SERVICE_H_
