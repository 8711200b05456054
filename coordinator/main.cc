// The Ringmaster coordinator.
//
// At this stage it serves the gRPC endpoint with the standard health service and reflection, and
// /metrics. The job, node, placement, rendezvous and watchdog managers plug in behind the same
// server (see docs/architecture.md).
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/build_info.h"
#include "common/flags.h"
#include "common/grpc_server.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics/registry.h"
#include "common/signals.h"
#include "common/status.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "gRPC address for clients and agents (HOST:PORT; port 0 picks a free port).");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9400",
          "HTTP address serving /metrics and /healthz (HOST:PORT; port 0 picks a free port).");
ABSL_FLAG(bool, insecure, false,
          "Serve gRPC in plaintext without TLS. Only for local development.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate; when set, clients and agents must present a certificate it signed.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain of the coordinator.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of the coordinator.");

namespace ringmaster {
namespace {

absl::Status Run() {
  metrics::Registry registry;
  registry.AddGauge("ringmaster_build_info", "Build of the running binary; always 1.",
                    {"component", "version"})
      .WithLabels({"coordinator", kVersion})
      ->Set(1);
  registry.AddGauge("ringmaster_process_start_time_seconds",
                    "Start time of the process since the Unix epoch, in seconds.",
                    {"component"})
      .WithLabels({"coordinator"})
      ->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));

  ServerTlsOptions tls{absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                       absl::GetFlag(FLAGS_tls_key)};
  ASSIGN_OR_RETURN(auto credentials, MakeServerCredentials(tls, absl::GetFlag(FLAGS_insecure)));
  if (absl::GetFlag(FLAGS_insecure)) {
    RM_LOG(WARNING) << "serving gRPC WITHOUT TLS (--insecure): for local development only";
  }
  GrpcServerOptions options;
  options.address = absl::GetFlag(FLAGS_listen);
  options.credentials = credentials;
  ASSIGN_OR_RETURN(auto grpc_server, GrpcServer::Start(options));
  ASSIGN_OR_RETURN(auto http_server,
                   StartMetricsServer(absl::GetFlag(FLAGS_metrics_listen), &registry));

  std::string host;
  int unused_port;
  RETURN_IF_ERROR(ParseHostPort("--listen", absl::GetFlag(FLAGS_listen), &host, &unused_port));
  std::string metrics_host;
  RETURN_IF_ERROR(ParseHostPort("--metrics_listen", absl::GetFlag(FLAGS_metrics_listen),
                                &metrics_host, &unused_port));
  // Tests and tools/demo read these two lines to learn the chosen ports.
  RM_LOG(INFO) << "coordinator gRPC listening on " << host << ":" << grpc_server->port();
  RM_LOG(INFO) << "coordinator metrics listening on " << metrics_host << ":"
               << http_server->port();

  int sig = WaitForTerminationSignal();
  RM_LOG(INFO) << "signal " << sig << ": shutting down";
  grpc_server->Shutdown();
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmaster

int main(int argc, char** argv) {
  ringmaster::BlockTerminationSignals();
  absl::Status status = ringmaster::InitBinary(
      argc, argv, "Ringmaster coordinator: accepts jobs and runs them on agents.", nullptr);
  if (status.ok()) status = ringmaster::Run();
  if (!status.ok()) {
    RM_LOG(ERROR) << status.message();
    return ringmaster::ExitCodeFor(status);
  }
  return 0;
}
