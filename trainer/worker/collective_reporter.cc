#include "trainer/worker/collective_reporter.h"

#include <map>
#include <string>

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
  std::map<std::string, std::pair<int64_t, int64_t>> sent;
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    v1::ReportCollectivesRequest request;
    bool changed = false;
    for (const Communicator* c : communicators_) {
      const std::pair<int64_t, int64_t> now = {c->entered(), c->completed()};
      (*request.mutable_collective_entered())[c->name()] = now.first;
      (*request.mutable_collective_completed())[c->name()] = now.second;
      auto [it, added] = sent.try_emplace(c->name(), now);
      if (added || it->second != now) changed = true;
      it->second = now;
    }
    if (!changed) continue;
    absl::Status s = agent_->ReportCollectives(request);
    // A lost agent is noticed by the training thread's own calls; this side report only adds
    // detail, so its failure is logged at debug level and the next change is sent again.
    if (!s.ok()) RM_LOG(DEBUG) << "collective report: " << s;
  }
}

}  // namespace ringmaster::trainer
