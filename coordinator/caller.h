// Who is calling the JobService or the AgentService, as established by authentication (auth.h).
// A caller has one role: user (neither flag), admin, or agent. docs/security.md says what each
// service accepts from which role.
#ifndef RINGMASTER_COORDINATOR_CALLER_H_
#define RINGMASTER_COORDINATOR_CALLER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ringmaster::coordinator {

struct Caller {
  // Token name; "" when authentication is off (anonymous).
  std::string identity;
  // Admins may act on any job and read any job's environment values and logs.
  bool admin = false;
  // An agent's credential: accepted on the AgentService only (the JobService refuses it), and
  // the identity a node name is bound to (node_identities.h). Never together with `admin`.
  bool agent = false;
};

// Whether `caller` owns a job owned by `owner`, or is an admin: who may cancel it, ask for its
// link check, read its logs and see its environment values.
inline bool OwnsOrAdministers(const Caller& caller, absl::string_view owner) {
  return caller.admin || caller.identity == owner;
}

// OK when OwnsOrAdministers; else PERMISSION_DENIED naming the job, its owner and `action`.
inline absl::Status CheckOwnerOrAdmin(const Caller& caller, absl::string_view job_id,
                                      absl::string_view owner, absl::string_view action) {
  if (OwnsOrAdministers(caller, owner)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("job ", job_id, " belongs to \"", owner,
                                                  "\"; only its owner or an admin may ", action));
}

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_CALLER_H_
