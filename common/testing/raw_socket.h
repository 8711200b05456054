// Raw loopback TCP clients for tests that hold connections open or trickle bytes at a server
// (what an HTTP client library would not do). Plain functions and a descriptor owner; not
// thread-safe. ConnectLoopback reports errors as -1 with errno set, as the socket calls do.
#ifndef RINGMASTER_COMMON_TESTING_RAW_SOCKET_H_
#define RINGMASTER_COMMON_TESTING_RAW_SOCKET_H_

#include <vector>

namespace ringmaster::testing {

// A TCP socket connected to 127.0.0.1:`port`, or -1 (errno says why). The caller owns it.
int ConnectLoopback(int port);

// Owns descriptors and closes them however the test ends.
struct OwnedSockets {
  std::vector<int> fds;
  ~OwnedSockets();
};

// Opens `count` connections to 127.0.0.1:`port` that send nothing, into `sockets`. A failed
// connect fails the test (a gtest fatal failure) and stops; wrap the call in
// ASSERT_NO_FATAL_FAILURE to stop the test too.
void OpenIdleConnections(int port, int count, OwnedSockets* sockets);

// Raises this process's open-descriptor limit to its hard limit (best effort: a failure leaves
// the limit as it was). Each loopback client costs a test two descriptors when the server runs
// in the same process; a child process started afterwards inherits the raised limit.
void RaiseDescriptorLimit();

}  // namespace ringmaster::testing

#endif  // RINGMASTER_COMMON_TESTING_RAW_SOCKET_H_
