#include "common/flags.h"

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

TEST(ParseHostPortTest, AcceptsHostPortAndBracketedV6) {
  std::string host;
  int port = -1;
  ASSERT_TRUE(ParseHostPort("--listen", "127.0.0.1:0", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(ParseHostPort("--listen", "[::1]:7070", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 7070);
}

TEST(ParseHostPortTest, RejectsMalformedAddressesNamingTheFlag) {
  std::string host;
  int port;
  for (const char* bad : {"nohost", ":80", "h:99999", "h:-1", "h:x", "[::1:80"}) {
    absl::Status s = ParseHostPort("--listen", bad, &host, &port);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().rfind("--listen: ", 0), 0u) << s;
  }
}

}  // namespace
}  // namespace ringmaster
