#include "coordinator/node_manager.h"

#include "absl/strings/str_cat.h"
#include "coordinator/testing/node_registration.h"
#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

Placement OnNode(const std::string& node, std::vector<int> devices) {
  Placement p;
  for (int d : devices) {
    v1::RankAssignment& a = p.assignments.emplace_back();
    a.set_node(node);
    a.set_local_device(d);
  }
  return p;
}

class NodeManagerTest : public ::testing::Test {
 protected:
  NodeManagerTest() : nodes_(&clock_, absl::Seconds(3), absl::Hours(1), &registry_) {}
  FakeClock clock_;
  metrics::Registry registry_;
  NodeManager nodes_;
};

// Whether the registry's page has the line `series value` exactly.
bool HasLine(const std::string& page, const std::string& line) {
  return absl::StrCat("\n", page).find(absl::StrCat("\n", line, "\n")) != std::string::npos;
}

TEST_F(NodeManagerTest, RegisterValidates) {
  EXPECT_EQ(nodes_.Register(NodeRegistration("", 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nodes_.Register(NodeRegistration("a", 0)).status().message(),
            "register.devices: a node must report at least one device");
  v1::Register dup = NodeRegistration("a", 2);
  dup.mutable_devices(1)->set_index(0);
  EXPECT_EQ(nodes_.Register(dup).status().message(), "register.devices.index: duplicate index 0");
  v1::Register kind = NodeRegistration("a", 1);
  kind.mutable_devices(0)->set_kind("tpu");
  EXPECT_EQ(nodes_.Register(kind).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(NodeManagerTest, SilentNodeIsLostAfterTheIntervalOnce) {
  auto a = nodes_.Register(NodeRegistration("a", 2));
  auto b = nodes_.Register(NodeRegistration("b", 2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(nodes_.AliveCount(), 2);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(nodes_.Heartbeat("b", *b).ok());
  clock_.Advance(absl::Seconds(2));  // a silent 4 s, b 2 s.
  EXPECT_EQ(nodes_.CheckLiveness(), std::vector<std::string>{"a"});
  EXPECT_TRUE(nodes_.CheckLiveness().empty());  // Reported once.
  EXPECT_FALSE(nodes_.IsAlive("a"));
  EXPECT_TRUE(nodes_.IsAlive("b"));
  const std::string page = registry_.RenderText();
  EXPECT_NE(page.find("ringmaster_agents_connected 1"), std::string::npos);
  // Each node's losses, named (b's series exists at 0 so that its first loss is an increase).
  EXPECT_NE(page.find("ringmaster_nodes_lost_total{node=\"a\"} 1"), std::string::npos) << page;
  EXPECT_NE(page.find("ringmaster_nodes_lost_total{node=\"b\"} 0"), std::string::npos) << page;
  // A late heartbeat on the lost session does not revive it; a new registration does.
  EXPECT_EQ(nodes_.Heartbeat("a", *a).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  EXPECT_TRUE(nodes_.IsAlive("a"));
}

// Nodes a and b registered (sessions a_ and b_); lost_after is 3 s, the ticker's period 1 s.
class LivenessTest : public NodeManagerTest {
 protected:
  void SetUp() override {
    auto a = nodes_.Register(NodeRegistration("a", 1));
    auto b = nodes_.Register(NodeRegistration("b", 1));
    ASSERT_TRUE(a.ok() && b.ok());
    a_ = *a;
    b_ = *b;
  }
  const absl::Duration tick_ = absl::Seconds(1);
  uint64_t a_ = 0, b_ = 0;
};

TEST_F(LivenessTest, TheCoordinatorsStallIsNotCountedAsSilence) {
  EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());  // no time since the registrations
  clock_.Advance(2 * tick_);                              // twice the period: late, not a stall
  EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());
  EXPECT_NE(registry_.RenderText().find("ringmaster_coordinator_stall_seconds_count 0"),
            std::string::npos);
  // Both silent 2 s, then a 10 s stall: 9 s of it (beyond one period) is not silence.
  clock_.Advance(10 * tick_);
  EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());
  const std::string page = registry_.RenderText();
  EXPECT_NE(page.find("ringmaster_coordinator_stall_seconds_count 1"), std::string::npos) << page;
  EXPECT_NE(page.find("ringmaster_coordinator_stall_seconds_sum 9"), std::string::npos) << page;
  // b's heartbeats, unread during the stall, arrive; a stays silent: 3 s counted so far. The
  // silence the coordinator reports is still the real one.
  ASSERT_TRUE(nodes_.Heartbeat("b", b_).ok());
  EXPECT_EQ(nodes_.SilentFor("a"), 12 * tick_);
  EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());
  clock_.Advance(tick_);
  EXPECT_EQ(nodes_.CheckLivenessEvery(tick_), std::vector<std::string>{"a"});
  EXPECT_TRUE(nodes_.IsAlive("b"));
  // CheckLiveness alone, as the job manager's tests call it, counts any gap as silence.
  clock_.Advance(4 * tick_);
  EXPECT_EQ(nodes_.CheckLiveness(), std::vector<std::string>{"b"});
}

// Paused after the nodes registered but before the ticker's first check (the coordinator had just
// started): that pause is a stall too.
TEST_F(LivenessTest, APauseBeforeTheFirstCheckIsAStall) {
  clock_.Advance(10 * tick_);
  EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());
  EXPECT_NE(registry_.RenderText().find("ringmaster_coordinator_stall_seconds_sum 9\n"),
            std::string::npos)
      << registry_.RenderText();
  // One period of the pause was their silence: two more on time and they are lost on the third.
  for (int i = 0; i < 2; ++i) {
    clock_.Advance(tick_);
    EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());
  }
  clock_.Advance(tick_);
  EXPECT_EQ(nodes_.CheckLivenessEvery(tick_), (std::vector<std::string>{"a", "b"}));
}

// A clock the process is paused on: `reads` more readings later, time has jumped by `pause`.
class PausingClock : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    const absl::Time now = now_;
    if (reads_ > 0 && --reads_ == 0) now_ += pause_;
    return now;
  }
  void PauseAfter(int reads, absl::Duration pause) {
    absl::MutexLock lock(&mu_);
    reads_ = reads;
    pause_ = pause;
  }

 private:
  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch();
  mutable int reads_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration pause_ ABSL_GUARDED_BY(mu_);
};

