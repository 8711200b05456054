// The Ringmaster agent: one per node. Registers the node's devices with the coordinator, launches
// and supervises the workers it is told to run, serves the worker API on a Unix socket, and
// exposes per-rank metrics at /metrics.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "agent/devices.h"
#include "agent/local_watchdog.h"
#include "agent/node_agent.h"
#include "agent/oom_score.h"
#include "agent/python_watch_files.h"
#include "agent/rank_metrics.h"
#include "agent/report_socket.h"
#include "agent/worker_service.h"
#include "agent/worker_supervisor.h"
#include "common/build_info.h"
#include "common/checkpoint_grace.h"
#include "common/clock.h"
#include "common/file_contents.h"
#include "common/flags.h"
#include "common/grpc_client.h"
#include "common/grpc_server.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/status.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator address HOST:PORT.");
ABSL_FLAG(std::string, node_name, "", "Name of this node (default: the host name).");
ABSL_FLAG(std::string, devices, "auto", "Devices to offer: cpu:N, gpu, or auto.");
ABSL_FLAG(std::string, host_address, "127.0.0.1",
          "Address other nodes reach this node's workers at (MASTER_ADDR when rank 0 is here).");
ABSL_FLAG(std::string, work_dir, "/var/lib/ringmaster/agent",
          "Directory for the worker API socket and the workers' logs.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9401",
          "HTTP address serving /metrics and /healthz (port 0 picks a free port).");
ABSL_FLAG(std::string, worker_socket, "",
          "Unix socket of the worker API (default: WORK_DIR/agent.sock); at most 100 bytes, as "
          "the report socket beside it (NAME-report.sock) is 7 longer.");
ABSL_FLAG(std::string, trainer_binary, "", "Program run for builtin (\"gpt\") jobs.");
ABSL_FLAG(bool, prestart_spares, true,
          "While this node is held as a builtin job's hot spare, keep that job's trainer processes "
          "started and waiting for their ranks, so that replacing a lost node skips their start-up "
          "(off: a replacement starts them then).");
ABSL_FLAG(std::string, python_watch_dir, "",
          "Directory holding the Python watch (sitecustomize.py and _ringmaster_watch/) put first "
          "on the PYTHONPATH of Python command jobs (docs/python.md). Default: the copy built "
          "into the agent, written to WORK_DIR/python-watch-<digest> at start. Set it to a "
          "source tree's python/watch to try changes without rebuilding; \"none\": no job is "
          "watched.");
ABSL_FLAG(bool, insecure, false, "Talk to the coordinator in plaintext (local development).");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA certificate that signed the coordinator's certificate.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate of this agent (mutual TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of this agent's certificate.");
ABSL_FLAG(std::string, token_file, "",
          "File holding this agent's bearer token (role agent in the coordinator's --tokens; read "
          "once at start). Default: $RINGMASTER_AGENT_TOKEN; neither: no token is sent.");
ABSL_FLAG(double, stop_grace, 10, "Seconds between SIGTERM and SIGKILL when the agent exits.");
ABSL_FLAG(double, leave_checkpoint_grace, 0,
          "On SIGTERM or SIGINT: seconds the node's workers get to checkpoint and exit (SIGUSR1) "
          "before the SIGTERM of --stop_grace. The coordinator is told first, so it moves their "
          "jobs elsewhere from that checkpoint without counting a restart and places nothing new "
          "here (0: stop the workers at once).");
ABSL_FLAG(double, hang_init_timeout, 600,
          "Seconds a worker may be silent while starting, in INIT, or before its first step (a "
          "command job's worker is watched only from its first step or phase report, and before "
          "it while blocked in a collective that does not move: then until just before its "
          "process group's timeout where the Python watch says it), unless its job sets "
          "watchdog.init_timeout.");
ABSL_FLAG(double, hang_checkpoint_timeout, 1800,
          "Seconds a worker may be silent while in the CHECKPOINT phase, unless its job sets "
          "watchdog.checkpoint_timeout.");
ABSL_FLAG(double, hang_busy_timeout, 600,
          "Seconds a stepping Python rank may go without a step while its watch says it is busy "
          "outside any collective (an evaluation between steps), unless its job sets "
          "watchdog.hang_timeout.");
ABSL_FLAG(double, hang_step_floor, 9,
          "Minimum seconds a stepping worker may be silent (the STEP allowance is "
          "max(floor, factor * p99 step time) unless the job sets watchdog.hang_timeout).");
ABSL_FLAG(double, hang_step_factor, 5, "Multiple of the p99 step time a worker may be silent.");
ABSL_FLAG(double, log_budget_mb, 20480,
          "Disk space, in MiB, for the logs of all workers run on this node: past it, the "
          "generations least recently written and no longer running are removed (0: no limit).");
