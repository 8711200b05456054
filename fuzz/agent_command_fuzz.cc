// libFuzzer target: an agent's handling of what the coordinator sends on its stream.
//
// The input is one v1.CoordinatorMessage as it arrives on the wire. It is parsed as the agent's
// link does it: refused past the channel's receive limit (kMaxGrpcMessageBytes), gRPC's protobuf
// deserializer, then SanitizeIncoming (common/proto_edge.h: unknown fields dropped). Each input
// gets a fresh NodeAgent (never connected) whose launcher is fuzz/fake_launcher.h, so the whole
// command path runs, launches included, without a process ever being started:
//  1. the agent is given a fixed launch first (job "fuzz", generation 1, ranks 0 and 1), so that
//     stops, link-check requests, log reads and relaunches find a running job;
//  2. the fuzzed command goes to OnCommand, as the link hands it on;
//  3. the harness waits (bounded) until the agent has carried it out: its Register lists no
//     rank as starting.
// The launch's pure parts are also called directly: CheckLaunchable, WorkerArgv and, for each
// assignment, WorkerEnv (agent/worker_env.h). ReadLog commands read a real log in the work
// directory (logs/fuzz/1/rank-0.log) or none.
//
// Checks: a sanitized command parses again within protobuf's limits (an agent or coordinator can
// pass it on); every worker the agent starts has an argv and the RINGMASTER_WORKER_TOKEN it
// keeps for it (the job's own variables cannot replace it); the agent carries out a command
// within 5 s; it remembers at most 1024 exits.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/node_agent.h"
#include "agent/worker_env.h"
#include "common/clock.h"
#include "common/grpc_limits.h"
#include "common/proto_edge.h"
#include "fuzz/fake_launcher.h"
#include "fuzz/fuzz_agent.h"
#include "fuzz/fuzz_check.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ringmaster/v1/agent.pb.h"

