// The worker report socket: a Unix datagram socket (SOCK_DGRAM) beside the worker API's socket,
// whose path every worker gets in RINGMASTER_REPORT_SOCKET. Each datagram is one v1::WorkerReport
// in protobuf's JSON form (worker.proto): the way a program without a gRPC stack reports (the
// Python watch, python/watch). There is no reply.
//
// A datagram is refused, counted in ringmaster_agent_worker_reports_refused_total{reason} and
// logged (the first kRefusalsLoggedInFull, then one in that many), when it is
//   - larger than kMaxReportDatagramBytes (reason "size": the kernel truncated it);
//   - not UTF-8 JSON of a WorkerReport, or nested deeper than kMaxIncomingNesting (reason
//     "parse"; unknown fields are ignored, as common/proto_edge.h drops them from binary
//     messages);
//   - refused by the handler: PERMISSION_DENIED or FAILED_PRECONDITION (reason "identity": not
//     a worker running here with that token, or a stale generation), anything else (reason
//     "invalid": the report's form, see report_validation.h).
// The reader survives every datagram.
//
// Threading: one reader thread of its own, from Start() until Stop() (or destruction); the
// handler runs on it, one datagram at a time. Ownership: owns the socket and its file (removed
// by Stop()); the handler and the registry are borrowed and must outlive the socket. Errors:
// Start() fails with FieldError("--worker_socket", ...) for a path too long for a Unix socket,
// UNAVAILABLE when the socket cannot be made.
#ifndef RINGMASTER_AGENT_REPORT_SOCKET_H_
#define RINGMASTER_AGENT_REPORT_SOCKET_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/metrics/registry.h"
#include "common/unique_fd.h"
#include "proto/ringmaster/v1/worker.pb.h"

namespace ringmaster::agent {

// The largest datagram accepted (worker.proto's WorkerReport).
inline constexpr size_t kMaxReportDatagramBytes = 65536;

// The report socket's path for the worker API's socket `worker_socket`: in the same directory,
// "NAME-report.sock" for "NAME.sock", else the path with "-report" appended.
std::string ReportSocketPath(const std::string& worker_socket);

// Parses one datagram as a v1::WorkerReport: INVALID_ARGUMENT "report: ..." when it is larger
// than kMaxReportDatagramBytes, not UTF-8, nests JSON deeper than kMaxIncomingNesting, or is not
// the JSON of a WorkerReport. Unknown fields are ignored.
absl::StatusOr<v1::WorkerReport> ParseReportDatagram(absl::string_view datagram);

class ReportSocket {
 public:
  // What a datagram's report goes to (WorkerService::HandleReport).
  using Handler = std::function<absl::Status(const v1::WorkerReport&)>;

  // Refusals logged in full: the first ones, then one in this many.
  static constexpr int64_t kRefusalsLoggedInFull = 100;

  // Binds `path` (a stale socket file there is replaced), registers the refusal counter in
  // `registry` and starts the reader.
  static absl::StatusOr<std::unique_ptr<ReportSocket>> Start(const std::string& path,
                                                             Handler handler,
                                                             metrics::Registry* registry);
  ~ReportSocket();
  ReportSocket(const ReportSocket&) = delete;
  ReportSocket& operator=(const ReportSocket&) = delete;

  // Stops the reader (a datagram being handled is finished first), closes the socket and
  // removes its file. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }
  // Datagrams handled without refusal (for tests).
  int64_t accepted() const { return accepted_.load(); }

 private:
  ReportSocket(std::string path, UniqueFd socket, UniqueFd wake_read, UniqueFd wake_write,
               Handler handler, metrics::CounterFamily* refused);
  void ReadLoop();
  void Handle(absl::string_view datagram, size_t size);
  void Refuse(const char* reason, const absl::Status& status);

  const std::string path_;
  UniqueFd socket_;
  UniqueFd wake_read_;   // readable once Stop() wants the reader gone
  UniqueFd wake_write_;
  const Handler handler_;
  metrics::CounterFamily* const refused_;
  std::atomic<int64_t> refusals_{0};
  std::atomic<int64_t> accepted_{0};
  std::thread reader_;
  std::atomic<bool> stopped_{false};
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_REPORT_SOCKET_H_