ABSL_FLAG(int, oom_score_adj, -900,
          "The agent's own oom_score_adj (-1000 to 1000), lowered to this at start (never "
          "raised) so that the kernel's OOM killer chooses a worker before the agent, whose "
          "death takes every worker on the node with it. Workers get the value the agent "
          "started with. Lowering needs CAP_SYS_RESOURCE; without it the agent warns and keeps "
          "its own.");
ABSL_FLAG(double, coordinator_timeout, 20,
          "The agent pings the coordinator's connection every half of this and drops it when a "
          "ping is not answered within the other half, then connects again: a coordinator whose "
          "host died without closing it is left within this time. A paused coordinator (not a "
          "busy one: gRPC answers pings without it) may lose the agent's stream after half of "
          "this and does after all of it (the node is lost, and its jobs restart).");
ABSL_FLAG(double, summary_interval, 1,
          "Seconds between step summaries of one rank to the coordinator (at most).");

namespace ringmaster::agent {
namespace {

// Lowers the agent's oom_score_adj to `value` (the flag) and returns the workers' value: the one
// the agent started with, or nullopt (inherit) when the agent's was left as it was. Never raises
// it: an agent started lower (a Guaranteed pod, a systemd OOMScoreAdjust) is already shielded.
absl::StatusOr<std::optional<int>> ProtectFromOomKiller(int value) {
  if (absl::Status s = CheckOomScoreAdj(value); !s.ok()) {
    return FieldError("--oom_score_adj", s.message());
  }
  absl::StatusOr<int> started_with = ReadOomScoreAdj();
  if (!started_with.ok()) {
    RM_LOG(WARNING) << "--oom_score_adj not applied: " << started_with.status().message();
    return std::nullopt;
  }
  if (*started_with <= value) {
    RM_LOG(INFO) << "oom_score_adj " << *started_with
                 << " kept (at or below --oom_score_adj=" << value << ")";
    return std::nullopt;
  }
  if (absl::Status s = SetOomScoreAdj(value); !s.ok()) {
    RM_LOG(WARNING) << "--oom_score_adj=" << value << " not applied (" << s.message()
                    << "): the kernel's OOM killer may choose this agent, and every worker on "
                       "the node dies with it; run it with CAP_SYS_RESOURCE";
    return std::nullopt;
  }
  RM_LOG(INFO) << "oom_score_adj " << value << " (workers: " << *started_with << ")";
  return *started_with;
}

// The agent's bearer token: the contents of --token_file (surrounding whitespace dropped), else
// $RINGMASTER_AGENT_TOKEN, else none. INVALID_ARGUMENT naming the source for an unreadable or
// empty file or a token with whitespace inside.
absl::StatusOr<std::string> ReadAgentToken() {
  const std::string path = absl::GetFlag(FLAGS_token_file);
  std::string source = "--token_file";
  std::string token;
  if (!path.empty()) {
    absl::StatusOr<std::string> contents = ReadFileContents(path);
    if (!contents.ok()) return FieldError(source, contents.status().message());
    token = std::string(absl::StripAsciiWhitespace(*contents));
    if (token.empty()) return FieldError(source, absl::StrCat("\"", path, "\" is empty"));
  } else {
    source = "RINGMASTER_AGENT_TOKEN";
    const char* env = std::getenv("RINGMASTER_AGENT_TOKEN");
    if (env == nullptr || *env == '\0') return std::string();
    token = std::string(absl::StripAsciiWhitespace(env));
  }
  for (char c : token) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || !absl::ascii_isprint(c)) {
      return FieldError(source, "the token must be one word of printable characters");
    }
  }
  return token;
}

// The directory of the Python watch: --python_watch_dir as given (checked to hold
// sitecustomize.py), "" for "none", else the embedded files written under `work_dir`.
absl::StatusOr<std::string> PythonWatchDir(const std::string& work_dir) {
  const std::string flag = absl::GetFlag(FLAGS_python_watch_dir);
  if (flag == "none") return std::string();
  if (flag.empty()) {
    absl::StatusOr<std::string> written = WritePythonWatch(work_dir);
    if (!written.ok()) return Annotate(written.status(), "the Python watch (--work_dir)");
    return written;
  }
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(flag, ec);
  if (ec || !std::filesystem::is_regular_file(dir / "sitecustomize.py", ec)) {
    return FieldError("--python_watch_dir",
                      absl::StrCat("\"", flag, "\" holds no sitecustomize.py"));
  }
  return dir.string();
}

