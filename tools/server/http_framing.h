// The parts of slake-server's HTTP/1.1 layer that need no socket, so that the fuzzer runs them:
// Beast's request parser with the server's limits, the head checks beyond Beast's own, the
// request as the service sees it, and a response's head.
#pragma once
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <optional>
#include <string>

#include "http_server.h"

namespace slake::server::http {

using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets the parser's limits on the head and the body (chunked bodies included).
void limit(Parser& p, const HttpLimits& l);

// The answer to a parse error of Beast's: 431 past the head limit, 413 past the body limit, 400
// otherwise (ambiguous framing among them: Beast refuses two Content-Lengths that differ,
// Transfer-Encoding with Content-Length, and chunked twice).
HttpError parse_error(const boost::system::error_code& ec, const HttpLimits& l);

// What a parsed head breaks beyond Beast's checks (RFC 9112): a transfer coding other than chunked
// alone, chunked in HTTP/1.0, no Host or two in HTTP/1.1, an Expect other than 100-continue.
std::optional<HttpError> head_error(const Parser& p);

// The method, target, path and headers of a parsed head (the body is moved in once read).
HttpRequest request_of(const Parser& p);

// Whether the client asked for "100 Continue" before it sends its body.
bool expects_continue(const Parser& p);

// "HTTP/1.1 <status> <reason>" and the headers of a response, up to and including the empty line.
// `content_length` -1: chunked; below -1: neither (the body ends with the connection).
// `close`: "Connection: close".
std::string response_head(int status, const std::string& content_type, long long content_length, bool close,
                          const HttpHeaders& extra = {});

// A whole response, head and body.
std::string response_bytes(const HttpResponse& r, bool close);

}  // namespace slake::server::http
