#include "agent/worker_env.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "agent/devices.h"
#include "agent/torchrun_launch.h"
#include "common/proto_edge.h"
#include "common/status.h"
#include "google/protobuf/util/json_util.h"
#include "spec/command_line.h"
#include "spec/elastic.h"

namespace ringmaster::agent {
namespace {

void CopyEnv(const std::map<std::string, std::string>& from, const char* name,
             std::map<std::string, std::string>* env) {
  auto it = from.find(name);
  if (it != from.end()) (*env)[name] = it->second;
}

}  // namespace

std::map<std::string, std::string> AgentEnvironment() {
  std::map<std::string, std::string> env;
  for (const char* name :
       {"PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONPATH"}) {
    const char* value = std::getenv(name);
    if (value != nullptr) env[name] = value;
  }
  return env;
}

namespace {

// PythonLaunchOf's verdict on one program word (past env and wrappers).
PythonLaunch LaunchOfProgram(const std::string& program) {
  const absl::string_view name = spec::ProgramName(program);
  if (IsPythonInterpreter(program) || (name.size() > 3 && absl::EndsWith(name, ".py"))) {
    return PythonLaunch::kDirect;
  }
  if (spec::IsShell(program) || (name.size() > 3 && absl::EndsWith(name, ".sh"))) {
    return PythonLaunch::kShell;
  }
  return PythonLaunch::kNone;
}

PythonLaunch PythonLaunchOfSpec(const v1::JobSpec& spec) {
  if (!spec.trainer().has_command()) return PythonLaunch::kNone;
  const auto& argv = spec.trainer().command().argv();
  return PythonLaunchOf(std::vector<std::string>(argv.begin(), argv.end()));
}

// WatchesPython, for a spec whose command is `launch`.
bool Watches(const v1::JobSpec& spec, PythonLaunch launch) {
  return launch != PythonLaunch::kNone && !spec.watchdog().python_watch_disabled();
}

}  // namespace

PythonLaunch PythonLaunchOf(const std::vector<std::string>& argv) {
  if (argv.empty()) return PythonLaunch::kNone;
  if (spec::RunsTorchrun(argv)) {
    spec::TorchrunCommand command;
    std::vector<spec::Problem> problems;
    spec::ReadTorchrun(argv, &command, &problems);
    if (!problems.empty()) return PythonLaunch::kNone;
    return command.kind == spec::TorchrunCommand::Kind::kNoPython
               ? PythonLaunchOf(command.program)
               : PythonLaunch::kDirect;
  }
  // Past env and wrappers (`nohup`, `timeout 1d`, `numactl -N 0`, ...): the program they run.
  std::vector<std::string> command;
  spec::EnvEffects effects;
  if (spec::ProgramOf(argv, &command, &effects) < 0) return PythonLaunch::kNone;
  // The Python the command starts could not find the watch where env empties the environment,
  // or unsets or sets PYTHONPATH.
  auto names_pythonpath = [](const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), "PYTHONPATH") != names.end();
  };
  if (effects.clears || names_pythonpath(effects.unset) || names_pythonpath(effects.assigned)) {
    return PythonLaunch::kNone;
  }
  return LaunchOfProgram(command[0]);
}

bool WatchesPython(const v1::JobSpec& spec) { return Watches(spec, PythonLaunchOfSpec(spec)); }

