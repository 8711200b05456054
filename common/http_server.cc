#include "common/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
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
// The time a client has to take its whole answer once it is ready.
constexpr absl::Duration kWriteTimeout = absl::Seconds(5);
// After an accept fails for lack of descriptors with nothing to evict: the pause before the
// next try (accept would fail at once meanwhile, and the listening socket stays readable).
constexpr absl::Duration kAcceptRetryPause = absl::Milliseconds(100);
// Accepts per wake-up, so a connection storm cannot starve reads and writes.
constexpr int kAcceptBatch = 256;
constexpr int kEventBatch = 128;
// epoll tags of the two non-connection descriptors (connection ids start at 1).
constexpr uint64_t kListenTag = 0;
constexpr uint64_t kWakeTag = ~uint64_t{0};

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

std::string Render(const HttpResponse& response, bool head) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", response.status, " ", Reason(response.status),
                   "\r\nContent-Type: ", response.content_type,
                   "\r\nContent-Length: ", response.body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head) out += response.body;
  return out;
}

HttpResponse Plain(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

void SetEvents(int epoll_fd, int fd, uint32_t events, uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  // Cannot fail for a descriptor the loop registered and has not closed.
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
}

int MaxConnections(int wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return wanted;
  return static_cast<int>(std::min<rlim_t>(wanted, std::max<rlim_t>(1, limit.rlim_cur / 2)));
}

}  // namespace

struct HttpServer::Connection {
  enum class State { kReading, kHandling, kWriting };
  uint64_t id = 0;
  int fd = -1;
  State state = State::kReading;
  std::string in;
  std::string out;
  size_t written = 0;
  bool head = false;
  bool has_deadline = false;
  std::multimap<absl::Time, uint64_t>::iterator deadline;
};

struct HttpServer::Lane {
  HttpHandler handler;
  absl::Mutex mu;
  std::deque<std::pair<uint64_t, std::string>> queue ABSL_GUARDED_BY(mu);  // connection, path
  int running ABSL_GUARDED_BY(mu) = 0;  // calls of the handler under way
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::vector<std::thread> threads;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, std::map<std::string, HttpHandler> handlers, int handler_threads,
    absl::Duration request_timeout) {
  HttpServerOptions options;
  options.handler_threads = handler_threads;
  options.request_timeout = request_timeout;
  return Start(address, std::move(handlers), options);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, std::map<std::string, HttpHandler> handlers,
    const HttpServerOptions& options) {
  if (options.handler_threads < 1) return FieldError("handler_threads", "must be >= 1");
  if (options.max_connections < 1) return FieldError("max_connections", "must be >= 1");
  if (options.max_queued_per_path < 0) return FieldError("max_queued_per_path", "must be >= 0");
  if (options.request_timeout <= absl::ZeroDuration()) {
    return FieldError("request_timeout", "must be positive");
  }
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
  int fd = socket(info->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(info);
    return ErrnoError(errno, "socket");
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, info->ai_addr, info->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
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
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event listen_ev{};
  listen_ev.events = EPOLLIN;
  listen_ev.data.u64 = kListenTag;
  epoll_event wake_ev{};
  wake_ev.events = EPOLLIN;
  wake_ev.data.u64 = kWakeTag;
  if (epoll_fd < 0 || wake_fd < 0 || epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &listen_ev) != 0 ||
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &wake_ev) != 0) {
    const int err = errno;
    close(fd);
    if (epoll_fd >= 0) close(epoll_fd);
    if (wake_fd >= 0) close(wake_fd);
    return absl::InternalError(absl::StrCat("http server epoll: ", std::strerror(err)));
  }
  std::unique_ptr<HttpServer> server(new HttpServer(fd, epoll_fd, wake_fd, bound_port, options));
  for (auto& [path, handler] : handlers) {
    auto lane = std::make_unique<Lane>();
    lane->handler = std::move(handler);
    server->lanes_[path] = std::move(lane);
  }
  for (auto& [path, lane] : server->lanes_) {
    for (int i = 0; i < options.handler_threads; ++i) {
      lane->threads.emplace_back([s = server.get(), l = lane.get()] { s->LaneLoop(l); });
    }
  }
  server->loop_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

HttpServer::HttpServer(int listen_fd, int epoll_fd, int wake_fd, int port,
                       HttpServerOptions options)
    : listen_fd_(listen_fd),
      epoll_fd_(epoll_fd),
      wake_fd_(wake_fd),
      port_(port),
      options_(options),
      max_connections_(MaxConnections(options.max_connections)) {}

