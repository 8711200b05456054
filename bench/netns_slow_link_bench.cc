// Unasked slow-link localisation on the namespaced cluster (tests/netns_cluster.h; needs root):
// four agents in network namespaces, every veth limited to --others_bits with tc, a DP=4 job of
// the trainer. Each of --trials times, one agent's veth (round robin) is limited to --slow_bits:
//  - the seconds from the tc change to the coordinator's "slow_link" events naming that agent's
//    two ring links (nobody asks for a check), by polling `ringctl describe job` (~0.3 s);
//  - the seconds the automatic check held training: from its "link check started by the
//    coordinator" event to its verdict (the ranks run it between two steps);
// then the veth is limited to --others_bits again and the bench waits for the "link_recovered"
// events before the next trial. Median and worst are printed; speed is reported here, never
// asserted in tests. Figures go to docs/benchmarks.md. It also counts straggler flags (issue 37
// wants none under a slow link): "straggler" events that flag a rank, and the `ringctl describe`
// snapshots (every poll) that mark a rank a straggler, per trial and in all.
//
//   sudo bazel run -c opt //bench:netns_slow_link_bench -- --trials=10
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/status.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "tests/netns_cluster.h"

ABSL_FLAG(int, trials, 10, "Degradations to time.");
ABSL_FLAG(int64_t, others_bits, 200'000'000, "Every veth's rate (bits per second).");
ABSL_FLAG(int64_t, slow_bits, 4'000'000, "The degraded veth's rate (bits per second).");
ABSL_FLAG(int64_t, link_check_bytes, 262144, "The job's watchdog.link_check_bytes.");
ABSL_FLAG(int, interval, 10, "The job's watchdog.auto_link_check_interval (seconds).");

