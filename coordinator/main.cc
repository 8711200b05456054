// The Ringmaster coordinator: JobService for users, AgentService for agents, health and
// reflection, and /metrics. Managers hold the logic (docs/architecture.md); this file wires them
// to flags, the store, the gRPC server and a ticker thread.
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/build_info.h"
#include "common/checkpoint_grace.h"
#include "common/flags.h"
#include "common/grpc_server.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics/registry.h"
#include "common/signals.h"
#include "common/status.h"
#include "coordinator/agent_service.h"
#include "coordinator/auth.h"
#include "coordinator/auth_metadata_processor.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_service.h"
#include "coordinator/job_store_sqlite.h"
#include "coordinator/node_identities.h"
#include "coordinator/node_manager.h"
#include "coordinator/rendezvous_manager.h"

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
ABSL_FLAG(std::string, state, "ringmaster-state.db",
          "SQLite database holding jobs, events and assignments (created if missing).");
ABSL_FLAG(std::string, tokens, "",
          "File of bearer tokens, one per line: TOKEN NAME [admin|agent]. Required, with at least "
          "one agent token, unless --insecure (empty: no authentication).");
ABSL_FLAG(double, heartbeat_interval, 0.5, "Seconds between agent heartbeats.");
ABSL_FLAG(double, lost_after, 2.5, "Seconds without a heartbeat after which a node is lost.");
ABSL_FLAG(double, forget_lost_node_after, 3600,
          "Seconds after which a lost node that holds no device is forgotten: dropped from "
          "`ringctl nodes` and its metric series removed (0: never).");
ABSL_FLAG(double, flap_window, 1800,
          "Flap damping: seconds over which a node's losses count. A node lost twice or more "
          "within it settles after it registers again before an elastic job grows onto it or a "
          "job takes it as a spare (docs/coordinator.md).");
ABSL_FLAG(double, flap_hold, 60,
          "Flap damping: seconds a node lost twice within --flap_window settles, doubling per "
          "further loss, at most --flap_window (0: no damping).");
ABSL_FLAG(double, stop_grace, 10, "Seconds between SIGTERM and SIGKILL when stopping workers.");
ABSL_FLAG(double, drain_checkpoint_grace, 120,
          "Seconds a drained job's workers get to checkpoint and exit after SIGUSR1, before the "
          "SIGTERM; the job relaunches from that checkpoint once they have exited (0: stop at "
          "once and resume from the last periodic checkpoint).");
ABSL_FLAG(double, reconcile_timeout, 10,
          "After a restart, seconds a running job's nodes have to re-register with its workers.");
ABSL_FLAG(double, restart_backoff, 1,
          "Crash loops: seconds before relaunching a job whose generations failed twice in a row "
          "before their first step, doubling per further such failure (0: never wait).");
ABSL_FLAG(double, restart_backoff_max, 60, "The longest crash-loop wait, in seconds.");
ABSL_FLAG(double, ended_job_retention, 7 * 24 * 3600,
          "Seconds an ended job (succeeded, failed or cancelled) is kept, with its events, after "
          "it ended; then it is deleted from the coordinator and its store (0: keep every job).");
ABSL_FLAG(bool, hold_devices_for_oldest_pending, true,
          "Hold, for the first job that does not fit (restarting jobs, then pending ones, by "
          "submission), the devices nearest to being free that it would run on, so pending jobs "
          "after it that fit into what frees do not keep it waiting (false: every job takes "
          "whatever is free, in that order).");

namespace ringmaster {
namespace {

absl::Status Run() {
  metrics::Registry registry;
  registry
      .AddGauge("ringmaster_build_info", "Build of the running binary; always 1.",
                {"component", "version"})
      .WithLabels({"coordinator", kVersion})
      ->Set(1);
  registry
      .AddGauge("ringmaster_process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds.", {"component"})
      .WithLabels({"coordinator"})
      ->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));

