// Who is calling the JobService, as established by authentication (auth.h).
#ifndef RINGMASTER_COORDINATOR_CALLER_H_
#define RINGMASTER_COORDINATOR_CALLER_H_

#include <string>

namespace ringmaster::coordinator {

struct Caller {
  // Token name; "" when authentication is off (anonymous).
  std::string identity;
  // Admins may cancel any job.
  bool admin = false;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_CALLER_H_
