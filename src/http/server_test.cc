#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <regex>
#include <chrono>
#include <string>
#include <thread>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deepinfer::http {
namespace {

using ::deepinfer::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The chunked body's last chunk. The leading CRLF matters: a bare "0\r\n\r\n" also matches the
// end of the headers whenever the last header value ends in '0' (a random X-Request-Id does, one
// time in 16).
constexpr char kLastChunk[] = "\r\n0\r\n\r\n";

// A raw TCP client: the expected bytes below come from RFC 9112 (HTTP/1.1 framing), not from
// the server code.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  void Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += n;
    }
  }
  // Reads until `needle` has been seen, EOF, or a 5 s timeout.
  std::string ReadUntil(const std::string& needle) {
    auto start = std::chrono::steady_clock::now();
    while (buf_.find(needle) == std::string::npos &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) break;
      buf_.append(tmp, n);
    }
    size_t pos = buf_.find(needle);
    std::string out;
    if (pos == std::string::npos) {
      out.swap(buf_);
    } else {
      out = buf_.substr(0, pos + needle.size());
      buf_.erase(0, pos + needle.size());
    }
    return out;
  }
  // True when the server closed the connection within 5 s.
  bool WaitEof() {
    for (int i = 0; i < 50; ++i) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) return true;
      buf_.append(tmp, n);
    }
    return false;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

HttpServerConfig TestConfig() {
  HttpServerConfig config;
  config.port = 0;
  config.max_body_bytes = 1024;
  return config;
}

TEST(HttpServerTest, EchoesRequestAndKeepsConnectionAlive) {
  ASSERT_OK_AND_ASSIGN(
      auto server, HttpServer::Start(TestConfig(), [](const HttpRequest& req, ResponseWriter& w) {
        w.Send(200, "text/plain",
               req.method + " " + req.path + " " + req.Header("x-test") + " " + req.body);
      }));
  RawClient c(server->port());
  ASSERT_TRUE(c.connected());
  c.Send("POST /a?q=1 HTTP/1.1\r\nHost: x\r\nX-Test: hi\r\nContent-Length: 5\r\n\r\nhello");
  std::string r1 = c.ReadUntil("hello");
  EXPECT_THAT(r1, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r1, HasSubstr("Content-Length: 16\r\n"));
  EXPECT_THAT(r1, HasSubstr("\r\n\r\nPOST /a hi hello"));
  // Second request on the same connection (HTTP/1.1 default keep-alive).
  c.Send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r2 = c.ReadUntil("GET /b  ");
  EXPECT_THAT(r2, StartsWith("HTTP/1.1 200 OK\r\n"));
  server->Shutdown(1000);
}

TEST(HttpServerTest, BodyOverLimitGets413) {
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(TestConfig(), [](const HttpRequest&, ResponseWriter& w) {
                         w.Send(200, "text/plain", "should not run");
                       }));
  RawClient c(server->port());
  c.Send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'a'));
  std::string r = c.ReadUntil("\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 413 "));
  EXPECT_TRUE(c.WaitEof());
}

TEST(HttpServerTest, MalformedRequestGets400AndCustomErrorBody) {
  HttpServerConfig config = TestConfig();
  config.error_body = [](int status, const std::string& message, const std::string&) {
    return std::make_pair(std::string("application/json"),
                          "{\"status\":" + std::to_string(status) + "}");
  };
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(config, [](const HttpRequest&, ResponseWriter& w) {
                         w.Send(200, "text/plain", "x");
                       }));
  RawClient c(server->port());
  c.Send("THIS IS NOT HTTP\r\n\r\n");
  std::string r = c.ReadUntil("{\"status\":400}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(r, HasSubstr("application/json"));
}