// Paused in the middle of a check: the check judges by the time it read before the pause, and
// the next one sees the stall. (Had the two halves of a check each read the clock, the pause
// would have counted as silence without being seen as a stall.)
TEST(NodeManagerPauseTest, APauseDuringACheckIsNotSilence) {
  PausingClock clock;
  NodeManager nodes(&clock, absl::Seconds(3), absl::ZeroDuration(), nullptr);
  ASSERT_TRUE(nodes.Register(NodeRegistration("a", 1)).ok());
  const absl::Duration tick = absl::Seconds(1);
  EXPECT_TRUE(nodes.CheckLivenessEvery(tick).empty());
  clock.PauseAfter(1, absl::Seconds(10));  // right after the next check's first reading
  EXPECT_TRUE(nodes.CheckLivenessEvery(tick).empty());
  EXPECT_TRUE(nodes.CheckLivenessEvery(tick).empty());  // sees the 10 s: a stall
  EXPECT_TRUE(nodes.IsAlive("a"));
}

// A coordinator that went on reading heartbeats while its ticker was late was deaf only for the
// longest time it read nothing.
TEST_F(LivenessTest, OnlyTheTimeNoMessageWasReadIsAStall) {
  EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());
  clock_.Advance(5 * tick_);
  ASSERT_TRUE(nodes_.Heartbeat("b", b_).ok());
  clock_.Advance(5 * tick_);
  // Read nothing for 5 s at most: 4 s are not silence, so a counts 6 s and is lost.
  EXPECT_EQ(nodes_.CheckLivenessEvery(tick_), std::vector<std::string>{"a"});
  EXPECT_NE(registry_.RenderText().find("ringmaster_coordinator_stall_seconds_sum 4"),
            std::string::npos)
      << registry_.RenderText();
}

