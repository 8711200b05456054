// A whole local cluster for integration tests: a coordinator and N agents with CPU slots (or GPUs),
// processes on loopback, the builtin trainer as the agents' --trainer_binary. Binaries come from
// the test's runfiles (declare //coordinator, //agent, //ctl:ringctl and //trainer in `data`).
#ifndef RINGMASTER_TESTS_TEST_CLUSTER_H_
#define RINGMASTER_TESTS_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/subprocess.h"
#include "tests/local_cluster.h"

namespace ringmaster::testing {

struct TestClusterOptions {
  int agents = 2;
  int slots = 2;        // --devices=cpu:N per agent
  std::string devices;  // --devices instead (e.g. "gpu"), when set
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> agent_flags;
};

// Not thread-safe. The destructor kills every process it started.
class TestCluster {
 public:
  // Starts everything under `dir` and waits until every agent is registered.
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(const std::string& dir,
                                                           const TestClusterOptions& options);
  ~TestCluster();

  const std::string& dir() const { return dir_; }
  CoordinatorProcess& coordinator() { return *coordinator_; }
  Subprocess& agent(int i) { return agents_[i]; }
  int agent_count() const { return static_cast<int>(agents_.size()); }
  // Restarts the coordinator on the same address with the same state file (after it was
  // killed), so the agents reconnect to it.
  absl::Status RestartCoordinator();
  // Starts agent `i` again with its original flags (after it was killed).
  absl::Status RestartAgent(int i);

  // Runs ringctl against the coordinator (plaintext).
  CommandResult Ctl(std::vector<std::string> args);
  // Writes `yaml` to DIR/NAME.yaml, submits it, and returns the job id ("" on failure).
  std::string Submit(const std::string& name, const std::string& yaml);
  // Waits until the job is SUCCEEDED, FAILED or CANCELLED; returns that state name ("" on
  // timeout).
  std::string WaitForEnd(const std::string& job, absl::Duration timeout);
  // The output of `rank` of `job` in `generation`, from whichever agent ran it ("" if none yet).
  std::string RankLog(const std::string& job, int generation, int rank) const;
  // The /metrics port agent `i` logged, or 0.
  int AgentMetricsPort(int i) const;
  // Absolute path of a runfile, e.g. "trainer/trainer".
  static std::string Runfile(const std::string& path);

 private:
  TestCluster() = default;
  std::string dir_, socket_dir_, state_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::vector<std::string> coordinator_flags_;
  std::vector<Subprocess> agents_;
  std::vector<std::vector<std::string>> agent_argv_;
  std::vector<std::string> work_dirs_;
};

// Runs the trainer binary (trainer/trainer in the runfiles, one BLAS thread) standalone with
// `args`, to completion.
absl::StatusOr<CommandResult> RunTrainer(const std::vector<std::string>& args);

// RunTrainer, for tests that go on to check its result: a trainer that could not be run at all
// is a test failure (non-fatal) and an empty result.
CommandResult TrainOrFail(const std::vector<std::string>& args);

// The losses a trainer printed ("step N/M loss X"), by step, as printed.
std::vector<std::pair<int, std::string>> TrainerLosses(const std::string& log);

// A loss as TrainerLosses returns it, as a number; a test failure naming the text when it is not
// one (and NaN, which no comparison passes).
double TrainerLossValue(const std::string& printed);

// Expects the losses `got` to be those of steps 1, 2, ... and each within `tolerance` (relative)
// of `want`'s (as many); returns the largest relative difference.
double ExpectLossesFollow(const std::vector<std::pair<int, std::string>>& got,
                          const std::vector<std::pair<int, std::string>>& want, double tolerance);

// The checksum of the parameters a trainer logged at its end ("params crc32c XXXXXXXX"), or "".
std::string TrainerFinalCrc(const std::string& log);

// The checkpoint directories ("step-NNNNNNNN", committed or not) in `dir`, sorted; none if `dir`
// does not exist.
std::vector<std::string> CheckpointDirs(const std::string& dir);

// The one rank the first "hang" event of `job_json` (`ringctl get job ID -o json`) blames, or -1
// when there is no such event or it names several ranks.
int HangBlamedRank(const std::string& job_json);

// After a hang in `generation` of `job` blamed `rank`: waits (30 s) until a "suspect_exit" event
// quotes the rank's last output before the agent stopped it ("... last output before the stop:
// LINE"), and expects LINE to be a whole line of the rank's log in that generation. A fatal
// failure if no such event comes.
void ExpectLastOutputBeforeTheStopFromItsLog(TestCluster& cluster, const std::string& job,
                                             int generation, int rank);

// After job `job` failed on NaN gradients injected into `step` (trainer --nan_gradients_at_step):
// none of its `ranks` ranks logged that step in generation 1, and every rank that failed by
// itself (rather than being stopped once the first one had) failed with exit 78 naming the step
// and the NaN norm; at least one did.
void ExpectNoRankFinishedTheNanStep(const TestCluster& cluster, const std::string& job, int ranks,
                                    int step);

// The pid a trainer logged at its start ("rank R/W pid P"), or 0.
pid_t TrainerPid(const std::string& log);

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_TEST_CLUSTER_H_
