#include "http/server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "http/request_id.h"

namespace deepinfer::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

const char* ReasonPhrase(int status) {
  return bhttp::obsolete_reason(static_cast<bhttp::status>(status)).data();
}

// A blocking stream over a connected socket whose reads and writes give up after a timeout
// (poll() before each operation; Asio's own blocking operations ignore SO_RCVTIMEO). Models
// Beast's SyncReadStream / SyncWriteStream.
class TimedStream {
 public:
  TimedStream(tcp::socket& socket, int read_timeout_ms, int write_timeout_ms)
      : socket_(socket), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {}

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    if (!Wait(POLLIN, read_timeout_ms_, ec)) return 0;
    return socket_.read_some(buffers, ec);
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers, error_code& ec) {
    if (!Wait(POLLOUT, write_timeout_ms_, ec)) return 0;
    return socket_.write_some(buffers, ec);
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers) {
    error_code ec;
    size_t n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  void set_read_timeout_ms(int ms) { read_timeout_ms_ = ms; }
  // Reads also fail with timed_out once MonotonicNanos() passes `ns` (0 = no deadline), so a
  // client trickling bytes cannot stretch the per-read timeout indefinitely.
  void set_read_deadline_ns(int64_t ns) { read_deadline_ns_ = ns; }
  // Waits until the socket is readable (data, EOF or error) within the read timeout.
  bool WaitReadable(error_code& ec) { return Wait(POLLIN, read_timeout_ms_, ec); }

 private:
  bool Wait(short events, int timeout_ms, error_code& ec) {
    pollfd p{socket_.native_handle(), events, 0};
    for (;;) {
      if (events == POLLIN && read_deadline_ns_ > 0) {
        const int64_t left_ms = (read_deadline_ns_ - MonotonicNanos()) / 1000000;
        timeout_ms = static_cast<int>(std::clamp<int64_t>(left_ms, 0, timeout_ms));
      }
      int r = ::poll(&p, 1, timeout_ms);
      if (r > 0) return true;  // ready, or HUP/ERR: the read/write reports it
      if (r == 0) {
        ec = asio::error::timed_out;
        return false;
      }
      if (errno != EINTR) {
        ec = error_code(errno, boost::system::system_category());
        return false;
      }
    }
  }

  tcp::socket& socket_;
  int read_timeout_ms_;
  int write_timeout_ms_;
  int64_t read_deadline_ns_ = 0;
};

// Connection errors that just mean "the peer went away": no log line.
bool IsDisconnect(const error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::timed_out || ec == asio::error::operation_aborted ||
         ec == asio::error::bad_descriptor || ec == bhttp::error::partial_message;
}

}  // namespace

std::string HttpRequest::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

// One open connection. Shared between its worker thread and the server (for shutdown).
struct Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)) {}
  tcp::socket socket;
  std::atomic<bool> busy{false};          // a request is being handled
  std::atomic<bool> force_closed{false};  // the server shut the socket down
  std::atomic<bool> closing{false};       // drain deadline passed: handler should end now
  std::string remote;

  // Shuts the socket down so blocked reads/writes return; the worker closes it.
  void ForceClose() {
    force_closed = true;
    ::shutdown(socket.native_handle(), SHUT_RDWR);
  }
};

class HttpServer::Impl {
 public:
  Impl(const HttpServerConfig& config, Handler handler, std::atomic<bool>* stopping)
      : config_(config), handler_(std::move(handler)), stopping_(stopping), acceptor_(ioc_) {}

  absl::Status Listen(int* bound_port);
  void Run() {
    accept_thread_ = std::thread([this] {
      DoAccept();
      ioc_.run();
    });
  }
  void Shutdown(int64_t deadline_ms);
  int open_connections() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(conns_.size());
  }

 private:
  void DoAccept();
  void OnAccept(tcp::socket socket);
  void Serve(std::shared_ptr<Connection> conn);
  void ServeRequests(Connection& conn);
  // Writes a small error response with `Connection: close`; `path` ("" = unknown) picks the
  // error shape.
  void WriteError(TimedStream& stream, int status, const std::string& message,
                  const std::string& path = "",
                  const std::map<std::string, std::string>& headers = {});
  std::pair<std::string, std::string> ErrorBody(int status, const std::string& message,
                                                const std::string& path = "") const {
    if (config_.error_body) return config_.error_body(status, message, path);
    return {"text/plain; charset=utf-8", message + "\n"};
  }

  HttpServerConfig config_;
  Handler handler_;
  std::atomic<bool>* stopping_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread accept_thread_;
  absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when a connection leaves conns_
  std::set<std::shared_ptr<Connection>> conns_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

