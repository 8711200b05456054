#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "common/metrics/text_format.h"
#include "common/testing/wait.h"
#include "gtest/gtest.h"

namespace ringmaster {
namespace {

using ::ringmaster::testing::WaitFor;

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
  std::map<std::string, HttpHandler> handlers;
  handlers["/healthz"] = [](const std::string&) { return HttpResponse{200, "text/plain", "ok\n"}; };
  auto server = HttpServer::Start("127.0.0.1:0", handlers, 2, absl::Seconds(1));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::atomic<int> dropped{0};
  std::vector<std::string> answers(2);
  std::vector<std::thread> slow;
  for (int i = 0; i < 2; ++i) {
    slow.emplace_back([&, i] {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(port);
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
        close(fd);
        return;
      }
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