std::map<std::string, std::string> WorkerEnv(const v1::LaunchWorkers& launch,
                                             const v1::RankAssignment& a,
                                             const WorkerEnvOptions& node,
                                             const std::string& worker_token) {
  const v1::JobSpec& spec = launch.spec();
  int min_rank = a.rank();
  for (const auto& other : launch.assignments()) min_rank = std::min(min_rank, other.rank());
  const int local_world = launch.assignments_size();
  std::map<std::string, std::string> env;
  CopyEnv(node.inherited, "PATH", &env);
  CopyEnv(node.inherited, "HOME", &env);
  CopyEnv(node.inherited, "LANG", &env);
  env["RANK"] = absl::StrCat(a.rank());
  env["WORLD_SIZE"] = absl::StrCat(launch.world_size());
  env["LOCAL_RANK"] = absl::StrCat(a.local_rank());
  env["LOCAL_WORLD_SIZE"] = absl::StrCat(local_world);
  env["GROUP_RANK"] = absl::StrCat(local_world > 0 ? min_rank / local_world : 0);
  env["MASTER_ADDR"] = launch.master_addr();
  env["MASTER_PORT"] = absl::StrCat(launch.master_port());
  env["TORCHELASTIC_RESTART_COUNT"] = absl::StrCat(launch.restart_count());
  // The rest of what torchrun's agent gives its workers: one role, "default"; and two of its
  // defaults, which the job's trainer.env may change.
  env["ROLE_NAME"] = "default";
  env["ROLE_RANK"] = env["RANK"];
  env["ROLE_WORLD_SIZE"] = env["WORLD_SIZE"];
  env["GROUP_WORLD_SIZE"] = absl::StrCat(local_world > 0 ? launch.world_size() / local_world : 0);
  env["TORCHELASTIC_MAX_RESTARTS"] = absl::StrCat(spec.restart().max_restarts());
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";  // a failed NCCL collective ends the process
  if (spec.trainer().has_command() && local_world > 1) env["OMP_NUM_THREADS"] = "1";
  env["RINGMASTER_JOB"] = launch.job().job_id();
  env["RINGMASTER_GENERATION"] = absl::StrCat(launch.job().generation());
  env["RINGMASTER_AGENT_SOCKET"] = node.socket_path;
  env["RINGMASTER_NODE"] = node.node_name;
  env["RINGMASTER_HOST_ADDRESS"] = node.host_address;
  env["RINGMASTER_TP_RANK"] = absl::StrCat(a.tp_rank());
  env["RINGMASTER_PP_RANK"] = absl::StrCat(a.pp_rank());
  env["RINGMASTER_DP_RANK"] = absl::StrCat(a.dp_rank());
  env["RINGMASTER_TP_SIZE"] = absl::StrCat(launch.layout().tensor());
  env["RINGMASTER_PP_SIZE"] = absl::StrCat(launch.layout().pipeline());
  env["RINGMASTER_DP_SIZE"] = absl::StrCat(launch.layout().data());
  // Elastic data parallelism (spec/elastic.h): the degree at spec.nodes (TP and PP never change
  // with the nodes), and how many times its full-size per-replica batch each replica takes now.
  const int64_t model_ranks = int64_t{launch.layout().tensor()} * launch.layout().pipeline();
  const int64_t desired =
      model_ranks > 0 ? int64_t{spec.nodes()} * spec.devices_per_node() / model_ranks : 0;
  const int desired_dp =
      desired > 0 && desired <= (1 << 30) ? static_cast<int>(desired) : launch.layout().data();
  env["RINGMASTER_DESIRED_DP_SIZE"] = absl::StrCat(desired_dp);
  const int accumulation = spec::Accumulation(spec, desired_dp, launch.layout().data());
  env["RINGMASTER_ACCUMULATION"] = absl::StrCat(accumulation > 0 ? accumulation : 1);
  // With elastic_batch per_replica the program keeps its batch and scales its learning rate.
  env["RINGMASTER_LR_SCALE"] =
      absl::StrFormat("%.9g", spec::LrScale(spec, desired_dp, launch.layout().data()));
  env["RINGMASTER_CHECKPOINT_DIR"] = spec.checkpoint().dir();
  std::string spec_json;
  // A JobSpec always converts; on the impossible failure the variable is just empty.
  (void)google::protobuf::util::MessageToJsonString(spec, &spec_json);
  env["RINGMASTER_JOB_SPEC_JSON"] = spec_json;
  for (const v1::Device& d : node.devices) {
    if (d.index() == a.local_device() && d.kind() == "gpu") {
      auto visible = node.inherited.find("CUDA_VISIBLE_DEVICES");
      env["CUDA_VISIBLE_DEVICES"] = WorkerVisibleDevice(
          d.index(), visible == node.inherited.end() ? nullptr : visible->second.c_str());
      // The order the agent's ordinals were counted in.
      CopyEnv(node.inherited, "CUDA_DEVICE_ORDER", &env);
    }
  }
  if (!node.report_socket_path.empty()) env["RINGMASTER_REPORT_SOCKET"] = node.report_socket_path;
  for (const auto& [k, v] : spec.trainer().env()) env[k] = v;
  // A Python command inherits the agent's PYTHONPATH unless the job sets its own, watched or not.
  const PythonLaunch python = PythonLaunchOfSpec(spec);
  if (python == PythonLaunch::kDirect && spec.trainer().env().count("PYTHONPATH") == 0) {
    CopyEnv(node.inherited, "PYTHONPATH", &env);
  }
  if (!node.python_watch_dir.empty() && Watches(spec, python)) {
    auto path = env.find("PYTHONPATH");
    const std::string rest = path == env.end() ? "" : path->second;
    env["PYTHONPATH"] = rest.empty() ? node.python_watch_dir
                                     : absl::StrCat(node.python_watch_dir, ":", rest);
    env["RINGMASTER_PYTHON_WATCH"] = python == PythonLaunch::kShell ? "shell" : "1";
  }
  // After the job's own variables (which cannot name it: RINGMASTER_* is the agent's).
  env["RINGMASTER_WORKER_TOKEN"] = worker_token;
  return env;
}

