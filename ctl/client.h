// ringctl's connection to the coordinator: address, TLS, bearer token, deadlines, and turning
// gRPC errors into one line a person can act on.
#ifndef RINGMASTER_CTL_CLIENT_H_
#define RINGMASTER_CTL_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "proto/ringmaster/v1/coordinator.grpc.pb.h"

namespace ringmaster::ctl {

struct ClientOptions {
  std::string coordinator;  // HOST:PORT; required.
  std::string token;        // Bearer token; may be empty.
  bool insecure = false;
  std::string tls_ca, tls_cert, tls_key;
  absl::Duration timeout = absl::Seconds(10);  // Per unary call.
};

class Client {
 public:
  // INVALID_ARGUMENT naming the flag for a missing address or unreadable TLS files.
  static absl::StatusOr<Client> Connect(const ClientOptions& options);

  v1::JobService::Stub* jobs() const { return stub_.get(); }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

  // A context with the token and (unless `streaming`) the per-call deadline.
  std::unique_ptr<grpc::ClientContext> Context(bool streaming = false) const;

  // Converts an RPC's status to a one-line absl::Status; UNAVAILABLE becomes
  // "coordinator HOST:PORT unreachable: ..." followed by what to do when the cause is known (TLS
  // against a plaintext coordinator, plaintext against TLS, an untrusted certificate, nothing
  // listening); NOT_FOUND for a job says how to list the jobs.
  absl::Status Check(const grpc::Status& status) const;

 private:
  // ". What to do ..." for a connection failure's message, or "".
  std::string ConnectHint(absl::string_view message) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_CLIENT_H_