// However often and long the coordinator stalls, each check counts at least one period of a
// silent node's silence.
TEST_F(NodeManagerTest, RepeatedStallsStillLoseASilentNode) {
  const absl::Duration tick = absl::Seconds(1);
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 1)).ok());
  EXPECT_TRUE(nodes_.CheckLivenessEvery(tick).empty());
  int checks = 0;
  while (nodes_.IsAlive("a") && checks < 100) {
    clock_.Advance(10 * tick);
    nodes_.CheckLivenessEvery(tick);
    ++checks;
  }
  EXPECT_EQ(checks, 4);  // lost_after / tick + 1
}

// While the coordinator does not read a node's stream (too many of its messages wait for the job
// lock, say), the heartbeats on it wait unread: the node is not lost meanwhile, and that time is
// not silence.
TEST_F(LivenessTest, ANodeIsNotSilentWhileItsStreamIsPaused) {
  nodes_.StreamPaused("a", a_);
  nodes_.StreamPaused("b", b_ + 1);  // another session's: ignored
  std::vector<std::string> lost;
  for (int i = 0; i < 10; ++i) {  // checks on time: no stall
    clock_.Advance(tick_);
    for (const std::string& node : nodes_.CheckLivenessEvery(tick_)) lost.push_back(node);
  }
  EXPECT_EQ(lost, std::vector<std::string>{"b"});  // silent, its pause ignored
  nodes_.StreamResumed("a", a_);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(tick_);
    EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());  // 3 s since the stream resumed
  }
  EXPECT_EQ(nodes_.SilentFor("a"), 13 * tick_);
  clock_.Advance(tick_);
  EXPECT_EQ(nodes_.CheckLivenessEvery(tick_), std::vector<std::string>{"a"});
  // A registration while the old session's stream is paused (the agent connected again): the
  // new session's silence counts from the registration, and the old session's resume is
  // ignored.
  auto again = nodes_.Register(NodeRegistration("a", 1));
  ASSERT_TRUE(again.ok());
  nodes_.StreamPaused("a", *again);
  auto third = nodes_.Register(NodeRegistration("a", 1));
  ASSERT_TRUE(third.ok());
  nodes_.StreamResumed("a", *again);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(tick_);
    EXPECT_TRUE(nodes_.CheckLivenessEvery(tick_).empty());
  }
  clock_.Advance(tick_);
  EXPECT_EQ(nodes_.CheckLivenessEvery(tick_), std::vector<std::string>{"a"});
}

