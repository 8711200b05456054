// The coordinator with agents on real gRPC streams (the simulated agents of bench/, which answer
// a launch by doing the rendezvous and reporting each rank done): a job runs to SUCCEEDED under
// `ringctl submit --wait`, and `ringctl nodes` shows the agents and what they hold. Then single
// agents on raw streams: how heartbeats are timed and read, and streams out of protocol.
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include "bench/sim_agent_fleet.h"
#include "common/grpc_client.h"
#include "common/http_client.h"
#include "common/testing/series_value.h"
#include "common/testing/wait.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace ringmaster::testing {
namespace {

bench::FleetOptions FleetOptionsFor(const CoordinatorProcess& coordinator, int agents, int devices,
                                    int channels) {
  bench::FleetOptions options;
  options.target = coordinator.address();
  options.agents = agents;
  options.devices_per_agent = devices;
  options.channels = channels;
  return options;
}

TEST(CoordinatorAgentsTest, SubmitWaitRunsAJobToSuccessOnAgents) {
  auto coordinator = StartCoordinator(
      {"--insecure", "--lost_after=60", "--state=" + TestTempDir() + "/agents.db"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  bench::SimAgentFleet fleet(FleetOptionsFor(*coordinator, 2, 2, 2));
  ASSERT_TRUE(fleet.Register(absl::Seconds(30)).ok());

  auto nodes = RunRingctl({"--insecure", "--coordinator=" + coordinator->address(), "nodes"});
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(nodes->exit_code, 0) << nodes->output;
  EXPECT_NE(nodes->output.find("sim-0"), std::string::npos) << nodes->output;
  EXPECT_NE(nodes->output.find("sim-1"), std::string::npos) << nodes->output;

  // small_job.yaml wants 1 node x 2 devices: it runs on one agent.
  auto run = RunRingctl({"--insecure", "--coordinator=" + coordinator->address(), "submit", "-f",
                         "tests/testdata/small_job.yaml", "--wait"});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->exit_code, 0) << run->output;
  EXPECT_NE(run->output.find("RUNNING: placed 2 ranks on 1 nodes (generation 1)"),
            std::string::npos)
      << run->output;
  EXPECT_NE(run->output.find("SUCCEEDED: all 2 ranks finished"), std::string::npos) << run->output;
  auto answers = fleet.WaitForRendezvous(2, absl::Seconds(10));
  ASSERT_TRUE(answers.ok()) << answers.status();
  EXPECT_EQ(*answers, 2);  // Rank 0's set and rank 1's wait both answered OK.
}

// The fleet is shut down (every stream cancelled) while a thread keeps sending heartbeats on
// them: a write must never start on a stream gRPC is done with (under --config=asan, which
// tools/test runs, such a write is a heap-use-after-free). Several fleets, for the race.
TEST(CoordinatorAgentsTest, AFleetShutsDownWhileHeartbeatsAreSent) {
  auto coordinator = StartCoordinator(
      {"--insecure", "--lost_after=60", "--state=" + TestTempDir() + "/shutdown.db"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  for (int round = 0; round < 20; ++round) {
    bench::SimAgentFleet fleet(FleetOptionsFor(*coordinator, 256, 1, 4));
    ASSERT_TRUE(fleet.Register(absl::Seconds(30)).ok());
    std::atomic<bool> stop{false};
    std::thread beats([&] {
      while (!stop.load()) fleet.HeartbeatAll();
    });
    fleet.HeartbeatAll();
    fleet.Shutdown();
    fleet.HeartbeatAll();  // after the cancel, too
    stop.store(true);
    beats.join();
  }  // each fleet waits for its streams to end, then frees its agents
}

using AgentStream = grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>;

// A coordinator (nodes lost only after 10 minutes) and agents spoken for by the test on raw
// streams.
class RawAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto coordinator = StartCoordinator({"--insecure", "--lost_after=600", "--state=" + db_});
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::make_unique<CoordinatorProcess>(*std::move(coordinator));
    stub_ = v1::AgentService::NewStub(
        MakeChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
  }

  static v1::AgentMessage Hello(const std::string& node) {
    v1::AgentMessage hello;
    hello.mutable_register_()->set_node(node);
    hello.mutable_register_()->add_devices()->set_kind("cpu");
    return hello;
  }

  // A rendezvous request, answered (with an error: no such job) if handled.
  static v1::AgentMessage Ask() {
    v1::AgentMessage ask;
    ask.mutable_rendezvous()->set_request_id(7);
    ask.mutable_rendezvous()->set_key("k");
    ask.mutable_rendezvous()->set_get(true);
    return ask;
  }

  // A stream registered as `node`, with one CPU device.
  std::unique_ptr<AgentStream> Register(const std::string& node) {
    context_.set_deadline(Deadline());
    auto stream = stub_->Connect(&context_);
    v1::CoordinatorMessage ack;
    if (!stream->Write(Hello(node)) || !stream->Read(&ack) || !ack.has_register_ack()) {
      ADD_FAILURE() << "no RegisterAck: " << ack.DebugString();
    }
    return stream;
  }

  // The coordinator's /metrics page once `series` is at least `least`; fails the test otherwise.
  std::string MetricsOnce(const std::string& series, double least) {
    std::string page;
    EXPECT_TRUE(WaitFor(
        [&] {
          auto got = HttpGet("127.0.0.1", coordinator_->metrics_port, "/metrics");
          page = got.ok() ? got->body : "";
          return SeriesValue(page, series) >= least;
        },
        absl::Seconds(30)))
        << page;
    return page;
  }

  // A stream that should have ended but did not fails the test instead of hanging it.
  static std::chrono::system_clock::time_point Deadline() {
    return std::chrono::system_clock::now() + std::chrono::seconds(60);
  }

  const std::string db_ = FreshTestCaseDir() + "/state.db";
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
  grpc::ClientContext context_;  // for Register's stream
};

// ringmaster_heartbeat_delay_seconds counts from when the agent queued each heartbeat (its
// clock): one sent 30 s ago (it waited on a congested link, say) is at least 30 s late; one from
// an agent whose clock is an hour ahead counts as no delay, not a negative one; one that does not
// say when it was sent (an older agent) is not counted.
TEST_F(RawAgentTest, HeartbeatDelaysAreTimedFromWhenTheAgentQueuedThem) {
  auto stream = Register("late");
  const absl::Time now = absl::Now();
  for (const int64_t sent : {int64_t{0}, absl::ToUnixNanos(now - absl::Seconds(30)),
                             absl::ToUnixNanos(now + absl::Hours(1))}) {
    v1::AgentMessage beat;
    beat.mutable_heartbeat()->set_sent_unix_nanos(sent);
    ASSERT_TRUE(stream->Write(beat));
  }
  // Handled in order: once the last two are counted, the first was handled too.
  const std::string series = "ringmaster_heartbeat_delay_seconds";
  const std::string page = MetricsOnce(series + "_count", 2);
  EXPECT_EQ(SeriesValue(page, series + "_count"), 2) << page;
  EXPECT_EQ(SeriesValue(page, series + "_bucket{le=\"0.001\"}"), 1) << page;   // the clock ahead
  EXPECT_EQ(SeriesValue(page, series + "_bucket{le=\"16.384\"}"), 1) << page;  // not the 30 s one
  EXPECT_GE(SeriesValue(page, series + "_sum"), 30) << page;
  context_.TryCancel();
}

// While one of a node's messages waits for the job lock (held here by a job-state write that
// waits for the store, which the test keeps locked), that node's later heartbeats are still read:
// they are not queued behind it, so the coordinator keeps hearing from the node, and on a shared
// connection from every node, however long the job lock is held. (Queued behind it, they would
// have been read only once the exit was handled, after the store's 5 s busy timeout.)
TEST_F(RawAgentTest, HeartbeatsAreReadWhileAMessageWaitsForTheJobLock) {
  auto stream = Register("held");
  const std::string job = TestTempDir() + "/held.yaml";
  std::ofstream(job) << "name: held\nnodes: 1\ndevices_per_node: 1\ntrainer:\n  steps: 1\n"
                        "  command: [\"true\"]\n";
  const std::string coordinator = "--coordinator=" + coordinator_->address();
  auto submitted = RunRingctl({"--insecure", coordinator, "submit", "-f", job});
  ASSERT_TRUE(submitted.ok() && submitted->exit_code == 0)
      << (submitted.ok() ? submitted->output : submitted.status().ToString());
  std::smatch id;
  ASSERT_TRUE(std::regex_search(submitted->output, id, std::regex("job (\\S+) submitted")));
  v1::CoordinatorMessage in;
  while (!in.has_launch()) ASSERT_TRUE(stream->Read(&in));

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> holder(db, sqlite3_close);  // unlocks when closed
  ASSERT_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  // The rank exits: the job succeeds, and the coordinator writes that under the job lock.
  v1::AgentMessage exited;
  *exited.mutable_worker_state()->mutable_job() = in.launch().job();
  exited.mutable_worker_state()->set_rank(in.launch().assignments(0).rank());
  exited.mutable_worker_state()->set_phase(v1::WORKER_PHASE_EXITED);
  ASSERT_TRUE(stream->Write(exited));
  for (int i = 0; i < 3; ++i) {
    v1::AgentMessage beat;
    beat.mutable_heartbeat()->set_sent_unix_nanos(absl::ToUnixNanos(absl::Now()));
    ASSERT_TRUE(stream->Write(beat));
  }
  const std::string series = "ringmaster_heartbeat_delay_seconds";
  const std::string page = MetricsOnce(series + "_count", 3);
  // Ahead of the exit: it is still waiting (it is counted once handled).
  EXPECT_EQ(SeriesValue(page, "ringmaster_agent_message_seconds_count{type=\"worker_state\"}"), 0)
      << page;
  holder.reset();  // the coordinator's write goes ahead
  std::string state;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto got = RunRingctl({"--insecure", coordinator, "get", "job", id[1].str()});
        state = got.ok() ? got->output : got.status().ToString();
        return state.find("SUCCEEDED") != std::string::npos;
      },
      absl::Seconds(30)))
      << state;
  context_.TryCancel();
}

