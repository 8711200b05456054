#include "trainer/worker/collective_reporter.h"

#include "common/logging.h"

namespace ringmaster::trainer {

CollectiveReporter::CollectiveReporter(AgentClient* agent,
                                       std::vector<const Communicator*> communicators,
                                       absl::Duration interval)
    : agent_(agent),
      communicators_(std::move(communicators)),
      interval_(interval),
      thread_([this] { Loop(); }) {}

CollectiveReporter::~CollectiveReporter() {
  stop_.Notify();
  thread_.join();
}

void CollectiveReporter::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    v1::ReportCollectivesRequest request;
    for (const Communicator* c : communicators_) {
      (*request.mutable_collective_entered())[c->name()] = c->entered();
      (*request.mutable_collective_completed())[c->name()] = c->completed();
    }
    absl::Status s = agent_->ReportCollectives(request);
    // A lost agent is noticed by the training thread's own calls; this side report only adds
    // detail, so its failure is logged at debug level and the next interval tries again.
    if (!s.ok()) RM_LOG(DEBUG) << "collective report: " << s;
  }
}

}  // namespace ringmaster::trainer
