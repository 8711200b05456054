// A real Prometheus server for tests, started from Debian's `prometheus` binary on loopback with
// its data under the test's temp dir. Used by the scrape test and by the dashboard/alert tests.
#ifndef RINGMASTER_COMMON_TESTING_PROMETHEUS_SERVER_H_
#define RINGMASTER_COMMON_TESTING_PROMETHEUS_SERVER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/subprocess.h"

namespace ringmaster::testing {

// One element of an instant-vector query result.
struct PromSample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

class PrometheusServer {
 public:
  // Starts Prometheus scraping `targets` ("host:port") every `scrape_interval`, with extra
  // `rule_files` loaded, and waits until it is ready. UNAVAILABLE if the binary is missing or it
  // does not become ready in time.
  static absl::StatusOr<std::unique_ptr<PrometheusServer>> Start(
      const std::vector<std::string>& targets, absl::Duration scrape_interval = absl::Seconds(1),
      const std::vector<std::string>& rule_files = {});

  // Starts Prometheus with the configuration file at `config_path` (its rule files and file_sd
  // files resolved against that file's directory, as Prometheus does), data next to it, and
  // waits until it is ready. Errors as for Start.
  static absl::StatusOr<std::unique_ptr<PrometheusServer>> StartWithConfigFile(
      const std::string& config_path);

  int port() const { return port_; }

  // Runs an instant query. INVALID_ARGUMENT if Prometheus rejects the expression (its error
  // message included); the result may be empty.
  absl::StatusOr<std::vector<PromSample>> Query(const std::string& promql) const;

  // Waits until `promql` returns at least one sample; returns them, or DEADLINE_EXCEEDED.
  absl::StatusOr<std::vector<PromSample>> WaitForSamples(const std::string& promql,
                                                         absl::Duration timeout) const;

  // Prometheus's own log, for failure messages.
  std::string Log() const { return process_.Log(); }

 private:
  PrometheusServer(Subprocess process, int port) : process_(std::move(process)), port_(port) {}
  Subprocess process_;
  int port_;
};

}  // namespace ringmaster::testing

#endif  // RINGMASTER_COMMON_TESTING_PROMETHEUS_SERVER_H_
