// Issue 34, point 4, against a real coordinator: hundreds of idle TCP connections and some that
// trickle a request they never finish, opened to its metrics port, once held the metrics server's
// two workers and filled its queue, so /healthz answered 503 or reset the connection. Now /healthz
// and /metrics keep answering 200 while they stay open.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "common/testing/raw_socket.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace ringmaster::testing {
namespace {

TEST(HttpFloodTest, CoordinatorHealthAndMetricsAnswerUnderIdleConnections) {
  // The test holds its client ends; the coordinator (which inherits the limit) its own.
  RaiseDescriptorLimit();
  auto coordinator =
      StartCoordinator({"--insecure", "--state=" + TestTempDir() + "/http_flood.db"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const int port = coordinator->metrics_port;

  OwnedSockets idle;
  ASSERT_NO_FATAL_FAILURE(OpenIdleConnections(port, 300, &idle));
  OwnedSockets trickling;
  const std::string start = "GET /metrics HTTP/1.1\r\nX-Slow: ";
  for (int i = 0; i < 30; ++i) {
    const int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(send(fd, start.data(), start.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(start.size()));
    trickling.fds.push_back(fd);
  }
  // Each round: the trickling clients send one more byte, then a probe and a scrape must succeed.
  // The coordinator's request timeout (5 s) may expire the oldest of these on a slow machine; a
  // closed one only stops trickling.
  for (int round = 0; round < 10; ++round) {
    for (int fd : trickling.fds) (void)!send(fd, "a", 1, MSG_NOSIGNAL);
    auto health = HttpGet("127.0.0.1", port, "/healthz");
    ASSERT_TRUE(health.ok()) << "round " << round << ": " << health.status();
    EXPECT_EQ(health->status, 200) << "round " << round << ": " << health->body;
    EXPECT_EQ(health->body, "ok\n");
    auto scrape = HttpGet("127.0.0.1", port, "/metrics");
    ASSERT_TRUE(scrape.ok()) << "round " << round << ": " << scrape.status();
    EXPECT_EQ(scrape->status, 200) << "round " << round;
    EXPECT_NE(scrape->body.find("ringmaster_build_info{component=\"coordinator\""),
              std::string::npos);
  }
  EXPECT_TRUE(coordinator->process.Running()) << coordinator->process.Log();
}

}  // namespace
}  // namespace ringmaster::testing