  ServerTlsOptions tls{absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                       absl::GetFlag(FLAGS_tls_key)};
  ASSIGN_OR_RETURN(auto credentials, MakeServerCredentials(tls, absl::GetFlag(FLAGS_insecure)));
  if (absl::GetFlag(FLAGS_insecure)) {
    RM_LOG(WARNING) << "serving gRPC WITHOUT TLS (--insecure): for local development only";
  }
  coordinator::TokenAuthenticator auth;
  if (!absl::GetFlag(FLAGS_tokens).empty()) {
    ASSIGN_OR_RETURN(auth, coordinator::TokenAuthenticator::FromFile(absl::GetFlag(FLAGS_tokens)));
  } else {
    RM_LOG(WARNING) << "no --tokens: clients are not authenticated";
  }
  // With TLS, calls with a bad token are refused on their headers, before their body is read.
  coordinator::InstallTokenMetadataProcessor(credentials.get(), &auth,
                                             absl::GetFlag(FLAGS_insecure));
  // Agents receive every job placed on their node, hidden environment values included: a
  // coordinator that lets anyone register a node is open to all (docs/security.md).
  if (!auth.has_agent_tokens()) {
    if (!absl::GetFlag(FLAGS_insecure)) {
      return FieldError(
          "--tokens",
          "must name a file with at least one agent token (a line \"TOKEN NAME agent\") unless "
          "--insecure: agents must authenticate, or anyone who reaches the coordinator could "
          "register a node and receive other users' jobs (for local development only: "
          "--insecure)");
    }
    RM_LOG(WARNING) << "no agent token in --tokens: agents are not authenticated (--insecure)";
  }
  const absl::Duration lost_after = absl::Seconds(absl::GetFlag(FLAGS_lost_after));
  if (lost_after <= absl::Seconds(absl::GetFlag(FLAGS_heartbeat_interval))) {
    return FieldError("--lost_after", "must be longer than --heartbeat_interval");
  }
  // The durable state: SQLite under --state (the one JobStore a coordinator runs on).
  ASSIGN_OR_RETURN(auto store, coordinator::SqliteJobStore::Open(absl::GetFlag(FLAGS_state)));
  ASSIGN_OR_RETURN(auto node_identities, coordinator::NodeIdentities::Load(store.get()));
  Clock* clock = Clock::Real();
  const absl::Duration forget_after = absl::Seconds(absl::GetFlag(FLAGS_forget_lost_node_after));
  if (forget_after < absl::ZeroDuration()) {
    return FieldError("--forget_lost_node_after", "must be >= 0");
  }
  // Liveness is measured on the steady clock: setting the system clock must neither lose every
  // node (a step forward) nor keep a dead one (a step back).
  coordinator::NodeManager nodes(Clock::Steady(), lost_after, forget_after, &registry);
  coordinator::FlapDamping damping;
  damping.window = absl::Seconds(absl::GetFlag(FLAGS_flap_window));
  damping.hold = absl::Seconds(absl::GetFlag(FLAGS_flap_hold));
  if (!(damping.window > absl::ZeroDuration())) return FieldError("--flap_window", "must be > 0");
  if (!(damping.hold >= absl::ZeroDuration() && damping.hold <= damping.window)) {
    return FieldError("--flap_hold", "must be in [0, --flap_window]");
  }
  nodes.SetFlapDamping(damping);
  coordinator::RendezvousManager rendezvous(clock, &registry);
  coordinator::AgentService agent_service(&nodes, &rendezvous, clock,
                                          absl::Seconds(absl::GetFlag(FLAGS_heartbeat_interval)),
                                          lost_after, &registry);
  coordinator::JobManagerOptions job_options;
  job_options.stop_grace_seconds = absl::GetFlag(FLAGS_stop_grace);
  job_options.drain_checkpoint_grace_seconds = absl::GetFlag(FLAGS_drain_checkpoint_grace);
  if (!(job_options.drain_checkpoint_grace_seconds >= 0 &&
        job_options.drain_checkpoint_grace_seconds <= kMaxCheckpointGraceSeconds)) {
    return FieldError("--drain_checkpoint_grace",
                      absl::StrCat("must be in [0, ", kMaxCheckpointGraceSeconds, "] seconds"));
  }
  job_options.reconcile_timeout = absl::Seconds(absl::GetFlag(FLAGS_reconcile_timeout));
  job_options.restart_backoff = absl::Seconds(absl::GetFlag(FLAGS_restart_backoff));
  job_options.restart_backoff_max = absl::Seconds(absl::GetFlag(FLAGS_restart_backoff_max));
  if (job_options.restart_backoff < absl::ZeroDuration()) {
    return FieldError("--restart_backoff", "must be >= 0");
  }
  if (job_options.restart_backoff_max < job_options.restart_backoff) {
    return FieldError("--restart_backoff_max", "must be >= --restart_backoff");
  }
  job_options.ended_job_retention = absl::Seconds(absl::GetFlag(FLAGS_ended_job_retention));
  if (job_options.ended_job_retention < absl::ZeroDuration()) {
    return FieldError("--ended_job_retention", "must be >= 0");
  }
  job_options.hold_devices_for_oldest_pending =
      absl::GetFlag(FLAGS_hold_devices_for_oldest_pending);
  coordinator::JobManager jobs(store.get(), &nodes, &rendezvous, &agent_service, clock, &registry,
                               job_options);
  agent_service.set_jobs(&jobs);
  agent_service.set_identity(&auth, node_identities.get());
  RETURN_IF_ERROR(jobs.Recover());
  coordinator::JobService job_service(&jobs, &nodes, &agent_service, &auth, &registry);

