// Simulated agents for load tests: many AgentService streams over real gRPC, on the callback
// client API (no thread per agent). Each agent registers with `devices_per_agent` CPU slots,
// heartbeats when told to, and answers LaunchWorkers like a real agent's workers would for a
// rendezvous: global rank 0 sets `rendezvous_key`, every other rank waits for it. When a rank's
// rendezvous answer arrives it reports the rank EXITED with code 0, so the job can succeed (at
// once, or when ReleaseExits is called if `hold_exits` is set).
//
// Thread-safe.
#ifndef RINGMASTER_BENCH_SIM_AGENT_FLEET_H_
#define RINGMASTER_BENCH_SIM_AGENT_FLEET_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "proto/ringmaster/v1/agent.grpc.pb.h"

namespace ringmaster::bench {

struct FleetOptions {
  std::string target;  // Coordinator HOST:PORT (plaintext).
  int agents = 1;
  int devices_per_agent = 8;
  int channels = 64;  // Agents are spread over this many connections.
  std::string rendezvous_key = "bench";
  absl::Duration rendezvous_timeout = absl::Seconds(60);
  // When set, ranks keep running after their rendezvous until ReleaseExits().
  bool hold_exits = false;
};

class SimAgentFleet {
 public:
  explicit SimAgentFleet(FleetOptions options);
  // Shuts down and waits until every stream ended; aborts if one has not after 30 s (its agent
  // would call into freed memory later).
  ~SimAgentFleet();

  // Opens every stream (each agent registers first thing); call once.
  void Connect();
  // Waits until each agent got its RegisterAck. UNAVAILABLE on timeout.
  absl::Status AwaitRegistered(absl::Duration timeout);
  // Both of the above.
  absl::Status Register(absl::Duration timeout);
  // Queues one heartbeat on every stream (after its Register). Safe alongside Shutdown (a stream
  // gRPC finished takes no more writes) and, after Connect, alongside AwaitRegistered.
  void HeartbeatAll();
  // Waits until `ranks` rendezvous answers arrived (OK or not); returns how many were OK, or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int64_t> WaitForRendezvous(int64_t ranks, absl::Duration timeout);
  // Reports every rank held by `hold_exits` as EXITED with code 0; later ranks exit at once.
  void ReleaseExits();
  // Closes every stream.
  void Shutdown();

  class Agent;

 private:
  friend class Agent;
  void OnRegistered();
  void OnRendezvousAnswer(bool ok);
  bool ExitsReleased();

  const FleetOptions options_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::AgentService::Stub>> stubs_;  // One per channel.
  std::vector<Agent*> agents_;  // Owned; deleted after their streams are done.
  absl::Mutex mu_;
  int64_t registered_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t answers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ok_answers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  bool exits_released_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ringmaster::bench

#endif  // RINGMASTER_BENCH_SIM_AGENT_FLEET_H_
