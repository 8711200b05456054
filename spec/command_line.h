// Reading a command job's argv as the programs that run it will: the program a path names, and
// GNU env's command line (`env [OPTION]... [-] [NAME=VALUE]... [COMMAND [ARG]...]`), for the
// agent (is it Python? does the watch reach it?) and the coordinator (does it hide torchrun?).
//
// Pure functions; thread-safe. Nothing here fails: a line env would refuse reads as such
// (EnvCommand::ok false).
#ifndef RINGMASTER_SPEC_COMMAND_LINE_H_
#define RINGMASTER_SPEC_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ringmaster::spec {

// The last component of `path` ("/usr/bin/python3" -> "python3"; "env" -> "env").
absl::string_view ProgramName(absl::string_view path);

// What `env ...` does, read as coreutils' env (9.1) reads it: options until "--", a word that is
// no option, or the first NAME=VALUE; a long option may be a unique prefix of its name
// (`--ign`); -u, -C and -S take the rest of their word or the next word (`--unset=NAME` or
// `--unset NAME`); -S's string is split at blanks into words read in its place (env's quotes,
// escapes and ${VAR} in it are not read); a lone "-" right after the options is -i. Other
// options (-0, -v, the signal ones) change nothing read here.
struct EnvCommand {
  bool ok = true;       // false: env refuses the line (an option's argument missing, an
                        // ambiguous or unknown long option)
  bool clears = false;  // -i, --ignore-environment or "-": COMMAND starts with no environment
  std::vector<std::string> unset;     // -u's names, in order
  std::vector<std::string> assigned;  // the names of the NAME=VALUE words, in order
  std::vector<std::string> command;   // COMMAND [ARG]...; empty where env runs none
  // The index in `argv` of COMMAND's word; -1 where it came from -S's string or there is none.
  int command_index = -1;
};

// `argv[0]` is env itself (any path); the rest is read.
EnvCommand ReadEnvCommand(const std::vector<std::string>& argv);

}  // namespace ringmaster::spec

#endif  // RINGMASTER_SPEC_COMMAND_LINE_H_