TEST(HttpServerTest, ExpectContinueIsAnswered) {
  ASSERT_OK_AND_ASSIGN(
      auto server, HttpServer::Start(TestConfig(), [](const HttpRequest& req, ResponseWriter& w) {
        w.Send(200, "text/plain", "got " + req.body);
      }));
  RawClient c(server->port());
  c.Send("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("\r\n\r\n"), StartsWith("HTTP/1.1 100 Continue"));
  c.Send("abc");
  EXPECT_THAT(c.ReadUntil("got abc"), StartsWith("HTTP/1.1 200 OK"));
}

TEST(HttpServerTest, StreamsChunksAndEndsWithZeroChunk) {
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(TestConfig(), [](const HttpRequest&, ResponseWriter& w) {
                         ASSERT_TRUE(w.BeginStream(200, "text/event-stream"));
                         EXPECT_TRUE(w.WriteChunk("data: 1\n\n"));
                         EXPECT_TRUE(w.WriteChunk("data: [DONE]\n\n"));
                         w.EndStream();
                       }));
  RawClient c(server->port());
  c.Send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.ReadUntil(kLastChunk);
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(r, HasSubstr("Content-Type: text/event-stream\r\n"));
  EXPECT_THAT(r, HasSubstr("Transfer-Encoding: chunked\r\n"));
  // 9 = strlen("data: 1\n\n"), e = strlen("data: [DONE]\n\n") = 14.
  EXPECT_THAT(r, HasSubstr("\r\n\r\n9\r\ndata: 1\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"));
}

TEST(HttpServerTest, DetectsClientDisconnectWhileHandlerWaits) {
  std::atomic<bool> saw_close{false};
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(TestConfig(), [&](const HttpRequest&, ResponseWriter& w) {
                         w.BeginStream(200, "text/event-stream");
                         for (int i = 0; i < 500; ++i) {  // up to 5 s
                           if (w.ClientClosed()) {
                             saw_close = true;
                             break;
                           }
                           std::this_thread::sleep_for(std::chrono::milliseconds(10));
                         }
                         w.EndStream();
                       }));
  {
    RawClient c(server->port());
    c.Send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
    c.ReadUntil("\r\n\r\n");
    c.Close();
  }
  for (int i = 0; i < 500 && !saw_close; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(saw_close);
}

