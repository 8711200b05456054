// A whole local cluster on a real virtual network, for integration tests where the network
// matters (issue 37): every agent in its own network namespace, joined by a veth to a Linux
// bridge, with its own address; the coordinator listens on the bridge.
//
//   hub namespace  "rmt<pid>-<n>-hub": bridge br0 10.77.0.1/24, lo; the coordinator, the test
//                  process itself (see below) and everything it starts (ringctl, ...)
//   agent i        "rmt<pid>-<n>-a<i>": eth0 10.77.0.(i+2)/24, lo; agent i (--host_address is
//                  its eth0 address, so its workers' Gloo listens there) and its workers
//   agent i's veth: eth0 in agent i's namespace <-> v<i> in the hub, enslaved to br0
//
// Every interface lives inside a namespace the fixture created (none in the root namespace), so
// the subnet can repeat between concurrent tests, and deleting the namespaces by name removes
// everything. Names carry the prefix "rmt<pid>-<n>-"; Start removes stale namespaces whose
// prefix names a process that no longer runs (a test that crashed).
//
// The test process moves into the hub namespace (setns on the calling thread) in Start, so call
// Start from the main thread before any thread or gRPC channel exists (SetUpTestSuite is fine);
// its own clients and every process it starts from that thread then reach the coordinator on
// the bridge. The destructor moves the thread back to the namespace it came from.
//
// Usage:
//   if (std::string why = NetnsCluster::Unsupported(); !why.empty()) GTEST_SKIP() << why;
//   NetnsClusterOptions options;  // 4 agents of 1 CPU slot
//   auto cluster = NetnsCluster::Start(TestTempDir() + "/x", options);
//   ASSERT_TRUE(cluster.ok()) << cluster.status();
//   std::string id = (*cluster)->Submit("job", yaml);          // ringctl in the hub
//   ASSERT_TRUE((*cluster)->Degrade(2, 20'000'000).ok());     // agent 2's link at 20 Mbit/s
//   LinkCounters before = *(*cluster)->LinkBytes(2);
//   ... (*cluster)->Restore(2); (*cluster)->Cut(1); (*cluster)->Heal(1);
// BUILD: deps ":netns_cluster", data CLUSTER_PROGRAMS (tests/defs.bzl), tags "local" and
// "exclusive" (root, namespaces, many processes).
//
// Threading: not thread-safe; one thread (the one that called Start) uses a cluster.
// Ownership: the cluster owns its processes and namespaces; the destructor SIGKILLs the
// processes and deletes the namespaces by name (also after a Start that failed half-way).
// Errors: absl::Status; FAILED_PRECONDITION when this machine cannot do it (see Unsupported),
// INTERNAL with the command and its output when `ip`/`tc` fails.
#ifndef RINGMASTER_TESTS_NETNS_CLUSTER_H_
#define RINGMASTER_TESTS_NETNS_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/subprocess.h"
#include "tests/local_cluster.h"

namespace ringmaster::testing {

struct NetnsClusterOptions {
  int agents = 4;
  int slots = 1;  // --devices=cpu:N per agent
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> agent_flags;
};

// Bytes through one agent's veth, counted at its hub end (v<i>): `to_agent` left the bridge
// for the agent, `from_agent` came from it.
struct LinkCounters {
  int64_t to_agent = 0;
  int64_t from_agent = 0;
  int64_t total() const { return to_agent + from_agent; }
};

class NetnsCluster {
 public:
  // Why this machine cannot run a namespaced cluster ("" when it can): not root, `ip netns`
  // missing or refused, or a bridge, a veth pair or a tbf qdisc that cannot be created in a probe
  // namespace (deleted again). For GTEST_SKIP.
  static std::string Unsupported();

  // Creates the namespaces, moves the calling thread into the hub, starts the coordinator and
  // the agents (each in its namespace) under `dir`, and waits until every agent is registered.
  static absl::StatusOr<std::unique_ptr<NetnsCluster>> Start(const std::string& dir,
                                                             const NetnsClusterOptions& options);
  ~NetnsCluster();

  // "rmt<pid>-<n>-": every namespace of this cluster starts with it.
  const std::string& prefix() const { return prefix_; }
  const std::string& hub_namespace() const { return hub_; }
  const std::string& agent_namespace(int i) const { return agent_ns_[i]; }
  // 10.77.0.1, the bridge; the coordinator listens on it (gRPC) and on the hub's 127.0.0.1
  // (metrics, so `HttpGet("127.0.0.1", coordinator().metrics_port, ...)` works from the test).
  std::string bridge_address() const;
  // 10.77.0.(i+2), agent i's address (its --host_address; its /metrics listens there too).
  std::string agent_address(int i) const;
  // BRIDGE:PORT, what agents and ringctl dial.
  std::string coordinator_address() const;

  const std::string& dir() const { return dir_; }
  CoordinatorProcess& coordinator() { return *coordinator_; }
  Subprocess& agent(int i) { return agents_[i]; }
  int agent_count() const { return static_cast<int>(agents_.size()); }
  // Starts agent `i` again, in its namespace, with its original flags (after it was killed).
  absl::Status RestartAgent(int i);

  // Runs ringctl (in the hub) against the coordinator.
  CommandResult Ctl(std::vector<std::string> args);
  // Writes `yaml` to DIR/NAME.yaml, submits it, returns the job id ("" on failure, logged).
  std::string Submit(const std::string& name, const std::string& yaml);
  // Waits until the job is SUCCEEDED, FAILED or CANCELLED; returns that state ("" on timeout).
  std::string WaitForEnd(const std::string& job, absl::Duration timeout);
  // The output of `rank` of `job` in `generation`, from whichever agent ran it ("" if none yet).
  std::string RankLog(const std::string& job, int generation, int rank) const;
  // The agent (index) whose work directory holds the log of `rank` of `job` in `generation`, or
  // -1 when none does yet.
  int RankAgent(const std::string& job, int generation, int rank) const;
  // The /metrics port agent `i` logged (on agent_address(i)), or 0.
  int AgentMetricsPort(int i) const;

  // Faults on agent i's veth. Degrade limits both directions to `bits_per_second` with a token
  // bucket (tc tbf as the root qdisc on the egress of both ends: eth0 in the agent's namespace,
  // v<i> in the hub); Restore removes it (OK when none). Cut sets the hub end v<i> down (the
  // agent's eth0 loses its carrier: nothing passes either way, the agent process lives on);
  // Heal sets it up again. Idempotent.
  absl::Status Degrade(int i, int64_t bits_per_second);
  absl::Status Restore(int i);
  absl::Status Cut(int i);
  absl::Status Heal(int i);
  // The byte counters of agent i's veth now.
  absl::StatusOr<LinkCounters> LinkBytes(int i) const;

  // The namespaces whose names start with `prefix` now (for leftover checks).
  static std::vector<std::string> NamespacesWithPrefix(const std::string& prefix);

 private:
  NetnsCluster() = default;
  absl::Status CreateNetwork(int agents);
  absl::Status EnterHub();
  absl::Status StartAgent(int i);
  absl::Status CheckAgent(int i) const;  // INVALID_ARGUMENT unless 0 <= i < agents
  void Teardown();

  std::string prefix_, hub_;
  std::vector<std::string> agent_ns_;  // every name recorded before it is created
  int original_netns_fd_ = -1;         // the calling thread's namespace before Start
  std::vector<bool> degraded_;
  std::string dir_, socket_dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::vector<Subprocess> agents_;
  std::vector<std::vector<std::string>> agent_argv_;
  std::vector<std::string> work_dirs_;
};

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_NETNS_CLUSTER_H_
