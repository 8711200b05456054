#include "common/grpc_client.h"

#include <algorithm>

#include "common/grpc_limits.h"
#include "common/pem_file.h"
#include "common/status.h"
#include "grpcpp/create_channel.h"

namespace ringmaster {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& tls, bool insecure) {
  if (insecure) return grpc::InsecureChannelCredentials();
  if (tls.cert_chain_path.empty() != tls.private_key_path.empty()) {
    return FieldError("--tls_cert/--tls_key", "give both or neither");
  }
  grpc::SslCredentialsOptions options;
  if (!tls.ca_cert_path.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPemFile("--tls_ca", tls.ca_cert_path));
  }
  if (!tls.cert_chain_path.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain, ReadPemFile("--tls_cert", tls.cert_chain_path));
    ASSIGN_OR_RETURN(options.pem_private_key, ReadPemFile("--tls_key", tls.private_key_path));
  }
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    absl::Duration keepalive) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  if (keepalive > absl::ZeroDuration()) {
    // GrpcServer accepts pings half a second apart: 1 s keeps a margin.
    const int ms = static_cast<int>(
        std::clamp<int64_t>(absl::ToInt64Milliseconds(keepalive), 1000, 24 * 3600 * 1000));
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ms);
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms);
    // Pings go on while the calls send no data (an agent's stream between heartbeats, or one
    // whose writes are stuck behind the dead connection).
    arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  return grpc::CreateCustomChannel(target, credentials, arguments);
}

}  // namespace ringmaster
