#include "ctl/completion.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ctl/help.h"

namespace ringmaster::ctl {
namespace {

// The bash function; zsh runs it through bashcompinit.
std::string BashFunction() {
  std::set<std::string> first_words;
  std::string cases;
  for (const CommandHelp& c : Commands()) {
    first_words.insert(c.words[0]);
    std::vector<std::string> flags;
    for (const std::string& f : c.flags) flags.push_back(absl::StrCat(f.size() == 1 ? "-" : "--", f));
    if (c.connects) {
      for (const FlagHelp& f : ConnectionFlags()) flags.push_back("--" + f.name);
    }
    flags.push_back("--help");
    const std::string name = absl::StrJoin(c.words, " ");
    absl::StrAppend(&cases, "    \"", name, "\") flags=\"", absl::StrJoin(flags, " "), "\" ;;\n");
  }
  return absl::StrCat(
      "# ringctl completion (bash). Load it with: source <(ringctl completion bash)\n"
      "_ringctl() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} words=() w flags=\"\"\n"
      "  for w in \"${COMP_WORDS[@]:1:COMP_CWORD-1}\"; do\n"
      "    case \"$w\" in -*) ;; *) words+=(\"$w\") ;; esac\n"
      "  done\n"
      "  local cmd=\"${words[0]}\"\n"
      "  case \"$cmd\" in get|describe) cmd=\"${words[0]} ${words[1]}\" ;; esac\n"
      "  case \"$cmd\" in\n",
      cases,
      "  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\")); return\n"
      "  fi\n"
      "  case \"${#words[@]}:${words[0]}\" in\n"
      "    0:*) COMPREPLY=($(compgen -W \"", absl::StrJoin(first_words, " "),
      "\" -- \"$cur\")) ;;\n"
      "    1:get) COMPREPLY=($(compgen -W \"jobs job\" -- \"$cur\")) ;;\n"
      "    1:describe) COMPREPLY=($(compgen -W \"job\" -- \"$cur\")) ;;\n"
      "    1:completion) COMPREPLY=($(compgen -W \"bash zsh\" -- \"$cur\")) ;;\n"
      "    1:cancel|1:watch|1:top|1:logs|1:check-links|2:get|2:describe)\n"
      "      [[ $cmd == \"get jobs\" ]] && return\n"
      "      COMPREPLY=($(compgen -W \"$(ringctl get jobs 2>/dev/null | awk 'NR>1 {print $1}')\" "
      "-- \"$cur\")) ;;\n"
      "    1:cordon|1:drain|1:uncordon|1:release-node)\n"
      "      COMPREPLY=($(compgen -W \"$(ringctl nodes 2>/dev/null | awk 'NR>1 && NF {print "
      "$1}')\" -- \"$cur\")) ;;\n"
      "    1:submit|1:plan) COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
      "  esac\n"
      "}\n");
}

}  // namespace

std::optional<std::string> CompletionScript(const std::string& shell) {
  if (shell == "bash") return absl::StrCat(BashFunction(), "complete -F _ringctl ringctl\n");
  if (shell == "zsh") {
    return absl::StrCat(
        "# ringctl completion (zsh). Load it with: source <(ringctl completion zsh)\n"
        "autoload -U +X bashcompinit && bashcompinit\n",
        BashFunction(), "complete -F _ringctl ringctl\n");
  }
  return std::nullopt;
}

}  // namespace ringmaster::ctl