TEST(HttpServerTest, ShutdownLetsInFlightRequestFinishAndClosesIdleConnections) {
  std::atomic<bool> started{false};
  ASSERT_OK_AND_ASSIGN(
      auto server, HttpServer::Start(TestConfig(), [&](const HttpRequest& req, ResponseWriter& w) {
        if (req.path == "/slow") {
          started = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        w.Send(200, "text/plain", "done " + req.path);
      }));
  RawClient idle(server->port());
  idle.Send("GET /fast HTTP/1.1\r\nHost: x\r\n\r\n");
  idle.ReadUntil("done /fast");
  RawClient busy(server->port());
  busy.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server->Shutdown(5000);
  EXPECT_THAT(busy.ReadUntil("done /slow"), HasSubstr("Connection: close"));
  EXPECT_TRUE(idle.WaitEof());
  EXPECT_EQ(server->open_connections(), 0);
  // New connections are refused after shutdown.
  RawClient late(server->port());
  EXPECT_FALSE(late.connected());
}

TEST(HttpServerTest, HeadGetsHeadersWithoutBody) {
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(TestConfig(), [](const HttpRequest&, ResponseWriter& w) {
                         w.Send(200, "text/plain", "0123456789");
                       }));
  RawClient c(server->port());
  c.Send("HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.ReadUntil("\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  // RFC 9110 §9.3.2: the Content-Length a GET would get, and no body.
  EXPECT_THAT(r, HasSubstr("Content-Length: 10\r\n"));
  // The connection stays usable: the next response follows directly (no stray body bytes).
  c.Send("GET /h HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("0123456789"), StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST(HttpServerTest, Http10StreamIsNotChunkedAndEndsByClosing) {
  ASSERT_OK_AND_ASSIGN(
      auto server, HttpServer::Start(TestConfig(), [](const HttpRequest& req, ResponseWriter& w) {
        EXPECT_EQ(req.version, 10);
        ASSERT_TRUE(w.BeginStream(200, "text/event-stream"));
        EXPECT_TRUE(w.WriteChunk("data: 1\n\n"));
        EXPECT_TRUE(w.WriteChunk("data: [DONE]\n\n"));
        w.EndStream();
      }));
  RawClient c(server->port());
  c.Send("GET /s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  std::string head = c.ReadUntil("\r\n\r\n");
  // RFC 9112 §6.1: no chunked encoding towards an HTTP/1.0 recipient; the body is delimited by
  // closing the connection.
  EXPECT_THAT(head, Not(HasSubstr("Transfer-Encoding")));
  EXPECT_THAT(head, HasSubstr("Connection: close\r\n"));
  EXPECT_EQ(c.ReadUntil("data: [DONE]\n\n"), "data: 1\n\ndata: [DONE]\n\n");
  EXPECT_TRUE(c.WaitEof());
}

TEST(HttpServerTest, SilentConnectionIsClosedAfterRequestTimeout) {
  HttpServerConfig config = TestConfig();
  config.request_timeout_s = 1;
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(config, [](const HttpRequest&, ResponseWriter& w) {
                         w.Send(200, "text/plain", "x");
                       }));
  RawClient c(server->port());
  ASSERT_TRUE(c.connected());
  EXPECT_TRUE(c.WaitEof());  // within 5 s; nothing was sent, so nothing is answered
  EXPECT_EQ(c.ReadUntil("HTTP"), "");
  for (int i = 0; i < 100 && server->open_connections() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server->open_connections(), 0);
}

TEST(HttpServerTest, PartialHeaderAndShortBodyGet408InTheRoutesErrorShape) {
  HttpServerConfig config = TestConfig();
  config.request_timeout_s = 1;
  config.error_body = [](int status, const std::string&, const std::string& path) {
    return std::make_pair(std::string("application/json"),
                          "{\"status\":" + std::to_string(status) + ",\"path\":\"" + path + "\"}");
  };
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(config, [](const HttpRequest&, ResponseWriter& w) {
                         w.Send(200, "text/plain", "should not run");
                       }));
  RawClient body(server->port());
  body.Send("POST /v1/x?q=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\":1}");
  std::string r = body.ReadUntil("}");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 408 "));
  EXPECT_THAT(r, HasSubstr("Connection: close\r\n"));
  EXPECT_THAT(r, HasSubstr("{\"status\":408,\"path\":\"/v1/x\"}"));
  EXPECT_TRUE(body.WaitEof());

  RawClient header(server->port());
  header.Send("POST /v1/x HTTP/1.1\r\nHost: x\r\n");
  EXPECT_THAT(header.ReadUntil("}"), StartsWith("HTTP/1.1 408 "));
  EXPECT_TRUE(header.WaitEof());
}

TEST(HttpServerTest, KeepAliveAndLongResponsesOutliveTheRequestTimeout) {
  HttpServerConfig config = TestConfig();
  config.request_timeout_s = 1;
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(config, [](const HttpRequest& req, ResponseWriter& w) {
                         w.BeginStream(200, "text/event-stream");
                         w.WriteChunk("data: a\n\n");
                         if (req.path == "/slow") {
                           std::this_thread::sleep_for(std::chrono::milliseconds(1500));
                         }
                         w.WriteChunk("data: b\n\n");
                         w.EndStream();
                       }));
  RawClient c(server->port());
  c.Send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(c.ReadUntil(kLastChunk), HasSubstr("data: b\n\n"));
  // Idle between requests for longer than the request timeout (the idle timeout is 75 s).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  c.Send("GET /fast HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(c.ReadUntil(kLastChunk), StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST(HttpServerTest, ShutdownDeadlineLetsStreamsEndWithATerminalEvent) {
  std::atomic<bool> started{false};
  std::atomic<bool> saw_closing{false};
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(TestConfig(), [&](const HttpRequest&, ResponseWriter& w) {
                         w.BeginStream(200, "text/event-stream");
                         w.WriteChunk("data: start\n\n");
                         started = true;
                         for (int i = 0; i < 1000 && !w.ClientClosed(); ++i) {
                           std::this_thread::sleep_for(std::chrono::milliseconds(10));
                         }
                         if (w.ServerClosing()) {
                           saw_closing = true;
                           EXPECT_TRUE(w.WriteChunk("data: closing\n\n"));
                         }
                         w.EndStream();
                       }));
  RawClient c(server->port());
  c.Send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  c.ReadUntil("data: start\n\n");
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server->Shutdown(100);
  EXPECT_TRUE(saw_closing);
  // The terminal event and the last chunk (RFC 9112 §7.1) arrive before the connection closes.
  EXPECT_THAT(c.ReadUntil(kLastChunk), HasSubstr("f\r\ndata: closing\n\n\r\n0\r\n\r\n"));
  EXPECT_TRUE(c.WaitEof());
}

