// Coordinator scale benchmark: N simulated agents x D devices register and heartbeat at 1 Hz over
// real gRPC on loopback; then one job of N*D ranks is submitted, placed, and completes a
// rendezvous (rank 0 sets a key, every other rank waits for it).
//
// Reports: registration time, placement + rendezvous time (submit -> last rendezvous answer),
// heartbeat handling p99 (from the coordinator's ringmaster_agent_message_seconds histogram:
// the upper bound of the bucket holding the 99th percentile), the nodes declared lost, the
// coordinator's stalls, how late heartbeats were read (ringmaster_heartbeat_delay_seconds: from
// the simulated agent queuing one to the coordinator reading it), and the coordinator's memory
// (VmRSS and VmHWM from /proc). Speed is reported here, never asserted in tests. Each agent
// heartbeats from its registration on, as real agents do.
//
// With --pending_jobs=P the big job keeps running after its rendezvous while P one-node jobs are
// submitted behind it (each waits; the first holds devices); then the big job's ranks exit and
// the bench times until every pending job was placed and through its rendezvous. It reports
// the scheduling passes from ringmaster_scheduling_pass_seconds.
//
//   bazel run -c opt //bench:coordinator_scale_bench -- --agents=4096 --devices=8
//   bazel run -c opt //bench:coordinator_scale_bench -- --agents=4096 --pending_jobs=4096
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
ABSL_FLAG(double, lost_after, 10,
          "The coordinator's --lost_after (the simulated agents heartbeat once a second).");
ABSL_FLAG(
    int, channels, 64,
    "Connections the simulated agents share (a real agent has its own: --channels=--agents).");
ABSL_FLAG(int, warmup_heartbeats, 5, "Heartbeat rounds (1 s apart) before the job is submitted.");
ABSL_FLAG(int, pending_jobs, 0,
          "One-node jobs submitted while the big job runs; they are placed when it ends.");

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

// Upper bound of the bucket holding a quantile, and the count, of a histogram series in a
// /metrics page. `labels` are the series' labels before le, each followed by a comma.
std::pair<double, double> QuantileFromPage(const std::string& page, const std::string& series,
                                           const std::string& labels, double quantile) {
  std::regex re(series + "_bucket\\{" + labels + "le=\"([^\"]+)\"\\} (\\S+)");
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
    if (count >= quantile * total) return {le, total};
  }
  return {INFINITY, total};
}

// The sum of every series of `name` (a counter, or a histogram's _sum or _count) in a /metrics
// page.
double SumFromPage(const std::string& page, const std::string& name) {
  std::regex re("\n" + name + "(\\{[^}]*\\})? (\\S+)");
  double sum = 0;
  for (std::sregex_iterator it(page.begin(), page.end(), re), end; it != end; ++it) {
    double value = 0;
    if (absl::SimpleAtod((*it)[2].str(), &value)) sum += value;
  }
  return sum;
}

// Submits a command job of `nodes` x `devices` ranks, one tensor-parallel group per node.
absl::Status Submit(v1::JobService::Stub& jobs, const std::string& name, int nodes, int devices) {
  grpc::ClientContext context;
  v1::SubmitJobRequest request;
  v1::JobSpec* spec = request.mutable_spec();
  spec->set_name(name);
  spec->set_nodes(nodes);
  spec->set_devices_per_node(devices);
  spec->mutable_parallelism()->set_tensor(devices);
  spec->mutable_parallelism()->set_pipeline(1);
  spec->mutable_parallelism()->set_data(nodes);
  spec->mutable_trainer()->mutable_command()->add_argv("true");
  spec->mutable_trainer()->set_steps(1);
  v1::SubmitJobResponse response;
  grpc::Status submitted = jobs.SubmitJob(&context, request, &response);
  if (!submitted.ok()) {
    return absl::InternalError(absl::StrCat("SubmitJob ", name, ": ", submitted.error_message()));
  }
  return absl::OkStatus();
}

