// HTTP/1.1 server on Boost.Beast / Asio: transport only (ARCHITECTURE.md §2 http/). It knows
// nothing about JSON, models or the OpenAI API; the api/ layer installs one Handler.
//
// Threading model (ARCHITECTURE.md §3, §8): one acceptor thread runs an io_context that accepts
// connections; each open connection is served by its own HTTP worker thread doing blocking reads
// and writes (keep-alive: requests on one connection are handled in order). Handlers run on that
// worker thread and may block (e.g. waiting for the engine's output stream), so a slow request
// never stalls another connection. The number of connections, and so of workers, is bounded by
// `max_connections`; a connection beyond it gets an immediate 503 and is closed.
//
// Protocol handling done here, before any handler runs:
//   * a request line / header block that does not parse -> 400, connection closed;
//   * a body above `max_body_bytes` (by Content-Length or while reading chunked data) -> 413;
//   * `Expect: 100-continue` is answered so curl does not stall on large bodies;
//   * a new connection must send its request line and headers within `request_timeout_s`, and
//     a request body may not stall for longer than that: 408 (a connection that sent nothing is
//     just closed), so silent connections cannot hold `max_connections` slots;
//   * idle keep-alive connections are closed after `idle_timeout_s`;
//   * HEAD is answered with the headers the handler's Send() produces, without the body
//     (RFC 9110 §9.3.2);
//   * request ids (http/request_id.h): HttpRequest::request_id is the client's X-Request-Id or a
//     random one, and every response to a request whose header was read carries it as
//     X-Request-Id; an unusable X-Request-Id gets a 400 without reaching the handler;
//   * CORS (http/cors.h, HttpServerConfig::cors): preflights are answered here for every path,
//     and every response to an allowed Origin carries the CORS headers.
// Error bodies produced by the transport itself are built by `error_body` (set by api/ so they
// use the error shape of the route's API family), or plain text when unset.
//
// Streaming (SSE): a handler calls ResponseWriter::BeginStream() and then WriteChunk() per event;
// each chunk is written and flushed with HTTP chunked transfer encoding at once (HTTP/1.0
// clients, which do not know chunked encoding (RFC 9112 §6.1), get the raw body delimited by
// closing the connection). WriteChunk() returns false as soon as the peer is gone;
// ClientClosed() detects a closed connection without writing (polling for EOF/RST), so a
// handler waiting for the first token can abort promptly.
//
// Shutdown(deadline): stops accepting, closes idle connections, lets in-flight requests finish
// until the deadline; then tells the remaining handlers the server is closing (ClientClosed() and
// ServerClosing() turn true while writes still work) so they can end their responses with a
// terminal error event, gives them a short grace period, shuts down the sockets still open
// (WriteChunk() == false from then on) and waits for every worker to exit.
#ifndef DEEPINFER_HTTP_SERVER_H_
#define DEEPINFER_HTTP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "http/cors.h"

namespace deepinfer::http {

// One parsed request. Header names are lower-cased; repeated headers are joined with ", ".
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path + optional "?query"
  std::string path;    // target without the query string
  std::map<std::string, std::string> headers;
  std::string body;
  std::string remote;  // peer "ip:port", for logs
  int version = 11;    // HTTP version as major*10+minor: 10 = HTTP/1.0, 11 = HTTP/1.1
  // The client's X-Request-Id, or a random id when it sent none (http/request_id.h); echoed in
  // the response's X-Request-Id header.
  std::string request_id;

  // Value of header `name` (lower-case) or "" when absent.
  std::string Header(const std::string& name) const;
};

// The response side of one request, handed to the handler. Exactly one of Send() or
// BeginStream()...EndStream() must be used; if the handler returns without either, the server
// answers 500. Not thread-safe: use it from the handler's thread only.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // Sends a complete response with Content-Length. `extra_headers` are added verbatim; an empty
  // `content_type` sends none (e.g. 204). For HEAD requests only the header block is written.
  virtual void Send(int status, std::string_view content_type, std::string body,
                    const std::map<std::string, std::string>& extra_headers = {}) = 0;

  // Writes the status line and headers of a chunked response (e.g. text/event-stream); for an
  // HTTP/1.0 request, of a response without chunked encoding that ends when the connection
  // closes. Returns false when the client is already gone.
  virtual bool BeginStream(int status, std::string_view content_type) = 0;

  // Writes one chunk (e.g. one SSE event) and flushes it. Returns false when the client is gone
  // (the handler should stop producing and abort its work). Empty data is ignored.
  virtual bool WriteChunk(std::string_view data) = 0;

  // Terminates the chunked body.
  virtual void EndStream() = 0;

  // True when the peer has closed (or reset) the connection, or the server is force-closing it.
  // Never blocks; cheap enough to call every few milliseconds.
  virtual bool ClientClosed() = 0;

  // True once a shutdown's drain deadline has passed for this request: the handler should end
  // its response now with a terminal event that says the server is closing (writes still work
  // for a short grace period). ClientClosed() is true as well, so polling loops stop.
  virtual bool ServerClosing() { return false; }
};

using Handler = std::function<void(const HttpRequest&, ResponseWriter&)>;

// Builds the body of a transport-level error (status, message, request path or "" when the
// request header was not read) -> (content type, body).
using ErrorBodyFn = std::function<std::pair<std::string, std::string>(
    int status, const std::string& message, const std::string& path)>;

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = pick a free port (see HttpServer::port())
  int64_t max_body_bytes = 32 << 20;
  int64_t max_header_bytes = 64 << 10;
  int max_connections = 1024;
  int idle_timeout_s = 75;  // keep-alive idle limit
  // Seconds a new connection gets to send its request line and headers (a kept-alive one: from
  // the first byte of its next request), and the longest a request body may stall: then 408.
  int request_timeout_s = 30;
  int write_timeout_s = 60;  // a client that stops reading is treated as gone after this
  ErrorBodyFn error_body;    // optional; plain text when unset
  CorsPolicy cors;           // browser cross-origin access; off unless origins are listed
};

class HttpServer {
 public:
  // Binds and listens on config.host:config.port and starts accepting; returns once the socket
  // is listening. Errors: InvalidArgument (bad host), Unavailable (bind/listen failed, e.g. the
  // port is in use; the message names the address).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerConfig& config,
                                                           Handler handler);

  // Shuts down (with a zero deadline) if Shutdown() was not called.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (useful with config.port == 0).
  int port() const { return port_; }

  // Graceful shutdown (see the file comment). Blocks until all workers have exited; safe to call
  // more than once and from any thread except a handler.
  void Shutdown(int64_t deadline_ms);

  // True once Shutdown() has begun; handlers may use it to stop early.
  bool stopping() const { return stopping_.load(); }

  // Number of connections currently open.
  int open_connections() const;

  class Impl;  // defined in server.cc

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
};

}  // namespace deepinfer::http

#endif  // DEEPINFER_HTTP_SERVER_H_
