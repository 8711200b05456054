// Refusing calls with a bad token before their request is read (issue 34: a server reads a whole
// request, up to the receive limit, before its handler can check the caller).
//
// gRPC runs a server credential's AuthMetadataProcessor on a call's headers, before the call is
// handed to a service and before any message of it is read; a call it refuses ends there with
// its status, and its body is never buffered. gRPC offers this hook only on secure (TLS) server
// credentials, so with --insecure the receive limit (common/grpc_limits.h) alone bounds what an
// unauthenticated caller can make the coordinator hold.
//
// What it refuses (UNAUTHENTICATED, with TokenAuthenticator's message), by the call's method path:
//   - /ringmaster.v1.JobService/...: when authentication is on, a missing or unknown token;
//   - /ringmaster.v1.AgentService/...: when the tokens file has agent tokens, the same;
//   - anything else (health, reflection): nothing.
// It only screens: roles (admin, agent, user) stay the services' business, and they authenticate
// every call again. It consumes no metadata, so the services still see "authorization".
//
// Thread-safe: gRPC may call Process from many threads at once; `auth` is immutable and must
// outlive the server.
#ifndef RINGMASTER_COORDINATOR_AUTH_METADATA_PROCESSOR_H_
#define RINGMASTER_COORDINATOR_AUTH_METADATA_PROCESSOR_H_

#include <memory>

#include "coordinator/auth.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/server_credentials.h"

namespace ringmaster::coordinator {

class TokenMetadataProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenMetadataProcessor(const TokenAuthenticator* auth) : auth_(auth) {}

  // A map lookup: cheap enough for gRPC's own threads.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const TokenAuthenticator* const auth_;
};

// Installs a TokenMetadataProcessor on `credentials` when they are secure and authentication is
// on; does nothing otherwise (insecure credentials have no such hook).
void InstallTokenMetadataProcessor(grpc::ServerCredentials* credentials,
                                   const TokenAuthenticator* auth, bool insecure);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_AUTH_METADATA_PROCESSOR_H_