TEST(HttpServerTest, BadHostIsInvalidArgumentAndBusyPortIsUnavailable) {
  HttpServerConfig bad = TestConfig();
  bad.host = "not-an-ip";
  EXPECT_THAT(HttpServer::Start(bad, nullptr), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(auto first, HttpServer::Start(TestConfig(), nullptr));
  HttpServerConfig same = TestConfig();
  same.port = first->port();
  EXPECT_THAT(HttpServer::Start(same, nullptr), StatusIs(absl::StatusCode::kUnavailable));
}


TEST(HttpServerTest, RequestIdIsTheClientsOrRandomAndEchoedOnEveryResponse) {
  ASSERT_OK_AND_ASSIGN(
      auto server, HttpServer::Start(TestConfig(), [](const HttpRequest& req, ResponseWriter& w) {
        if (req.path == "/stream") {
          w.BeginStream(200, "text/event-stream");
          w.WriteChunk("id=" + req.request_id);
          w.EndStream();
        } else {
          w.Send(200, "text/plain", "id=" + req.request_id);
        }
      }));
  RawClient c(server->port());
  c.Send("GET /a HTTP/1.1\r\nHost: x\r\nX-Request-Id: trace-42\r\n\r\n");
  std::string r = c.ReadUntil("id=trace-42");
  EXPECT_THAT(r, HasSubstr("X-Request-Id: trace-42\r\n"));
  c.Send("GET /stream HTTP/1.1\r\nHost: x\r\nX-Request-Id: s-1\r\n\r\n");
  r = c.ReadUntil(kLastChunk);
  EXPECT_THAT(r, HasSubstr("X-Request-Id: s-1\r\n"));
  EXPECT_THAT(r, HasSubstr("id=s-1"));
  // Without the header: a fresh 32-hex id, the same in the header and the handler's view.
  c.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  r = c.ReadUntil("\r\n\r\n");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r, m, std::regex("X-Request-Id: ([0-9a-f]{32})\r\n"))) << r;
  const std::string id = m[1];
  EXPECT_THAT(c.ReadUntil("id=" + id), HasSubstr("id=" + id));
  // A value with spaces (or a repeated header) is refused before the handler runs; the
  // connection stays usable.
  c.Send("GET /a HTTP/1.1\r\nHost: x\r\nX-Request-Id: a b\r\n\r\n");
  r = c.ReadUntil("sent once)\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 "));
  c.Send("GET /a HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\r\nX-Request-Id: b\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("sent once)\n"), StartsWith("HTTP/1.1 400 "));
  c.Send("GET /a HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + std::string(257, 'x') +
         "\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("sent once)\n"), StartsWith("HTTP/1.1 400 "));
  server->Shutdown(1000);
}

TEST(HttpServerTest, CorsPreflightIsAnsweredAndResponsesCarryTheHeaders) {
  HttpServerConfig config = TestConfig();
  config.cors.allowed_origins = {"http://app.example"};
  std::atomic<int> handled{0};
  ASSERT_OK_AND_ASSIGN(auto server,
                       HttpServer::Start(config, [&](const HttpRequest&, ResponseWriter& w) {
                         ++handled;
                         w.Send(401, "text/plain", "no key");
                       }));
  RawClient c(server->port());
  c.Send("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
         "Access-Control-Request-Method: POST\r\n"
         "Access-Control-Request-Headers: authorization,content-type\r\n\r\n");
  std::string r = c.ReadUntil("\r\n\r\nOK");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 "));
  EXPECT_THAT(r, HasSubstr("Access-Control-Allow-Origin: http://app.example\r\n"));
  EXPECT_THAT(r, HasSubstr("Access-Control-Allow-Headers: authorization, content-type\r\n"));
  EXPECT_EQ(handled.load(), 0);  // answered before the handler (and its authentication)
  // The actual request's response (an error here) carries the origin too.
  c.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
         "Content-Length: 0\r\n\r\n");
  r = c.ReadUntil("no key");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 401 "));
  EXPECT_THAT(r, HasSubstr("Access-Control-Allow-Origin: http://app.example\r\n"));
  // Another origin: a refused preflight, and no CORS headers on its requests.
  c.Send("OPTIONS /x HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n"
         "Access-Control-Request-Method: POST\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("Disallowed CORS origin\n"), StartsWith("HTTP/1.1 400 "));
  c.Send("GET /x HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n\r\n");
  EXPECT_THAT(c.ReadUntil("no key"), Not(HasSubstr("Access-Control-Allow-Origin")));
  server->Shutdown(1000);
}

}  // namespace
}  // namespace deepinfer::http
