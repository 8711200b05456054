// Where the job manager sends commands for agents. The AgentService implements it over the
// agents' streams; tests use a recording fake.
#ifndef RINGMASTER_COORDINATOR_AGENT_COMMAND_SINK_H_
#define RINGMASTER_COORDINATOR_AGENT_COMMAND_SINK_H_

#include <string>

#include "proto/ringmaster/v1/agent.pb.h"

namespace ringmaster::coordinator {

class AgentCommandSink {
 public:
  virtual ~AgentCommandSink() = default;
  // Queues `message` for the agent of `node` without blocking. Returns false if the node has no
  // open stream (the message is dropped; reconciliation on reconnect covers it).
  // Thread-safe; may be called with the job manager's lock held, so it must not call back into
  // the job manager.
  virtual bool Send(const std::string& node, const v1::CoordinatorMessage& message) = 0;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_AGENT_COMMAND_SINK_H_
