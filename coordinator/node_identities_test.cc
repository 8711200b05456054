#include "coordinator/node_identities.h"

#include "absl/strings/str_cat.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

using ::testing::HasSubstr;

class NodeIdentitiesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(testing::TestTempDir(), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    std::remove(path_.c_str());
    Reopen();
  }

  void Reopen() {
    identities_.reset();
    store_.reset();
    auto store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto identities = NodeIdentities::Load(store_.get());
    ASSERT_TRUE(identities.ok()) << identities.status();
    identities_ = *std::move(identities);
  }

  static v1::UpdateNodeRequest ReleaseRequest(const std::string& node) {
    v1::UpdateNodeRequest request;
    request.set_node(node);
    request.set_release_identity(true);
    return request;
  }

  std::string path_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<NodeIdentities> identities_;
};

TEST_F(NodeIdentitiesTest, FirstIdentityHoldsTheNameAcrossRestarts) {
  ASSERT_TRUE(identities_->Claim("node-a", "agents-1").ok());
  EXPECT_TRUE(identities_->Claim("node-a", "agents-1").ok());  // its own reconnection
  Reopen();
  EXPECT_EQ(identities_->HolderOf("node-a"), std::optional<std::string>("agents-1"));
  const absl::Status taken = identities_->Claim("node-a", "agents-2");
  EXPECT_EQ(taken.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(taken.message(), HasSubstr("node node-a"));
  EXPECT_THAT(taken.message(), HasSubstr("\"agents-1\""));
  EXPECT_EQ(identities_->HolderOf("node-a"), std::optional<std::string>("agents-1"));
  EXPECT_TRUE(identities_->Claim("node-b", "agents-2").ok());  // another name is free
}

TEST_F(NodeIdentitiesTest, AnonymousAgentsClaimNothing) {
  EXPECT_TRUE(identities_->Claim("node-a", "").ok());
  EXPECT_EQ(identities_->HolderOf("node-a"), std::nullopt);
  ASSERT_TRUE(identities_->Claim("node-a", "agents-1").ok());
  EXPECT_TRUE(identities_->Claim("node-a", "").ok());  // authentication off: not refused here
}

TEST_F(NodeIdentitiesTest, AnAdminReleaseLetsAnotherIdentityRegisterAndIsStored) {
  ASSERT_TRUE(identities_->Claim("node-a", "agents-1").ok());
  Caller admin;
  admin.identity = "ops";
  admin.admin = true;
  auto released = identities_->Release(ReleaseRequest("node-a"), admin);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, std::optional<std::string>("agents-1"));
  Reopen();
  EXPECT_EQ(identities_->HolderOf("node-a"), std::nullopt);
  released = identities_->Release(ReleaseRequest("node-a"), admin);  // idempotent
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, std::nullopt);
  EXPECT_TRUE(identities_->Claim("node-a", "agents-2").ok());
  EXPECT_EQ(identities_->Claim("node-a", "agents-1").code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(NodeIdentitiesTest, OnlyAdminsReleaseAndRequestsAreChecked) {
  ASSERT_TRUE(identities_->Claim("node-a", "agents-1").ok());
  Caller user;
  user.identity = "alice";
  Caller agent;
  agent.identity = "agents-2";
  agent.agent = true;
  for (const Caller& caller : {user, agent}) {
    auto released = identities_->Release(ReleaseRequest("node-a"), caller);
    EXPECT_EQ(released.status().code(), absl::StatusCode::kPermissionDenied) << caller.identity;
  }
  EXPECT_EQ(identities_->HolderOf("node-a"), std::optional<std::string>("agents-1"));
  Caller anonymous;  // authentication off: every caller may
  EXPECT_EQ(identities_->Release(ReleaseRequest(""), anonymous).status().message(),
            "node: must not be empty");
  v1::UpdateNodeRequest both = ReleaseRequest("node-a");
  both.set_action(v1::NODE_ACTION_CORDON);
  EXPECT_THAT(identities_->Release(both, anonymous).status().message(), HasSubstr("action:"));
  EXPECT_TRUE(identities_->Release(ReleaseRequest("node-a"), anonymous).ok());
}

}  // namespace
}  // namespace ringmaster::coordinator
