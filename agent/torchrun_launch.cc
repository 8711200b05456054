#include "agent/torchrun_launch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "spec/command_line.h"
#include "spec/torchrun.h"

namespace ringmaster::agent {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

absl::StatusOr<std::string> FindProgram(const std::string& name, absl::string_view path) {
  if (name.find('/') != std::string::npos) return name;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("trainer.command[0]: ", name, " is not an executable file in the agent's PATH (",
                   path, "): give its full path"));
}

// The Python of #! words, as torchrun's `sys.executable` starts its program (none of the line's
// options): the interpreter, when it is one; for `env` before one (read as env reads it: -S's
// string split), `env` and it. Empty when they do not run Python.
std::vector<std::string> PythonOf(const std::vector<std::string>& words) {
  if (spec::IsPythonInterpreter(words[0])) return {words[0]};
  if (spec::ProgramName(words[0]) != "env") return {};
  const spec::EnvCommand env = spec::ReadEnvCommand(words);
  if (!env.ok || env.command.empty() || !spec::IsPythonInterpreter(env.command[0])) return {};
  return {words[0], env.command[0]};
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ShebangOf(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read ", file));
  }
  std::string line(256, '\0');
  in.read(line.data(), static_cast<std::streamsize>(line.size()));
  line.resize(static_cast<size_t>(in.gcount()));
  line = line.substr(0, line.find('\n'));
  if (line.size() < 3 || line[0] != '#' || line[1] != '!') {
    return absl::FailedPreconditionError(absl::StrCat(file, " has no #! line"));
  }
  absl::string_view rest = absl::StripAsciiWhitespace(absl::string_view(line).substr(2));
  const size_t space = rest.find_first_of(" \t");
  std::vector<std::string> words = {std::string(rest.substr(0, space))};
  if (space != absl::string_view::npos) {
    const absl::string_view arg = absl::StripAsciiWhitespace(rest.substr(space));
    if (!arg.empty()) words.emplace_back(arg);
  }
  if (words[0].empty()) {
    return absl::FailedPreconditionError(absl::StrCat(file, "'s #! line names no interpreter"));
  }
  return words;
}

absl::StatusOr<std::vector<std::string>> TorchrunLaunchArgv(const std::vector<std::string>& argv,
                                                            absl::string_view path,
                                                            const std::string& python_exec) {
  spec::TorchrunCommand command;
  std::vector<spec::Problem> problems;
  spec::ReadTorchrun(argv, &command, &problems);
  if (!problems.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(problems[0].first, ": ", problems[0].second));
  }
  std::vector<std::string> python;
  if (!python_exec.empty()) {
    python = {python_exec};  // torchrun's PYTHON_EXEC
  } else if (command.interpreter.empty() &&
             command.kind != spec::TorchrunCommand::Kind::kNoPython) {
    absl::StatusOr<std::string> torchrun = FindProgram(argv[0], path);
    if (!torchrun.ok()) return torchrun.status();
    absl::StatusOr<std::vector<std::string>> words = ShebangOf(*torchrun);
    if (!words.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("trainer.command[0]: the Python torchrun runs on is named by its #! line: ",
                       words.status().message()));
    }
    python = PythonOf(*words);
    if (python.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trainer.command[0]: ", *torchrun, " is not a Python script run through its #! line (#!",
          absl::StrJoin(*words, " "),
          "): write the command as PYTHON -m torch.distributed.run ... with the Python it uses"));
    }
  }
  return spec::TorchrunProgramArgv(command, python);
}

}  // namespace ringmaster::agent
