// Launchers a rank must not run: `accelerate launch` and the `deepspeed` launcher start their own
// processes and their own world on each node (from their options and, for accelerate, a config
// file on the node). Ringmaster already starts one process per device with the world set up
// (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so under it each rank's launcher
// would start a node's worth of processes and train apart from the other ranks. The coordinator
// refuses such a command, saying what to run instead: the script itself, which Accelerate's
// Accelerator and deepspeed.initialize set up from those variables. (torchrun is read and run
// as the program it starts instead: spec/torchrun.h.)
//
// Threading: pure functions, thread-safe. Ownership: nothing is kept. Errors: nothing fails: a
// command without a launcher is index -1. The watch's run-time refusal
// (python/watch/_ringmaster_watch/__init__.py, _LAUNCHER_MODULES and _LAUNCHER_SCRIPTS) knows the
// same launchers: keep the two lists together.
#ifndef RINGMASTER_SPEC_LAUNCHERS_H_
#define RINGMASTER_SPEC_LAUNCHERS_H_

#include <string>
#include <vector>

namespace ringmaster::spec {

// `accelerate launch ...`, `accelerate-launch ...` or `PYTHON -m accelerate.commands.launch`.
bool RunsAccelerateLaunch(const std::vector<std::string>& command);

// `deepspeed ...` or `deepspeed.pt ...` (its runner; not `ds`, its third name, which other
// programs bear too), or `PYTHON -m deepspeed.launcher.runner` or `deepspeed.launcher.launch`.
bool RunsDeepspeedLauncher(const std::vector<std::string>& command);

struct LauncherProblem {
  int index = -1;    // the word of argv that starts the launcher; -1: none
  std::string rule;  // what is wrong and what to run instead
};

// The first launcher `argv` runs, as its program or inside env, a wrapper or a shell's -c string
// (spec/command_line.h's CommandRunning).
LauncherProblem ForeignLauncher(const std::vector<std::string>& argv);

}  // namespace ringmaster::spec

#endif  // RINGMASTER_SPEC_LAUNCHERS_H_
