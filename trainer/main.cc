// ringmaster-trainer: the worker program for builtin "gpt" jobs (the agent's --trainer_binary),
// and a development tool.
//
//   Under an agent: the agent starts it with the job's environment (RANK, WORLD_SIZE,
//   RINGMASTER_JOB_SPEC_JSON, RINGMASTER_AGENT_SOCKET, ...); it rendezvouses through the agent,
//   trains, and reports every step.
//   Standalone:      trainer --spec=job.yaml   (one rank, no agent; the whole global batch by
//   gradient accumulation).
//   Standby (--standby_fd=N, started by an agent whose node is a builtin job's hot spare; see
//   docs/agent.md): everything that does not depend on the rank is done (exec, dynamic
//   libraries and their initialisers, the OpenBLAS re-exec, flag parsing), then it blocks
//   reading descriptor N for its assignment: the complete environment a normal launch would
//   have given it ("NAME=VALUE", each followed by a NUL byte, then end of file). It replaces its
//   environment with it and goes on as if just started under the agent (its startup figures
//   count from then). End of file with no assignment (the agent dropped it or died): exit 0.
//   --mode=collective-bench: an nccl-tests-style sweep of the communication layer instead of
//   training (under an agent, as a command job: command: [".../trainer",
//   "--mode=collective-bench"]).
//
// Exit codes (common/status.h; the agent reports them and the coordinator acts on them):
//   0   done;
//   75  retryable: a lost peer, a timeout, an I/O or transport failure (UNAVAILABLE,
//       DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED, INTERNAL) — the job restarts from its
//       newest checkpoint;
//   78  fatal: a configuration error a restart cannot fix (bad spec, data or layout; a
//       checkpoint of another layout), or a step whose gradient norm or loss is not finite
//       (a restart would repeat it) — the job fails without restarting.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "trainer/collective_bench.h"
#include "trainer/comm/connect_group.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/cuda/accelerator.h"
#include "trainer/model/blas_kernels.h"
#include "trainer/trainer.h"
#include "trainer/trainer_config.h"
#include "trainer/worker/agent_client.h"

ABSL_FLAG(std::string, mode, "train", "train | collective-bench");
ABSL_FLAG(std::string, spec, "", "Job file (YAML) to train standalone, without an agent.");
ABSL_FLAG(int, blas_threads, 0, "OpenBLAS threads per rank (0: cores / ranks on this node).");
ABSL_FLAG(int64_t, bucket_bytes, 4 << 20, "Gradient bucket size in bytes.");
ABSL_FLAG(double, comm_timeout, 600,
          "Seconds a rendezvous or collective may take before the rank exits (retryable).");
ABSL_FLAG(double, peak_flops, 0,
          "Peak FLOP/s of this rank's device for MFU (0: estimated from the CPU).");
ABSL_FLAG(int, slow_rank, -1, "Fault injection: this rank's compute is slowed (-1: none).");
ABSL_FLAG(double, slow_factor, 1, "Fault injection: compute time multiplier of --slow_rank.");
ABSL_FLAG(double, slow_after_seconds, 0,
          "Fault injection: --slow_rank is slowed only once its process has trained this long (a "
          "rank that slows down mid-run).");
ABSL_FLAG(std::string, slow_link, "",
          "Fault injection: the link check's exchanges between these two global ranks (A:B) "
          "each take --slow_link_delay longer (empty: none).");
ABSL_FLAG(double, slow_link_delay, 0.1, "Fault injection: seconds added by --slow_link.");
ABSL_FLAG(std::string, corrupt_link, "",
          "Fault injection: in the link check, what global rank A sends arrives at rank B (A:B) "
          "with one element changed, as over a link that corrupts data (empty: none).");
ABSL_FLAG(int64_t, exit_after_step, 0,
          "Fault injection: after this step (and its checkpoint) exit 75 as if a peer failed.");
ABSL_FLAG(int64_t, nan_gradients_at_step, 0,
          "Fault injection: in this step the loss gradient of --nan_gradients_rank is NaN, as a "
          "corrupted activation would make it (0: never). The step fails (exit 78) before its "
          "update.");
ABSL_FLAG(int, nan_gradients_rank, -1,
          "Fault injection: the global rank of --nan_gradients_at_step, on the last pipeline "
          "stage (-1: every rank there).");
ABSL_FLAG(bool, shared_memory, true,
          "Collectives of groups whose ranks are all on this machine and node (RINGMASTER_NODE) "
          "go through shared memory instead of Gloo over TCP (about 2x the bus bandwidth on the "
          "development machine; see docs/benchmarks.md).");
ABSL_FLAG(int64_t, exit_in_generation, 0,
          "Fault injection: --exit_after_step applies only in this job generation "
          "(RINGMASTER_GENERATION; 0: in every generation).");
