// A small HTTP/1.1 server for /metrics and health endpoints.
//
// It answers GET and HEAD with `Connection: close`, one request per connection. A request must
// arrive whole (at most 16 KiB of headers) within `request_timeout` (5 s) of its worker taking
// it, however slowly its bytes trickle in, so a stuck or hostile client cannot hold a worker
// (408 otherwise). An accept thread feeds a fixed pool of worker threads; connections beyond what
// the queue holds are answered 503 at once; accept errors (out of descriptors, say) are retried
// after a pause. Handlers run on worker threads and must be thread-safe.
#ifndef RINGMASTER_COMMON_HTTP_SERVER_H_
#define RINGMASTER_COMMON_HTTP_SERVER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
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

class HttpServer {
 public:
  // Binds `address` ("127.0.0.1:0" picks a free port; "0.0.0.0:9400" all interfaces) and starts
  // serving `handlers` keyed by exact path. Other paths get 404. Errors: INVALID_ARGUMENT for a
  // malformed address, UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, std::map<std::string, HttpHandler> handlers,
      int worker_threads = 2, absl::Duration request_timeout = absl::Seconds(5));
  // Stops accepting, cuts connections still being read or answered, and joins all threads.
  ~HttpServer();

  // The bound port (the chosen one when started with port 0).
  int port() const { return port_; }

 private:
  HttpServer(int listen_fd, int port, std::map<std::string, HttpHandler> handlers,
             absl::Duration request_timeout);
  void AcceptLoop();
  void WorkerLoop();
  void Serve(int fd) const;

  const int listen_fd_;
  const int port_;
  const std::map<std::string, HttpHandler> handlers_;
  const absl::Duration request_timeout_;
  absl::Mutex mu_;
  std::deque<int> pending_ ABSL_GUARDED_BY(mu_);
  std::set<int> serving_ ABSL_GUARDED_BY(mu_);  // connections a worker has taken
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

// A handler that renders `registry` (which must outlive the server) in the text format.
HttpHandler MetricsHandler(const metrics::Registry* registry);

// Starts a server on `address` with /metrics rendering `registry`, plus /healthz answering "ok"
// (the process serves) and, when `ready` is given, /readyz: 200 with "ready" when it returns OK,
// else 503 with its message (e.g. an agent not connected to its coordinator).
absl::StatusOr<std::unique_ptr<HttpServer>> StartMetricsServer(
    const std::string& address, const metrics::Registry* registry,
    std::function<absl::Status()> ready = nullptr);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_HTTP_SERVER_H_