absl::Status Run() {
  const int agents = absl::GetFlag(FLAGS_agents);
  const int devices = absl::GetFlag(FLAGS_devices);
  const int64_t world = int64_t{agents} * devices;
  ASSIGN_OR_RETURN(
      testing::CoordinatorProcess coordinator,
      testing::StartCoordinator({"--insecure", "--heartbeat_interval=1",
                                 absl::StrCat("--lost_after=", absl::GetFlag(FLAGS_lost_after)),
                                 "--state=" + testing::TestTempDir() + "/bench.db"}));
  std::cout << "coordinator pid " << coordinator.process.pid() << " at " << coordinator.address()
            << "\n";

  FleetOptions options;
  options.target = coordinator.address();
  options.agents = agents;
  options.devices_per_agent = devices;
  options.channels = absl::GetFlag(FLAGS_channels);
  if (options.channels < 1) return absl::InvalidArgumentError("--channels: must be at least 1");
  options.hold_exits = absl::GetFlag(FLAGS_pending_jobs) > 0;
  SimAgentFleet fleet(options);
  absl::Time t = absl::Now();
  fleet.Connect();

  // From the start, as real agents do: each heartbeats once registered, however long the others
  // take (a node registered early would be lost before the last one registers otherwise).
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
      if (thread->joinable()) thread->join();
    }
  } joiner{&stop, &heartbeats};
  RETURN_IF_ERROR(fleet.AwaitRegistered(absl::Minutes(5)));
  absl::Duration registration = absl::Now() - t;
  {
    auto page = HttpGet("127.0.0.1", coordinator.metrics_port, "/metrics");
    if (!page.ok()) return page.status();
    std::cout << agents << " agents registered in " << registration << "; meanwhile "
              << SumFromPage(page->body, "ringmaster_nodes_lost_total")
              << " nodes lost, heartbeat delay longest <= "
              << QuantileFromPage(page->body, "ringmaster_heartbeat_delay_seconds", "", 1.0).first
              << " s" << std::endl;
  }
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_warmup_heartbeats)));  // Steady state.

  auto channel = MakeChannel(coordinator.address(), grpc::InsecureChannelCredentials());
  auto jobs = v1::JobService::NewStub(channel);
  t = absl::Now();
  RETURN_IF_ERROR(Submit(*jobs, "scale", agents, devices));
  absl::Duration submit = absl::Now() - t;
  ASSIGN_OR_RETURN(int64_t ok, fleet.WaitForRendezvous(world, absl::Minutes(5)));
  absl::Duration rendezvous = absl::Now() - t;

  const int pending = absl::GetFlag(FLAGS_pending_jobs);
  std::string pending_report;
  if (pending > 0) {
    // Each submission runs a scheduling pass over every job waiting before it.
    absl::Duration last_submit;
    t = absl::Now();
    for (int i = 0; i < pending; ++i) {
      absl::Time one = absl::Now();
      RETURN_IF_ERROR(Submit(*jobs, absl::StrCat("pending-", i), 1, devices));
      last_submit = absl::Now() - one;
    }
    absl::Duration submits = absl::Now() - t;
    std::cout << pending << " jobs waiting; the big job's ranks exit now" << std::endl;
    t = absl::Now();
    fleet.ReleaseExits();  // The big job ends; one pass places every pending job.
    ASSIGN_OR_RETURN(int64_t pending_ok,
                     fleet.WaitForRendezvous(world + int64_t{pending} * devices, absl::Minutes(5)));
    absl::Duration placed = absl::Now() - t;
    pending_report = absl::StrFormat(
        "%d pending one-node jobs submitted behind it in %s (the last SubmitJob: %s)\n"
        "big job's exits -> every pending job placed and through its rendezvous (%d OK): %s\n",
        pending, absl::FormatDuration(submits), absl::FormatDuration(last_submit), pending_ok - ok,
        absl::FormatDuration(placed));
  }

  absl::SleepFor(absl::Seconds(2));  // A few more heartbeat rounds under the finished job.
  auto page = HttpGet("127.0.0.1", coordinator.metrics_port, "/metrics");
  if (!page.ok()) return page.status();
  auto [p99, count] =
      QuantileFromPage(page->body, "ringmaster_agent_message_seconds", "type=\"heartbeat\",", 0.99);
  auto [pass_p99, passes] =
      QuantileFromPage(page->body, "ringmaster_scheduling_pass_seconds", "", 0.99);
  auto [pass_max, unused] =
      QuantileFromPage(page->body, "ringmaster_scheduling_pass_seconds", "", 1.0);
  auto [delay_p99, delays] =
      QuantileFromPage(page->body, "ringmaster_heartbeat_delay_seconds", "", 0.99);
  auto [delay_max, unused_delays] =
      QuantileFromPage(page->body, "ringmaster_heartbeat_delay_seconds", "", 1.0);
  const double lost = SumFromPage(page->body, "ringmaster_nodes_lost_total");
  const double stalls = SumFromPage(page->body, "ringmaster_coordinator_stall_seconds_count");
  const double stalled = SumFromPage(page->body, "ringmaster_coordinator_stall_seconds_sum");
  std::string rss = ProcStatus(coordinator.process.pid(), "VmRSS");
  std::string hwm = ProcStatus(coordinator.process.pid(), "VmHWM");
  // No heartbeat is sent while the streams are cancelled.
  stop.Notify();
  heartbeats.join();
  fleet.Shutdown();

  std::cout << absl::StrFormat(
      "agents=%d devices=%d ranks=%d\n"
      "registration: %s\n"
      "submit (validate+plan+place+launch): %s\n"
      "placement + rendezvous (submit -> last of %d answers, %d OK): %s\n"
      "%s"
      "heartbeat handling p99 <= %g s over %.0f heartbeats\n"
      "scheduling passes: %.0f, p99 <= %g s, longest <= %g s\n"
      "nodes declared lost: %.0f; coordinator stalls: %.0f, %.3f s in all\n"
      "heartbeat delay (queued by the agent -> read) over %.0f heartbeats: p99 <= %g s, "
      "longest <= %g s\n"
      "coordinator memory: VmRSS %s, VmHWM %s\n",
      agents, devices, world, absl::FormatDuration(registration), absl::FormatDuration(submit),
      world, ok, absl::FormatDuration(rendezvous), pending_report, p99, count, passes, pass_p99,
      pass_max, lost, stalls, stalled, delays, delay_p99, delay_max, rss, hwm);
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