ABSL_FLAG(bool, report_metrics, true,
          "Send step reports to the agent (off only to measure their overhead).");
ABSL_FLAG(int, standby_fd, -1,
          "Set by the agent only: wait as a pre-started standby for the assignment on this "
          "descriptor (-1: not a standby).");
ABSL_FLAG(int64_t, bench_min_bytes, 1024, "collective-bench: smallest buffer.");
ABSL_FLAG(int64_t, bench_max_bytes, 16 << 20, "collective-bench: largest buffer.");
ABSL_FLAG(int, bench_factor, 4, "collective-bench: size multiplier between rows.");
ABSL_FLAG(int, bench_warmup, 3, "collective-bench: warm-up iterations per size.");
ABSL_FLAG(int, bench_iters, 10, "collective-bench: timed iterations per size.");
ABSL_FLAG(std::string, bench_ops, "all_reduce,all_gather,reduce_scatter,broadcast,send_recv",
          "collective-bench: operations to sweep.");

namespace ringmaster::trainer {
namespace {

// Parses a fault-injection flag's "A:B" (two different global ranks) into *a, *b; "" leaves them.
absl::Status RankPair(const char* flag, const std::string& value, int* a, int* b) {
  if (value.empty()) return absl::OkStatus();
  std::vector<std::string> ends = absl::StrSplit(value, ':');
  if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], a) || !absl::SimpleAtoi(ends[1], b) ||
      *a < 0 || *b < 0 || *a == *b) {
    return FieldError(flag, absl::StrCat("must be two different ranks A:B, got \"", value, "\""));
  }
  return absl::OkStatus();
}

absl::Status Bench(const EnvLookup& env, AgentClient* agent) {
  const auto int_env = [&](const char* name, int fallback) {
    int v = 0;
    return absl::SimpleAtoi(env(name).value_or(""), &v) ? v : fallback;
  };
  const int rank = int_env("RANK", 0);
  const int world = int_env("WORLD_SIZE", 1);
  if (world > 1 && agent == nullptr) {
    return FieldError("WORLD_SIZE", "needs an agent (RINGMASTER_AGENT_SOCKET) for more than 1 rank");
  }
  InMemoryStore local;
  KeyValueStore* store = agent != nullptr ? static_cast<KeyValueStore*>(agent) : &local;
  ASSIGN_OR_RETURN(auto network,
                   GlooNetwork::Create(env("RINGMASTER_HOST_ADDRESS").value_or("127.0.0.1")));
  ASSIGN_OR_RETURN(auto comm, ConnectGroup(*network, "bench", rank, world, store,
                                           absl::Seconds(absl::GetFlag(FLAGS_comm_timeout)),
                                           absl::GetFlag(FLAGS_shared_memory),
                                           env("RINGMASTER_NODE").value_or("")));
  if (agent != nullptr) {
    v1::ReportPhaseRequest phase;
    phase.set_phase(v1::WORKER_PHASE_STEP);
    RETURN_IF_ERROR(agent->ReportPhase(phase));
  }
  CollectiveBenchOptions options;
  options.min_bytes = absl::GetFlag(FLAGS_bench_min_bytes);
  options.max_bytes = absl::GetFlag(FLAGS_bench_max_bytes);
  options.factor = absl::GetFlag(FLAGS_bench_factor);
  options.warmup = absl::GetFlag(FLAGS_bench_warmup);
  options.iters = absl::GetFlag(FLAGS_bench_iters);
  options.ops = absl::StrSplit(absl::GetFlag(FLAGS_bench_ops), ',', absl::SkipEmpty());
  return RunCollectiveBench(*comm, options).status();
}

// A standby's wait: reads `fd` to its end and makes what it read the whole environment.
// NOT_FOUND when it holds nothing (no assignment came); the I/O error otherwise.
absl::Status TakeAssignment(int fd) {
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, absl::StrCat("--standby_fd=", fd, ": read"));
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  if (bytes.empty()) return absl::NotFoundError("no assignment came");
  // Set by the OpenBLAS re-exec (a normal launch has it too): kept unless the assignment sets it.
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const std::string kept_coretype = coretype != nullptr ? coretype : "";
  clearenv();
  if (!kept_coretype.empty()) setenv("OPENBLAS_CORETYPE", kept_coretype.c_str(), 1);
  for (absl::string_view entry : absl::StrSplit(bytes, '\0', absl::SkipEmpty())) {
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return FieldError("--standby_fd", absl::StrCat("assignment entry without NAME=: \"",
                                                     entry.substr(0, 64), "\""));
    }
    setenv(std::string(entry.substr(0, eq)).c_str(), std::string(entry.substr(eq + 1)).c_str(),
           1);
  }
  return absl::OkStatus();
}

