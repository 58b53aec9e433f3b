#include "kvstore/service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/strings.h"
#include "kvstore/protocol.h"

namespace deepinfer::kvstore {

absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad IPv4 listen address '", host, "'"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 128) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = ntohs(addr.sin_port);
  return fd;
}

absl::StatusOr<std::unique_ptr<KvStoreServer>> KvStoreServer::Start(
    KvStore* store, const KvStoreServiceConfig& config) {
  std::unique_ptr<KvStoreServer> server(new KvStoreServer(store));
  auto fd = ListenTcp(config.host, config.port, &server->port_);
  if (!fd.ok()) return fd.status();
  server->listen_fd_ = *fd;
  if (config.metrics_port >= 0) {
    auto mfd = ListenTcp(config.host, config.metrics_port, &server->metrics_port_);
    if (!mfd.ok()) return mfd.status();  // ~KvStoreServer closes listen_fd_
    server->metrics_fd_ = *mfd;
  }
  KvStoreServer* s = server.get();
  s->acceptors_.emplace_back([s] { s->AcceptLoop(s->listen_fd_, false); });
  if (s->metrics_fd_ >= 0) s->acceptors_.emplace_back([s] { s->AcceptLoop(s->metrics_fd_, true); });
  return server;
}

KvStoreServer::~KvStoreServer() { Stop(); }

void KvStoreServer::Stop() {
  if (stopping_.exchange(true)) return;
  for (int fd : {listen_fd_, metrics_fd_}) {
    if (fd >= 0) shutdown(fd, SHUT_RDWR);  // wakes accept()
  }
  for (std::thread& t : acceptors_) t.join();
  acceptors_.clear();
  for (int fd : {listen_fd_, metrics_fd_}) {
    if (fd >= 0) close(fd);
  }
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : conn_fds_) shutdown(fd, SHUT_RDWR);  // wakes recv() in connection threads
    threads.swap(conn_threads_);
    finished_.clear();
  }
  for (auto& [id, t] : threads) t.join();
}

void KvStoreServer::AcceptLoop(int listen_fd, bool metrics) {
  while (!stopping_.load()) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (!stopping_.load()) LOG(WARNING) << "kvstore accept: " << std::strerror(errno);
      return;
    }
    if (metrics) {
      ServeMetrics(fd);  // one short request; inline keeps the endpoint trivially bounded
      close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_.load()) {
      close(fd);
      return;
    }
    // Join connection threads that have ended (each is past its last use of mu_ or about to be).
    for (uint64_t id : finished_) {
      auto it = conn_threads_.find(id);
      if (it != conn_threads_.end()) {
        it->second.join();
        conn_threads_.erase(it);
      }
    }
    finished_.clear();
    conn_fds_.push_back(fd);
    const uint64_t id = next_conn_id_++;
    conn_threads_.emplace(id, std::thread([this, fd, id] {
                            ServeConnection(fd);
                            std::lock_guard<std::mutex> l(mu_);
                            conn_fds_.erase(std::find(conn_fds_.begin(), conn_fds_.end(), fd));
                            close(fd);
                            finished_.push_back(id);
                          }));
  }
}

void KvStoreServer::ServeConnection(int fd) {
  std::string body;
  for (;;) {
    uint8_t op = 0;
    if (absl::Status s = wire::ReadFrame(fd, &op, &body); !s.ok()) {
      if (absl::IsInvalidArgument(s)) {  // oversized/empty frame: answer, then hang up
        (void)wire::WriteFrame(fd, static_cast<uint8_t>(s.code()), StdView(s.message()));
      }
      return;
    }
    absl::Status status;
    std::string result;
    switch (static_cast<wire::Op>(op)) {
      case wire::Op::kPut:
        status = store_->PutRecord(body);
        break;
      case wire::Op::kGet: {
        auto key = wire::DecodeKey(body);
        if (!key.ok()) {
          status = key.status();
          break;
        }
        auto rec = store_->GetRecord(*key);
        if (rec.ok())
          result = std::move(*rec);
        else
          status = rec.status();
        break;
      }
      case wire::Op::kLongestPrefix: {
        auto keys = wire::DecodeKeys(body);
        if (!keys.ok()) {
          status = keys.status();
          break;
        }
        auto n = store_->LongestPrefix(*keys);
        if (n.ok())
          result = wire::EncodeU32(static_cast<uint32_t>(*n));
        else
          status = n.status();
        break;
      }
      case wire::Op::kDelete: {
        auto key = wire::DecodeKey(body);
        status = key.ok() ? store_->Delete(*key) : key.status();
        break;
      }
      case wire::Op::kStats: {
        auto st = store_->Stats();
        if (st.ok())
          result = wire::EncodeStats(*st);
        else
          status = st.status();
        break;
      }
      case wire::Op::kMetrics:
        result = store_->MetricsText();
        break;
      default:
        status = absl::InvalidArgumentError(absl::StrCat("kvstore: unknown op ", op));
    }
    absl::Status w = status.ok() ? wire::WriteFrame(fd, 0, result)
                                 : wire::WriteFrame(fd, static_cast<uint8_t>(status.code()),
                                                    StdView(status.message()));
    if (!w.ok()) return;
  }
}

void KvStoreServer::ServeMetrics(int fd) {
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
  }
  std::string status_line, body, type = "text/plain; charset=utf-8";
  if (req.starts_with("GET /metrics ") || req.starts_with("GET /metrics?")) {
    status_line = "HTTP/1.1 200 OK";
    body = store_->MetricsText();
    type = "text/plain; version=0.0.4; charset=utf-8";
  } else if (req.starts_with("GET ")) {
    status_line = "HTTP/1.1 404 Not Found";
    body = "not found: the kvstore serves only /metrics\n";
  } else {
    status_line = "HTTP/1.1 400 Bad Request";
    body = "bad request\n";
  }
  const std::string resp =
      absl::StrCat(status_line, "\r\nContent-Type: ", type, "\r\nContent-Length: ", body.size(),
                   "\r\nConnection: close\r\n\r\n", body);
  size_t done = 0;
  while (done < resp.size()) {
    const ssize_t n = send(fd, resp.data() + done, resp.size() - done, MSG_NOSIGNAL);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace deepinfer::kvstore
