// libFuzzer target: an agent's handling of what the coordinator sends on its stream.
//
// The input is one v1.CoordinatorMessage as it arrives on the wire. It is parsed as the agent's
// stream does it: refused past the channel's receive limit (kMaxGrpcMessageBytes), gRPC's
// protobuf deserializer, then SanitizeIncoming (common/proto_edge.h: unknown fields dropped),
// and handed to real NodeAgents' OnCommand, as CoordinatorLink does; the agents' state is read
// back (MakeRegister) once the command has been carried out. Nothing here may start a process:
//  - `node`, an agent at work, gets every command. Its launches go through the agent's queue and
//    ordering, CheckLaunchable (the agent's own refusal of what it cannot run) and, for a
//    builtin trainer, MakeLaunchSpec up to "cannot run builtin trainer" (the agent has no
//    --trainer_binary). A command trainer's launch reaches it without its assignments: the same
//    checks, and no rank to start the fuzzed argv for.
//  - `leaving`, an agent that has called Leave(), gets the launches as sent: each rank is
//    reported as not launched.
// What MakeLaunchSpec would derive for the workers' environment is computed apart: the spec as
// JSON (RINGMASTER_JOB_SPEC_JSON, which node_agent.cc assumes always converts) and each rank's
// CUDA_VISIBLE_DEVICES (WorkerVisibleDevice, with the message's master_addr standing in for the
// agent's own CUDA_VISIBLE_DEVICES). ReadLog commands read a real log of the work directory
// (logs/fuzz/1/rank-0.log) or none; StopWorkers find no worker to stop.
//
// Checks: a sanitized message parses again within protobuf's limits (an agent or coordinator
// can pass it on), a launched spec converts to JSON, and neither agent ever runs a worker.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/devices.h"
#include "agent/local_watchdog.h"
#include "agent/node_agent.h"
#include "agent/rank_metrics.h"
#include "common/clock.h"
#include "common/grpc_limits.h"
#include "common/metrics/registry.h"
#include "common/proto_edge.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ringmaster/v1/agent.pb.h"

namespace {

namespace agent = ringmaster::agent;
namespace v1 = ringmaster::v1;

// How long the agent may take to carry out one command: far more than a command with no worker
// to start or stop needs; past it the harness reports the agent stuck.
constexpr absl::Duration kCommandDeadline = absl::Seconds(5);

struct Fixture {
  std::string work_dir;
  ringmaster::metrics::Registry registry;
  std::unique_ptr<agent::RankMetrics> metrics;
  std::unique_ptr<agent::LocalWatchdog> watchdog;
  std::unique_ptr<agent::NodeAgent> node;     // at work
  std::unique_ptr<agent::NodeAgent> leaving;  // has called Leave()
};

// Built once; lives until the process exits (its threads with it).
Fixture* MakeFixture() {
  auto* f = new Fixture;
  std::string tmpl = std::filesystem::temp_directory_path() / "agent_command_fuzz.XXXXXX";
  FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp " + tmpl);
  f->work_dir = tmpl;
  std::filesystem::create_directories(f->work_dir + "/logs/fuzz/1");
  std::ofstream(f->work_dir + "/logs/fuzz/1/rank-0.log") << "step 1 loss 5.5\nstep 2 loss 5.1\n";
  f->metrics = std::make_unique<agent::RankMetrics>(&f->registry, ringmaster::Clock::Steady(),
                                                    absl::Seconds(1));
  f->watchdog =
      std::make_unique<agent::LocalWatchdog>(ringmaster::Clock::Steady(), agent::WatchdogOptions{});
  agent::NodeAgentOptions options;
  options.node_name = "fuzz-node";
  auto devices = agent::ParseDevices("cpu:4");
  FUZZ_CHECK(devices.ok(), devices.status().ToString());
  options.devices = *devices;
  options.socket_path = f->work_dir + "/worker.sock";
  options.work_dir = f->work_dir;
  options.trainer_binary = "";  // builtin jobs cannot start
  f->node = std::make_unique<agent::NodeAgent>(options, f->metrics.get(), f->watchdog.get());
  options.node_name = "fuzz-node-leaving";
  f->leaving = std::make_unique<agent::NodeAgent>(options, f->metrics.get(), f->watchdog.get());
  f->leaving->Leave(absl::ZeroDuration(), absl::Seconds(1), "fuzzing: launches are refused");
  return f;
}

// Parses `data` as the agent's stream does: refused past the channel's receive limit, then
// grpc's protobuf deserializer.
bool ParseAsTheAgentDoes(const uint8_t* data, size_t size, v1::CoordinatorMessage* message) {
  if (size > static_cast<size_t>(ringmaster::kMaxGrpcMessageBytes)) return false;
  grpc::Slice slice(data, size);
  grpc::ByteBuffer buffer(&slice, 1);
  return grpc::SerializationTraits<v1::CoordinatorMessage>::Deserialize(&buffer, message).ok();
}

// What MakeLaunchSpec computes from a launch besides plain numbers.
void DeriveWorkerEnvironment(const v1::LaunchWorkers& launch) {
  std::string spec_json;
  const auto printed = google::protobuf::util::MessageToJsonString(launch.spec(), &spec_json);
  FUZZ_CHECK(printed.ok(),
             "a launched spec does not convert to RINGMASTER_JOB_SPEC_JSON: " + printed.ToString());
  const std::string& visible = launch.master_addr();
  for (const v1::RankAssignment& a : launch.assignments()) {
    const std::string device = agent::WorkerVisibleDevice(a.local_device(), visible.c_str());
    FUZZ_CHECK(!device.empty(), "an empty CUDA_VISIBLE_DEVICES for a worker");
    (void)agent::WorkerVisibleDevice(a.local_device(), nullptr);
  }
}

// Whether `agent` lists no rank as starting (every launch taken from its queue and carried out)
// by the deadline; it runs none.
void AwaitLaunches(const agent::NodeAgent& agent) {
  const absl::Time deadline = absl::Now() + kCommandDeadline;
  for (;;) {
    const v1::Register r = agent.MakeRegister();
    bool starting = false;
    for (const v1::WorkerState& w : r.running_workers()) {
      starting = starting || w.phase() == v1::WORKER_PHASE_STARTING;
    }
    if (!starting) {
      FUZZ_CHECK(r.running_workers_size() == 0, "the agent lists a running worker");
      FUZZ_CHECK(r.exited_workers_size() <= 1024, "the agent remembers more than 1024 exits");
      FUZZ_CHECK(agent.RunningWorkers() == 0, "the agent started a worker");
      return;
    }
    FUZZ_CHECK(absl::Now() < deadline, "the agent did not carry out a launch within 5 s");
    absl::SleepFor(absl::Microseconds(50));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* const fixture = MakeFixture();
  v1::CoordinatorMessage message;
  if (!ParseAsTheAgentDoes(data, size, &message)) return 0;
  ringmaster::SanitizeIncoming(&message);
  v1::CoordinatorMessage again;
  FUZZ_CHECK(again.ParseFromString(message.SerializeAsString()),
             "a sanitized command does not parse again (nested too deeply?)");
  if (message.has_launch()) {
    DeriveWorkerEnvironment(message.launch());
    fixture->leaving->OnCommand(message);
    if (message.launch().spec().trainer().has_command()) {
      message.mutable_launch()->clear_assignments();  // no fuzzed argv is ever executed
    }
  }
  fixture->node->OnCommand(message);
  AwaitLaunches(*fixture->node);
  AwaitLaunches(*fixture->leaving);
  return 0;
}
