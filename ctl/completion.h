// `ringctl completion bash|zsh`: a completion script for commands, flags and job ids, generated
// from the help tables (ctl/help.h). Job ids come from `ringctl get jobs` when completing, so the
// connection settings of the shell (RINGMASTER_*) apply. Pure functions (thread-safe); the
// script is returned by value (the caller owns it). Errors: an unknown shell gives nullopt.
#ifndef RINGMASTER_CTL_COMPLETION_H_
#define RINGMASTER_CTL_COMPLETION_H_

#include <optional>
#include <string>

namespace ringmaster::ctl {

// The script for `shell` ("bash" or "zsh"); nullopt for another shell.
std::optional<std::string> CompletionScript(const std::string& shell);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_COMPLETION_H_
