// The Register message a node agent sends, for coordinator unit tests that register nodes
// without an agent. A pure function; thread-safe; the message is returned by value (the caller
// owns it). Errors: none (no input is checked; tests pass sensible values).
#ifndef RINGMASTER_COORDINATOR_TESTING_NODE_REGISTRATION_H_
#define RINGMASTER_COORDINATOR_TESTING_NODE_REGISTRATION_H_

#include <string>

#include "proto/ringmaster/v1/agent.pb.h"

namespace ringmaster::coordinator {

// Node `name` at host "<name>.local" with `devices` CPU devices, indexed 0 to devices - 1 and
// split evenly, in index order, over `domains` interconnect domains.
v1::Register NodeRegistration(const std::string& name, int devices, int domains = 1);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_TESTING_NODE_REGISTRATION_H_
