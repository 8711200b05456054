// Issue 34, point 4, against a real coordinator: hundreds of idle TCP connections and some that
// trickle a request they never finish, opened to its metrics port, once held the metrics server's
// two workers and filled its queue, so /healthz answered 503 or reset the connection. Now /healthz
// and /metrics keep answering 200 while they stay open.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace ringmaster::testing {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

struct Sockets {
  std::vector<int> fds;
  ~Sockets() {
    for (int fd : fds) close(fd);
  }
};

TEST(HttpFloodTest, CoordinatorHealthAndMetricsAnswerUnderIdleConnections) {
  // The test holds its client ends; the coordinator (which inherits the limit) its own.
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  auto coordinator =
      StartCoordinator({"--insecure", "--state=" + TestTempDir() + "/http_flood.db"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const int port = coordinator->metrics_port;

  Sockets idle;
  for (int i = 0; i < 300; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    idle.fds.push_back(fd);
  }
  Sockets trickling;
  const std::string start = "GET /metrics HTTP/1.1\r\nX-Slow: ";
  for (int i = 0; i < 30; ++i) {
    const int fd = Connect(port);
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
