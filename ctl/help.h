// ringctl's help texts: `ringctl --help`, `ringctl help COMMAND`, `ringctl COMMAND --help`.
// Pure functions of constant tables (thread-safe; no errors). The tables are also the source of
// the shell completion scripts (ctl/completion.h), so a command or flag is named in one place.
#ifndef RINGMASTER_CTL_HELP_H_
#define RINGMASTER_CTL_HELP_H_

#include <optional>
#include <string>
#include <vector>

namespace ringmaster::ctl {

// One command: its words ("get", "jobs"), the usage after them, a summary line, a paragraph, the
// flags it takes (names as in kFlags, without dashes) and an example.
struct CommandHelp {
  std::vector<std::string> words;
  std::string args;  // e.g. "ID [--follow]"
  std::string summary;
  std::string details;
  std::vector<std::string> flags;
  bool connects = true;  // talks to the coordinator: takes the connection flags
  std::string example;
};

// One flag: its name (without dashes), the value's placeholder ("" for a boolean), the
// environment variable it falls back to ("" for none) and what it does.
struct FlagHelp {
  std::string name;
  std::string value;
  std::string env;
  std::string text;
};

const std::vector<CommandHelp>& Commands();
// The connection flags every command that talks to the coordinator takes.
const std::vector<FlagHelp>& ConnectionFlags();
// Every flag, connection flags included; nullptr for an unknown name.
const FlagHelp* FindFlag(const std::string& name);

// `ringctl --help`: the commands, the connection flags with their environment variables, and
// examples.
std::string MainHelp();

// The help of the command named by the leading `words` (extra words, such as a job id, are
// ignored); nullopt when they name no command.
std::optional<std::string> CommandHelpText(const std::vector<std::string>& words);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_HELP_H_
