// The single boundary between absl::Status and grpc::Status.
//
// gRPC handlers call managers that return absl::Status and convert here, exactly once; clients
// convert a grpc::Status back as soon as an RPC returns. Codes map one to one (both use the
// canonical google.rpc codes); messages are kept verbatim.
#ifndef RINGMASTER_COMMON_GRPC_STATUS_H_
#define RINGMASTER_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace ringmaster {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_GRPC_STATUS_H_
