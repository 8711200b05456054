#include "coordinator/auth_metadata_processor.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace ringmaster::coordinator {
namespace {

absl::string_view View(const grpc::string_ref& s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

grpc::Status TokenMetadataProcessor::Process(const InputMetadata& auth_metadata,
                                             grpc::AuthContext* /*context*/,
                                             OutputMetadata* /*consumed_auth_metadata*/,
                                             OutputMetadata* /*response_metadata*/) {
  absl::string_view path;
  std::string authorization;
  for (const auto& [key, value] : auth_metadata) {
    if (View(key) == ":path") path = View(value);
    if (View(key) == "authorization") authorization = std::string(View(value));
  }
  bool screened = false;
  if (absl::StartsWith(path, "/ringmaster.v1.JobService/")) {
    screened = auth_->enabled();
  } else if (absl::StartsWith(path, "/ringmaster.v1.AgentService/")) {
    screened = auth_->has_agent_tokens();
  }
  if (!screened) return grpc::Status::OK;
  const absl::StatusOr<Caller> caller = auth_->Authenticate(authorization);
  if (!caller.ok()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(caller.status().message()));
  }
  return grpc::Status::OK;
}

void InstallTokenMetadataProcessor(grpc::ServerCredentials* credentials,
                                   const TokenAuthenticator* auth, bool insecure) {
  // InsecureServerCredentials has no processor hook (gRPC aborts if one is set).
  if (insecure || !auth->enabled()) return;
  credentials->SetAuthMetadataProcessor(std::make_shared<TokenMetadataProcessor>(auth));
}

}  // namespace ringmaster::coordinator
