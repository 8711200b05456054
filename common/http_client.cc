#include "common/http_client.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ringmaster {

absl::StatusOr<HttpGetResult> HttpGet(const std::string& host, int port,
                                      const std::string& path_and_query, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* info = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &info);
  if (rc != 0) return absl::UnavailableError(absl::StrCat(host, ": ", gai_strerror(rc)));
  int fd = socket(info->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, info->ai_addr, info->ai_addrlen) != 0) {
    int err = errno;
    freeaddrinfo(info);
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect ", host, ":", port, ": ", std::strerror(err)));
  }
  freeaddrinfo(info);
  std::string request = absl::StrCat("GET ", path_and_query, " HTTP/1.0\r\nHost: ", host, ":", port,
                                     "\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("send to ", host, ":", port, " failed"));
  }
  std::string response;
  char buf[8192];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      if (err == EAGAIN || err == EWOULDBLOCK) {
        return absl::DeadlineExceededError(absl::StrCat("GET ", path_and_query, " timed out"));
      }
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(err)));
    }
    if (n == 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) return absl::InternalError("malformed HTTP response");
  std::vector<std::string> lines = absl::StrSplit(response.substr(0, header_end), "\r\n");
  std::vector<std::string> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  HttpGetResult result;
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &result.status)) {
    return absl::InternalError(absl::StrCat("malformed status line: ", lines[0]));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    if (absl::AsciiStrToLower(lines[i].substr(0, colon)) == "content-type") {
      result.content_type = std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
  }
  result.body = response.substr(header_end + 4);
  return result;
}

std::string UrlEncode(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrCat("%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace ringmaster
