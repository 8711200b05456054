#include "ctl/client.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/grpc_client.h"
#include "common/grpc_status.h"
#include "common/status.h"

namespace ringmaster::ctl {

absl::StatusOr<Client> Client::Connect(const ClientOptions& options) {
  if (options.coordinator.empty()) {
    return FieldError("--coordinator", "not set (nor RINGMASTER_COORDINATOR)");
  }
  ClientTlsOptions tls{options.tls_ca, options.tls_cert, options.tls_key};
  ASSIGN_OR_RETURN(auto credentials, MakeChannelCredentials(tls, options.insecure));
  Client client;
  client.options_ = options;
  client.channel_ = MakeChannel(options.coordinator, credentials);
  client.stub_ = v1::JobService::NewStub(client.channel_);
  return client;
}

std::unique_ptr<grpc::ClientContext> Client::Context(bool streaming) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!options_.token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.token);
  }
  if (!streaming) context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  return context;
}

std::string Client::ConnectHint(absl::string_view message) const {
  if (absl::StrContains(message, "wrong version number") ||
      (!options_.insecure && absl::StrContains(message, "Ssl handshake failed") &&
       !absl::StrContains(message, "certificate verify failed"))) {
    return ". The coordinator speaks plaintext, not TLS (a local cluster from tools/cluster?): "
           "pass --insecure or set RINGMASTER_INSECURE=1 (`source DIR/env` does)";
  }
  if (absl::StrContains(message, "certificate verify failed")) {
    return ". The coordinator's certificate is not signed by a CA ringctl trusts: pass "
           "--tls_ca=FILE (or set RINGMASTER_TLS_CA) with the CA that signed it";
  }
  if (options_.insecure && (absl::StrContains(message, "Socket closed") ||
                            absl::StrContains(message, "Connection reset"))) {
    return ". The coordinator may speak TLS while ringctl speaks plaintext (--insecure or "
           "RINGMASTER_INSECURE): drop them, and pass --tls_ca=FILE for a private CA";
  }
  if (absl::StrContains(message, "Connection refused")) {
    return ". Nothing listens there: is the coordinator running, and is --coordinator "
           "(RINGMASTER_COORDINATOR) its address?";
  }
  return "";
}

absl::Status Client::Check(const grpc::Status& status) const {
  absl::Status s = FromGrpcStatus(status);
  if (s.ok()) return s;
  std::string message = absl::StrReplaceAll(s.message(), {{"\n", " "}});
  if (s.code() == absl::StatusCode::kUnavailable ||
      s.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::Status(s.code(), absl::StrCat("coordinator ", options_.coordinator,
                                               " unreachable: ", message, ConnectHint(message)));
  }
  if (s.code() == absl::StatusCode::kNotFound && absl::StartsWith(message, "no job ")) {
    absl::StrAppend(&message, ": `ringctl get jobs` lists the jobs you may see");
  }
  return absl::Status(s.code(), message);
}

}  // namespace ringmaster::ctl
