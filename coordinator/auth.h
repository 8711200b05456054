// Bearer-token authentication of JobService clients and AgentService agents.
//
// The tokens file (--tokens) has one token per line: `TOKEN NAME [admin|agent]`; `#` starts a
// comment. NAME is the caller's identity (the owner recorded on the jobs it submits); `admin` may
// act on anyone's job (caller.h says what only owners and admins may do); `agent` is an agent's
// credential: the AgentService accepts only these once the file has one, the JobService never
// (docs/security.md). Without a tokens file authentication is off: every caller is anonymous
// (identity "", no role) and may act only on anonymous jobs.
//
// Thread-safe (immutable after construction).
#ifndef RINGMASTER_COORDINATOR_AUTH_H_
#define RINGMASTER_COORDINATOR_AUTH_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "coordinator/caller.h"

namespace ringmaster::coordinator {

class TokenAuthenticator {
 public:
  // Authentication off.
  TokenAuthenticator() = default;

  // Parses a tokens file's contents. INVALID_ARGUMENT "tokens:LINE: ..." for a malformed line or
  // a duplicate token.
  static absl::StatusOr<TokenAuthenticator> FromText(const std::string& text);
  static absl::StatusOr<TokenAuthenticator> FromFile(const std::string& path);

  bool enabled() const { return enabled_; }
  // Whether the file has at least one `agent` token: then agents are authenticated
  // (AgentService.Connect refuses every other caller).
  bool has_agent_tokens() const { return has_agent_tokens_; }

  // `authorization` is the request's "authorization" metadata ("Bearer TOKEN"), empty if absent.
  // UNAUTHENTICATED when auth is on and the header is missing, malformed or unknown.
  absl::StatusOr<Caller> Authenticate(const std::string& authorization) const;

 private:
  bool enabled_ = false;
  bool has_agent_tokens_ = false;
  absl::flat_hash_map<std::string, Caller> tokens_;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_AUTH_H_