namespace {

namespace agent = ringmaster::agent;
namespace v1 = ringmaster::v1;
using ringmaster::fuzz::FakeLauncher;

// How long the agent may take to carry out one command: far more than any needs without
// processes; past it the harness reports the agent stuck.
constexpr absl::Duration kCommandDeadline = absl::Seconds(5);

// What lives for the whole run: the work directory, the metrics, the watchdog and the options.
using Fixture = ringmaster::fuzz::AgentParts;

Fixture* MakeFixture() {
  auto* f = new Fixture;
  ringmaster::fuzz::InitAgentParts("agent_command_fuzz", "cpu:4", f);
  f->options.trainer_binary = "/nonexistent/ringmaster-trainer";  // never executed
  return f;
}

// Parses `data` as the agent's link does.
bool ParseAsTheAgentDoes(const uint8_t* data, size_t size, v1::CoordinatorMessage* message) {
  if (size > static_cast<size_t>(ringmaster::kMaxGrpcMessageBytes)) return false;
  grpc::Slice slice(data, size);
  grpc::ByteBuffer buffer(&slice, 1);
  if (!grpc::SerializationTraits<v1::CoordinatorMessage>::Deserialize(&buffer, message).ok()) {
    return false;
  }
  ringmaster::SanitizeIncoming(message);
  return true;
}

// The launch every fresh agent gets first.
v1::CoordinatorMessage FirstLaunch() {
  v1::CoordinatorMessage m;
  v1::LaunchWorkers* l = m.mutable_launch();
  l->mutable_job()->set_job_id("fuzz");
  l->mutable_job()->set_generation(1);
  l->mutable_spec()->set_name("fuzz");
  l->mutable_spec()->mutable_trainer()->set_builtin("gpt");
  l->mutable_layout()->set_data(2);
  l->set_world_size(2);
  l->set_master_addr("127.0.0.1");
  for (int rank = 0; rank < 2; ++rank) {
    v1::RankAssignment* a = l->add_assignments();
    a->set_rank(rank);
    a->set_local_rank(rank);
    a->set_local_device(rank);
    a->set_dp_rank(rank);
  }
  return m;
}

// Waits until `agent` lists no rank as starting: every launch taken from its queue and carried
// out.
void AwaitCommands(const agent::NodeAgent& agent) {
  const absl::Time deadline = absl::Now() + kCommandDeadline;
  for (;;) {
    const v1::Register r = agent.MakeRegister();
    bool starting = false;
    for (const v1::WorkerState& w : r.running_workers()) {
      starting = starting || w.phase() == v1::WORKER_PHASE_STARTING;
    }
    if (!starting) {
      FUZZ_CHECK(r.exited_workers_size() <= 1024, "the agent remembers more than 1024 exits");
      return;
    }
    FUZZ_CHECK(absl::Now() < deadline, "the agent did not carry out a command within 5 s");
    absl::SleepFor(absl::Microseconds(50));
  }
}

// The launch's pure parts, as the agent calls them.
void DeriveWorker(const v1::LaunchWorkers& launch, const agent::NodeAgentOptions& options) {
  (void)agent::CheckLaunchable(launch);
  (void)agent::WorkerArgv(launch.spec(), options.trainer_binary);
  agent::WorkerEnvOptions node;
  node.node_name = options.node_name;
  node.host_address = options.host_address;
  node.socket_path = options.socket_path;
  node.devices = options.devices;
  node.devices[0].set_kind("gpu");  // a GPU worker's CUDA_VISIBLE_DEVICES too
  // The agent's own CUDA_VISIBLE_DEVICES: the message's master_addr, so that the fuzzer varies
  // it as well.
  node.inherited = {{"PATH", "/usr/bin"}, {"CUDA_VISIBLE_DEVICES", launch.master_addr()}};
  for (const v1::RankAssignment& a : launch.assignments()) {
    const std::map<std::string, std::string> env = agent::WorkerEnv(launch, a, node, "token");
    auto token = env.find("RINGMASTER_WORKER_TOKEN");
    FUZZ_CHECK(token != env.end() && token->second == "token",
               "WorkerEnv does not end with the worker's token");
  }
}

// Every worker the launcher runs has an argv and a token of 32 hex digits.
void CheckWorkers(const FakeLauncher& launcher) {
  for (const auto& [pid, spec] : launcher.Specs()) {
    FUZZ_CHECK(!spec.argv.empty() && !spec.argv[0].empty(), "a worker without argv[0]");
    auto token = spec.env.find("RINGMASTER_WORKER_TOKEN");
    FUZZ_CHECK(token != spec.env.end() && token->second.size() == 32,
               absl::StrCat("worker ", pid, " without its RINGMASTER_WORKER_TOKEN"));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* const f = MakeFixture();
  v1::CoordinatorMessage message;
  if (!ParseAsTheAgentDoes(data, size, &message)) return 0;
  v1::CoordinatorMessage again;
  FUZZ_CHECK(again.ParseFromString(message.SerializeAsString()),
             "a sanitized command does not parse again (nested too deeply?)");
  if (message.has_launch()) DeriveWorker(message.launch(), f->options);

  // The logs of the previous input's agent go; job fuzz's rank 0 has one to read.
  std::error_code ec;
  std::filesystem::remove_all(f->work_dir + "/logs", ec);
  FakeLauncher* launcher = nullptr;
  auto node = std::make_unique<agent::NodeAgent>(f->options, f->metrics.get(), f->watchdog.get(),
                                                 ringmaster::Clock::Real(),
                                                 FakeLauncher::Factory(&launcher));
  node->OnCommand(FirstLaunch());
  AwaitCommands(*node);
  std::filesystem::create_directories(f->work_dir + "/logs/fuzz/1");
  std::ofstream(f->work_dir + "/logs/fuzz/1/rank-0.log") << "step 1 loss 5.5\nstep 2 loss 5.1\n";

  node->OnCommand(message);
  AwaitCommands(*node);
  CheckWorkers(*launcher);
  node.reset();  // stops its workers (the launcher reports their exits) and joins its threads
  return 0;
}
