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

TEST(TokenAuthenticatorTest, AgentTokensHaveTheAgentRoleOnly) {
  auto auth = TokenAuthenticator::FromText(
      "aaaaaaaaaaaaaaaaaaaa alice\n"
      "bbbbbbbbbbbbbbbbbbbb ops admin\n"
      "cccccccccccccccccccc node-agents agent\n");
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE(auth->has_agent_tokens());
  auto agent = auth->Authenticate("Bearer cccccccccccccccccccc");
  ASSERT_TRUE(agent.ok());
  EXPECT_EQ(agent->identity, "node-agents");
  EXPECT_TRUE(agent->agent);
  EXPECT_FALSE(agent->admin);
  for (const char* header : {"Bearer aaaaaaaaaaaaaaaaaaaa", "Bearer bbbbbbbbbbbbbbbbbbbb"}) {
    auto caller = auth->Authenticate(header);
    ASSERT_TRUE(caller.ok());
    EXPECT_FALSE(caller->agent) << header;
  }
}

TEST(TokenAuthenticatorTest, FilesWithoutAgentTokensSayNoAgentsAreAuthenticated) {
  EXPECT_FALSE(TokenAuthenticator().has_agent_tokens());
  auto users = TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa alice\nbbbbbbbbbbbbbbbbbbbb ops admin\n");
  ASSERT_TRUE(users.ok());
  EXPECT_FALSE(users->has_agent_tokens());
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
            "tokens:1: expected \"TOKEN NAME [admin|agent]\"");
  EXPECT_EQ(TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa a root\n").status().message(),
            "tokens:1: expected \"TOKEN NAME [admin|agent]\"");
  EXPECT_EQ(TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa a agent admin\n").status().message(),
            "tokens:1: expected \"TOKEN NAME [admin|agent]\"");
  EXPECT_EQ(TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa a Agent\n").status().message(),
            "tokens:1: expected \"TOKEN NAME [admin|agent]\"");
  EXPECT_EQ(TokenAuthenticator::FromText("aaaaaaaaaaaaaaaaaaaa a\naaaaaaaaaaaaaaaaaaaa b\n")
                .status()
                .message(),
            "tokens:2: duplicate token");
  EXPECT_EQ(TokenAuthenticator::FromFile("/nonexistent").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmaster::coordinator
