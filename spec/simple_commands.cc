// ProgramOf, ShellCommands and CommandRunning (spec/command_line.h): the program a simple
// command runs past its wrappers, and the simple commands of a shell's -c string.
#include <cctype>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "spec/command_line.h"

namespace ringmaster::spec {
namespace {

// Levels of env, wrappers and shells read within one another; a deeper command is not read
// (-1), which bounds the work a coordinator does on a request.
constexpr int kMaxDepth = 16;

// A program that runs another given after its own options and operands.
struct Wrapper {
  absl::string_view name;
  absl::string_view short_arguments;  // its short options that take an argument
  absl::string_view long_arguments;   // its long options that take one, blank-separated
  int operands;                       // words between its options and the program
  absl::string_view short_none;       // short options with which it runs no program
  absl::string_view long_none;        // long ones (--help and --version for all)
};
constexpr Wrapper kWrappers[] = {
    {"exec", "a", "", 0, "", ""},
    {"nohup", "", "", 0, "", ""},
    {"time", "fo", "format output", 0, "V", ""},
    {"command", "", "", 0, "vV", ""},
    {"timeout", "sk", "signal kill-after", 1, "", ""},
    {"nice", "n", "adjustment", 0, "", ""},
    {"setsid", "", "", 0, "hV", ""},
    {"stdbuf", "ioe", "input output error", 0, "", ""},
    {"taskset", "", "", 1, "phV", "pid"},
    {"numactl", "NmCcipPwSfLMIo",
     "cpunodebind membind physcpubind cpubind interleave preferred preferred-many "
     "weighted-interleave shm file length mode policy offset",
     0, "HsV", "hardware show"},
};

bool Lists(absl::string_view names, absl::string_view name) {
  for (absl::string_view listed : absl::StrSplit(names, ' ', absl::SkipEmpty())) {
    if (listed == name) return true;
  }
  return false;
}

// The index in `words` of the first word after `wrapper`'s options and operands (from `from`,
// the word after its name); -1 where it runs no program.
int AfterWrapper(const Wrapper& wrapper, const std::vector<std::string>& words, size_t from) {
  size_t i = from;
  while (i < words.size() && words[i].size() > 1 && words[i][0] == '-') {
    const std::string& option = words[i++];
    if (option == "--") break;
    if (option[1] == '-') {
      const std::string name = option.substr(2, option.find('=') - 2);
      if (name == "help" || name == "version" || Lists(wrapper.long_none, name)) return -1;
      if (option.find('=') == std::string::npos && Lists(wrapper.long_arguments, name)) ++i;
      continue;
    }
    for (size_t c = 1; c < option.size(); ++c) {
      if (absl::StrContains(wrapper.short_none, option[c])) return -1;
      if (absl::StrContains(wrapper.short_arguments, option[c])) {
        if (c + 1 == option.size()) ++i;  // else the rest of the word is the argument
        break;
      }
    }
  }
  i += static_cast<size_t>(wrapper.operands);
  return i < words.size() ? static_cast<int>(i) : -1;
}

// A shell's NAME=VALUE prefix word.
bool IsAssignment(const std::string& word) {
  const size_t equals = word.find('=');
  if (equals == 0 || equals == std::string::npos) return false;
  for (size_t i = 0; i < equals; ++i) {
    const unsigned char c = static_cast<unsigned char>(word[i]);
    if (!(std::isalpha(c) || c == '_' || (i > 0 && std::isdigit(c)))) return false;
  }
  return true;
}

int ProgramFrom(const std::vector<std::string>& words, size_t from,
                std::vector<std::string>* command, int depth, EnvEffects* effects) {
  if (depth > kMaxDepth) return -1;
  size_t k = from;
  for (; k < words.size() && IsAssignment(words[k]); ++k) {
    if (effects != nullptr) effects->assigned.push_back(words[k].substr(0, words[k].find('=')));
  }
  if (k >= words.size()) return -1;
  const absl::string_view name = ProgramName(words[k]);
  if (name == "env") {
    EnvCommand env =
        ReadEnvCommand(std::vector<std::string>(words.begin() + static_cast<long>(k), words.end()));
    if (!env.ok || env.command.empty()) return -1;
    if (effects != nullptr) {
      effects->clears = effects->clears || env.clears;
      for (std::string& name : env.unset) effects->unset.push_back(std::move(name));
      for (std::string& name : env.assigned) effects->assigned.push_back(std::move(name));
    }
    const int at = ProgramFrom(env.command, 0, command, depth + 1, effects);
    if (at < 0) return -1;
    // Words -S inserted precede the rest of the line: a COMMAND from the line is followed by
    // the line's own words.
    return env.command_index < 0 ? static_cast<int>(k)
                                 : static_cast<int>(k) + env.command_index + at;
  }
  for (const Wrapper& wrapper : kWrappers) {
    if (name != wrapper.name) continue;
    const int after = AfterWrapper(wrapper, words, k + 1);
    return after < 0 ? -1
                     : ProgramFrom(words, static_cast<size_t>(after), command, depth + 1, effects);
  }
  command->assign(words.begin() + static_cast<long>(k), words.end());
  return static_cast<int>(k);
}

bool IsShell(absl::string_view program) {
  const absl::string_view name = ProgramName(program);
  return name == "sh" || name == "bash" || name == "dash" || name == "zsh" || name == "ksh";
}

// A redirection word as written (quotes included): [N]< [N]> [N]>> &> [N]<& [N]>& <> ...; the
// operator alone (its target is the next word), or with its target attached.
enum class Redirection { kNone, kOperator, kAttached };
Redirection RedirectionOf(absl::string_view raw) {
  size_t i = 0;
  while (i < raw.size() && std::isdigit(static_cast<unsigned char>(raw[i]))) ++i;
  if (i < raw.size() && raw[i] == '&' && i + 1 < raw.size() && raw[i + 1] == '>') ++i;
  if (i >= raw.size() || (raw[i] != '<' && raw[i] != '>')) return Redirection::kNone;
  while (i < raw.size() && (raw[i] == '<' || raw[i] == '>' || raw[i] == '&' || raw[i] == '|')) {
    ++i;
  }
  return i == raw.size() ? Redirection::kOperator : Redirection::kAttached;
}

// Reserved words that may open a simple command's words: the program follows.
bool IsReservedWord(absl::string_view word) {
  return word == "if" || word == "then" || word == "else" || word == "elif" || word == "do" ||
         word == "while" || word == "until" || word == "{" || word == "!" || word == "}" ||
         word == "fi" || word == "done";
}

// The simple commands of shell text: split at ; & | ( ) newline and backquote outside quotes,
// words at blanks outside quotes, quotes and backslashes removed, redirections (and their
// targets) and leading reserved words dropped. Heredoc bodies and ${...} are read as text.
std::vector<std::vector<std::string>> LexCommands(absl::string_view text) {
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> words;
  std::string word, raw;  // the word's value, and as written (for redirections)
  bool in_word = false;
  auto end_word = [&] {
    if (in_word) {
      words.push_back(std::move(word));
      words.push_back(std::move(raw));  // pairs (value, raw), sorted out in end_command
    }
    word.clear();
    raw.clear();
    in_word = false;
  };
  auto end_command = [&] {
    end_word();
    std::vector<std::string> kept;
    bool skip_next = false;
    for (size_t i = 0; i + 1 < words.size(); i += 2) {
      if (skip_next) {
        skip_next = false;
        continue;
      }
      const Redirection r = RedirectionOf(words[i + 1]);
      if (r != Redirection::kNone) {
        skip_next = r == Redirection::kOperator;
        continue;
      }
      if (kept.empty() && IsReservedWord(words[i + 1])) continue;
      kept.push_back(std::move(words[i]));
    }
    if (!kept.empty()) commands.push_back(std::move(kept));
    words.clear();
  };
  enum class Quote { kNone, kSingle, kDouble };
  Quote quote = Quote::kNone;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == Quote::kSingle) {
      raw += c;
      if (c == '\'') {
        quote = Quote::kNone;
      } else {
        word += c;
      }
      continue;
    }
    if (c == '\\' && i + 1 < text.size()) {
      raw += c;
      raw += text[++i];
      if (text[i] != '\n') word += text[i];  // a backslash-newline joins lines
      in_word = true;
      continue;
    }
    if (quote == Quote::kDouble) {
      raw += c;
      if (c == '"') {
        quote = Quote::kNone;
      } else {
        word += c;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c == '\'' ? Quote::kSingle : Quote::kDouble;
      raw += c;
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      end_word();
    } else if (c == '&' && in_word && (raw.back() == '<' || raw.back() == '>')) {
      raw += c;  // 2>&1, <&3: a redirection's own &
      word += c;
    } else if (c == '&' && i + 1 < text.size() && text[i + 1] == '>') {
      end_word();
      raw += c;  // &> FILE
      word += c;
      in_word = true;
    } else if (c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '\n' ||
               c == '`') {
      end_command();
    } else {
      raw += c;
      word += c;
      in_word = true;
    }
  }
  end_command();
  return commands;
}

int CommandRunningAt(const std::vector<std::string>& argv, ProgramTest runs, int depth);

// Where a shell's commands (ShellCommands) or the program `words` run (a shell too, read in
// turn) run a program `runs` accepts: the index in `words`, or -1.
int ProgramRunning(const std::vector<std::string>& words, ProgramTest runs, int depth) {
  std::vector<std::string> command;
  const int at = ProgramFrom(words, 0, &command, depth, nullptr);
  if (at < 0) return -1;
  if (runs(command)) return at;
  if (at == 0 || !IsShell(command[0])) return -1;  // a shell as argv itself: CommandRunningAt
  const int inner = CommandRunningAt(command, runs, depth + 1);
  if (inner < 0) return -1;
  // The shell's words are argv's from `at` on, unless env's -S string gave them.
  return at + command.size() == words.size() ? at + inner : at;
}

int CommandRunningAt(const std::vector<std::string>& argv, ProgramTest runs, int depth) {
  if (depth > kMaxDepth) return -1;
  for (const auto& [index, words] : ShellCommands(argv)) {
    if (CommandRunningAt(words, runs, depth + 1) >= 0) return index;
  }
  return ProgramRunning(argv, runs, depth);
}

}  // namespace