absl::Status Main(absl::Time process_start) {
  const EnvLookup env = ProcessEnvironment();
  ASSIGN_OR_RETURN(std::unique_ptr<AgentClient> agent, AgentClient::FromEnvironment(env));
  absl::Status status = [&]() -> absl::Status {
    if (agent != nullptr) {
      v1::ReportPhaseRequest phase;
      phase.set_phase(v1::WORKER_PHASE_INIT);
      RETURN_IF_ERROR(agent->ReportPhase(phase));
    }
    const std::string mode = absl::GetFlag(FLAGS_mode);
    if (mode == "collective-bench") return Bench(env, agent.get());
    if (mode != "train") {
      return FieldError("--mode", absl::StrCat("must be train or collective-bench, got \"", mode,
                                               "\""));
    }
    TrainerFlags flags;
    flags.spec_file = absl::GetFlag(FLAGS_spec);
    flags.blas_threads = absl::GetFlag(FLAGS_blas_threads);
    flags.bucket_bytes = absl::GetFlag(FLAGS_bucket_bytes);
    flags.comm_timeout = absl::Seconds(absl::GetFlag(FLAGS_comm_timeout));
    flags.peak_flops = absl::GetFlag(FLAGS_peak_flops);
    flags.slow_rank = absl::GetFlag(FLAGS_slow_rank);
    flags.slow_factor = absl::GetFlag(FLAGS_slow_factor);
    flags.slow_after_seconds = absl::GetFlag(FLAGS_slow_after_seconds);
    RETURN_IF_ERROR(RankPair("--slow_link", absl::GetFlag(FLAGS_slow_link), &flags.slow_link_a,
                             &flags.slow_link_b));
    RETURN_IF_ERROR(RankPair("--corrupt_link", absl::GetFlag(FLAGS_corrupt_link),
                             &flags.corrupt_link_from, &flags.corrupt_link_to));
    flags.slow_link_delay = absl::GetFlag(FLAGS_slow_link_delay);
    flags.report_metrics = absl::GetFlag(FLAGS_report_metrics);
    flags.exit_after_step = absl::GetFlag(FLAGS_exit_after_step);
    flags.nan_gradients_at_step = absl::GetFlag(FLAGS_nan_gradients_at_step);
    flags.nan_gradients_rank = absl::GetFlag(FLAGS_nan_gradients_rank);
    flags.shared_memory = absl::GetFlag(FLAGS_shared_memory);
    flags.exit_in_generation = absl::GetFlag(FLAGS_exit_in_generation);
    ASSIGN_OR_RETURN(TrainerConfig config, LoadTrainerConfig(env, flags));
    config.process_start = process_start;
    return RunTraining(config, agent.get());
  }();
  if (agent != nullptr) {
    const int code = ExitCodeFor(status);
    // Best effort: the exit itself is what the agent acts on; this only adds the reason.
    (void)agent->ReportExit(code, status.ok() ? "done" : status.ToString());
  }
  return status;
}

}  // namespace
}  // namespace ringmaster::trainer

int main(int argc, char** argv) {
  ringmaster::trainer::ReexecWithBetterOpenBlasKernels(argv);
  // A standby (--standby_fd) learns its environment only once assigned; the flag is parsed
  // below, so this looks for it by hand.
  bool standby = false;
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--standby_fd=")) standby = true;
  }
  if (!standby) ringmaster::trainer::PrepareAcceleratorEnvironment();  // before any thread starts
  absl::Time process_start = absl::Now();
  absl::Status init = ringmaster::InitBinary(
      argc, argv,
      "ringmaster-trainer: trains the builtin GPT (under an agent, or --spec=job.yaml "
      "standalone), or --mode=collective-bench",
      nullptr);
  if (init.ok() && absl::GetFlag(FLAGS_standby_fd) >= 0) {
    const absl::Time ready = absl::Now();
    init = ringmaster::trainer::TakeAssignment(absl::GetFlag(FLAGS_standby_fd));
    if (absl::IsNotFound(init)) return 0;  // dropped before it was needed: nothing to say
    // Set before the threads of what follows start (it sets variables, as at a normal start).
    ringmaster::trainer::PrepareAcceleratorEnvironment();
    process_start = absl::Now();
    if (init.ok()) {
      const char* rank = std::getenv("RANK");
      RM_LOG(INFO) << "pre-started standby (pid " << getpid() << ") took its assignment: rank "
                   << (rank != nullptr ? rank : "?") << ", after waiting "
                   << absl::FormatDuration(process_start - ready);
    }
  }
  absl::Status status = init.ok() ? ringmaster::trainer::Main(process_start) : init;
  if (!status.ok()) {
    const int code = ringmaster::ExitCodeFor(status);
    RM_LOG(ERROR) << "trainer failed (exit " << code << ", "
                  << (code == ringmaster::kExitRetryable ? "retryable" : "fatal")
                  << "): " << status;
    return code;
  }
  return 0;
}
