#include "agent/report_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/proto_edge.h"
#include "common/status.h"
#include "common/utf8.h"
#include "google/protobuf/util/json_util.h"

namespace ringmaster::agent {
namespace {

constexpr size_t kMaxUnixPath = sizeof(sockaddr_un::sun_path) - 1;

// The deepest nesting of JSON objects and arrays in `json` (outside strings).
int JsonDepth(absl::string_view json) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

std::string ReportSocketPath(const std::string& worker_socket) {
  if (absl::EndsWith(worker_socket, ".sock")) {
    return absl::StrCat(worker_socket.substr(0, worker_socket.size() - 5), "-report.sock");
  }
  return absl::StrCat(worker_socket, "-report");
}

absl::StatusOr<v1::WorkerReport> ParseReportDatagram(absl::string_view datagram) {
  if (datagram.size() > kMaxReportDatagramBytes) {
    return FieldError("report", absl::StrCat("must be at most ", kMaxReportDatagramBytes,
                                             " bytes, got ", datagram.size()));
  }
  if (!IsUtf8(datagram)) return FieldError("report", "must be UTF-8");
  if (JsonDepth(datagram) > kMaxIncomingNesting) {
    return FieldError("report", absl::StrCat("must nest at most ", kMaxIncomingNesting,
                                             " levels of JSON objects and arrays"));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  v1::WorkerReport report;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(datagram.data(), datagram.size()), &report, options);
  if (!parsed.ok()) {
    return FieldError("report",
                      absl::StrCat("not the JSON of a ringmaster.v1.WorkerReport: ",
                                   std::string(parsed.message()).substr(0, 200)));
  }
  SanitizeIncoming(&report);  // nothing unknown survives JSON parsing; kept for symmetry
  return report;
}

absl::StatusOr<std::unique_ptr<ReportSocket>> ReportSocket::Start(const std::string& path,
                                                                  Handler handler,
                                                                  metrics::Registry* registry) {
  if (path.empty() || path.size() > kMaxUnixPath) {
    return FieldError("--worker_socket",
                      absl::StrCat("the report socket \"", path, "\" beside it must be 1 to ",
                                   kMaxUnixPath, " bytes, got ", path.size(),
                                   "; set --worker_socket to a shorter path"));
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return absl::UnavailableError(absl::StrCat("report socket: socket: ", std::strerror(errno)));
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);  // A stale socket from an earlier run.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("report socket: bind ", path, ": ", std::strerror(errno)));
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    std::filesystem::remove(path, ec);
    return absl::UnavailableError(absl::StrCat("report socket: pipe: ", std::strerror(errno)));
  }
  auto& refused = registry->AddCounter(
      "ringmaster_agent_worker_reports_refused_total",
      "Datagram reports (RINGMASTER_REPORT_SOCKET) the agent refused, by reason: size (over 64 "
      "KiB), parse (not the JSON of a WorkerReport), identity (not a worker running here with "
      "that token, or a stale generation), invalid (the report's figures or names).",
      {"reason"});
  for (const char* reason : {"size", "parse", "identity", "invalid"}) {
    refused.WithLabels({reason});  // every reason exported from the start, at 0
  }
  std::unique_ptr<ReportSocket> socket(new ReportSocket(path, std::move(fd),
                                                        UniqueFd(pipe_fds[0]),
                                                        UniqueFd(pipe_fds[1]),
                                                        std::move(handler), &refused));
  socket->reader_ = std::thread([s = socket.get()] { s->ReadLoop(); });
  return socket;
}

ReportSocket::ReportSocket(std::string path, UniqueFd socket, UniqueFd wake_read,
                           UniqueFd wake_write, Handler handler,
                           metrics::CounterFamily* refused)
    : path_(std::move(path)),
      socket_(std::move(socket)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      handler_(std::move(handler)),
      refused_(refused) {}

ReportSocket::~ReportSocket() { Stop(); }

void ReportSocket::Stop() {
  if (stopped_.exchange(true)) return;
  const char byte = 0;
  // The pipe is empty and ours: a failed write cannot happen short of a closed read end, which
  // only the destructor closes (after the join below).
  (void)!write(wake_write_.get(), &byte, 1);
  if (reader_.joinable()) reader_.join();
  socket_.reset();
  std::error_code ec;
  std::filesystem::remove(path_, ec);  // Gone already (someone removed it): nothing to do.
}

void ReportSocket::ReadLoop() {
  // One byte more than the largest datagram accepted: with MSG_TRUNC, recv returns the real
  // size of a larger one (and the kernel drops the rest).
  std::vector<char> buffer(kMaxReportDatagramBytes + 1);
  pollfd fds[2] = {{socket_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
  while (true) {
    fds[0].revents = fds[1].revents = 0;
    const int ready = poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      RM_LOG(ERROR) << "report socket " << path_ << ": poll: " << std::strerror(errno)
                    << "; datagram reports are no longer read";
      return;
    }
    if (fds[1].revents != 0) return;  // Stop()
    if (fds[0].revents == 0) continue;
    const ssize_t n = recv(socket_.get(), buffer.data(), buffer.size(), MSG_TRUNC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      RM_LOG(ERROR) << "report socket " << path_ << ": recv: " << std::strerror(errno)
                    << "; datagram reports are no longer read";
      return;
    }
    const size_t size = static_cast<size_t>(n);
    Handle(absl::string_view(buffer.data(), std::min(size, buffer.size())), size);
  }
}

void ReportSocket::Handle(absl::string_view datagram, size_t size) {
  if (size > kMaxReportDatagramBytes) {
    Refuse("size", FieldError("report", absl::StrCat("must be at most ", kMaxReportDatagramBytes,
                                                     " bytes, got ", size)));
    return;
  }
  absl::StatusOr<v1::WorkerReport> report = ParseReportDatagram(datagram);
  if (!report.ok()) {
    Refuse("parse", report.status());
    return;
  }
  const absl::Status handled = handler_(*report);
  if (handled.ok()) {
    accepted_.fetch_add(1);
  } else if (absl::IsPermissionDenied(handled) || absl::IsFailedPrecondition(handled)) {
    Refuse("identity", handled);
  } else {
    Refuse("invalid", handled);
  }
}

void ReportSocket::Refuse(const char* reason, const absl::Status& status) {
  refused_->WithLabels({reason})->Increment();
  const int64_t refused = refusals_.fetch_add(1) + 1;
  if (refused <= kRefusalsLoggedInFull || refused % kRefusalsLoggedInFull == 0) {
    RM_LOG(WARNING) << "report socket: refused a datagram (" << refused << " so far; " << reason
                    << "): " << status;
  }
}

}  // namespace ringmaster::agent
