// A small HTTP/1.1 server for /metrics and health endpoints, built so that idle, slow or hostile
// clients cannot hold it down.
//
// It answers GET and HEAD with `Connection: close`, one request per connection; other methods get
// 405, unknown paths 404, a malformed request line 400, more than 16 KiB of headers 400.
//
// Threading: one event-loop thread owns the listening socket and every connection (non-blocking
// sockets, epoll): it accepts, reads requests from all connections at once, and writes answers.
// Handlers run off the loop, on a lane of `handler_threads` threads per path, so a slow handler
// (a large /metrics) delays only later requests for its own path, never /healthz. Handlers must be
// thread-safe; a lane's backlog is bounded (`max_queued_per_path`), and requests beyond it get 503
// at once.
//
// Deadlines: a connection must deliver its whole request within `request_timeout` of being
// accepted, however slowly its bytes trickle in; otherwise it gets 408 (written if the socket
// takes it) and is closed. An answer must be taken by the client within 5 s, or the connection is
// closed.
//
// Connection cap: at most `max_connections` connections are open, and never more than half the
// process's soft RLIMIT_NOFILE (the rest of the process needs descriptors too). A new connection
// beyond the cap (or an accept that fails for lack of descriptors) closes the OLDEST connection
// still waiting for its request, so idle connections cannot lock out a probe; only when every
// open connection is being answered is the newcomer closed.
//
// Ownership: the server owns its sockets and threads. Destroying it stops accepting, closes every
// connection (requests in flight get no answer), waits for handlers already running to return
// and joins all threads.
#ifndef RINGMASTER_COMMON_HTTP_SERVER_H_
#define RINGMASTER_COMMON_HTTP_SERVER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"

namespace ringmaster {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called with the request path (query string removed).
using HttpHandler = std::function<HttpResponse(const std::string& path)>;

struct HttpServerOptions {
  // Threads per path: how many calls of one handler may run at once.
  int handler_threads = 1;
  // Time from accept to the end of the request's headers.
  absl::Duration request_timeout = absl::Seconds(5);
  // Open connections at most (further capped at half the soft RLIMIT_NOFILE).
  int max_connections = 1024;
  // Requests waiting for a busy handler lane, per path; more get 503.
  int max_queued_per_path = 64;
};

class HttpServer {
 public:
  // Binds `address` ("127.0.0.1:0" picks a free port; "0.0.0.0:9400" all interfaces) and starts
  // serving `handlers` keyed by exact path. Other paths get 404. Errors: INVALID_ARGUMENT for a
  // malformed address or options, UNAVAILABLE if it cannot bind, INTERNAL if epoll cannot be set
  // up.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, std::map<std::string, HttpHandler> handlers,
      const HttpServerOptions& options);
  // The same with `handler_threads` threads per path.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, std::map<std::string, HttpHandler> handlers,
      int handler_threads = 1, absl::Duration request_timeout = absl::Seconds(5));
  // Stops accepting, cuts connections still being read or answered, waits for running handlers
  // to return and joins all threads.
  ~HttpServer();

  // The bound port (the chosen one when started with port 0).
  int port() const { return port_; }

 private:
  struct Connection;
  struct Lane;
  struct Done {
    uint64_t connection;
    HttpResponse response;
  };

  HttpServer(int listen_fd, int epoll_fd, int wake_fd, int port, HttpServerOptions options);
  void Loop();
  // Loop-thread helpers.
  void AcceptAll();
  bool EvictOldestWaiting();
  void OnReadable(Connection& c);
  void OnWritable(Connection& c);
  void Dispatch(Connection& c);
  void StartAnswer(Connection& c, const HttpResponse& response);
  void Close(uint64_t id);
  void ExpireDeadlines(absl::Time now);
  void TakeFinished();
  void LaneLoop(Lane* lane);

  const int listen_fd_;
  const int epoll_fd_;
  const int wake_fd_;  // eventfd: handler results and stop
  const int port_;
  const HttpServerOptions options_;
  const int max_connections_;

  // Only the loop thread touches these.
  std::map<uint64_t, std::unique_ptr<Connection>> connections_;  // by id = accept order
  std::map<uint64_t, Connection*> waiting_;  // still reading their request, oldest first
  std::multimap<absl::Time, uint64_t> deadlines_;  // of connections reading or writing
  uint64_t next_id_ = 1;
  bool accept_paused_ = false;
  absl::Time accept_resume_ = absl::InfinitePast();

  std::map<std::string, std::unique_ptr<Lane>> lanes_;  // by path; the map is immutable

  absl::Mutex mu_;
  std::vector<Done> finished_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread loop_;
};

// A handler that renders `registry` (which must outlive the server) in the text format.
HttpHandler MetricsHandler(const metrics::Registry* registry);

// Starts a server on `address` with /metrics rendering `registry`, plus /healthz answering "ok"
// (the process serves) and, when `ready` is given, /readyz: 200 with "ready" when it returns OK,
// else 503 with its message (e.g. an agent not connected to its coordinator). Each path has its
// own handler lane, so a slow /metrics never delays /healthz.
absl::StatusOr<std::unique_ptr<HttpServer>> StartMetricsServer(
    const std::string& address, const metrics::Registry* registry,
    std::function<absl::Status()> ready = nullptr);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_HTTP_SERVER_H_