namespace {

// ResponseWriter over one connection for one request.
class WriterImpl : public ResponseWriter {
 public:
  // `common_headers` (request id, CORS) go on whatever response the handler sends.
  WriterImpl(Connection& conn, TimedStream& stream, bool keep_alive, bool head, bool http10,
             std::atomic<bool>* stopping, std::map<std::string, std::string> common_headers)
      : conn_(conn),
        stream_(stream),
        keep_alive_(keep_alive),
        head_(head),
        http10_(http10),
        stopping_(stopping),
        common_headers_(std::move(common_headers)) {}

  void Send(int status, std::string_view content_type, std::string body,
            const std::map<std::string, std::string>& extra_headers) override {
    if (responded_) return;
    responded_ = true;
    bhttp::response<bhttp::string_body> res;
    res.version(11);
    res.result(static_cast<unsigned>(status));
    res.set(bhttp::field::server, "deepinfer");
    if (!content_type.empty()) res.set(bhttp::field::content_type, std::string(content_type));
    for (const auto& [k, v] : common_headers_) res.set(k, v);
    for (const auto& [k, v] : extra_headers) res.set(k, v);
    res.keep_alive(KeepAlive());
    // An HTTP/1.0 client keeps the connection only when told so explicitly.
    if (http10_ && KeepAlive()) res.set(bhttp::field::connection, "keep-alive");
    res.body() = std::move(body);
    res.prepare_payload();
    // RFC 9110 §8.6: no Content-Length in a 204 (or 304) response.
    if (status == 204 || status == 304) res.erase(bhttp::field::content_length);
    error_code ec;
    if (head_) {
      bhttp::response_serializer<bhttp::string_body> sr(res);
      bhttp::write_header(stream_, sr, ec);
    } else {
      bhttp::write(stream_, res, ec);
    }
    if (ec) failed_ = true;
  }

  bool BeginStream(int status, std::string_view content_type) override {
    if (responded_) return !failed_;
    responded_ = true;
    streaming_ = true;
    // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
    std::string head = absl::StrCat(
        "HTTP/1.1 ", status, " ", ReasonPhrase(status), "\r\nServer: deepinfer\r\nContent-Type: ",
        absl::string_view(content_type.data(), content_type.size()),
        "\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n",
        http10_ ? "" : "Transfer-Encoding: chunked\r\n",
        "Connection: ", KeepAlive() && !http10_ ? "keep-alive" : "close", "\r\n");
    for (const auto& [k, v] : common_headers_) absl::StrAppend(&head, k, ": ", v, "\r\n");
    head += "\r\n";
    return WriteRaw(head);
  }

  bool WriteChunk(std::string_view data) override {
    if (failed_) return false;
    if (data.empty() || head_) return true;
    if (http10_) return WriteRaw(data);
    char size[32];
    int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    std::string chunk;
    chunk.reserve(n + data.size() + 2);
    chunk.append(size, n);
    chunk.append(data);
    chunk.append("\r\n");
    return WriteRaw(chunk);
  }

  void EndStream() override {
    if (ended_ || !streaming_) return;
    ended_ = true;
    if (!http10_ && !head_) WriteRaw("0\r\n\r\n");
  }

  bool ServerClosing() override { return conn_.closing && !conn_.force_closed; }

  bool ClientClosed() override {
    if (failed_ || conn_.force_closed || conn_.closing) return true;
    int fd = conn_.socket.native_handle();
    pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
      char c;
      ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (r == 0) return true;
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
  }

  bool responded() const { return responded_; }
  // The connection can carry another request.
  bool reusable() const { return !failed_ && KeepAlive() && (!streaming_ || (ended_ && !http10_)); }

