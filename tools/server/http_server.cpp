#include "http_server.h"

#include <malloc.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>

#include "http_framing.h"
#include "slake/error.h"

namespace slake::server {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using ms = std::chrono::milliseconds;

// Writes all of `data` to the socket `fd` without blocking in send(); false once the peer has
// gone, or when its receive window stays shut for `timeout_ms`.
bool write_all(int fd, std::string_view data, int timeout_ms) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r > 0 && (p.revents & POLLOUT)) continue;
    }
    return false;
  }
  return true;
}

// A reply written to the socket by a worker thread, while the I/O thread leaves the connection
// alone. Chunked for an HTTP/1.1 client; for HTTP/1.0, a streamed reply ends with the connection.
class SocketReply final : public HttpReply {
 public:
  SocketReply(int fd, int timeout_ms, bool keep_alive, bool http11, HttpHeaders extra)
      : fd_(fd), timeout_ms_(timeout_ms), keep_alive_(keep_alive), http11_(http11), extra_(std::move(extra)) {}

  void send(const HttpResponse& r) override {
    begin();
    done_ = true;
    if (!ok_) return;  // the client went (or half-closed): nothing more goes to it
    HttpResponse with = r;
    with.headers.insert(with.headers.end(), extra_.begin(), extra_.end());
    ok_ = write_all(fd_, http::response_bytes(with, !keep_alive_), timeout_ms_);
  }
  bool start(int status, const std::string& content_type, const HttpHeaders& headers) override {
    begin();
    if (!http11_) keep_alive_ = false;
    HttpHeaders all = headers;
    all.insert(all.end(), extra_.begin(), extra_.end());
    ok_ = write_all(fd_, http::response_head(status, content_type, http11_ ? -1 : -2, !keep_alive_, all), timeout_ms_);
    return ok_;
  }
  bool write(std::string_view data) override {
    if (!ok_ || data.empty()) return connected();
    if (!http11_) return ok_ = write_all(fd_, data, timeout_ms_);
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string chunk = size;
    chunk.append(data);
    chunk += "\r\n";
    return ok_ = write_all(fd_, chunk, timeout_ms_);
  }
  bool finish() override {
    done_ = true;
    if (ok_ && http11_) ok_ = write_all(fd_, "0\r\n\r\n", timeout_ms_);
    return ok_;
  }
  bool connected() override {
    if (!ok_) return false;
    pollfd p{fd_, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP))) ok_ = false;
    return ok_;
  }
  bool started() const override { return started_; }
  // Whether the connection may carry the client's next request: this reply went out whole.
  bool reusable() const { return ok_ && done_ && keep_alive_; }

 private:
  void begin() {
    if (started_) throw std::logic_error("a reply was started twice");
    started_ = true;
  }
  int fd_, timeout_ms_;
  bool keep_alive_, http11_;
  HttpHeaders extra_;  // the service's headers for every reply to this request
  bool ok_ = true, started_ = false, done_ = false;
};

// The reply of a quick request, written by the I/O thread once the service returns.
class BufferedReply final : public HttpReply {
 public:
  void send(const HttpResponse& r) override { response = r; }
  bool start(int, const std::string&, const HttpHeaders&) override { return refuse(); }
  bool write(std::string_view) override { return refuse(); }
  bool finish() override { return refuse(); }
  bool connected() override { return true; }
  bool started() const override { return response.has_value(); }
  std::optional<HttpResponse> response;

 private:
  static bool refuse() { throw std::logic_error("a quick request cannot stream its reply"); }
};

std::string seconds(int ms) { return std::to_string(ms / 1000) + (ms % 1000 ? "." + std::to_string(ms % 1000 / 100) : "") + " s"; }

}  // namespace

struct detail::HttpServerState {
  HttpServerState(HttpService& s, const HttpLimits& l) : service(s), limits(l), workers(static_cast<size_t>(std::max(1, l.workers))) {}
  void accept();
  // The response to an error of the HTTP layer; the service's, or a bare one should it throw.
  std::string error_bytes(const HttpError& e) const;

