#include "spec/launchers.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spec/command_line.h"

namespace ringmaster::spec {
namespace {

constexpr absl::string_view kWorld =
    "starts its own processes and world on each node, while Ringmaster already starts one "
    "process per device with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set: "
    "each rank's launcher would train apart from the others";

}  // namespace

bool RunsAccelerateLaunch(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  const absl::string_view name = ProgramName(command[0]);
  if (name == "accelerate-launch") return true;
  if (name == "accelerate") return command.size() > 1 && command[1] == "launch";
  std::string module;
  return PythonModule(command, &module) >= 0 && module == "accelerate.commands.launch";
}

bool RunsDeepspeedLauncher(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  const absl::string_view name = ProgramName(command[0]);
  if (name == "deepspeed" || name == "deepspeed.pt") return true;
  std::string module;
  return PythonModule(command, &module) >= 0 &&
         (module == "deepspeed.launcher.runner" || module == "deepspeed.launcher.launch");
}

LauncherProblem ForeignLauncher(const std::vector<std::string>& argv) {
  LauncherProblem problem;
  if ((problem.index = CommandRunning(argv, RunsAccelerateLaunch)) >= 0) {
    problem.rule = absl::StrCat(
        "must not run `accelerate launch`, which ", kWorld,
        ": run the script itself (python3 train.py ...; Accelerator() reads those variables), "
        "with accelerate's settings as its variables in trainer.env "
        "(ACCELERATE_MIXED_PRECISION: bf16)");
  } else if ((problem.index = CommandRunning(argv, RunsDeepspeedLauncher)) >= 0) {
    problem.rule = absl::StrCat(
        "must not run the deepspeed launcher, which ", kWorld,
        ": run the script itself (python3 train.py --deepspeed ...; deepspeed.initialize() "
        "reads those variables)");
  }
  return problem;
}

}  // namespace ringmaster::spec