namespace ringmaster::bench {
namespace {

using testing::NetnsCluster;
using testing::WaitFor;

int Count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

std::string Stats(std::vector<double> v) {
  if (v.empty()) return "none";
  std::sort(v.begin(), v.end());
  return absl::StrFormat("median %.1f s, worst %.1f s (n=%d)", v[v.size() / 2], v.back(),
                         static_cast<int>(v.size()));
}

absl::Status Run() {
  if (std::string why = NetnsCluster::Unsupported(); !why.empty()) {
    return absl::FailedPreconditionError(why);
  }
  const std::string dir = std::filesystem::temp_directory_path().string() + "/netns_slow_link_bench";
  std::filesystem::remove_all(dir);
  ASSIGN_OR_RETURN(auto cluster, NetnsCluster::Start(dir, testing::NetnsClusterOptions{}));
  const int64_t others = absl::GetFlag(FLAGS_others_bits);
  for (int i = 0; i < 4; ++i) RETURN_IF_ERROR(cluster->Degrade(i, others));
  const std::string id = cluster->Submit(
      "slow-link-bench",
      absl::StrCat("name: slow-link-bench\nnodes: 4\ndevices_per_node: 1\n"
                   "parallelism: {tensor: 1, pipeline: 1, data: 4}\n"
                   "trainer:\n  command: [\"",
                   std::filesystem::absolute("trainer/trainer").string(),
                   "\", \"--shared_memory=false\"]\n"
                   "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n"
                   "  batch: {micro_batch: 2, global_batch: 8}\n"
                   "  optimizer: {lr: 2.0e-3}\n  steps: 100000000\n"
                   "restart: {max_restarts: 0}\n"
                   "watchdog: {link_check_bytes: ",
                   absl::GetFlag(FLAGS_link_check_bytes),
                   ", auto_link_check_interval: ", absl::GetFlag(FLAGS_interval), "}\n"));
  if (id.empty()) return absl::InternalError("submit failed");
  std::string described;
  int marked_snapshots = 0;  // describe snapshots with a rank marked "straggler (N.NNx)"
  const std::regex mark("straggler \\(\\d");
  auto describe = [&] {
    described = cluster->Ctl({"describe", "job", id}).output;
    if (std::regex_search(described, mark)) ++marked_snapshots;
    return described;
  };
  // A baseline (see tests/netns_slow_link_test.cc): 400 steps, 11 s and more at these rates.
  if (!WaitFor([&] { return std::regex_search(describe(), std::regex("Progress: +step ([4-9]\\d\\d|\\d{4,})")); },
               absl::Seconds(300))) {
    return absl::DeadlineExceededError("the job did not train:\n" + described);
  }
  std::vector<double> named, held;
  const std::string slow = "\n  \\S+  gen \\d+  slow_link ";
  const std::string recovered = "\n  \\S+  gen \\d+  link_recovered ";
  const std::string started = "link check started by the coordinator: ";
  const std::string verdict = "link check after step \\d+: 4 links, [1-9]";
  const std::string flagged = "\n  \\S+  gen \\d+  straggler  [^\n]*: straggler  ";
  int trials_flagged = 0;
  for (int trial = 0; trial < absl::GetFlag(FLAGS_trials); ++trial) {
    const int agent = trial % 4;
    describe();
    const int slow_before = Count(described, slow);
    const int recovered_before = Count(described, recovered);
    const int started_before = Count(described, started);
    const int verdicts_before = Count(described, verdict);
    const int flagged_before = Count(described, flagged);
    const int marked_before = marked_snapshots;
    RETURN_IF_ERROR(cluster->Degrade(agent, absl::GetFlag(FLAGS_slow_bits)));
    const absl::Time degraded = absl::Now();
    absl::Time check_started = absl::InfiniteFuture();
    const bool ok = WaitFor(
        [&] {
          describe();
          if (check_started == absl::InfiniteFuture() && Count(described, started) > started_before) {
            check_started = absl::Now();
          }
          return Count(described, slow) >= slow_before + 2 &&
                 Count(described, verdict) > verdicts_before;
        },
        absl::Seconds(120));
    if (!ok) return absl::DeadlineExceededError("not named within 120 s:\n" + described);
    const absl::Time now = absl::Now();
    named.push_back(absl::ToDoubleSeconds(now - degraded));
    if (check_started != absl::InfiniteFuture()) held.push_back(absl::ToDoubleSeconds(now - check_started));
    std::cout << absl::StrFormat("trial %d: agent-%d's links named %.1f s after the tc change\n",
                                 trial, agent, named.back());
    RETURN_IF_ERROR(cluster->Degrade(agent, others));
    if (!WaitFor([&] { return Count(describe(), recovered) >= recovered_before + 2; },
                 absl::Seconds(180))) {
      return absl::DeadlineExceededError("no recovery said within 180 s:\n" + described);
    }
    const int flags = Count(described, flagged) - flagged_before;
    const int marks = marked_snapshots - marked_before;
    if (flags > 0 || marks > 0) ++trials_flagged;
    std::cout << absl::StrFormat("trial %d: %d straggler flags, %d snapshots marked\n", trial,
                                 flags, marks);
  }
  describe();
  const int flags = Count(described, flagged);  // from the job's start, baseline included
  cluster->Ctl({"cancel", id});
  std::cout << "time from the tc change to the named links: " << Stats(named) << "\n"
            << "automatic check, its start to its verdict (training held): " << Stats(held)
            << "\n"
            << absl::StrFormat("straggler flags: %d events, %d snapshots marked, %d of %d trials "
                               "with either\n",
                               flags, marked_snapshots, trials_flagged,
                               absl::GetFlag(FLAGS_trials));
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmaster::bench

int main(int argc, char** argv) {
  absl::Status s = ringmaster::InitBinary(argc, argv, "netns_slow_link_bench", nullptr);
  if (s.ok()) s = ringmaster::bench::Run();
  if (!s.ok()) {
    std::cerr << "netns_slow_link_bench: " << s << "\n";
    return 1;
  }
  return 0;
}