  HttpService& service;
  const HttpLimits limits;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  asio::thread_pool workers;
  std::atomic<int> connections{0};
  std::atomic<bool> stopping{false};
};

namespace {

// One client connection: its requests in order, each read under the deadlines and limits, served,
// and answered before the next is read.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(detail::HttpServerState& s, tcp::socket socket)
      : s_(s), socket_(std::move(socket)), deadline_(s.io), buffer_(s.limits.max_head_bytes + (64u << 10)) {
    ++s_.connections;
  }
  ~Connection() { --s_.connections; }
  void start() { read_head(); }

 private:
  // The deadline of the operations that follow: when it passes, they are cancelled (the socket
  // stays open, so that a 408 can still be written).
  void arm(int timeout_ms) {
    const uint64_t gen = ++deadline_gen_;
    timed_out_ = false;
    deadline_.expires_after(ms(timeout_ms));
    deadline_.async_wait([weak = weak_from_this(), gen](beast::error_code ec) {
      const auto self = weak.lock();
      if (ec || !self || self->deadline_gen_ != gen) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->socket_.cancel(ignored);
    });
  }
  void disarm() {
    ++deadline_gen_;
    deadline_.cancel();
  }

  void read_head() {
    if (s_.stopping) return close();
    parser_.emplace();
    http::limit(*parser_, s_.limits);
    arm(s_.limits.head_timeout_ms);
    bhttp::async_read_header(socket_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(beast::error_code ec) {
    disarm();
    if (ec) {
      // Nothing of a request yet: an idle keep-alive connection ended or timed out, quietly.
      if (!parser_->got_some() && buffer_.size() == 0) return close();
      if (timed_out_)
        return refuse({408, "the request line and headers took longer than " + seconds(s_.limits.head_timeout_ms) +
                                " (--timeout-headers)"});
      if (ec == bhttp::error::partial_message || ec == asio::error::eof || ec == asio::error::connection_reset)
        return close();
      return refuse(http::parse_error(ec, s_.limits));
    }
    if (auto e = http::head_error(*parser_)) return refuse(*e);
    req_ = http::request_of(*parser_);
    if (auto refused = s_.service.check_head(req_)) {
      for (auto& h : s_.service.reply_headers(req_)) refused->headers.push_back(std::move(h));
      return write_and_close(http::response_bytes(*refused, true));
    }
    if (!parser_->is_done() && http::expects_continue(*parser_)) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      arm(s_.limits.write_timeout_ms);
      asio::async_write(socket_, asio::buffer(kContinue), [self = shared_from_this()](beast::error_code e, size_t) {
        self->disarm();
        if (e) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    if (parser_->is_done()) return on_body({});
    arm(s_.limits.body_timeout_ms);
    bhttp::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(beast::error_code ec) {
    disarm();
    if (ec) {
      if (timed_out_)
        return refuse({408, "the request body took longer than " + seconds(s_.limits.body_timeout_ms) + " (--timeout)"});
      if (ec == bhttp::error::partial_message || ec == asio::error::eof || ec == asio::error::connection_reset)
        return close();
      return refuse(http::parse_error(ec, s_.limits));
    }
    req_.body = std::move(parser_->get().body());
    keep_alive_ = parser_->get().keep_alive();
    http11_ = parser_->get().version() >= 11;
    parser_.reset();
    if (s_.service.quick(req_)) return serve_quick();
    asio::post(s_.workers, [self = shared_from_this()] { self->serve_on_worker(); });
  }

  void serve_quick() {
    BufferedReply r;
    HttpResponse resp;
    try {
      s_.service.serve(req_, r);
      resp = r.response ? *r.response : s_.service.error({500, "internal error: no reply"});
    } catch (const std::exception& e) {
      resp = s_.service.error({500, std::string("internal error: ") + e.what()});
    }
    for (auto& h : s_.service.reply_headers(req_)) resp.headers.push_back(std::move(h));
    out_ = http::response_bytes(resp, !keep_alive_);
    arm(s_.limits.write_timeout_ms);
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->disarm();
      self->out_.clear();
      if (ec) return self->close();
      self->keep_alive_ ? self->read_head() : self->linger();
    });
  }

  // On a worker thread; the I/O thread has no operation on this connection meanwhile.
  void serve_on_worker() {
    SocketReply r(socket_.native_handle(), s_.limits.write_timeout_ms, keep_alive_, http11_, s_.service.reply_headers(req_));
    try {
      s_.service.serve(req_, r);
      if (!r.started()) r.send(s_.service.error({500, "internal error: no reply"}));
    } catch (const std::exception& e) {
      if (!r.started()) r.send(s_.service.error({500, std::string("internal error: ") + e.what()}));
    } catch (...) {
      if (!r.started()) r.send(s_.service.error({500, "internal error"}));
    }
    // A large body's memory goes back to the system (its parsed JSON is many small blocks in
    // this worker's heap arena).
    const bool large = req_.body.capacity() >= (1u << 20);
    req_ = HttpRequest();
    if (large) malloc_trim(0);
    const bool again = r.reusable();
    asio::post(socket_.get_executor(), [self = shared_from_this(), again] { again ? self->read_head() : self->linger(); });
  }

  void refuse(const HttpError& e) { write_and_close(s_.error_bytes(e)); }

  // Writes `bytes` (a response that says Connection: close), then closes.
  void write_and_close(std::string bytes) {
    parser_.reset();
    out_ = std::move(bytes);
    arm(std::min(s_.limits.write_timeout_ms, 10000));
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->disarm();
      self->out_.clear();
      if (ec) return self->close();
      self->linger();
    });
  }

  // Closes after a last response: the sending side first, then what the client still sends is read
  // and dropped for a moment, so that closing with unread bytes does not reset the connection
  // before the client has read the response (RFC 9112 9.6).
  void linger() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    arm(1000);
    discard_ = std::make_unique<char[]>(kDiscard);
    drain();
  }
  void drain() {
    socket_.async_read_some(asio::buffer(discard_.get(), kDiscard), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > (1u << 20)) return self->close();
      self->drain();
    });
  }

  void close() {
    disarm();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  static constexpr size_t kDiscard = 16384;
  detail::HttpServerState& s_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  uint64_t deadline_gen_ = 0;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::Parser> parser_;
  HttpRequest req_;
  bool keep_alive_ = false, http11_ = true;
  std::string out_;
  std::unique_ptr<char[]> discard_;
  size_t drained_ = 0;
};

}  // namespace

