// Client side of the standard gRPC health service (grpc.health.v1.Health/Check), without a
// generated stub (Debian ships no health client headers): the request and response are two tiny
// messages encoded on the wire by hand. Used by `ringctl health`, tools/demo and tests.
#ifndef RINGMASTER_COMMON_GRPC_HEALTH_CLIENT_H_
#define RINGMASTER_COMMON_GRPC_HEALTH_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace ringmaster {

enum class ServingStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

// Asks `channel` for the health of `service` ("" = the whole server). Errors: the RPC's status
// (UNAVAILABLE if unreachable, NOT_FOUND for a service the server does not know,
// DEADLINE_EXCEEDED after `timeout`), INTERNAL for an unparseable reply.
absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                          const std::string& service,
                                          absl::Duration timeout = absl::Seconds(5));

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_GRPC_HEALTH_CLIENT_H_