int ProgramOf(const std::vector<std::string>& words, std::vector<std::string>* command,
              EnvEffects* effects) {
  command->clear();
  return ProgramFrom(words, 0, command, 0, effects);
}

std::vector<std::pair<int, std::vector<std::string>>> ShellCommands(
    const std::vector<std::string>& argv) {
  std::vector<std::pair<int, std::vector<std::string>>> out;
  if (argv.empty() || !IsShell(argv[0])) return out;
  // The shell's options, as bash and dash read them: -c makes the first operand the command
  // string; o and O (in a cluster too) take the next word, --rcfile and --init-file one.
  bool string = false;
  size_t i = 1;
  while (i < argv.size()) {
    const std::string& word = argv[i];
    if (word == "--" || word == "-") {
      ++i;
      break;
    }
    if (word.size() < 2 || (word[0] != '-' && word[0] != '+')) break;
    ++i;
    if (absl::StartsWith(word, "--")) {
      if (word == "--rcfile" || word == "--init-file") ++i;
      continue;
    }
    for (size_t c = 1; c < word.size(); ++c) {
      if (word[c] == 'c') string = true;
      if (word[c] == 'o' || word[c] == 'O') ++i;
    }
  }
  if (!string || i >= argv.size()) return out;  // a script (not read), or stdin
  const std::string& text = argv[i];
  for (std::vector<std::string>& words : LexCommands(text)) {
    out.emplace_back(static_cast<int>(i), std::move(words));
  }
  // `exec "$@"` and the like: the words after $0 are one command.
  if (absl::StrContains(text, "$@") || absl::StrContains(text, "${@") ||
      absl::StrContains(text, "$*") || absl::StrContains(text, "${*")) {
    if (i + 2 < argv.size()) {
      out.emplace_back(static_cast<int>(i) + 2,
                       std::vector<std::string>(argv.begin() + static_cast<long>(i) + 2,
                                                argv.end()));
    }
  }
  return out;
}

int CommandRunning(const std::vector<std::string>& argv, ProgramTest runs) {
  return CommandRunningAt(argv, runs, 0);
}

}  // namespace ringmaster::spec