absl::StatusOr<std::vector<std::string>> WorkerArgv(const v1::JobSpec& spec,
                                                    const std::string& trainer_binary) {
  if (spec.trainer().has_command()) {
    std::vector<std::string> argv(spec.trainer().command().argv().begin(),
                                  spec.trainer().command().argv().end());
    if (!spec::RunsTorchrun(argv)) return argv;
    // The PATH execvpe searches (worker_supervisor.cc): the agent's; glibc's default without.
    const char* path = std::getenv("PATH");
    const auto exec = spec.trainer().env().find("PYTHON_EXEC");
    return TorchrunLaunchArgv(argv, path == nullptr ? "/bin:/usr/bin" : path,
                              exec == spec.trainer().env().end() ? "" : exec->second);
  }
  if (spec.trainer().builtin() == "gpt" && !trainer_binary.empty()) {
    return std::vector<std::string>{trainer_binary};
  }
  return absl::FailedPreconditionError(absl::StrCat("this agent cannot run builtin trainer \"",
                                                    spec.trainer().builtin(),
                                                    "\" (no --trainer_binary)"));
}

absl::Status CheckLaunchable(const v1::LaunchWorkers& launch) {
  const std::string& id = launch.job().job_id();
  if (id.empty() || id.size() > 128 || id == "." || id == ".." ||
      id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos) {
    return FieldError("job.job_id",
                      "must be 1-128 characters of [A-Za-z0-9._-] (a directory name)");
  }
  RETURN_IF_ERROR(CheckJsonSize(launch.spec(), "spec", kMaxJobSpecJsonBytes));
  const v1::TrainerSpec& trainer = launch.spec().trainer();
  for (const auto& [name, value] : trainer.env()) {
    if (name.empty() || name.find_first_of(std::string("=\0", 2)) != std::string::npos ||
        value.find('\0') != std::string::npos) {
      return FieldError("spec.trainer.env",
                        "names must be non-empty without '=' or NUL, and values without NUL");
    }
  }
  if (trainer.has_command() &&
      (trainer.command().argv().empty() || trainer.command().argv(0).empty())) {
    return FieldError("spec.trainer.command.argv", "must name a program (argv[0] non-empty)");
  }
  for (const std::string& arg : trainer.command().argv()) {
    if (arg.find('\0') != std::string::npos) {
      return FieldError("spec.trainer.command.argv", "must not contain NUL");
    }
  }
  return absl::OkStatus();
}

}  // namespace ringmaster::agent