TEST_F(NodeManagerTest, DisconnectOfCurrentSessionOnly) {
  auto first = nodes_.Register(NodeRegistration("a", 1));
  auto second = nodes_.Register(NodeRegistration("a", 1));  // Reconnect replaces the session.
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(nodes_.Disconnected("a", *first));  // The old stream closing changes nothing.
  EXPECT_TRUE(nodes_.IsAlive("a"));
  EXPECT_EQ(nodes_.Heartbeat("a", *first).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(nodes_.TakeDisconnected().empty());
  EXPECT_TRUE(nodes_.Disconnected("a", *second));
  EXPECT_FALSE(nodes_.IsAlive("a"));
  EXPECT_EQ(nodes_.AliveCount(), 0);
  EXPECT_NE(registry_.RenderText().find("ringmaster_nodes_lost_total{node=\"a\"} 1"),
            std::string::npos);
  // Lost once, handed on once; the end of a stream already lost is not a second loss.
  EXPECT_EQ(nodes_.TakeDisconnected(), std::vector<std::string>{"a"});
  EXPECT_FALSE(nodes_.Disconnected("a", *second));
  EXPECT_TRUE(nodes_.TakeDisconnected().empty());
}

TEST_F(NodeManagerTest, DisconnectedNodesAreHandedOnInTheOrderTheyWereLost) {
  auto a = nodes_.Register(NodeRegistration("a", 1));
  auto b = nodes_.Register(NodeRegistration("b", 1));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(nodes_.Disconnected("b", *b));
  ASSERT_TRUE(nodes_.Disconnected("a", *a));
  auto again = nodes_.Register(NodeRegistration("b", 1));  // b connects again and is lost again
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(nodes_.Disconnected("b", *again));
  EXPECT_EQ(nodes_.TakeDisconnected(), (std::vector<std::string>{"b", "a", "b"}));
  // Lost for silence, a node is CheckLiveness's to return, not TakeDisconnected's.
  auto c = nodes_.Register(NodeRegistration("c", 1));
  ASSERT_TRUE(c.ok());
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(nodes_.CheckLiveness(), std::vector<std::string>{"c"});
  EXPECT_TRUE(nodes_.TakeDisconnected().empty());
}

TEST_F(NodeManagerTest, ANodeLostForAnHourIsForgottenOnceItHoldsNothing) {
  auto a = nodes_.Register(NodeRegistration("a", 2));
  auto b = nodes_.Register(NodeRegistration("b", 2));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(nodes_.Allocate("j1", OnNode("b", {0})).ok());
  ASSERT_TRUE(nodes_.Disconnected("a", *a));
  ASSERT_TRUE(nodes_.Disconnected("b", *b));
  clock_.Advance(absl::Minutes(59));
  EXPECT_TRUE(nodes_.CheckLiveness().empty());
  EXPECT_EQ(nodes_.List().size(), 2u);  // lost, still listed
  clock_.Advance(absl::Minutes(1));
  EXPECT_TRUE(nodes_.CheckLiveness().empty());  // forgetting is not a loss
  // a is gone, from the list and the metrics; b still holds a device of j1.
  std::vector<v1::NodeStatus> list = nodes_.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name(), "b");
  EXPECT_FALSE(nodes_.HostAddress("a").has_value());
  std::string page = registry_.RenderText();
  for (const char* family : {"ringmaster_nodes_lost_total", "ringmaster_nodes_left_total",
                             "ringmaster_node_settling_seconds", "ringmaster_node_connected"}) {
    EXPECT_EQ(page.find(absl::StrCat(family, "{node=\"a\"}")), std::string::npos) << page;
  }
  EXPECT_TRUE(HasLine(page, "ringmaster_nodes_lost_total{node=\"b\"} 1")) << page;
  EXPECT_TRUE(HasLine(page, "ringmaster_node_connected{node=\"b\"} 0")) << page;
  // Once released, b goes at the next check too.
  nodes_.Release("j1");
  EXPECT_TRUE(nodes_.CheckLiveness().empty());
  EXPECT_TRUE(nodes_.List().empty());
  // A forgotten node that comes back registers afresh, its losses counted from 0.
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  EXPECT_TRUE(nodes_.IsAlive("a"));
  EXPECT_EQ(nodes_.AliveCount(), 1);
  page = registry_.RenderText();
  EXPECT_TRUE(HasLine(page, "ringmaster_nodes_lost_total{node=\"a\"} 0")) << page;
  EXPECT_TRUE(HasLine(page, "ringmaster_node_connected{node=\"a\"} 1")) << page;
}

TEST_F(NodeManagerTest, CordonedNodeOffersNoCapacityAndIsListedWithItsCordon) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  ASSERT_TRUE(nodes_.Register(NodeRegistration("b", 2)).ok());
  v1::NodeCordon cordon;
  cordon.set_reason("ECC errors");
  cordon.set_by("alice");
  nodes_.SetCordon("a", cordon);
  std::vector<NodeCapacity> free = nodes_.FreeCapacity();
  ASSERT_EQ(free.size(), 1u);
  EXPECT_EQ(free[0].name, "b");
  // A placement made from free devices read before the cordon is refused.
  EXPECT_EQ(nodes_.Allocate("j1", OnNode("a", {0})).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nodes_.Cordoned(), std::vector<std::string>{"a"});
  auto a = nodes_.Status("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->cordon().reason(), "ECC errors");
  EXPECT_EQ(a->devices(), 2);
  EXPECT_FALSE(nodes_.Status("b")->has_cordon());
  EXPECT_EQ(nodes_.Status("zz").status().code(), absl::StatusCode::kNotFound);
  std::string page = registry_.RenderText();
  EXPECT_NE(page.find("ringmaster_node_cordoned{node=\"a\"} 1"), std::string::npos) << page;
  EXPECT_EQ(page.find("ringmaster_node_cordoned{node=\"b\"}"), std::string::npos) << page;

  nodes_.SetCordon("a", std::nullopt);
  EXPECT_EQ(nodes_.FreeCapacity().size(), 2u);
  EXPECT_TRUE(nodes_.Cordoned().empty());
  EXPECT_TRUE(nodes_.Allocate("j1", OnNode("a", {0})).ok());
  page = registry_.RenderText();
  EXPECT_EQ(page.find("ringmaster_node_cordoned{"), std::string::npos) << page;
}

