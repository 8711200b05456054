// Reading a command job's argv as the programs that run it will: the program a path names, GNU
// env's command line (`env [OPTION]... [-] [NAME=VALUE]... [COMMAND [ARG]...]`), the program a
// simple command runs past the wrappers before it (`nohup`, `timeout 1h`, `numactl -N 0`, ...),
// and the simple commands of a shell's `-c` string, for the agent (is it Python? does the watch
// reach it?) and the coordinator (does it hide a launcher that would make a world per rank?).
//
// Threading: pure functions, thread-safe. Ownership: nothing is kept; out-parameters must not be
// null (PythonModule's `*module` is unchanged where it returns -1). Errors: nothing here fails: a
// line env would refuse reads as such (EnvCommand::ok false), and a command that runs no program
// as -1.
#ifndef RINGMASTER_SPEC_COMMAND_LINE_H_
#define RINGMASTER_SPEC_COMMAND_LINE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace ringmaster::spec {

// The last component of `path` ("/usr/bin/python3" -> "python3"; "env" -> "env").
absl::string_view ProgramName(absl::string_view path);

// Whether `program`'s last path component is sh, bash, dash, zsh or ksh.
bool IsShell(absl::string_view program);

// Whether `argv0`'s last path component matches ^python[0-9.]*$ ("python", "python3",
// "python3.11", "/usr/bin/python3"; not "python3-config", "ipython" or "/usr/bin/env").
bool IsPythonInterpreter(const std::string& argv0);

// For `PYTHON [options] -m MODULE ...` (argv[0] IsPythonInterpreter), its options read as Python
// reads them (one-letter ones in clusters; c, m, W and X take the rest of the word or the next
// word; --check-hash-based-pycs the next word): `*module` gets MODULE, and the index of the word
// after it is returned; -1 where argv runs anything else (a script, -c CODE, stdin, another
// program) or nothing.
int PythonModule(const std::vector<std::string>& argv, std::string* module);

// What `env ...` does, read as coreutils' env (9.1, and 9.7's -a/--argv0) reads it: options until
// "--", a word that is no option, or the first NAME=VALUE; a long option may be a unique prefix
// of its name (`--ign`); -u, -C, -S and -a take the rest of their word or the next word
// (`--unset=NAME` or `--unset NAME`); -S's string is split into words read in its place, as env
// splits it (blanks, single and double quotes, backslash escapes, `\_` a blank, a word starting
// with # ends it; ${VAR} is kept as written, not expanded); a lone "-" right after the options is
// -i. Other options (-0, -v, the signal ones) change nothing read here.
struct EnvCommand {
  bool ok = true;       // false: env refuses the line (an option's argument missing, an
                        // ambiguous or unknown option, an unterminated quote in -S's string)
  bool clears = false;  // -i, --ignore-environment or "-": COMMAND starts with no environment
  std::vector<std::string> unset;     // -u's names, in order
  std::vector<std::string> assigned;  // the names of the NAME=VALUE words, in order
  std::vector<std::string> command;   // COMMAND [ARG]...; empty where env runs none
  // The index in `argv` of COMMAND's word; -1 where it came from -S's string or there is none.
  int command_index = -1;
};

// `argv[0]` is env itself (any path); the rest is read.
EnvCommand ReadEnvCommand(const std::vector<std::string>& argv);

// What env and NAME=VALUE prefixes on the way to a program do to its environment (ProgramOf).
struct EnvEffects {
  bool clears = false;                // env -i or -
  std::vector<std::string> unset;     // env -u's names
  std::vector<std::string> assigned;  // NAME=VALUE names, env's and prefixes'
};

// The program a simple command's `words` run: past NAME=VALUE prefixes, env (ReadEnvCommand) and
// the wrappers exec, nohup, time, command, timeout, nice, setsid, stdbuf, taskset and numactl,
// with their options (those that take an argument, attached or the next word; long ones by
// their full names) and operands (timeout's DURATION, taskset's mask or list). `*command` gets
// the program's word and its arguments. Returns the index in `words` of the program's word
// (env's own, where -S's string named it), or -1 where no program runs (`command -v`, `taskset
// -p`, `numactl --show`, a line env refuses, nothing after the wrappers) or where more than 16
// levels of env and wrappers nest (not read: it bounds the work on a request).
// `command` must not be null; `effects`, if not null, gets what env and prefixes do.
int ProgramOf(const std::vector<std::string>& words, std::vector<std::string>* command,
              EnvEffects* effects = nullptr);

// The simple commands of a shell's command line (`bash -lc "cd /data && torchrun ..."`): for
// sh, bash, dash, zsh and ksh (argv[0]'s last component) given -c, its options read as bash
// reads them (o and O take the next word, --rcfile and --init-file one; "--" or "-" ends them),
// the command string split into simple commands at ; & | ( ) and newline outside quotes, each
// into words at blanks outside quotes, with quotes and backslashes removed, comments,
// redirections (`> FILE`, `2>&1`, `&>FILE`) and leading reserved words (if, then, do, ...)
// dropped; and where a command's program is "$@" (also ${@}, $*, ${*}: `exec "$@"`), the words
// after $0 as one more command. (index of the word in `argv`, the command's words). Only what
// can be read so without taking data for commands: a string with a heredoc, a command
// substitution, [[ ]], arithmetic, an ANSI-C quote, a function, an array or case gives none (a
// Python launcher it starts is refused as it runs, by the watch: docs/python.md). Empty for
// another program, and for a shell running a script (not read) or its standard input.
std::vector<std::pair<int, std::vector<std::string>>> ShellCommands(
    const std::vector<std::string>& argv);

// Whether a program's words (program, then its arguments) run a given program.
using ProgramTest = bool (*)(const std::vector<std::string>& command);

// Where `argv` runs a program `runs` accepts: as its own program past any wrappers (ProgramOf), or
// in one of a shell's simple commands (ShellCommands), a shell behind wrappers and shells within
// shells read in turn (up to 16 levels). The index of the word of `argv` that shows it, or -1.
int CommandRunning(const std::vector<std::string>& argv, ProgramTest runs);

}  // namespace ringmaster::spec

#endif  // RINGMASTER_SPEC_COMMAND_LINE_H_