HttpServer::~HttpServer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  // Cannot fail short of a counter overflow; the loop also sees stopping_ on its next wake-up.
  (void)!write(wake_fd_, &one, sizeof(one));
  if (loop_.joinable()) loop_.join();
  for (auto& [path, lane] : lanes_) {
    absl::MutexLock lock(&lane->mu);
    lane->stopping = true;
  }
  for (auto& [path, lane] : lanes_) {
    for (std::thread& t : lane->threads) t.join();
  }
  // The loop is gone: its connections are this thread's now.
  for (auto& [id, c] : connections_) close(c->fd);
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
}

void HttpServer::Loop() {
  epoll_event events[kEventBatch];
  for (;;) {
    int timeout_ms = -1;
    absl::Time next = absl::InfiniteFuture();
    if (!deadlines_.empty()) next = deadlines_.begin()->first;
    if (accept_paused_) next = std::min(next, accept_resume_);
    if (next != absl::InfiniteFuture()) {
      const double ms = std::ceil(absl::ToDoubleMilliseconds(next - absl::Now()));
      timeout_ms = static_cast<int>(std::clamp(ms, 0.0, 60000.0));
    }
    const int n = epoll_wait(epoll_fd_, events, kEventBatch, timeout_ms);
    if (n < 0 && errno != EINTR) {
      RM_LOG(ERROR) << "http server epoll_wait: " << std::strerror(errno);
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        AcceptAll();
        continue;
      }
      if (tag == kWakeTag) {
        uint64_t count;
        // Resets the eventfd; EAGAIN (nothing to read) is harmless.
        (void)!read(wake_fd_, &count, sizeof(count));
        {
          absl::MutexLock lock(&mu_);
          if (stopping_) return;
        }
        TakeFinished();
        continue;
      }
      auto it = connections_.find(tag);
      if (it == connections_.end()) continue;  // closed earlier in this batch
      Connection& c = *it->second;
      if (c.state == Connection::State::kReading) {
        OnReadable(c);
      } else if (c.state == Connection::State::kWriting) {
        OnWritable(c);
      }
      // kHandling: nothing is watched (a hang-up shows when the answer is written).
    }
    const absl::Time now = absl::Now();
    ExpireDeadlines(now);
    if (accept_paused_ && now >= accept_resume_) {
      accept_paused_ = false;
      SetEvents(epoll_fd_, listen_fd_, EPOLLIN, kListenTag);
    }
  }
}

void HttpServer::AcceptAll() {
  for (int i = 0; i < kAcceptBatch; ++i) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      // Out of descriptors or memory: an idle connection gives its descriptor to the newcomer;
      // with none to give, stop watching the listening socket for a moment instead of spinning.
      if ((err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) &&
          EvictOldestWaiting()) {
        continue;
      }
      RM_LOG(WARNING) << "http accept failed: " << std::strerror(err) << "; pausing accepts";
      accept_paused_ = true;
      accept_resume_ = absl::Now() + kAcceptRetryPause;
      SetEvents(epoll_fd_, listen_fd_, 0, kListenTag);
      return;
    }
    if (static_cast<int>(connections_.size()) >= max_connections_ && !EvictOldestWaiting()) {
      // Every open connection is being answered: the newcomer waits for none of them.
      const std::string busy = Render(Plain(503, "too many connections\n"), false);
      // Best effort on a fresh socket: its buffer takes this at once or the client never sees it.
      (void)!send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->id = next_id_++;
    c->fd = fd;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      continue;
    }
    c->deadline = deadlines_.emplace(absl::Now() + options_.request_timeout, c->id);
    c->has_deadline = true;
    waiting_[c->id] = c.get();
    connections_[c->id] = std::move(c);
  }
}

bool HttpServer::EvictOldestWaiting() {
  if (waiting_.empty()) return false;
  const uint64_t id = waiting_.begin()->first;
  const std::string busy = Render(Plain(503, "too many connections\n"), false);
  // Best effort: it has sent no request yet, so it may not even read this.
  (void)!send(waiting_.begin()->second->fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  Close(id);
  return true;
}

void HttpServer::OnReadable(Connection& c) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // Closed (or reset) before a full request: drop it.
      Close(c.id);
      return;
    }
    c.in.append(buf, static_cast<size_t>(n));
    // The headers end with an empty line (CRLF, or bare LF from lenient clients).
    if (c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos) {
      Dispatch(c);
      return;
    }
    if (c.in.size() > kMaxHeaderBytes) {
      StartAnswer(c, Plain(400, "request headers too large\n"));
      return;
    }
  }
}

