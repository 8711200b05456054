// What the agent fuzz targets (agent_command_fuzz, worker_api_fuzz) share: the parts a NodeAgent
// is built from, kept for the whole run.
//
// Ownership: a target builds one AgentParts per process and never frees it (libFuzzer runs until
// exit; the agent's threads may still use the metrics and watchdog). Not thread-safe while being
// built. A setup failure (no temporary directory, bad device list) is a FUZZ_CHECK abort: it is
// a broken harness, not a finding about the input.
#ifndef RINGMASTER_FUZZ_FUZZ_AGENT_H_
#define RINGMASTER_FUZZ_FUZZ_AGENT_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "agent/devices.h"
#include "agent/local_watchdog.h"
#include "agent/node_agent.h"
#include "agent/rank_metrics.h"
#include "common/clock.h"
#include "common/metrics/registry.h"
#include "fuzz/fuzz_check.h"

namespace ringmaster::fuzz {

struct AgentParts {
  std::string work_dir;
  metrics::Registry registry;
  std::unique_ptr<agent::RankMetrics> metrics;
  std::unique_ptr<agent::LocalWatchdog> watchdog;
  agent::NodeAgentOptions options;
};

// Fills `parts`: a new directory <temp>/<name>.XXXXXX as the work directory, metrics and a
// watchdog on the steady clock, and options for node "fuzz-node" with `devices` (agent/devices.h
// syntax, e.g. "cpu:2"), the worker socket and work directory in that directory, and a system
// root that does not exist (no OOM kill counts).
inline void InitAgentParts(const std::string& name, const std::string& devices, AgentParts* parts) {
  std::string tmpl = std::filesystem::temp_directory_path() / (name + ".XXXXXX");
  FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp " + tmpl);
  parts->work_dir = tmpl;
  parts->metrics =
      std::make_unique<agent::RankMetrics>(&parts->registry, Clock::Steady(), absl::Seconds(1));
  parts->watchdog =
      std::make_unique<agent::LocalWatchdog>(Clock::Steady(), agent::WatchdogOptions{});
  parts->options.node_name = "fuzz-node";
  auto parsed = agent::ParseDevices(devices);
  FUZZ_CHECK(parsed.ok(), parsed.status().ToString());
  parts->options.devices = *parsed;
  parts->options.socket_path = parts->work_dir + "/worker.sock";
  parts->options.work_dir = parts->work_dir;
  parts->options.system_root = parts->work_dir + "/no-system";
}

}  // namespace ringmaster::fuzz

#endif  // RINGMASTER_FUZZ_FUZZ_AGENT_H_
