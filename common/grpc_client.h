// Client channels the Ringmaster way: TLS (optionally with a client certificate for mutual TLS)
// unless plaintext is explicitly asked for.
#ifndef RINGMASTER_COMMON_GRPC_CLIENT_H_
#define RINGMASTER_COMMON_GRPC_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace ringmaster {

struct ClientTlsOptions {
  std::string ca_cert_path;      // PEM roots to verify the server; empty: system roots.
  std::string cert_chain_path;   // Client certificate for mutual TLS (optional).
  std::string private_key_path;  // Its key (required with cert_chain_path).
};

// Plaintext when `insecure`; otherwise TLS from `tls`. INVALID_ARGUMENT naming the flag if a file
// cannot be read or only one of certificate and key is given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& tls, bool insecure);

// A channel to `target` ("host:port" or "unix:/path") with the given credentials, receiving
// messages of up to kMaxGrpcMessageBytes (grpc_limits.h), as the servers do. With `keepalive`
// (zero: none; clamped to at least 1 s) the channel pings its server every `keepalive` and, when a
// ping is not answered within another `keepalive`, closes the connection and fails its calls
// (UNAVAILABLE): a server that stopped answering without closing the connection (its host lost, a
// network partition, a paused process) is noticed within twice `keepalive`, not TCP's 15 minutes.
// GrpcServer accepts pings that often.
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    absl::Duration keepalive = absl::ZeroDuration());

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_GRPC_CLIENT_H_