  auto started_http = StartMetricsServer(absl::GetFlag(FLAGS_metrics_listen), &registry);
  if (!started_http.ok()) return Annotate(started_http.status(), "--metrics_listen");
  std::unique_ptr<HttpServer> http_server = *std::move(started_http);
  std::string host;
  int unused_port;
  RETURN_IF_ERROR(ParseHostPort("--listen", absl::GetFlag(FLAGS_listen), &host, &unused_port));
  std::string metrics_host;
  RETURN_IF_ERROR(ParseHostPort("--metrics_listen", absl::GetFlag(FLAGS_metrics_listen),
                                &metrics_host, &unused_port));

  // Last: once agents can connect, nothing returns early (a return would end their streams
  // without BeginShutdown, which would count as node losses).
  GrpcServerOptions options;
  options.address = absl::GetFlag(FLAGS_listen);
  options.credentials = credentials;
  options.services = {&job_service, &agent_service};
  ASSIGN_OR_RETURN(auto grpc_server, GrpcServer::Start(options));

  // The ticker: rendezvous deadlines, node liveness, progress pushes. 10 Hz keeps loss detection
  // within lost_after + 0.1 s. Started after the last step that can fail (a joinable thread must
  // not be destroyed by an early return).
  absl::Notification stopping;
  std::thread ticker([&] {
    constexpr absl::Duration kTick = absl::Milliseconds(100);
    while (!stopping.WaitForNotificationWithTimeout(kTick)) {
      rendezvous.ExpireWaiters();
      for (const std::string& node : nodes.TakeDisconnected()) jobs.OnNodeLost(node);
      for (const std::string& node : nodes.CheckLivenessEvery(kTick)) {
        // Its silence may be longer than --lost_after: the coordinator's stalls are not counted.
        const std::optional<absl::Duration> silent = nodes.SilentFor(node);
        RM_LOG(WARNING) << "node " << node << " silent for "
                        << absl::Trunc(silent.value_or(lost_after), absl::Milliseconds(1))
                        << ": lost";
        jobs.OnNodeLost(node);
      }
      jobs.Tick();
    }
  });
  // Tests and tools/demo read these two lines to learn the chosen ports.
  RM_LOG(INFO) << "coordinator gRPC listening on " << host << ":" << grpc_server->port();
  RM_LOG(INFO) << "coordinator metrics listening on " << metrics_host << ":" << http_server->port();

  int sig = WaitForTerminationSignal();
  RM_LOG(INFO) << "signal " << sig << ": shutting down";
  // Neither the streams the server cancels nor the silence that follows are node losses: the
  // jobs keep running, and the next coordinator adopts them.
  agent_service.BeginShutdown();
  stopping.Notify();
  ticker.join();
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