TEST_F(NodeManagerTest, ALeavingNodeOffersNoCapacityUntilItRegistersAgain) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  ASSERT_TRUE(nodes_.Register(NodeRegistration("b", 2)).ok());
  nodes_.SetLeaving("a");
  nodes_.SetLeaving("zz");  // unknown: ignored
  std::vector<NodeCapacity> free = nodes_.FreeCapacity();
  ASSERT_EQ(free.size(), 1u);
  EXPECT_EQ(free[0].name, "b");
  EXPECT_TRUE(nodes_.Status("a")->leaving());
  EXPECT_FALSE(nodes_.Status("b")->leaving());
  EXPECT_EQ(nodes_.Status("zz").status().code(), absl::StatusCode::kNotFound);
  // No new job is placed there, but a draining job's ranks keep their devices while they stop.
  EXPECT_EQ(nodes_.Allocate("j1", OnNode("a", {0})).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(nodes_.Adopt("j1", "a", 1).ok());
  nodes_.Release("j1");
  // The agent came back (a new process): the node is used again.
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  EXPECT_FALSE(nodes_.Status("a")->leaving());
  EXPECT_EQ(nodes_.FreeCapacity().size(), 2u);
}

TEST_F(NodeManagerTest, CordonOutlivesTheNodeBeingForgottenAndAppliesWhenItReturns) {
  auto a = nodes_.Register(NodeRegistration("a", 2));
  ASSERT_TRUE(a.ok());
  nodes_.SetCordon("a", v1::NodeCordon());
  nodes_.SetCordon("ghost", v1::NodeCordon());  // a stored cordon of a node not yet registered
  ASSERT_TRUE(nodes_.Disconnected("a", *a));
  clock_.Advance(absl::Hours(1));
  EXPECT_TRUE(nodes_.CheckLiveness().empty());
  // Forgotten as a node, still listed as a cordon (name and cordon only).
  std::vector<v1::NodeStatus> list = nodes_.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name(), "a");
  EXPECT_TRUE(list[0].has_cordon());
  EXPECT_EQ(list[0].devices(), 0);
  EXPECT_EQ(list[1].name(), "ghost");
  EXPECT_TRUE(nodes_.Status("a").ok());
  EXPECT_EQ(nodes_.Status("b").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 2)).ok());
  EXPECT_TRUE(nodes_.FreeCapacity().empty());
  EXPECT_TRUE(nodes_.Status("a")->has_cordon());
  EXPECT_EQ(nodes_.Status("a")->devices(), 2);
}

TEST(NodeManagerForgetTest, ZeroKeepsLostNodesForever) {
  FakeClock clock;
  NodeManager nodes(&clock, absl::Seconds(3), absl::ZeroDuration(), nullptr);
  auto a = nodes.Register(NodeRegistration("a", 1));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(nodes.Disconnected("a", *a));
  clock.Advance(absl::Hours(24 * 365));
  nodes.CheckLiveness();
  EXPECT_EQ(nodes.List().size(), 1u);
}