 private:
  bool KeepAlive() const { return keep_alive_ && !stopping_->load(); }
  bool WriteRaw(std::string_view data) {
    if (failed_) return false;
    error_code ec;
    asio::write(stream_, asio::buffer(data.data(), data.size()), ec);
    if (ec) failed_ = true;
    return !failed_;
  }

  Connection& conn_;
  TimedStream& stream_;
  bool keep_alive_;
  bool head_;    // HEAD request: headers only
  bool http10_;  // HTTP/1.0 request: no chunked encoding
  std::atomic<bool>* stopping_;
  std::map<std::string, std::string> common_headers_;
  bool responded_ = false;
  bool streaming_ = false;
  bool ended_ = false;
  bool failed_ = false;
};

}  // namespace

absl::Status HttpServer::Impl::Listen(int* bound_port) {
  error_code ec;
  asio::ip::address address = asio::ip::make_address(config_.host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host: '", config_.host, "' is not an IP address (", ec.message(), ")"));
  }
  if (config_.port < 0 || config_.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port: ", config_.port, " is not in 0..65535"));
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(config_.port));
  std::string where = absl::StrCat(config_.host, ":", config_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", ec.message()));
  *bound_port = acceptor_.local_endpoint().port();
  return absl::OkStatus();
}

void HttpServer::Impl::DoAccept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      // EMFILE and friends: keep accepting after a short pause instead of spinning.
      LOG(WARNING) << "accept failed: " << ec.message();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } else {
      OnAccept(std::move(socket));
    }
    if (acceptor_.is_open()) DoAccept();
  });
}

void HttpServer::Impl::OnAccept(tcp::socket socket) {
  error_code ec;
  socket.set_option(tcp::no_delay(true), ec);  // SSE events are small: send them at once
  auto conn = std::make_shared<Connection>(std::move(socket));
  auto ep = conn->socket.remote_endpoint(ec);
  if (!ec) conn->remote = absl::StrCat(ep.address().to_string(), ":", ep.port());
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_ || stopping_->load()) return;  // socket closes with conn
    if (static_cast<int>(conns_.size()) >= config_.max_connections) {
      TimedStream stream(conn->socket, 1000, 1000);
      WriteError(stream, 503, "too many open connections");
      return;
    }
    conns_.insert(conn);
  }
  std::thread([this, conn] { Serve(conn); }).detach();
}

void HttpServer::Impl::Serve(std::shared_ptr<Connection> conn) {
  ServeRequests(*conn);
  error_code ec;
  conn->socket.shutdown(tcp::socket::shutdown_both, ec);
  conn->socket.close(ec);
  absl::MutexLock lock(&mu_);
  conns_.erase(conn);
  cv_.SignalAll();
}

void HttpServer::Impl::WriteError(TimedStream& stream, int status, const std::string& message,
                                  const std::string& path,
                                  const std::map<std::string, std::string>& headers) {
  auto [content_type, body] = ErrorBody(status, message, path);
  bhttp::response<bhttp::string_body> res;
  res.version(11);
  res.result(static_cast<unsigned>(status));
  res.set(bhttp::field::server, "deepinfer");
  res.set(bhttp::field::content_type, content_type);
  for (const auto& [k, v] : headers) res.set(k, v);
  res.keep_alive(false);
  res.body() = std::move(body);
  res.prepare_payload();
  error_code ec;
  bhttp::write(stream, res, ec);
}