absl::Status Run() {
  std::string node = absl::GetFlag(FLAGS_node_name);
  if (node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    node = host;
  }
  ASSIGN_OR_RETURN(std::vector<v1::Device> devices, ParseDevices(absl::GetFlag(FLAGS_devices)));
  ASSIGN_OR_RETURN(const std::string coordinator_token, ReadAgentToken());
  const std::string work_dir = absl::GetFlag(FLAGS_work_dir);
  std::error_code ec;
  std::filesystem::create_directories(work_dir, ec);
  if (ec) return FieldError("--work_dir", absl::StrCat("cannot create: ", ec.message()));
  std::string socket_path = absl::GetFlag(FLAGS_worker_socket);
  if (socket_path.empty()) socket_path = work_dir + "/agent.sock";
  const std::string report_socket_path = ReportSocketPath(socket_path);
  // Both sockets' paths must fit sizeof(sockaddr_un::sun_path) - 1 = 107 bytes; the report
  // socket's is 7 longer ("-report").
  for (const std::string& path : {socket_path, report_socket_path}) {
    if (path.size() > 107) {
      return FieldError(
          "--worker_socket",
          absl::StrCat("must be at most 100 bytes, as its report socket's path adds 7 and a Unix "
                       "socket path has at most 107; got ",
                       path.size(), " bytes for \"", path,
                       "\": set --worker_socket (default WORK_DIR/agent.sock) to a shorter path"));
    }
  }
  std::filesystem::remove(socket_path, ec);  // A stale socket from an earlier run.
  ASSIGN_OR_RETURN(const std::string python_watch_dir, PythonWatchDir(work_dir));

  metrics::Registry registry;
  registry
      .AddGauge("ringmaster_build_info", "Build of the running binary; always 1.",
                {"component", "version"})
      .WithLabels({"agent", kVersion})
      ->Set(1);
  auto connected = registry
                       .AddGauge("ringmaster_agent_connected",
                                 "1 while the agent's stream to the coordinator is up.")
                       .WithLabels({});
  auto running =
      registry.AddGauge("ringmaster_agent_workers", "Workers running on this node.").WithLabels({});
  auto log_bytes = registry
                       .AddGauge("ringmaster_agent_log_bytes",
                                 "Bytes of worker logs kept on this node (checked every minute; "
                                 "bounded by --log_budget_mb except for running workers).")
                       .WithLabels({});
  // Silences and hang timeouts are measured on the steady clock: a step of the system clock must
  // neither declare a rank hung nor hide one that is.
  RankMetrics rank_metrics(&registry, Clock::Steady(),
                           absl::Seconds(absl::GetFlag(FLAGS_summary_interval)));
  WatchdogOptions watchdog_options;
  watchdog_options.init_timeout = absl::Seconds(absl::GetFlag(FLAGS_hang_init_timeout));
  watchdog_options.checkpoint_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_hang_checkpoint_timeout));
  watchdog_options.busy_timeout = absl::Seconds(absl::GetFlag(FLAGS_hang_busy_timeout));
  watchdog_options.step_floor = absl::Seconds(absl::GetFlag(FLAGS_hang_step_floor));
  watchdog_options.step_factor = absl::GetFlag(FLAGS_hang_step_factor);
  LocalWatchdog watchdog(Clock::Steady(), watchdog_options);

  NodeAgentOptions options;
  options.node_name = node;
  options.devices = devices;
  options.host_address = absl::GetFlag(FLAGS_host_address);
  options.socket_path = socket_path;
  options.report_socket_path = report_socket_path;
  options.python_watch_dir = python_watch_dir;
  options.work_dir = work_dir;
  options.trainer_binary = absl::GetFlag(FLAGS_trainer_binary);
  options.prestart_spares = absl::GetFlag(FLAGS_prestart_spares);
  options.coordinator_token = coordinator_token;
  const double log_budget_mb = absl::GetFlag(FLAGS_log_budget_mb);
  if (!(log_budget_mb >= 0)) return FieldError("--log_budget_mb", "must be >= 0");
  const double leave_grace_seconds = absl::GetFlag(FLAGS_leave_checkpoint_grace);
  if (!(leave_grace_seconds >= 0 && leave_grace_seconds <= kMaxCheckpointGraceSeconds)) {
    return FieldError("--leave_checkpoint_grace",
                      absl::StrCat("must be in [0, ", kMaxCheckpointGraceSeconds, "] seconds"));
  }
  const absl::Duration leave_grace = absl::Seconds(leave_grace_seconds);
  const double coordinator_timeout = absl::GetFlag(FLAGS_coordinator_timeout);
  if (!(coordinator_timeout >= 2 && coordinator_timeout <= 3600)) {
    return FieldError("--coordinator_timeout", "must be in [2, 3600] seconds");
  }
  options.log_budget_bytes = static_cast<int64_t>(log_budget_mb * (1 << 20));
  ASSIGN_OR_RETURN(options.worker_oom_score_adj,
                   ProtectFromOomKiller(absl::GetFlag(FLAGS_oom_score_adj)));
  options.oom_kills = registry
                          .AddCounter("ringmaster_agent_worker_oom_kills_total",
                                      "Worker failures on this node told of an OOM kill: the "
                                      "first after the kernel's OOM killer acted where the "
                                      "workers run, one per kill (their exit reason says "
                                      "\"likely out of memory\").")
                          .WithLabels({});
  // /readyz: ready once registered with the coordinator (the agent is made after the server,
  // which must know its port first).
  std::atomic<const NodeAgent*> ready_agent{nullptr};
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  auto ready = [&ready_agent, coordinator]() -> absl::Status {
    const NodeAgent* a = ready_agent.load();
    if (a != nullptr && a->connected()) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("not registered with the coordinator at ", coordinator,
                     a == nullptr ? " yet (starting)" : " (connecting; it retries with backoff)"));
  };
  auto started_http = StartMetricsServer(absl::GetFlag(FLAGS_metrics_listen), &registry, ready);
  if (!started_http.ok()) return Annotate(started_http.status(), "--metrics_listen");
  std::unique_ptr<HttpServer> http = *std::move(started_http);
  std::string metrics_host;
  int unused;
  RETURN_IF_ERROR(ParseHostPort("--metrics_listen", absl::GetFlag(FLAGS_metrics_listen),
                                &metrics_host, &unused));
  options.metrics_address = absl::StrCat(metrics_host, ":", http->port());
  // Exits and states are stamped with wall time (shown to users); the workers are real processes.
  NodeAgent agent(options, &rank_metrics, &watchdog, Clock::Real(), WorkerSupervisorFactory());

  WorkerService worker_service(&agent, &rank_metrics, &watchdog);
  GrpcServerOptions server_options;
  server_options.address = "unix:" + socket_path;
  server_options.credentials = grpc::InsecureServerCredentials();  // Local socket only.
  server_options.services = {&worker_service};
  ASSIGN_OR_RETURN(auto worker_server, GrpcServer::Start(server_options));
  // Reports as datagrams (the Python watch's way), handled as the same calls.
  ASSIGN_OR_RETURN(
      std::unique_ptr<ReportSocket> report_socket,
      ReportSocket::Start(
          report_socket_path,
          [&worker_service](const v1::WorkerReport& r) { return worker_service.HandleReport(r); },
          &registry));

  ClientTlsOptions tls{absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                       absl::GetFlag(FLAGS_tls_key)};
  ASSIGN_OR_RETURN(auto credentials, MakeChannelCredentials(tls, absl::GetFlag(FLAGS_insecure)));
  agent.Start(MakeChannel(coordinator, credentials, absl::Seconds(coordinator_timeout) / 2));
  ready_agent.store(&agent);
  // Whatever way this returns, the HTTP server (whose /readyz reads `agent`) stops first.
  absl::Cleanup stop_http = [&http] { http.reset(); };
  // Tests and tools/cluster read these lines.
  RM_LOG(INFO) << "agent " << node << " with " << devices.size()
               << " devices, worker API on unix:" << socket_path;
  RM_LOG(INFO) << "worker reports (datagrams) on unix:" << report_socket_path
               << "; Python watch "
               << (python_watch_dir.empty() ? std::string("off (--python_watch_dir=none)")
                                            : absl::StrCat("in ", python_watch_dir));
  RM_LOG(INFO) << "agent metrics listening on " << options.metrics_address;

  absl::Notification stopping;
  std::thread ticker([&] {
    absl::Time next_prune = absl::InfinitePast();
    while (!stopping.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      agent.Tick();
      if (absl::Now() >= next_prune) {
        log_bytes->Set(static_cast<double>(agent.PruneLogs().bytes_kept));
        next_prune = absl::Now() + absl::Minutes(1);
      }
      connected->Set(agent.connected() ? 1 : 0);
      running->Set(agent.RunningWorkers());
    }
  });
  int sig = WaitForTerminationSignal();
  RM_LOG(INFO) << "signal " << sig << ": stopping workers and shutting down";
  const absl::Duration stop_grace = absl::Seconds(absl::GetFlag(FLAGS_stop_grace));
  if (leave_grace > absl::ZeroDuration()) {
    agent.Leave(leave_grace, stop_grace, absl::StrCat("signal ", sig));
  }
  stopping.Notify();
  ticker.join();
  agent.Shutdown(stop_grace);
  worker_server->Shutdown();
  report_socket->Stop();
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmaster::agent

int main(int argc, char** argv) {
  ringmaster::BlockTerminationSignals();
  absl::Status status = ringmaster::InitBinary(
      argc, argv, "Ringmaster agent: runs and supervises a node's training workers.", nullptr);
  if (status.ok()) status = ringmaster::agent::Run();
  if (!status.ok()) {
    RM_LOG(ERROR) << status.message();
    return ringmaster::ExitCodeFor(status);
  }
  return 0;
}
