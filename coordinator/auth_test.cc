#include "coordinator/auth.h"

#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

TEST(TokenAuthenticatorTest, OffByDefault) {
  TokenAuthenticator auth;
  auto caller = auth.Authenticate("");
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->identity, "");
  EXPECT_FALSE(caller->admin);
}

TEST(TokenAuthenticatorTest, KnownTokensMapToCallers) {
  auto auth = TokenAuthenticator::FromText(
      "# comment\n"
      "aaaaaaaaaaaaaaaaaaaa alice\n"
      "\n"
      "bbbbbbbbbbbbbbbbbbbb ops admin  # trailing comment\n");
  ASSERT_TRUE(auth.ok()) << auth.status();
  auto alice = auth->Authenticate("Bearer aaaaaaaaaaaaaaaaaaaa");
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->identity, "alice");
  EXPECT_FALSE(alice->admin);
  auto ops = auth->Authenticate("Bearer bbbbbbbbbbbbbbbbbbbb");
  ASSERT_TRUE(ops.ok());
  EXPECT_TRUE(ops->admin);
}

TEST(TokenAuthenticatorTest, MissingMalformedOrWrongTokensAreUnauthenticated) {
  auto auth = TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa alice\n");
  ASSERT_TRUE(auth.ok());
  for (const char* header : {"", "aaaaaaaaaaaaaaaaaaaa", "Basic aaaaaaaaaaaaaaaaaaaa",
                             "Bearer wrongwrongwrongwrong", "Bearer "}) {
    EXPECT_EQ(auth->Authenticate(header).status().code(), absl::StatusCode::kUnauthenticated)
        << header;
  }
}

TEST(TokenAuthenticatorTest, MalformedFilesNameTheLine) {
  EXPECT_EQ(TokenAuthenticator::FromText("\nshort alice\n").status().message(),
            "tokens:2: a token must be at least 16 characters");
  EXPECT_EQ(TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa\n").status().message(),
            "tokens:1: expected \"TOKEN NAME [admin]\"");
  EXPECT_EQ(TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa a root\n").status().message(),
            "tokens:1: expected \"TOKEN NAME [admin]\"");
  EXPECT_EQ(TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa a\naaaaaaaaaaaaaaaaaaaa b\n")
                .status()
                .message(),
            "tokens:2: duplicate token");
  EXPECT_EQ(TokenAuthenticator::FromFile("/nonexistent").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmaster::coordinator
