// The largest gRPC message Ringmaster's servers and channels take, in both directions: gRPC's
// default 4 MiB for receiving is too small for a list of large jobs, a job's events, or a launch
// of thousands of ranks.
#ifndef RINGMASTER_COMMON_GRPC_LIMITS_H_
#define RINGMASTER_COMMON_GRPC_LIMITS_H_

namespace ringmaster {

inline constexpr int kMaxGrpcMessageBytes = 64 * 1024 * 1024;

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_GRPC_LIMITS_H_
