// Starting a gRPC server the Ringmaster way: the standard health service (grpc.health.v1.Health)
// and server reflection are always on, the bound port is read back (so tests bind port 0),
// credentials are explicit (see MakeServerCredentials: plaintext only when asked for), and what a
// server receives is bounded (a 4 MiB message limit and a 128 MiB transport memory quota by
// default; grpc_limits.h says why).
#ifndef RINGMASTER_COMMON_GRPC_SERVER_H_
#define RINGMASTER_COMMON_GRPC_SERVER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_limits.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"

namespace ringmaster {

// TLS material for a server. Empty cert and key mean plaintext, which the caller allows only
// with an explicit --insecure flag.
struct ServerTlsOptions {
  std::string ca_cert_path;      // When set, clients must present a certificate signed by it.
  std::string cert_chain_path;   // PEM certificate chain of the server.
  std::string private_key_path;  // PEM private key of the server.
};

// Builds server credentials: insecure when `insecure` is true; otherwise TLS from `tls`
// (INVALID_ARGUMENT naming the flag if a file is missing or unreadable, or if neither TLS
// material nor `insecure` is given).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& tls, bool insecure);

struct GrpcServerOptions {
  // "127.0.0.1:0", "0.0.0.0:7070", or "unix:/path/to/socket".
  std::string address;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Services to serve; not owned, must outlive the server.
  std::vector<grpc::Service*> services;
  // Largest message received: a request (or stream message) beyond it fails with
  // RESOURCE_EXHAUSTED before any handler sees it. See grpc_limits.h.
  int max_receive_message_bytes = kMaxGrpcServerReceiveBytes;
  // Largest message sent (replies, server-stream messages).
  int max_send_message_bytes = kMaxGrpcMessageBytes;
  // Memory the server's transport may hold for connections and calls (0: unbounded). Under
  // pressure gRPC shrinks flow-control windows and at the limit cancels calls
  // (RESOURCE_EXHAUSTED). See grpc_limits.h.
  size_t memory_quota_bytes = kGrpcServerMemoryQuotaBytes;
};

// A running gRPC server. Thread-safe.
class GrpcServer {
 public:
  // Starts serving. UNAVAILABLE if the address cannot be bound. The whole server (health service
  // name "") is marked SERVING; mark individual services with SetServing().
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options);
  ~GrpcServer();  // Shuts down (with a short grace period) and waits.

  // Bound TCP port (0 for Unix sockets).
  int port() const { return port_; }
  // Marks `service` ("" for the whole server) SERVING or NOT_SERVING.
  void SetServing(const std::string& service, bool serving);
  // Stops accepting calls; calls in flight get until `grace` to finish, then are cancelled.
  void Shutdown(absl::Duration grace = absl::Seconds(2));
  // Blocks until Shutdown() is called and completes.
  void Wait();

 private:
  GrpcServer(std::unique_ptr<grpc::Server> server, int port)
      : server_(std::move(server)), port_(port) {}
  std::unique_ptr<grpc::Server> server_;
  int port_;
};

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_GRPC_SERVER_H_
