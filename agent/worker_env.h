// What a worker is started with, from a LaunchWorkers, one of its rank assignments and what the
// node contributes: its environment (WorkerEnv), its argv (WorkerArgv), and the agent's own
// refusal of a launch it cannot carry out safely (CheckLaunchable).
//
// Threading: pure functions of their arguments (AgentEnvironment() aside, which reads the
// agent's environment, and WorkerArgv of a torchrun command, which reads torchrun's #! line),
// thread-safe. Ownership: nothing is kept. Errors: INVALID_ARGUMENT in
// FieldError's form from CheckLaunchable, FAILED_PRECONDITION from WorkerArgv; WorkerEnv cannot
// fail.
#ifndef RINGMASTER_AGENT_WORKER_ENV_H_
#define RINGMASTER_AGENT_WORKER_ENV_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "spec/command_line.h"
#include "spec/torchrun.h"

namespace ringmaster::agent {

// What the node puts into each of its workers' environments.
struct WorkerEnvOptions {
  std::string node_name;     // RINGMASTER_NODE
  std::string host_address;  // RINGMASTER_HOST_ADDRESS
  std::string socket_path;   // RINGMASTER_AGENT_SOCKET: the worker API's Unix socket
  // RINGMASTER_REPORT_SOCKET: the report datagram socket (report_socket.h); empty: not set.
  std::string report_socket_path;
  // The directory holding the Python watch (python_watch_files.h: sitecustomize.py and
  // _ringmaster_watch/); empty: no worker is watched.
  std::string python_watch_dir;
  // The node's devices: a rank on a "gpu" device gets CUDA_VISIBLE_DEVICES.
  std::vector<v1::Device> devices;
  // The agent's own values of the variables workers inherit (AgentEnvironment()); a name absent
  // here is unset in the agent.
  std::map<std::string, std::string> inherited;
};

// The agent's values of the variables a worker may inherit, those set: PATH, HOME, LANG (every
// worker), CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER (GPU workers), PYTHONPATH (Python command
// jobs only); see WorkerEnv.
std::map<std::string, std::string> AgentEnvironment();

using spec::IsPythonInterpreter;

// How a command's argv runs Python, as far as it shows:
//  - kDirect: the program it runs (past wrappers, which may fork it) is the interpreter:
//    argv[0] IsPythonInterpreter, or is a script whose name ends in ".py" (run through its #!
//    line), or `env` and wrappers (nohup, timeout, nice, numactl, ...: spec::ProgramOf) run one
//    of these;
//  - kShell: a shell runs the program: the program's last path component is sh, bash, dash, zsh
//    or ksh, or ends in ".sh" (argv[0], or past env and wrappers): the Python processes it
//    starts are watched, the first to import torch taking the rank (docs/python.md);
//  - a torchrun command line (spec/torchrun.h, run as the program torchrun would start):
//    kDirect, or with --no_python its program's verdict; one spec::ReadTorchrun refuses: kNone;
//  - kNone: anything else (a binary, an empty argv, wrappers that run nothing), and an `env`
//    that empties the environment (-i, -) or unsets or sets PYTHONPATH: the Python it starts
//    would not find the watch.
enum class PythonLaunch { kNone, kDirect, kShell };
PythonLaunch PythonLaunchOf(const std::vector<std::string>& argv);

// Whether rank processes of `spec` get the Python watch: a command job whose argv runs Python
// (PythonLaunchOf: kDirect or kShell) and whose spec does not set
// watchdog.python_watch_disabled.
bool WatchesPython(const v1::JobSpec& spec);

// The complete environment of rank `a` of `launch` (nothing else is inherited), torchrun's
// variables and Ringmaster's, in this order, each later one overriding an earlier one of the same
// name:
//  - PATH, HOME, LANG from `node.inherited`;
//  - RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (the launch's ranks on this node),
//    GROUP_RANK (the lowest of those ranks / LOCAL_WORLD_SIZE), MASTER_ADDR, MASTER_PORT,
//    TORCHELASTIC_RESTART_COUNT, ROLE_NAME ("default"), ROLE_RANK (RANK), ROLE_WORLD_SIZE
//    (WORLD_SIZE), GROUP_WORLD_SIZE (WORLD_SIZE / LOCAL_WORLD_SIZE: the nodes),
//    TORCHELASTIC_MAX_RESTARTS (restart.max_restarts), TORCH_NCCL_ASYNC_ERROR_HANDLING "1", and
//    for a command job with more than one rank on the node OMP_NUM_THREADS "1" (torchrun's
//    defaults, which the job's trainer.env may change);
//  - RINGMASTER_JOB, RINGMASTER_GENERATION, RINGMASTER_AGENT_SOCKET, RINGMASTER_NODE,
//    RINGMASTER_HOST_ADDRESS, RINGMASTER_{TP,PP,DP}_RANK, RINGMASTER_{TP,PP,DP}_SIZE,
//    RINGMASTER_CHECKPOINT_DIR, RINGMASTER_JOB_SPEC_JSON (the spec as JSON);
//  - elastic data parallelism (spec/elastic.h): RINGMASTER_DESIRED_DP_SIZE (the degree at
//    spec.nodes), RINGMASTER_ACCUMULATION (spec::Accumulation; 1 for another program's job with
//    elastic_batch per_replica) and RINGMASTER_LR_SCALE (spec::LrScale: DP / desired DP with
//    elastic_batch per_replica, else 1, as "%.9g");
//  - on a "gpu" device: CUDA_VISIBLE_DEVICES (WorkerVisibleDevice of the agent's own list) and
//    the agent's CUDA_DEVICE_ORDER, if set;
//  - RINGMASTER_REPORT_SOCKET, if `node.report_socket_path` is set;
//  - the job's own `trainer.env`;
//  - for a command job that runs Python directly (PythonLaunchOf: kDirect), watched or not,
//    whose `trainer.env` does not set PYTHONPATH: the agent's own PYTHONPATH (node.inherited),
//    if set (the agent's PYTHONPATH reaches no other worker);
//  - when WatchesPython(spec) and `node.python_watch_dir` is set: python_watch_dir prepended to
//    that PYTHONPATH (then ":" and it, if non-empty), and RINGMASTER_PYTHON_WATCH = "1", or
//    "shell" for a kShell command (the watch then reports an exit reason only from the process
//    that took the rank, not from a shell's helper scripts);
//  - RINGMASTER_WORKER_TOKEN = `worker_token`, last (the job cannot name RINGMASTER_*: the
//    coordinator refuses it).
std::map<std::string, std::string> WorkerEnv(const v1::LaunchWorkers& launch,
                                             const v1::RankAssignment& a,
                                             const WorkerEnvOptions& node,
                                             const std::string& worker_token);

// The worker's argv: the job's `trainer.command.argv` (a torchrun command line: the program
// torchrun would start, agent/torchrun_launch.h, which reads torchrun's #! line), or
// `{trainer_binary}` for the builtin "gpt" trainer. FAILED_PRECONDITION for another builtin,
// "gpt" with no trainer_binary, or a torchrun command TorchrunLaunchArgv cannot run.
absl::StatusOr<std::vector<std::string>> WorkerArgv(const v1::JobSpec& spec,
                                                    const std::string& trainer_binary);

// The agent's own checks of a launch, whatever the coordinator accepted: what it could not run
// as asked (a job id that is no safe directory name, a spec too large for the worker's
// RINGMASTER_JOB_SPEC_JSON, strings that cannot go into an environment or argv) fails the
// launch's ranks, naming the field and the rule (INVALID_ARGUMENT), instead of anything else on
// the node.
absl::Status CheckLaunchable(const v1::LaunchWorkers& launch);

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_WORKER_ENV_H_
