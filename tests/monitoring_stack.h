// A local cluster watched by a real Prometheus running Ringmaster's own configuration, for the
// monitoring tests: TestCluster (a coordinator and agents on loopback) plus Prometheus started
// from deploy/prometheus/prometheus.yml with its recording and alert rules as written, and
// file_sd targets naming each agent's node. Declare //deploy/prometheus:config in `data`.
//
// The configuration is derived mechanically: the two 15 s intervals of prometheus.yml (scrape
// and rule evaluation) become kScrapeInterval and kEvaluationInterval so a test sees a fault
// within seconds; nothing else changes, and the rule files are copied unchanged.
#ifndef RINGMASTER_TESTS_MONITORING_STACK_H_
#define RINGMASTER_TESTS_MONITORING_STACK_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/prometheus_server.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {

inline constexpr char kScrapeInterval[] = "250ms";
inline constexpr char kEvaluationInterval[] = "500ms";

// Not thread-safe. The destructor stops Prometheus and the cluster.
class MonitoringStack {
 public:
  // Starts the cluster under `dir`, writes the Prometheus configuration and targets to
  // DIR/prometheus/, starts Prometheus and waits until it scrapes the coordinator and every agent.
  static absl::StatusOr<std::unique_ptr<MonitoringStack>> Start(const std::string& dir,
                                                                const TestClusterOptions& options);

  TestCluster& cluster() { return *cluster_; }
  const PrometheusServer& prometheus() const { return *prometheus_; }

  // Waits until Prometheus has an alert `alertname` pending or firing whose labels match
  // `matchers` (PromQL label matchers, e.g. `job_id="x"`); returns those ALERTS samples, or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<std::vector<PromSample>> WaitForAlert(const std::string& alertname,
                                                       const std::string& matchers,
                                                       absl::Duration timeout) const;
  // The ALERTS samples (pending or firing) of `alertname` matching `matchers` now.
  std::vector<PromSample> Alerts(const std::string& alertname, const std::string& matchers) const;

  // Submits `yaml` and waits until every one of its `ranks` has a ringmaster_step series in
  // Prometheus (the job is training and scraped). Returns the job id, or an error.
  absl::StatusOr<std::string> SubmitAndWaitForSteps(const std::string& name,
                                                    const std::string& yaml, int ranks,
                                                    absl::Duration timeout);

  // The Prometheus configuration as written, for failure messages.
  std::string Config() const { return config_; }

 private:
  MonitoringStack() = default;
  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<PrometheusServer> prometheus_;
  std::string config_;
};

// A 4-rank GPT job on 2 nodes x 2 devices (DP = 4, ZeRO-1) that trains for a long time;
// `program` is "builtin: gpt" or TrainerCommand(...); `extra` adds top-level YAML lines.
std::string FourRankJob(const std::string& name, const std::string& program,
                        const std::string& extra = "");
// `command: ["<the trainer>", FLAGS...]` for a job spec; `flags` like `"--slow_rank=3"`.
std::string TrainerCommand(const std::vector<std::string>& flags);

// The PID a worker logged in its start line ("rank R/W pid N"), or 0.
int WorkerPid(const std::string& rank_log);

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_MONITORING_STACK_H_
