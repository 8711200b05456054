// Message size limits of Ringmaster's gRPC servers and channels.
//
// Sending is generous in both directions (kMaxGrpcMessageBytes, 64 MiB): a list of large jobs, a
// job's events or a launch of thousands of ranks can be big, and clients receive as much.
//
// What a SERVER receives is bounded much lower (kMaxGrpcServerReceiveBytes, 4 MiB), because it
// reads a request before its handler can check who sent it: with 64 MiB, eight concurrent 60 MiB
// SubmitJob calls with a bogus token peaked the coordinator at 1.05 GB of RSS (issue 34). gRPC C++
// has one receive limit per server, not per method or service (ServerBuilder::
// SetMaxReceiveMessageSize; a per-method service config is a client-side feature), so the limit
// is the largest legitimate request of any service, with margin:
//   - JobService requests: a job spec is at most 64 KiB as JSON; none needs more than ~1 MiB;
//   - AgentService (agent -> coordinator stream): LogData chunks of 64 KiB (ReadLog.max_bytes from
//     the coordinator), rendezvous values of at most 1 MiB (RendezvousManager::kMaxValueBytes)
//     plus key, and small heartbeats and reports;
//   - WorkerService (worker -> agent): the same rendezvous values and small reports.
// A larger message fails with RESOURCE_EXHAUSTED before it reaches a handler.
//
// The receive limit alone does not bound memory: gRPC 1.51 (Debian 12) buffers a whole message,
// however large its length prefix says it is, before checking it (measured: eight concurrent
// 60 MiB requests still peaked at 371 MiB with a 4 MiB limit). Two things do:
//   - with TLS, the coordinator refuses a JobService or AgentService call with a bad token on its
//     headers, before any of its body is read (coordinator/auth_metadata_processor.h: 24 MiB
//     peak for the same attack);
//   - a memory quota on each server's transport (kGrpcServerMemoryQuotaBytes, a ResourceQuota):
//     past it gRPC shrinks flow-control windows and cancels calls, so what unauthenticated
//     plaintext callers (--insecure) or authenticated ones can make a server hold at once is
//     bounded (206 MiB peak for the attack over plaintext, RSS included).
#ifndef RINGMASTER_COMMON_GRPC_LIMITS_H_
#define RINGMASTER_COMMON_GRPC_LIMITS_H_

namespace ringmaster {

// Largest message sent by servers and clients, and received by clients.
inline constexpr int kMaxGrpcMessageBytes = 64 * 1024 * 1024;
// Largest message a server receives (see above for why it fits every request).
inline constexpr int kMaxGrpcServerReceiveBytes = 4 * 1024 * 1024;
// Memory a server's gRPC transport may hold: dozens of the largest legitimate requests at once.
inline constexpr int kGrpcServerMemoryQuotaBytes = 128 * 1024 * 1024;

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_GRPC_LIMITS_H_
