// Coordinator scale benchmark: N simulated agents x D devices register and heartbeat at 1 Hz over
// real gRPC on loopback; then one job of N*D ranks is submitted, placed, and completes a
// rendezvous (rank 0 sets a key, every other rank waits for it).
//
// Reports: registration time, placement + rendezvous time (submit -> last rendezvous answer),
// heartbeat handling p99 (from the coordinator's ringmaster_agent_message_seconds histogram:
// the upper bound of the bucket holding the 99th percentile), and the coordinator's memory
// (VmRSS and VmHWM from /proc). Speed is reported here, never asserted in tests.
//
//   bazel run -c opt //bench:coordinator_scale_bench -- --agents=4096 --devices=8
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "bench/sim_agent_fleet.h"
#include "common/flags.h"
#include "common/grpc_client.h"
#include "common/http_client.h"
#include "common/status.h"
#include "proto/ringmaster/v1/coordinator.grpc.pb.h"
#include "tests/local_cluster.h"

ABSL_FLAG(int, agents, 4096, "Simulated agents (nodes).");
ABSL_FLAG(int, devices, 8, "Devices per agent.");
ABSL_FLAG(int, warmup_heartbeats, 5, "Heartbeat rounds (1 s apart) before the job is submitted.");

namespace ringmaster::bench {
namespace {

std::string ProcStatus(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::string v = line.substr(key.size() + 1);
      return std::string(absl::StripAsciiWhitespace(v));
    }
  }
  return "?";
}

// p99 upper bound and count of a histogram series in a /metrics page.
std::pair<double, double> P99FromPage(const std::string& page, const std::string& series) {
  std::regex re(series + "_bucket\\{type=\"heartbeat\",le=\"([^\"]+)\"\\} (\\S+)");
  std::vector<std::pair<double, double>> buckets;
  for (std::sregex_iterator it(page.begin(), page.end(), re), end; it != end; ++it) {
    double le = 0, count = 0;
    std::string le_text = (*it)[1].str();
    le = le_text == "+Inf" ? INFINITY : std::stod(le_text);
    absl::SimpleAtod((*it)[2].str(), &count);
    buckets.emplace_back(le, count);
  }
  if (buckets.empty()) return {NAN, 0};
  double total = buckets.back().second;
  for (const auto& [le, count] : buckets) {
    if (count >= 0.99 * total) return {le, total};
  }
  return {INFINITY, total};
}

absl::Status Run() {
  const int agents = absl::GetFlag(FLAGS_agents);
  const int devices = absl::GetFlag(FLAGS_devices);
  const int64_t world = int64_t{agents} * devices;
  ASSIGN_OR_RETURN(
      testing::CoordinatorProcess coordinator,
      testing::StartCoordinator({"--insecure", "--heartbeat_interval=1", "--lost_after=10",
                                 "--state=" + testing::TestTempDir() + "/bench.db"}));
  std::cout << "coordinator pid " << coordinator.process.pid() << " at " << coordinator.address()
            << "\n";

  FleetOptions options;
  options.target = coordinator.address();
  options.agents = agents;
  options.devices_per_agent = devices;
  SimAgentFleet fleet(options);
  absl::Time t = absl::Now();
  RETURN_IF_ERROR(fleet.Register(absl::Minutes(5)));
  absl::Duration registration = absl::Now() - t;
  std::cout << agents << " agents registered in " << registration << "\n";

  absl::Notification stop;
  std::thread heartbeats([&] {
    do {
      fleet.HeartbeatAll();
    } while (!stop.WaitForNotificationWithTimeout(absl::Seconds(1)));
  });
  // Stops the heartbeat thread on every way out of this function.
  struct Joiner {
    absl::Notification* stop;
    std::thread* thread;
    ~Joiner() {
      if (!stop->HasBeenNotified()) stop->Notify();
      thread->join();
    }
  } joiner{&stop, &heartbeats};
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_warmup_heartbeats)));  // Steady state.

  v1::JobSpec spec;
  spec.set_name("scale");
  spec.set_nodes(agents);
  spec.set_devices_per_node(devices);
  spec.mutable_parallelism()->set_tensor(devices);
  spec.mutable_parallelism()->set_pipeline(1);
  spec.mutable_parallelism()->set_data(agents);
  spec.mutable_trainer()->mutable_command()->add_argv("true");
  spec.mutable_trainer()->set_steps(1);
  auto channel = MakeChannel(coordinator.address(), grpc::InsecureChannelCredentials());
  auto jobs = v1::JobService::NewStub(channel);
  grpc::ClientContext context;
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  t = absl::Now();
  grpc::Status submitted = jobs->SubmitJob(&context, request, &response);
  if (!submitted.ok()) return absl::InternalError(submitted.error_message());
  absl::Duration submit = absl::Now() - t;
  ASSIGN_OR_RETURN(int64_t ok, fleet.WaitForRendezvous(world, absl::Minutes(5)));
  absl::Duration rendezvous = absl::Now() - t;

  absl::SleepFor(absl::Seconds(2));  // A few more heartbeat rounds under the finished job.
  auto page = HttpGet("127.0.0.1", coordinator.metrics_port, "/metrics");
  if (!page.ok()) return page.status();
  auto [p99, count] = P99FromPage(page->body, "ringmaster_agent_message_seconds");
  std::string rss = ProcStatus(coordinator.process.pid(), "VmRSS");
  std::string hwm = ProcStatus(coordinator.process.pid(), "VmHWM");
  fleet.Shutdown();

  std::cout << absl::StrFormat(
      "agents=%d devices=%d ranks=%d\n"
      "registration: %s\n"
      "submit (validate+plan+place+launch): %s\n"
      "placement + rendezvous (submit -> last of %d answers, %d OK): %s\n"
      "heartbeat handling p99 <= %g s over %.0f heartbeats\n"
      "coordinator memory: VmRSS %s, VmHWM %s\n",
      agents, devices, world, absl::FormatDuration(registration), absl::FormatDuration(submit),
      world, ok, absl::FormatDuration(rendezvous), p99, count, rss, hwm);
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmaster::bench

int main(int argc, char** argv) {
  absl::Status status = ringmaster::InitBinary(
      argc, argv, "Coordinator scale benchmark (simulated agents on loopback).", nullptr);
  if (status.ok()) status = ringmaster::bench::Run();
  if (!status.ok()) {
    std::cerr << "bench: " << status << "\n";
    return 1;
  }
  return 0;
}