std::string detail::HttpServerState::error_bytes(const HttpError& e) const {
  try {
    return http::response_bytes(service.error(e), true);
  } catch (const std::exception&) {
    return http::response_bytes({e.status, "text/plain", e.message + "\n", {}}, true);
  }
}

void detail::HttpServerState::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {  // out of file descriptors, say: try again shortly rather than spin
      accept_retry.expires_after(ms(100));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e) accept();
      });
      return;
    }
    if (connections.load() >= limits.max_connections) {
      const std::string r = error_bytes(
          {503, "too many connections: " + std::to_string(limits.max_connections) + " open (--max-connections)"});
      [[maybe_unused]] ssize_t n = ::send(socket.native_handle(), r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      beast::error_code ignored;
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
    } else {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Connection>(*this, std::move(socket))->start();
    }
    accept();
  });
}

HttpServer::HttpServer(HttpService& service, const HttpLimits& limits) : impl_(std::make_unique<detail::HttpServerState>(service, limits)) {}

HttpServer::~HttpServer() {
  stop();
  impl_->workers.join();
}

int HttpServer::listen(const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  beast::error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) fail("cannot listen on " + where + ": " + (ec ? ec.message() : "no address"));
  const tcp::endpoint at = found.begin()->endpoint();
  auto& a = impl_->acceptor;
  a.open(at.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(at, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on " + where + " (" + ec.message() + ")");
  return a.local_endpoint().port();
}

void HttpServer::run() {
  impl_->accept();
  impl_->io.run();
  impl_->workers.join();
}

void HttpServer::stop() {
  impl_->stopping = true;
  impl_->io.stop();
}

}  // namespace slake::server
