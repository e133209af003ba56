// slake-server's HTTP/1.1 layer, on Boost.Asio with Boost.Beast's request parser (Debian's
// libboost-dev). One I/O thread accepts and reads every connection under deadlines and limits, so
// an idle or slow connection holds a socket and a small buffer, never a thread:
//   - a request's line and headers must arrive within `head_timeout_ms` (also a keep-alive
//     connection's idle time) and fit `max_head_bytes`: slowloris and endless lines get 408 / 431;
//   - the service checks the head (authentication, the route) before any body byte is read, and
//     answers `Expect: 100-continue` only once it passed;
//   - a body, Content-Length or chunked alike, must fit `max_body_bytes` (413) and arrive within
//     `body_timeout_ms`; ambiguous framing (two lengths, Transfer-Encoding with Content-Length, a
//     coding other than chunked) is a 400 and closes the connection (RFC 9112 6.3);
//   - a request is then served on one of `workers` threads (or on the I/O thread when the service
//     calls it quick: /health stays fast whatever the workers do), which writes the reply; a
//     write that makes no progress for `write_timeout_ms` ends the reply;
//   - keep-alive and pipelining per RFC 9112: requests of a connection are answered in order,
//     bytes that came after one request are the next one's.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace slake::server {

namespace detail {
struct HttpServerState;
}

struct HttpLimits {
  size_t max_head_bytes = 16u << 10;  // request line and headers
  size_t max_body_bytes = 64u << 20;
  int head_timeout_ms = 10000;
  int body_timeout_ms = 600000;
  int write_timeout_ms = 600000;  // a reply's write that makes no progress this long ends it
  int max_connections = 512;      // more are answered 503 and closed
  int workers = 8;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string target;  // as sent
  std::string path;    // the target up to '?'
  HttpHeaders headers;
  std::string body;

  // The value of the header `name` (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // more, e.g. Allow
};

struct HttpError {
  int status;
  std::string message;
};

// Where the service writes its reply to a request: whole, or streamed in chunks.
class HttpReply {
 public:
  virtual ~HttpReply() = default;
  virtual void send(const HttpResponse& r) = 0;
  // A streamed reply: the head, then the pieces, then finish(). Each returns false once the client
  // has gone or has read nothing for the write timeout; the reply is then over.
  virtual bool start(int status, const std::string& content_type, const HttpHeaders& headers) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual bool finish() = 0;
  // Whether the client is still there (does not block).
  virtual bool connected() = 0;
  // Whether anything was sent.
  virtual bool started() const = 0;
};

class HttpService {
 public:
  virtual ~HttpService() = default;
  // After the request line and headers, before the body: nullopt to read the body and serve the
  // request, or the response that refuses it (the connection is then closed, its body unread).
  virtual std::optional<HttpResponse> check_head(const HttpRequest& head) = 0;
  // Whether the request is served on the I/O thread: only what is fast and bounded.
  virtual bool quick(const HttpRequest& head) const = 0;
  // Serves a request whose head passed check_head. Exceptions become error(500).
  virtual void serve(const HttpRequest& req, HttpReply& reply) = 0;
  // The response to an error of the HTTP layer itself (400, 408, 413, 431, 500, 503).
  virtual HttpResponse error(const HttpError& e) const = 0;
  // Headers every reply to `head` carries (CORS's, say); none by default.
  virtual HttpHeaders reply_headers(const HttpRequest& head) const {
    (void)head;
    return {};
  }
};

class HttpServer {
 public:
  HttpServer(HttpService& service, const HttpLimits& limits);
  ~HttpServer();
  // Binds host:port (0: any free port); returns the port. Throws slake::Error.
  int listen(const std::string& host, int port);
  // Serves until stop(), then waits for the requests in flight.
  void run();
  // From any thread.
  void stop();

 private:
  std::unique_ptr<detail::HttpServerState> impl_;
};

}  // namespace slake::server