// Once the node registered again on a new stream (its agent reconnected), what its old stream
// still sends is not handled (it may be older than what the new stream's Register said), and
// the old stream's next heartbeat ends it.
TEST_F(RawAgentTest, AReplacedStreamsMessagesAreDropped) {
  auto old_stream = Register("again");
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = stub_->Connect(&context);
  v1::CoordinatorMessage in;
  ASSERT_TRUE(stream->Write(Hello("again")) && stream->Read(&in) && in.has_register_ack());
  const v1::AgentMessage ask = Ask();
  v1::AgentMessage beat;
  beat.mutable_heartbeat()->set_sequence(1);
  old_stream->Write(ask);
  old_stream->Write(beat);
  int answers = 0;
  while (old_stream->Read(&in)) answers += in.has_rendezvous();
  const grpc::Status status = old_stream->Finish();
  EXPECT_EQ(answers, 0);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(), "heartbeat from again on a replaced or lost session");
  context.TryCancel();
}

// Agent-stream protocol errors end the stream at once with a status that says what was wrong, and
// what the agent sent after the failed message is not handled.
TEST_F(RawAgentTest, AStreamIsEndedByAMessageOutOfProtocol) {
  const v1::AgentMessage ask = Ask();
  v1::AgentMessage beat;
  beat.mutable_heartbeat()->set_sequence(1);

  struct Case {
    std::vector<v1::AgentMessage> sent;
    std::string error;
  } cases[] = {
      {{beat, Hello("late")}, "the first message of an agent stream must be Register"},
      {{Hello("twice"), Hello("twice"), ask}, "Register sent twice on one stream"},
  };
  for (const Case& c : cases) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto stream = stub_->Connect(&context);
    for (const v1::AgentMessage& m : c.sent) stream->Write(m);  // may fail once it has ended
    v1::CoordinatorMessage in;
    int acks = 0, answers = 0;
    while (stream->Read(&in)) {  // until the coordinator ends the stream
      acks += in.has_register_ack();
      answers += in.has_rendezvous();
    }
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << c.error;
    EXPECT_EQ(status.error_message(), c.error);
    EXPECT_EQ(acks, c.sent[0].has_register_() ? 1 : 0) << c.error;
    EXPECT_EQ(answers, 0) << c.error;
  }
}

}  // namespace
}  // namespace ringmaster::testing
