#include "kvstore/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/strings.h"

namespace deepinfer::kvstore {

absl::StatusOr<std::unique_ptr<KvStoreClient>> KvStoreClient::Connect(
    const KvStoreClientConfig& config) {
  std::unique_ptr<KvStoreClient> client(new KvStoreClient(config));
  ASSIGN_OR_RETURN(int fd, client->Dial());
  std::lock_guard<std::mutex> lock(client->mu_);
  client->idle_.push_back(fd);
  return client;
}

std::unique_ptr<KvStoreClient> KvStoreClient::Create(const KvStoreClientConfig& config) {
  return std::unique_ptr<KvStoreClient>(new KvStoreClient(config));
}

KvStoreClient::~KvStoreClient() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : idle_) close(fd);
}

absl::StatusOr<int> KvStoreClient::Dial() {
  const std::string where = absl::StrCat(config_.host, ":", config_.port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(config_.port));
  if (inet_pton(AF_INET, config_.host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvstore client: bad IPv4 address '", config_.host, "'"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  timeval tv{config_.timeout_ms / 1000, (config_.timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("kvstore client: cannot connect to ", where, ": ", std::strerror(err)));
  }
  return fd;
}

absl::StatusOr<std::string> KvStoreClient::Call(wire::Op op, std::string_view a,
                                                std::string_view b) {
  // Every op is idempotent, so a request that failed on a pooled connection (which the server
  // may have closed while it sat idle) is retried once on a fresh one.
  for (int attempt = 0;; ++attempt) {
    int fd = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        fd = idle_.back();
        idle_.pop_back();
      }
    }
    const bool pooled = fd >= 0;
    if (!pooled) {
      ASSIGN_OR_RETURN(fd, Dial());
    }
    // The op byte is the frame's tag; a and b follow it.
    absl::Status s = wire::WriteFrame(fd, static_cast<uint8_t>(op), a, b);
    uint8_t code = 0;
    std::string body;
    if (s.ok()) s = wire::ReadFrame(fd, &code, &body);
    if (!s.ok()) {
      close(fd);
      if (pooled && attempt == 0 && absl::IsUnavailable(s)) continue;
      return absl::UnavailableError(
          absl::StrCat("kvstore client ", config_.host, ":", config_.port, ": ", s.message()));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_.size() < config_.max_idle_connections) {
        idle_.push_back(fd);
        fd = -1;
      }
    }
    if (fd >= 0) close(fd);
    if (code != 0) {
      if (code > static_cast<uint8_t>(absl::StatusCode::kUnauthenticated)) {
        return absl::InternalError(absl::StrCat("kvstore server sent status code ", code));
      }
      return absl::Status(static_cast<absl::StatusCode>(code), AbslView(body));
    }
    return body;
  }
}

absl::Status KvStoreClient::Put(const kv::BlockMeta& meta, std::string_view payload) {
  ASSIGN_OR_RETURN(std::string record, kv::EncodeBlockRecord(meta, payload));
  return PutRecord(record);
}

absl::Status KvStoreClient::PutRecord(std::string_view record) {
  return Call(wire::Op::kPut, record).status();
}

absl::StatusOr<kv::StoredBlock> KvStoreClient::Get(const kv::BlockKey& key) {
  ASSIGN_OR_RETURN(std::string record, Call(wire::Op::kGet, wire::EncodeKey(key)));
  auto d = kv::DecodeBlockRecord(record, key);
  if (!d.ok()) {  // damaged in transit or by a faulty server: a miss, never data
    return absl::NotFoundError(absl::StrCat("kvstore client: block ", key.ToHex(),
                                            " failed verification: ", d.status().message()));
  }
  return kv::StoredBlock{d->meta, std::string(d->payload)};
}

absl::StatusOr<size_t> KvStoreClient::LongestPrefix(std::span<const kv::BlockKey> chain) {
  if (chain.size() > wire::kMaxChainKeys) {
    return absl::InvalidArgumentError(absl::StrCat("kvstore client: chain of ", chain.size(),
                                                   " keys exceeds ", wire::kMaxChainKeys));
  }
  ASSIGN_OR_RETURN(std::string body, Call(wire::Op::kLongestPrefix, wire::EncodeKeys(chain)));
  ASSIGN_OR_RETURN(uint32_t n, wire::DecodeU32(body));
  if (n > chain.size()) return absl::InternalError("kvstore server: prefix longer than chain");
  return static_cast<size_t>(n);
}

absl::Status KvStoreClient::Delete(const kv::BlockKey& key) {
  return Call(wire::Op::kDelete, wire::EncodeKey(key)).status();
}

absl::StatusOr<kv::BlockStoreStats> KvStoreClient::Stats() {
  ASSIGN_OR_RETURN(std::string body, Call(wire::Op::kStats, {}));
  return wire::DecodeStats(body);
}

absl::StatusOr<std::string> KvStoreClient::MetricsText() { return Call(wire::Op::kMetrics, {}); }

}  // namespace deepinfer::kvstore
