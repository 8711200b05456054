#include "common/grpc_server.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/pem_file.h"
#include "common/status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/server_builder.h"

namespace ringmaster {
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& tls, bool insecure) {
  if (insecure) return grpc::InsecureServerCredentials();
  if (tls.cert_chain_path.empty() || tls.private_key_path.empty()) {
    return FieldError("--tls_cert/--tls_key",
                      "required unless --insecure is given (plaintext must be asked for)");
  }
  grpc::SslServerCredentialsOptions options(
      tls.ca_cert_path.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                               : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile("--tls_cert", tls.cert_chain_path));
  ASSIGN_OR_RETURN(pair.private_key, ReadPemFile("--tls_key", tls.private_key_path));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.ca_cert_path.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPemFile("--tls_ca", tls.ca_cert_path));
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options) {
  // Both are process-wide switches that must be set before the first ServerBuilder is created;
  // setting them again is harmless.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  if (options.credentials == nullptr) {
    return absl::InvalidArgumentError("grpc server: credentials must be set");
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.address, options.credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(options.max_send_message_bytes);
  // gRPC reads a whole request before checking it against the receive limit or handing it to
  // a handler: the quota is what bounds the memory many large requests can take at once
  // (grpc_limits.h).
  if (options.memory_quota_bytes > 0) {
    builder.SetResourceQuota(
        grpc::ResourceQuota("ringmaster-server").Resize(options.memory_quota_bytes));
  }
  // Clients' keepalive pings (MakeChannel's `keepalive`, from 1 s) are accepted down to half a
  // second apart, also on connections this server sends nothing on: by default it would close
  // those (GOAWAY "too_many_pings") after a few pings less than 5 minutes apart. Half, not all of
  // the client's shortest: both timers are approximate.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  for (grpc::Service* service : options.services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (port == 0 && !absl::StartsWith(options.address, "unix:"))) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", options.address));
  }
  if (absl::StartsWith(options.address, "unix:")) port = 0;
  std::unique_ptr<GrpcServer> result(new GrpcServer(std::move(server), port));
  result->SetServing("", true);
  return result;
}

GrpcServer::~GrpcServer() { Shutdown(); }

void GrpcServer::SetServing(const std::string& service, bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;  // Cannot happen: enabled in Start().
  if (service.empty()) {
    health->SetServingStatus(serving);
  } else {
    health->SetServingStatus(service, serving);
  }
}

void GrpcServer::Shutdown(absl::Duration grace) {
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

void GrpcServer::Wait() { server_->Wait(); }

}  // namespace ringmaster
