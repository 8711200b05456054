// Sends the worker's collective sequence numbers to its agent from a side thread every
// `interval` — also while the training thread is blocked inside a collective. That is what lets
// the coordinator name, in a hang, the rank that never entered the collective its peers wait in,
// or the rank whose process stopped reporting altogether (a SIGSTOPped process stops this thread
// too). These reports are not progress: the agent's watchdog ignores them.
//
// Thread-safe; the communicators and the agent client must outlive the reporter.
#ifndef RINGMASTER_TRAINER_WORKER_COLLECTIVE_REPORTER_H_
#define RINGMASTER_TRAINER_WORKER_COLLECTIVE_REPORTER_H_

#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "trainer/comm/communicator.h"
#include "trainer/worker/agent_client.h"

namespace ringmaster::trainer {

class CollectiveReporter {
 public:
  CollectiveReporter(AgentClient* agent, std::vector<const Communicator*> communicators,
                     absl::Duration interval);
  // Stops the thread.
  ~CollectiveReporter();

 private:
  void Loop();

  AgentClient* const agent_;
  const std::vector<const Communicator*> communicators_;
  const absl::Duration interval_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_WORKER_COLLECTIVE_REPORTER_H_
