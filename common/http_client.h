// A minimal blocking HTTP GET client (it speaks HTTP/1.0 so servers never answer chunked), for
// tools and tests (scraping /metrics, querying Prometheus' HTTP API on loopback). Not for
// production traffic: no TLS, no redirects, no chunked transfer encoding (servers used with it send
// Content-Length or close the connection).
#ifndef RINGMASTER_COMMON_HTTP_CLIENT_H_
#define RINGMASTER_COMMON_HTTP_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ringmaster {

struct HttpGetResult {
  int status = 0;
  std::string content_type;
  std::string body;
};

// GETs http://host:port/path_and_query. UNAVAILABLE if the connection fails, DEADLINE_EXCEEDED
// on timeout, INTERNAL for a malformed response. Any HTTP status is returned as a result.
absl::StatusOr<HttpGetResult> HttpGet(const std::string& host, int port,
                                      const std::string& path_and_query,
                                      absl::Duration timeout = absl::Seconds(10));

// Percent-encodes a query parameter value.
std::string UrlEncode(const std::string& value);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_HTTP_CLIENT_H_