void HttpServer::Impl::ServeRequests(Connection& conn) {
  const int request_timeout_ms = config_.request_timeout_s * 1000;
  TimedStream stream(conn.socket, request_timeout_ms, config_.write_timeout_s * 1000);
  beast::flat_buffer buffer;
  bool first = true;
  for (;;) {
    if (stopping_->load()) return;
    conn.busy = false;
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<uint32_t>(config_.max_header_bytes));
    parser.body_limit(static_cast<uint64_t>(config_.max_body_bytes));
    error_code ec;
    // Wait for the request's first byte: a new connection gets the request timeout (a client
    // that never sends anything must not hold a connection slot), a kept-alive one the idle
    // timeout. Either way it is closed silently: no request was started.
    if (buffer.size() == 0) {
      stream.set_read_timeout_ms(first ? request_timeout_ms : config_.idle_timeout_s * 1000);
      if (!stream.WaitReadable(ec)) return;
    }
    first = false;
    // The whole header block must then arrive within the request timeout.
    stream.set_read_timeout_ms(request_timeout_ms);
    stream.set_read_deadline_ns(MonotonicNanos() + int64_t{request_timeout_ms} * 1000000);
    bhttp::read_header(stream, buffer, parser, ec);
    stream.set_read_deadline_ns(0);
    if (ec) {
      if (ec == asio::error::timed_out && !conn.force_closed) {
        WriteError(stream, 408, "timed out waiting for the request header");
        return;
      }
      if (IsDisconnect(ec) || conn.force_closed) return;
      if (ec == bhttp::error::body_limit) {
        WriteError(stream, 413,
                   absl::StrCat("request body is larger than the limit of ", config_.max_body_bytes,
                                " bytes"));
      } else if (ec == bhttp::error::header_limit) {
        WriteError(stream, 431, "request header block is too large");
      } else {
        WriteError(stream, 400, absl::StrCat("malformed HTTP request: ", ec.message()));
      }
      return;
    }
    conn.busy = true;
    // A request that started arriving is in flight: it finishes even if shutdown begins now.
    // Its body may stall for at most the request timeout between reads.
    stream.set_read_timeout_ms(request_timeout_ms);
    const std::string path = [&] {
      auto target = parser.get().target();
      std::string t(target.data(), target.size());
      return t.substr(0, t.find('?'));
    }();
    // The request id and the CORS headers go on every response from here on, errors included
    // (a browser can read an error only when it carries Access-Control-Allow-Origin).
    auto header_value = [&](bhttp::field f) {
      auto v = parser.get()[f];
      return std::string(v.data(), v.size());
    };
    const std::string origin = header_value(bhttp::field::origin);
    // A repeated X-Request-Id is refused (as the joined value HttpRequest would hold).
    const absl::StatusOr<std::string> request_id = RequestIdFor(
        parser.get().count("x-request-id") > 1
            ? std::string("a, b")
            : [&] {
                auto v = parser.get()["x-request-id"];
                return std::string(v.data(), v.size());
              }());
    std::map<std::string, std::string> common = CorsResponseHeaders(config_.cors, origin);
    if (request_id.ok()) common["X-Request-Id"] = *request_id;
    {
      auto& h = parser.get();
      auto expect = h[bhttp::field::expect];
      if (absl::EqualsIgnoreCase(absl::string_view(expect.data(), expect.size()), "100-continue")) {
        static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        asio::write(stream, asio::buffer(kContinue, sizeof(kContinue) - 1), ec);
        if (ec) return;
      }
    }
    if (!parser.is_done()) bhttp::read(stream, buffer, parser, ec);
    if (ec) {
      if (ec == asio::error::timed_out && !conn.force_closed) {
        WriteError(stream, 408,
                   absl::StrCat("timed out reading the request body (no data for ",
                                config_.request_timeout_s, " s)"),
                   path, common);
      } else if (ec == bhttp::error::body_limit) {
        WriteError(stream, 413,
                   absl::StrCat("request body is larger than the limit of ", config_.max_body_bytes,
                                " bytes"),
                   path, common);
        // Drain what the client is still sending (bounded) so closing does not reset the
        // connection before it reads the 413.
        ::shutdown(conn.socket.native_handle(), SHUT_WR);
        stream.set_read_timeout_ms(500);
        std::vector<char> sink(64 << 10);
        int64_t drained = 0;
        Stopwatch watch;
        while (drained < 4 * config_.max_body_bytes && watch.ElapsedSeconds() < 5) {
          error_code rec;
          size_t n = stream.read_some(asio::buffer(sink), rec);
          if (rec) break;
          drained += static_cast<int64_t>(n);
        }
      } else if (!IsDisconnect(ec) && !conn.force_closed) {
        WriteError(stream, 400, absl::StrCat("malformed HTTP request: ", ec.message()), path,
                   common);
      }
      return;
    }

    bhttp::request<bhttp::string_body> msg = parser.release();
    const bool head = msg.method() == bhttp::verb::head;
    const bool http10 = msg.version() < 11;
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& field : msg) {
      std::string name = absl::AsciiStrToLower(
          absl::string_view(field.name_string().data(), field.name_string().size()));
      std::string value(field.value());
      auto [it, inserted] = req.headers.try_emplace(name, value);
      if (!inserted) it->second += ", " + value;
    }
    req.body = std::move(msg.body());
    req.remote = conn.remote;
    req.version = static_cast<int>(msg.version());
    if (request_id.ok()) req.request_id = *request_id;

    WriterImpl writer(conn, stream, msg.keep_alive(), head, http10, stopping_, common);
    if (!request_id.ok()) {
      auto [content_type, body] = ErrorBody(400, std::string(request_id.status().message()), path);
      writer.Send(400, content_type, body, {});
    } else if (std::optional<CorsPreflight> pre =
                   CorsPreflightFor(config_.cors, req.method, origin, req.Header("access-control-request-method"),
                                    req.Header("access-control-request-headers"))) {
      writer.Send(pre->status, "", pre->body, pre->headers);
    } else {
      handler_(req, writer);
    }
    if (!writer.responded()) {
      auto [content_type, body] = ErrorBody(500, "the handler produced no response", req.path);
      writer.Send(500, content_type, body, {});
    }
    if (!writer.reusable()) return;
  }
}

