#include "common/http_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "absl/synchronization/notification.h"
#include "common/metrics/text_format.h"
#include "common/testing/raw_socket.h"
#include "common/testing/wait.h"
#include "gtest/gtest.h"

namespace ringmaster {
namespace {

using ::ringmaster::testing::ConnectLoopback;
using ::ringmaster::testing::OpenIdleConnections;
using ::ringmaster::testing::OwnedSockets;
using ::ringmaster::testing::RaiseDescriptorLimit;
using ::ringmaster::testing::WaitFor;

// Handlers that answer /healthz with "ok\n", where most tests here start.
std::map<std::string, HttpHandler> HealthzHandlers() {
  std::map<std::string, HttpHandler> handlers;
  handlers["/healthz"] = [](const std::string&) { return HttpResponse{200, "text/plain", "ok\n"}; };
  return handlers;
}

// What the server sends on `fd` until it closes the connection, an error, or 10 s of silence.
// Bounded (100 reads): the servers under test close after answering.
std::string ReadUntilClosed(int fd) {
  std::string answer;
  char buf[512];
  for (int i = 0; i < 100; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    answer.append(buf, n);
  }
  return answer;
}

TEST(HttpServerTest, ServesMetricsOnAnEphemeralPort) {
  metrics::Registry registry;
  registry.AddGauge("test_value", "A value.", {"k"}).WithLabels({"v"})->Set(7);
  auto server = StartMetricsServer("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  auto got = HttpGet("127.0.0.1", (*server)->port(), "/metrics?x=1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->content_type, metrics::kTextContentType);
  EXPECT_EQ(got->body, registry.RenderText());

  auto health = HttpGet("127.0.0.1", (*server)->port(), "/healthz");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->body, "ok\n");
}

TEST(HttpServerTest, ReadyzAnswersWhatTheReadinessCheckSays) {
  metrics::Registry registry;
  std::atomic<bool> connected{false};
  auto server = StartMetricsServer("127.0.0.1:0", &registry, [&]() -> absl::Status {
    if (connected.load()) return absl::OkStatus();
    return absl::UnavailableError("not connected to the coordinator at c:7070");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  auto not_yet = HttpGet("127.0.0.1", (*server)->port(), "/readyz");
  ASSERT_TRUE(not_yet.ok()) << not_yet.status();
  EXPECT_EQ(not_yet->status, 503);
  EXPECT_EQ(not_yet->body, "not ready: not connected to the coordinator at c:7070\n");
  connected.store(true);
  auto ready = HttpGet("127.0.0.1", (*server)->port(), "/readyz");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(ready->body, "ready\n");

  // Without a readiness check there is no /readyz (a coordinator's probes use gRPC health).
  auto plain = StartMetricsServer("127.0.0.1:0", &registry);
  ASSERT_TRUE(plain.ok());
  auto missing = HttpGet("127.0.0.1", (*plain)->port(), "/readyz");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
}

TEST(HttpServerTest, UnknownPathIs404) {
  metrics::Registry registry;
  auto server = StartMetricsServer("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok());
  auto got = HttpGet("127.0.0.1", (*server)->port(), "/nope");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->status, 404);
}

TEST(HttpServerTest, ManySequentialAndConcurrentRequests) {
  metrics::Registry registry;
  auto counter = registry.AddCounter("test_total", "T.").WithLabels({});
  std::map<std::string, HttpHandler> handlers;
  handlers["/count"] = [counter](const std::string&) {
    counter->Increment();
    return HttpResponse{200, "text/plain", "counted"};
  };
  auto server = HttpServer::Start("127.0.0.1:0", handlers, 4);
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([port] {
      for (int i = 0; i < 25; ++i) {
        auto got = HttpGet("127.0.0.1", port, "/count");
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->body, "counted");
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(counter->Value(), 200);
}

// Clients that send their request a byte at a time and never finish it (each byte inside the
// per-read timeout) hold both workers only until the request timeout: they get 408 and are
// dropped, and a normal request is served.
TEST(HttpServerTest, ClientsThatNeverFinishTheirRequestAreDroppedAndOthersServed) {
  std::map<std::string, HttpHandler> handlers = HealthzHandlers();
  auto server = HttpServer::Start("127.0.0.1:0", handlers, 2, absl::Seconds(1));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::atomic<int> dropped{0};
  std::vector<std::string> answers(2);
  std::vector<std::thread> slow;
  for (int i = 0; i < 2; ++i) {
    slow.emplace_back([&, i] {
      const int fd = ConnectLoopback(port);
      if (fd < 0) return;
      // A byte every 100 ms (the pace, not a wait for anything), until the server answers or
      // closes, for a minute at most.
      for (int sent = 0; sent < 600; ++sent) {
        if (send(fd, "G", 1, MSG_NOSIGNAL) != 1) break;
        pollfd readable{fd, POLLIN, 0};
        if (poll(&readable, 1, 100) != 0) break;
      }
      char buf[512];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) answers[i].append(buf, n);
      close(fd);
      ++dropped;
    });
  }
  EXPECT_TRUE(WaitFor([&] { return dropped.load() == 2; }, absl::Seconds(60)));
  for (std::thread& t : slow) t.join();
  for (const std::string& answer : answers) {
    EXPECT_EQ(answer.rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u) << answer;
  }
  auto got = HttpGet("127.0.0.1", port, "/healthz");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->status, 200);
}

// The attack of issue 34: hundreds of idle connections, and some that trickle a request they
// never finish, once held every worker and filled the queue, so /healthz answered 503 or reset.
// Now they only sit in the event loop; every probe in between is answered 200.
TEST(HttpServerTest, IdleAndTricklingConnectionsDoNotStarveHealthz) {
  RaiseDescriptorLimit();
  metrics::Registry registry;
  registry.AddGauge("test_value", "A value.", {}).WithLabels({})->Set(1);
  std::map<std::string, HttpHandler> handlers = HealthzHandlers();
  handlers["/metrics"] = MetricsHandler(&registry);
  HttpServerOptions options;
  options.request_timeout = absl::Seconds(120);  // The idle ones stay for the whole test.
  auto server = HttpServer::Start("127.0.0.1:0", handlers, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  OwnedSockets idle;
  ASSERT_NO_FATAL_FAILURE(OpenIdleConnections(port, 300, &idle));
  OwnedSockets trickling;
  for (int i = 0; i < 50; ++i) {
    const int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, "GET /metrics HTTP/1.1\r\nX-Slow: ", 32, MSG_NOSIGNAL), 32);
    trickling.fds.push_back(fd);
  }
  for (int round = 0; round < 20; ++round) {
    for (int fd : trickling.fds) {
      ASSERT_EQ(send(fd, "a", 1, MSG_NOSIGNAL), 1) << "round " << round;
    }
    auto health = HttpGet("127.0.0.1", port, "/healthz");
    ASSERT_TRUE(health.ok()) << "round " << round << ": " << health.status();
    EXPECT_EQ(health->status, 200) << "round " << round;
    EXPECT_EQ(health->body, "ok\n");
    auto scrape = HttpGet("127.0.0.1", port, "/metrics");
    ASSERT_TRUE(scrape.ok()) << "round " << round << ": " << scrape.status();
    EXPECT_EQ(scrape->status, 200) << "round " << round;
  }
  // The idle ones were never closed under it (well within the cap): each is still open.
  for (int fd : idle.fds) {
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0);
  }
}

// At the connection cap, a newcomer closes the oldest connection that has sent no request yet
// instead of being refused.
TEST(HttpServerTest, AtTheCapTheOldestIdleConnectionMakesRoom) {
  std::map<std::string, HttpHandler> handlers = HealthzHandlers();
  HttpServerOptions options;
  options.max_connections = 8;
  options.request_timeout = absl::Seconds(120);
  auto server = HttpServer::Start("127.0.0.1:0", handlers, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  OwnedSockets idle;
  ASSERT_NO_FATAL_FAILURE(OpenIdleConnections(port, 8, &idle));
  for (int round = 0; round < 5; ++round) {
    auto health = HttpGet("127.0.0.1", port, "/healthz");
    ASSERT_TRUE(health.ok()) << "round " << round << ": " << health.status();
    EXPECT_EQ(health->status, 200);
  }
  // The first idle connection was the one closed (each probe evicted the oldest left).
  std::string answer;
  char buf[256];
  pollfd p{idle.fds[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1);
  ssize_t n;
  while ((n = recv(idle.fds[0], buf, sizeof(buf), 0)) > 0) answer.append(buf, n);
  EXPECT_TRUE(answer.empty() || answer.rfind("HTTP/1.1 503", 0) == 0) << answer;
  pollfd newest{idle.fds[7], POLLIN, 0};
  EXPECT_EQ(poll(&newest, 1, 0), 0);  // Still open.
}

// A handler that does not return (a huge /metrics) delays only its own path: /healthz is served
// while three calls of it are stuck, and answers come once it returns.
TEST(HttpServerTest, ASlowHandlerDoesNotDelayOtherPaths) {
  absl::Notification release;
  std::atomic<int> entered{0};
  std::map<std::string, HttpHandler> handlers = HealthzHandlers();
  handlers["/slow"] = [&](const std::string&) {
    ++entered;
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
    return HttpResponse{200, "text/plain", "slow\n"};
  };
  auto server = HttpServer::Start("127.0.0.1:0", handlers, 2);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<std::string> slow_answers(3);
  std::vector<std::thread> slow;
  for (int i = 0; i < 3; ++i) {
    slow.emplace_back([&, i] {
      auto got = HttpGet("127.0.0.1", port, "/slow", absl::Seconds(60));
      slow_answers[i] = got.ok() ? got->body : got.status().ToString();
    });
  }
  EXPECT_TRUE(WaitFor([&] { return entered.load() == 2; }, absl::Seconds(30)));
  for (int round = 0; round < 5; ++round) {
    auto health = HttpGet("127.0.0.1", port, "/healthz");
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(health->status, 200);
  }
  release.Notify();
  for (std::thread& t : slow) t.join();
  for (const std::string& answer : slow_answers) EXPECT_EQ(answer, "slow\n");
}

// Beyond a lane's backlog, requests for that path get 503 at once instead of piling up.
TEST(HttpServerTest, AFullLaneAnswers503) {
  absl::Notification release;
  std::atomic<int> entered{0};
  std::map<std::string, HttpHandler> handlers;
  handlers["/slow"] = [&](const std::string&) {
    ++entered;
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
    return HttpResponse{200, "text/plain", "slow\n"};
  };
  HttpServerOptions options;
  options.max_queued_per_path = 0;
  auto server = HttpServer::Start("127.0.0.1:0", handlers, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::string first;
  std::thread held([&] {
    auto got = HttpGet("127.0.0.1", port, "/slow", absl::Seconds(60));
    first = got.ok() ? got->body : got.status().ToString();
  });
  EXPECT_TRUE(WaitFor([&] { return entered.load() == 1; }, absl::Seconds(30)));
  auto refused = HttpGet("127.0.0.1", port, "/slow");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 503);
  release.Notify();
  held.join();
  EXPECT_EQ(first, "slow\n");
}

// Sends `request` as is to a new server with HealthzHandlers and sets `answer` to all it sends
// back until it closes. A fatal test failure when the server cannot start or take the request.
void ExchangeWithHealthzServer(const std::string& request, std::string* answer) {
  std::map<std::string, HttpHandler> handlers = HealthzHandlers();
  auto server = HttpServer::Start("127.0.0.1:0", handlers);
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = ConnectLoopback((*server)->port());
  ASSERT_GE(fd, 0);
  OwnedSockets owned{{fd}};
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  *answer = ReadUntilClosed(fd);
}

TEST(HttpServerTest, HeadAnswersWithoutABody) {
  const std::string request = "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string answer;
  ASSERT_NO_FATAL_FAILURE(ExchangeWithHealthzServer(request, &answer));
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
  EXPECT_NE(answer.find("Content-Length: 3\r\n"), std::string::npos) << answer;
  EXPECT_EQ(answer.substr(answer.size() - 4), "\r\n\r\n") << answer;
}

TEST(HttpServerTest, OversizedHeadersAre400) {
  const std::string request = "GET /healthz HTTP/1.1\r\nX: " + std::string(17 * 1024, 'a');
  std::string answer;
  ASSERT_NO_FATAL_FAILURE(ExchangeWithHealthzServer(request, &answer));
  EXPECT_EQ(answer.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << answer;
}

TEST(HttpServerTest, BadAddressIsInvalidArgument) {
  metrics::Registry registry;
  auto server = StartMetricsServer("localhost", &registry);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HttpServerTest, PortInUseIsUnavailable) {
  metrics::Registry registry;
  auto first = StartMetricsServer("127.0.0.1:0", &registry);
  ASSERT_TRUE(first.ok());
  auto second = StartMetricsServer("127.0.0.1:" + std::to_string((*first)->port()), &registry);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST(HttpClientTest, ConnectionRefusedIsUnavailable) {
  int port;
  {
    metrics::Registry registry;
    auto server = StartMetricsServer("127.0.0.1:0", &registry);
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
  }  // Closed: nothing listens there now.
  EXPECT_EQ(HttpGet("127.0.0.1", port, "/").status().code(), absl::StatusCode::kUnavailable);
}

TEST(HttpClientTest, UrlEncode) {
  EXPECT_EQ(UrlEncode("up{job=\"a b\"}"), "up%7bjob%3d%22a%20b%22%7d");
}

}  // namespace
}  // namespace ringmaster