TEST_F(NodeManagerTest, AllocationHidesDevicesUntilReleased) {
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 4, 2)).ok());
  ASSERT_TRUE(nodes_.Register(NodeRegistration("b", 2)).ok());
  ASSERT_TRUE(nodes_.Allocate("j1", OnNode("a", {0, 1})).ok());
  auto free = nodes_.FreeCapacity();
  ASSERT_EQ(free.size(), 2u);
  EXPECT_EQ(free[0].name, "a");
  ASSERT_EQ(free[0].free.size(), 2u);
  EXPECT_EQ(free[0].free[0].index, 2);
  EXPECT_EQ(free[0].free[0].domain, 1);
  // Another job cannot take a held device; nothing is half-allocated.
  Placement clash = OnNode("b", {0});
  clash.assignments.push_back(OnNode("a", {1}).assignments[0]);
  EXPECT_EQ(nodes_.Allocate("j2", clash).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nodes_.FreeCapacity()[1].free.size(), 2u);
  EXPECT_EQ(nodes_.Allocate("j2", OnNode("a", {9})).code(), absl::StatusCode::kFailedPrecondition);

  auto list = nodes_.List();
  EXPECT_EQ(list[0].devices_in_use(), 2);
  ASSERT_EQ(list[0].jobs_size(), 1);
  EXPECT_EQ(list[0].jobs(0), "j1");
  // Usable capacity counts held devices too: what placement would see once j1 ended.
  auto usable = nodes_.UsableCapacity();
  ASSERT_EQ(usable.size(), 2u);
  EXPECT_EQ(usable[0].free.size(), 4u);
  nodes_.Release("j1");
  EXPECT_EQ(nodes_.FreeCapacity()[0].free.size(), 4u);
}

TEST_F(NodeManagerTest, LostNodesOfferNoCapacity) {
  auto a = nodes_.Register(NodeRegistration("a", 2));
  ASSERT_TRUE(a.ok());
  nodes_.Disconnected("a", *a);
  EXPECT_TRUE(nodes_.FreeCapacity().empty());
  EXPECT_EQ(nodes_.Allocate("j1", OnNode("a", {0})).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*nodes_.HostAddress("a"), "a.local");
  EXPECT_FALSE(nodes_.HostAddress("zzz").has_value());
}

// Flap damping (flap_damping.h): a node lost twice, by disconnect or by silence, settles after
// it registers again; it is listed with its losses and time left, and a lost node is not settling.
TEST_F(NodeManagerTest, ANodeLostTwiceSettlesAfterItRegistersAgain) {
  nodes_.SetFlapDamping({absl::Minutes(30), absl::Minutes(1)});
  auto a = nodes_.Register(NodeRegistration("a", 1));
  ASSERT_TRUE(a.ok());
  auto b = nodes_.Register(NodeRegistration("b", 1));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(nodes_.Disconnected("a", *a));
  a = nodes_.Register(NodeRegistration("a", 1));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(nodes_.SettlingNodes().empty());  // one loss
  clock_.Advance(absl::Seconds(4));             // silent past lost_after: the second loss
  ASSERT_TRUE(nodes_.Heartbeat("b", *b).ok());
  EXPECT_EQ(nodes_.CheckLiveness(), std::vector<std::string>{"a"});
  EXPECT_TRUE(nodes_.SettlingNodes().empty());  // lost: not settling
  ASSERT_TRUE(nodes_.Heartbeat("b", *b).ok());
  EXPECT_TRUE(nodes_.CheckLiveness().empty());
  EXPECT_TRUE(HasLine(registry_.RenderText(), "ringmaster_node_settling_seconds{node=\"a\"} 0"));
  auto listed = nodes_.Status("a");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->recent_losses(), 2);
  EXPECT_EQ(listed->settling_seconds(), 0);
  clock_.Advance(absl::Seconds(10));
  a = nodes_.Register(NodeRegistration("a", 1));
  ASSERT_TRUE(a.ok());
  clock_.Advance(absl::Seconds(20));
  // The gauge, as of the last liveness check.
  const auto gauge = [&](double seconds) {
    ASSERT_TRUE(nodes_.Heartbeat("a", *a).ok());
    ASSERT_TRUE(nodes_.Heartbeat("b", *b).ok());
    EXPECT_TRUE(nodes_.CheckLiveness().empty());
    const std::string page = registry_.RenderText();
    EXPECT_TRUE(
        HasLine(page, absl::StrCat("ringmaster_node_settling_seconds{node=\"a\"} ", seconds)))
        << page;
    EXPECT_TRUE(HasLine(page, "ringmaster_node_settling_seconds{node=\"b\"} 0")) << page;
  };
  gauge(40);
  const auto settling = nodes_.SettlingNodes();
  ASSERT_EQ(settling.size(), 1u);
  EXPECT_EQ(settling.at("a").left, absl::Seconds(40));
  EXPECT_EQ(settling.at("a").losses, 2);
  listed = nodes_.Status("a");
  EXPECT_EQ(listed->settling_seconds(), 40);
  EXPECT_EQ(nodes_.Status("b")->recent_losses(), 0);
  // It still offers its capacity: only voluntary moves (grows, spares) avoid it.
  EXPECT_EQ(nodes_.FreeCapacity().size(), 2u);
  clock_.Advance(absl::Seconds(40));
  EXPECT_TRUE(nodes_.SettlingNodes().empty());
  EXPECT_EQ(nodes_.Status("a")->settling_seconds(), 0);
  gauge(0);
}

