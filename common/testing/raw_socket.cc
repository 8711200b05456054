#include "common/testing/raw_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"

namespace ringmaster::testing {

int ConnectLoopback(int port) {
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

OwnedSockets::~OwnedSockets() {
  for (int fd : fds) close(fd);
}

void OpenIdleConnections(int port, int count, OwnedSockets* sockets) {
  for (int i = 0; i < count; ++i) {
    const int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    sockets->fds.push_back(fd);
  }
}

void RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    // Best effort: without it the test may run out of descriptors and say so itself.
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace ringmaster::testing