void HttpServer::Dispatch(Connection& c) {
  std::vector<std::string> parts =
      absl::StrSplit(c.in.substr(0, c.in.find_first_of("\r\n")), ' ', absl::SkipEmpty());
  if (parts.size() != 3 || parts[2].rfind("HTTP/1.", 0) != 0) {
    StartAnswer(c, Plain(400, "malformed request line\n"));
    return;
  }
  const std::string& method = parts[0];
  c.head = method == "HEAD";
  if (method != "GET" && !c.head) {
    c.head = false;
    StartAnswer(c, Plain(405, "only GET and HEAD are supported\n"));
    return;
  }
  std::string path = parts[1].substr(0, parts[1].find('?'));
  auto it = lanes_.find(path);
  if (it == lanes_.end()) {
    StartAnswer(c, Plain(404, absl::StrCat("no handler for ", path, "\n")));
    return;
  }
  Lane& lane = *it->second;
  {
    absl::MutexLock lock(&lane.mu);
    const int in_lane = static_cast<int>(lane.queue.size()) + lane.running;
    if (in_lane < options_.handler_threads + options_.max_queued_per_path) {
      lane.queue.emplace_back(c.id, std::move(path));
      c.state = Connection::State::kHandling;
    }
  }
  if (c.state != Connection::State::kHandling) {
    StartAnswer(c, Plain(503, "busy\n"));
    return;
  }
  c.in.clear();
  c.in.shrink_to_fit();
  waiting_.erase(c.id);
  if (c.has_deadline) deadlines_.erase(c.deadline);
  c.has_deadline = false;
  SetEvents(epoll_fd_, c.fd, 0, c.id);
}

void HttpServer::StartAnswer(Connection& c, const HttpResponse& response) {
  c.state = Connection::State::kWriting;
  c.out = Render(response, c.head);
  c.written = 0;
  c.in.clear();
  c.in.shrink_to_fit();
  waiting_.erase(c.id);
  if (c.has_deadline) deadlines_.erase(c.deadline);
  c.deadline = deadlines_.emplace(absl::Now() + kWriteTimeout, c.id);
  c.has_deadline = true;
  SetEvents(epoll_fd_, c.fd, EPOLLOUT, c.id);
  OnWritable(c);  // Usually all of it fits in the socket's buffer at once.
}

void HttpServer::OnWritable(Connection& c) {
  while (c.written < c.out.size()) {
    const ssize_t n =
        send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // EPOLLOUT resumes it
    if (n <= 0) break;  // Peer gone: nothing useful left to do with this connection.
    c.written += static_cast<size_t>(n);
  }
  Close(c.id);
}

void HttpServer::Close(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  if (c.has_deadline) deadlines_.erase(c.deadline);
  waiting_.erase(id);
  close(c.fd);  // Also takes it out of the epoll set (the loop holds no duplicate of it).
  connections_.erase(it);
}

void HttpServer::ExpireDeadlines(absl::Time now) {
  // Each pass removes the first deadline (408 sets one kWriteTimeout later), so this ends.
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    Connection& c = *connections_.at(id);
    if (c.state == Connection::State::kReading) {
      StartAnswer(c, Plain(408, "the request did not arrive in time\n"));
    } else {
      Close(id);  // A client that does not take its answer.
    }
  }
}

void HttpServer::TakeFinished() {
  std::vector<Done> finished;
  {
    absl::MutexLock lock(&mu_);
    finished.swap(finished_);
  }
  for (Done& done : finished) {
    auto it = connections_.find(done.connection);
    if (it == connections_.end()) continue;  // Cannot happen: handled connections stay open.
    StartAnswer(*it->second, done.response);
  }
}

void HttpServer::LaneLoop(Lane* lane) {
  for (;;) {
    std::pair<uint64_t, std::string> job;
    {
      absl::MutexLock lock(&lane->mu);
      lane->mu.Await(absl::Condition(
          +[](Lane* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu) {
            return l->stopping || !l->queue.empty();
          },
          lane));
      if (lane->stopping) return;  // Queued requests die with their connections.
      job = std::move(lane->queue.front());
      lane->queue.pop_front();
      ++lane->running;
    }
    Done done{job.first, lane->handler(job.second)};
    {
      absl::MutexLock lock(&lane->mu);
      --lane->running;
    }
    {
      absl::MutexLock lock(&mu_);
      finished_.push_back(std::move(done));
    }
    const uint64_t one = 1;
    // Wakes the loop; cannot fail short of a counter overflow.
    (void)!write(wake_fd_, &one, sizeof(one));
  }
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
