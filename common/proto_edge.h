// The API edge's rules for protobuf messages that come from outside the process (a client, an
// agent, the coordinator, a store written by an older binary): parse with bounded nesting, drop
// unknown fields, bound a job spec's size.
//
// Why: protobuf keeps unknown fields and re-serializes them. An unknown group nested 99 levels
// deep inside a JobSpec parses within protobuf's recursion limit of 100, but once the spec is
// wrapped in a JobStatus and a ListJobsResponse (or a LaunchWorkers and a CoordinatorMessage) it
// is deeper than 100 and the receiver cannot parse it: `ringctl get jobs` failed and agents were
// cut off. No message in proto/ringmaster/v1 is recursive (proto_edge_test checks it), so once
// unknown fields are gone a message's nesting is bounded by its schema (a few levels); nothing
// Ringmaster wraps it in can push it past the receiver's limit.
//
// Stateless functions; thread-safe. Errors are INVALID_ARGUMENT in FieldError's form.
#ifndef RINGMASTER_COMMON_PROTO_EDGE_H_
#define RINGMASTER_COMMON_PROTO_EDGE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace ringmaster {

// The deepest nesting ParseIncoming accepts (messages and groups, known or not). Well above
// what the schema allows, well below protobuf's default of 100.
inline constexpr int kMaxIncomingNesting = 32;

// The largest job spec, as JSON (what `ringctl submit` reads and what a worker gets in
// RINGMASTER_JOB_SPEC_JSON, where Linux allows one environment string 128 KiB).
inline constexpr size_t kMaxJobSpecJsonBytes = 64 * 1024;

// Drops the unknown fields of `message` and of every message inside it. Returns whether there
// were any.
bool SanitizeIncoming(google::protobuf::Message* message);

// Parses `bytes` into `message` (cleared first) with nesting bounded by kMaxIncomingNesting, then
// SanitizeIncoming()s it. INVALID_ARGUMENT "request: ..." naming the message type when the bytes
// are not a valid message or nest deeper.
absl::Status ParseIncoming(const grpc::ByteBuffer& bytes, google::protobuf::Message* message);

// `message` as a gRPC payload.
grpc::ByteBuffer SerializeOutgoing(const google::protobuf::Message& message);

// INVALID_ARGUMENT "<field>: must be at most <limit> bytes as JSON, got <n>" when `message`'s
// JSON form (proto3 JSON, as the job file reader and RINGMASTER_JOB_SPEC_JSON write it) is
// longer than `limit`; also when it has no JSON form.
absl::Status CheckJsonSize(const google::protobuf::Message& message, absl::string_view field,
                           size_t limit);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_PROTO_EDGE_H_
