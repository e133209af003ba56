// libFuzzer target: the bytes a client sends on one connection, through slake-server's HTTP layer
// without a socket (tools/server/http_framing.cpp: Beast's request parser with the server's
// limits, the head checks beyond Beast's, the request as the service sees it, the response head
// of any error) and, for a completion request that parses whole, its body through the request
// validation of fuzz-request. Requests follow one another as on a keep-alive connection (what is
// left after one is the next), the bytes arriving in pieces of a size the input picks. Any input
// must parse or give an HttpError; ASan/UBSan catch everything else.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "api_error.h"
#include "http_framing.h"
#include "request_env.h"

namespace {

namespace http = slake::server::http;

void answer(const slake::server::HttpError& e) {
  if (e.status < 400 || e.status > 599 || e.message.empty()) __builtin_trap();
  (void)http::response_bytes({e.status, "application/json", e.message, {}}, true);
}

// One request from the front of `in`; returns the bytes it took, or 0 when the connection ends
// (an error answered, or the request incomplete).
size_t one_request(std::string_view in, size_t piece, fuzz::Env& env) {
  slake::server::HttpLimits limits;
  limits.max_head_bytes = 2048;
  limits.max_body_bytes = 1 << 16;
  http::Parser p;
  http::limit(p, limits);
  size_t used = 0, avail = std::min(in.size(), piece);
  while (!p.is_done()) {
    boost::system::error_code ec;
    used += p.put(boost::asio::buffer(in.data() + used, avail - used), ec);
    if (ec && ec != boost::beast::http::error::need_more) {
      answer(http::parse_error(ec, limits));
      return 0;
    }
    if (p.is_done()) break;
    if (p.is_header_done() && !p.eager()) {
      if (const auto e = http::head_error(p)) {  // the server answers before reading a body
        answer(*e);
        return 0;
      }
      p.eager(true);
      continue;
    }
    if (ec || used == avail) {
      if (avail == in.size()) return 0;  // the client stopped mid-request: the deadline ends it
      avail = std::min(in.size(), avail + piece);
    }
  }
  if (const auto e = http::head_error(p)) {
    answer(*e);
    return 0;
  }
  slake::server::HttpRequest req = http::request_of(p);
  (void)req.header("authorization");
  (void)http::expects_continue(p);
  const bool keep_alive = p.get().keep_alive();
  req.body = std::move(p.get().body());
  const bool chat = req.path == "/v1/chat/completions";
  if (chat || req.path == "/v1/completions") {
    try {
      slake::server::parse_request(req.body, chat, env.request);
    } catch (const slake::server::ApiError&) {
    }
  }
  return keep_alive ? used : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::Env env;
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (int n = 0; n < 16 && !in.empty(); ++n) {
    const size_t used = one_request(in, piece, env);
    if (used == 0) break;
    in.remove_prefix(used);
  }
  return 0;
}