void HttpServer::Impl::Shutdown(int64_t deadline_ms) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  stopping_->store(true);
  asio::post(ioc_, [this] {
    error_code ec;
    acceptor_.close(ec);
  });
  if (accept_thread_.joinable()) accept_thread_.join();

  absl::MutexLock lock(&mu_);
  // Idle keep-alive connections: close now. In-flight requests: wait until the deadline.
  for (const auto& c : conns_) {
    if (!c->busy) c->ForceClose();
  }
  int64_t deadline = MonotonicNanos() + deadline_ms * 1000000;
  while (!conns_.empty() && MonotonicNanos() < deadline) {
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
    // A connection may have finished its request and gone idle meanwhile.
    for (const auto& c : conns_) {
      if (!c->busy) c->ForceClose();
    }
  }
  if (!conns_.empty()) {
    // Let the handlers end their responses properly (a terminal error event, the end of the
    // chunked body) instead of cutting the socket mid-chunk; force-close whatever remains after
    // a short grace period (e.g. a handler blocked writing to a client that stopped reading).
    LOG(WARNING) << "shutdown deadline passed: ending " << conns_.size()
                 << " in-flight response(s)";
    for (const auto& c : conns_) {
      if (c->busy) {
        c->closing = true;
      } else {
        c->ForceClose();
      }
    }
    constexpr int64_t kClosingGraceMs = 2000;
    const int64_t grace_end = MonotonicNanos() + kClosingGraceMs * 1000000;
    while (!conns_.empty() && MonotonicNanos() < grace_end) {
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
      for (const auto& c : conns_) {
        if (!c->busy) c->ForceClose();
      }
    }
    if (!conns_.empty()) {
      LOG(WARNING) << "closing " << conns_.size() << " connection(s) that did not finish";
      for (const auto& c : conns_) c->ForceClose();
    }
  }
  // A force-closed connection's handler may still be busy in code that never touches the socket
  // (a long JSON parse): wait briefly, then return anyway so shutdown keeps its deadline. Such
  // handler threads are detached; the process exits without waiting for them.
  constexpr int64_t kForceClosedWaitMs = 500;
  const int64_t wait_end = MonotonicNanos() + kForceClosedWaitMs * 1000000;
  while (!conns_.empty() && MonotonicNanos() < wait_end) {
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
  }
  if (!conns_.empty()) {
    LOG(WARNING) << "shutdown: " << conns_.size()
                 << " request thread(s) still running after their connections were closed";
  }
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerConfig& config,
                                                              Handler handler) {
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>(config, std::move(handler), &server->stopping_);
  RETURN_IF_ERROR(server->impl_->Listen(&server->port_));
  server->impl_->Run();
  return server;
}

HttpServer::~HttpServer() {
  if (impl_) impl_->Shutdown(0);
}

void HttpServer::Shutdown(int64_t deadline_ms) { impl_->Shutdown(deadline_ms); }

int HttpServer::open_connections() const { return impl_->open_connections(); }

}  // namespace deepinfer::http
