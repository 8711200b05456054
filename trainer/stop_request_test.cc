// SIGUSR1 becomes a stop request once the handler is installed, and the process goes on.
#include "trainer/stop_request.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

TEST(StopRequestTest, Sigusr1SetsTheRequestInsteadOfEndingTheProcess) {
  InstallStopRequestHandler();
  InstallStopRequestHandler();  // idempotent
  ClearStopRequest();
  EXPECT_FALSE(StopRequested());
  // raise() returns after the handler ran (the signal goes to this thread).
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_TRUE(StopRequested());
  ClearStopRequest();
  EXPECT_FALSE(StopRequested());
}

}  // namespace
}  // namespace ringmaster::trainer