// A session replaced while the node is alive is no return (the hold is not restarted), and a node
// that said it was leaving before its stream ended did not flap.
TEST_F(NodeManagerTest, OnlyUnplannedLossesCountAndOnlyAReturnStartsTheHold) {
  nodes_.SetFlapDamping({absl::Minutes(30), absl::Minutes(1)});
  for (int loss = 0; loss < 2; ++loss) {
    auto a = nodes_.Register(NodeRegistration("a", 1));
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(nodes_.Disconnected("a", *a));
  }
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 1)).ok());
  clock_.Advance(absl::Seconds(50));
  auto replaced = nodes_.Register(NodeRegistration("a", 1));  // a new stream, never lost
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(nodes_.SettlingNodes().at("a").left, absl::Seconds(10));
  // Leaving, then its stream ends: gone, but neither a third flap nor a loss (no page for a
  // planned restart): ringmaster_nodes_left_total counts it.
  nodes_.SetLeaving("a");
  ASSERT_TRUE(nodes_.Disconnected("a", *replaced));
  std::string page = registry_.RenderText();
  EXPECT_TRUE(HasLine(page, "ringmaster_nodes_lost_total{node=\"a\"} 2")) << page;
  EXPECT_TRUE(HasLine(page, "ringmaster_nodes_left_total{node=\"a\"} 1")) << page;
  EXPECT_TRUE(HasLine(page, "ringmaster_node_connected{node=\"a\"} 0")) << page;
  auto back = nodes_.Register(NodeRegistration("a", 1));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(nodes_.Status("a")->recent_losses(), 2);
  EXPECT_EQ(nodes_.SettlingNodes().at("a").left, absl::Minutes(1));  // the hold of 2 losses
  // Leaving, then silent: it died on its way out (a planned stream ends), so it is lost.
  nodes_.SetLeaving("a");
  clock_.Advance(absl::Seconds(4));
  EXPECT_EQ(nodes_.CheckLiveness(), std::vector<std::string>{"a"});
  page = registry_.RenderText();
  EXPECT_TRUE(HasLine(page, "ringmaster_nodes_lost_total{node=\"a\"} 3")) << page;
  EXPECT_TRUE(HasLine(page, "ringmaster_nodes_left_total{node=\"a\"} 1")) << page;
  EXPECT_EQ(nodes_.Status("a")->recent_losses(), 2);  // no flap: it said it was leaving
}

TEST_F(NodeManagerTest, AZeroHoldSettlesNothing) {
  nodes_.SetFlapDamping({absl::Minutes(30), absl::ZeroDuration()});
  for (int i = 0; i < 5; ++i) {
    auto a = nodes_.Register(NodeRegistration("a", 1));
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(nodes_.Disconnected("a", *a));
  }
  ASSERT_TRUE(nodes_.Register(NodeRegistration("a", 1)).ok());
  EXPECT_TRUE(nodes_.SettlingNodes().empty());
  EXPECT_EQ(nodes_.Status("a")->recent_losses(), 5);
}

}  // namespace
}  // namespace ringmaster::coordinator
