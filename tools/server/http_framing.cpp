#include "http_framing.h"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/core/string.hpp>

namespace slake::server::http {

namespace bhttp = boost::beast::http;

void limit(Parser& p, const HttpLimits& l) {
  p.header_limit(static_cast<uint32_t>(std::min<size_t>(l.max_head_bytes, UINT32_MAX)));
  p.body_limit(l.max_body_bytes);
}

HttpError parse_error(const boost::system::error_code& ec, const HttpLimits& l) {
  if (ec == bhttp::error::header_limit)
    return {431, "the request line and headers are larger than " + std::to_string(l.max_head_bytes >> 10) +
                     " KiB (--max-headers)"};
  if (ec == bhttp::error::body_limit)
    return {413, "the request body is larger than " + std::to_string(l.max_body_bytes >> 20) + " MiB (--max-body)"};
  return {400, "malformed HTTP request: " + ec.message()};
}

std::optional<HttpError> head_error(const Parser& p) {
  const auto& m = p.get();
  const auto te = m.find(bhttp::field::transfer_encoding);
  if (te != m.end()) {
    if (m.version() < 11) return HttpError{400, "Transfer-Encoding in an HTTP/1.0 request"};
    if (!p.chunked()) return HttpError{400, "Transfer-Encoding must end with chunked (got '" + std::string(te->value()) + "')"};
    if (!boost::beast::iequals(te->value(), "chunked"))
      return HttpError{501, "transfer coding not supported: '" + std::string(te->value()) + "' (only chunked)"};
  }
  if (m.version() >= 11 && m.count(bhttp::field::host) != 1)
    return HttpError{400, m.count(bhttp::field::host) ? "two Host headers" : "an HTTP/1.1 request needs a Host header"};
  const auto expect = m.find(bhttp::field::expect);
  if (expect != m.end() && !boost::beast::iequals(expect->value(), "100-continue"))
    return HttpError{417, "Expect: only 100-continue is understood (got '" + std::string(expect->value()) + "')"};
  return std::nullopt;
}

HttpRequest request_of(const Parser& p) {
  const auto& m = p.get();
  HttpRequest r;
  r.method = std::string(m.method_string());
  r.target = std::string(m.target());
  r.path = r.target.substr(0, r.target.find('?'));
  for (const auto& f : m) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  return r;
}

bool expects_continue(const Parser& p) {
  const auto& m = p.get();
  const auto expect = m.find(bhttp::field::expect);
  return m.version() >= 11 && expect != m.end() && boost::beast::iequals(expect->value(), "100-continue");
}

std::string response_head(int status, const std::string& content_type, long long content_length, bool close,
                          const HttpHeaders& extra) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " +
                  std::string(bhttp::obsolete_reason(static_cast<bhttp::status>(status))) + "\r\nServer: slake\r\n";
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  if (content_length >= 0 && status != 204 && status != 304) h += "Content-Length: " + std::to_string(content_length) + "\r\n";
  else if (content_length == -1) h += "Transfer-Encoding: chunked\r\n";
  if (close) h += "Connection: close\r\n";
  for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
  return h + "\r\n";
}

std::string response_bytes(const HttpResponse& r, bool close) {
  return response_head(r.status, r.content_type, static_cast<long long>(r.body.size()), close, r.headers) + r.body;
}

}  // namespace slake::server::http

namespace slake::server {

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (boost::beast::iequals(k, boost::beast::string_view(name.data(), name.size()))) return &v;
  return nullptr;
}

}  // namespace slake::server
