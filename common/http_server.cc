#include "common/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/metrics/text_format.h"
#include "common/status.h"

namespace ringmaster {
namespace {

constexpr size_t kMaxHeaderBytes = 16 * 1024;
constexpr size_t kMaxQueuedConnections = 64;
constexpr int kIoTimeoutSeconds = 5;  // each send (a reader that stops reading the answer)
constexpr absl::Duration kAcceptRetryPause = absl::Milliseconds(100);

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // Peer gone or timed out: nothing useful left to do with this connection.
    done += static_cast<size_t>(n);
  }
}

void Respond(int fd, const HttpResponse& response, bool head) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", response.status, " ", Reason(response.status),
                   "\r\nContent-Type: ", response.content_type,
                   "\r\nContent-Length: ", response.body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head) out += response.body;
  WriteAll(fd, out);
}

HttpResponse Plain(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, std::map<std::string, HttpHandler> handlers, int worker_threads,
    absl::Duration request_timeout) {
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(ParseHostPort("http address", address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* info = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints,
                       &info);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("http address \"", address, "\": ", gai_strerror(rc)));
  }
  int fd = socket(info->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(info);
    return ErrnoError(errno, "socket");
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, info->ai_addr, info->ai_addrlen) != 0 || listen(fd, 128) != 0) {
    int err = errno;
    freeaddrinfo(info);
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", std::strerror(err)));
  }
  freeaddrinfo(info);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int bound_port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::unique_ptr<HttpServer> server(
      new HttpServer(fd, bound_port, std::move(handlers), request_timeout));
  for (int i = 0; i < std::max(1, worker_threads); ++i) {
    server->workers_.emplace_back([s = server.get()] { s->WorkerLoop(); });
  }
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

HttpServer::HttpServer(int listen_fd, int port, std::map<std::string, HttpHandler> handlers,
                       absl::Duration request_timeout)
    : listen_fd_(listen_fd),
      port_(port),
      handlers_(std::move(handlers)),
      request_timeout_(request_timeout) {}

HttpServer::~HttpServer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    // Their workers see the connections end at once, queued ones included (a worker closes its
    // fd only after taking it out of serving_, under the lock).
    for (int fd : serving_) shutdown(fd, SHUT_RDWR);
    for (int fd : pending_) shutdown(fd, SHUT_RDWR);
  }
  shutdown(listen_fd_, SHUT_RDWR);  // Wakes accept().
  if (acceptor_.joinable()) acceptor_.join();
  for (std::thread& t : workers_) t.join();
  close(listen_fd_);
  for (int fd : pending_) close(fd);
}

void HttpServer::AcceptLoop() {
  int last_accept_error = 0;
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;  // before anything else can change it
      if (err == EINTR || err == ECONNABORTED) continue;
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      // Out of descriptors or memory, or something else: the endpoints must come back when it
      // passes, without spinning meanwhile (accept fails at once while it lasts).
      if (err != last_accept_error) {
        RM_LOG(ERROR) << "http accept failed: " << std::strerror(err) << "; retrying";
        last_accept_error = err;
      }
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), kAcceptRetryPause);
      continue;
    }
    last_accept_error = 0;
    timeval tv{kIoTimeoutSeconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    absl::MutexLock lock(&mu_);
    if (stopping_ || pending_.size() >= kMaxQueuedConnections) {
      Respond(fd, Plain(503, "busy\n"), false);
      close(fd);
      if (stopping_) return;
      continue;
    }
    pending_.push_back(fd);
  }
}

void HttpServer::WorkerLoop() {
  for (;;) {
    int fd;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](HttpServer* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stopping_ || !s->pending_.empty();
          },
          this));
      if (pending_.empty()) return;  // Stopping and drained.
      fd = pending_.front();
      pending_.pop_front();
      serving_.insert(fd);
    }
    Serve(fd);
    {
      absl::MutexLock lock(&mu_);
      serving_.erase(fd);
    }
    close(fd);
  }
}

void HttpServer::Serve(int fd) const {
  const absl::Time deadline = absl::Now() + request_timeout_;
  std::string request;
  char buf[4096];
  // The headers end with an empty line (CRLF, or bare LF from lenient clients).
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    if (request.size() > kMaxHeaderBytes) {
      Respond(fd, Plain(400, "request headers too large\n"), false);
      return;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      Respond(fd, Plain(408, "the request did not arrive in time\n"), false);
      return;
    }
    pollfd readable{fd, POLLIN, 0};
    const double wait_ms = std::min(std::ceil(absl::ToDoubleMilliseconds(left)), 60000.0);
    const int ready = poll(&readable, 1, static_cast<int>(wait_ms));
    if (ready < 0 && errno != EINTR) return;
    if (ready <= 0) continue;  // interrupted, or the deadline: checked above
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // Closed (or cut by the destructor) before a full request: drop it.
    request.append(buf, static_cast<size_t>(n));
  }
  std::vector<std::string> parts =
      absl::StrSplit(request.substr(0, request.find_first_of("\r\n")), ' ', absl::SkipEmpty());
  if (parts.size() != 3 || parts[2].rfind("HTTP/1.", 0) != 0) {
    Respond(fd, Plain(400, "malformed request line\n"), false);
    return;
  }
  const std::string& method = parts[0];
  bool head = method == "HEAD";
  if (method != "GET" && !head) {
    Respond(fd, Plain(405, "only GET and HEAD are supported\n"), false);
    return;
  }
  std::string path = parts[1].substr(0, parts[1].find('?'));
  auto it = handlers_.find(path);
  if (it == handlers_.end()) {
    Respond(fd, Plain(404, absl::StrCat("no handler for ", path, "\n")), head);
    return;
  }
  Respond(fd, it->second(path), head);
}

HttpHandler MetricsHandler(const metrics::Registry* registry) {
  return [registry](const std::string&) {
    HttpResponse r;
    r.content_type = std::string(metrics::kTextContentType);
    r.body = registry->RenderText();
    return r;
  };
}

absl::StatusOr<std::unique_ptr<HttpServer>> StartMetricsServer(
    const std::string& address, const metrics::Registry* registry,
    std::function<absl::Status()> ready) {
  std::map<std::string, HttpHandler> handlers;
  handlers["/metrics"] = MetricsHandler(registry);
  handlers["/healthz"] = [](const std::string&) { return Plain(200, "ok\n"); };
  if (ready) {
    handlers["/readyz"] = [ready = std::move(ready)](const std::string&) {
      const absl::Status s = ready();
      return s.ok() ? Plain(200, "ready\n")
                    : Plain(503, absl::StrCat("not ready: ", s.message(), "\n"));
    };
  }
  return HttpServer::Start(address, std::move(handlers));
}

}  // namespace ringmaster
