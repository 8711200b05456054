// What the agent runs for a command job written as a torchrun command line (spec/torchrun.h):
// the program torchrun would start, with the Python torchrun itself runs on (its #! line), so
// that each rank is the program's own process, launched and watched as any Python rank.
//
// Threading: thread-safe (reads files, keeps nothing). Ownership: nothing is kept. Errors:
// FAILED_PRECONDITION naming what could not be done: a command the coordinator should have
// refused (field and rule), a torchrun not found or unreadable, or one that is not a Python
// script run through its #! line (a pip launcher that starts with #!/bin/sh).
#ifndef RINGMASTER_AGENT_TORCHRUN_LAUNCH_H_
#define RINGMASTER_AGENT_TORCHRUN_LAUNCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringmaster::agent {

// The argv for `argv`, which spec::RunsTorchrun accepts (spec::TorchrunProgramArgv): the
// program runs on `python_exec` where set (the job's PYTHON_EXEC, which torchrun honours), else
// the interpreter of the `python -m torch.distributed.run` form, else the Python of torchrun's
// #! line (its interpreter, or `env` and the Python it names; not the line's options).
// `torchrun` is found as execvpe finds a program (the agent's own PATH, `path`, is the one it
// searches): argv[0] itself when it holds a '/', else the first executable file of that name in
// `path`'s directories (an empty one is the current directory).
absl::StatusOr<std::vector<std::string>> TorchrunLaunchArgv(const std::vector<std::string>& argv,
                                                            absl::string_view path,
                                                            const std::string& python_exec = "");

// The interpreter words of `file`'s #! line, as Linux reads it: the interpreter, then the rest
// of the line (trimmed) as one argument if any ({"/usr/bin/python3.11"}, {"/usr/bin/env",
// "python3"}). FAILED_PRECONDITION for a file that cannot be read or has no #! line.
absl::StatusOr<std::vector<std::string>> ShebangOf(const std::string& file);

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_TORCHRUN_LAUNCH_H_
