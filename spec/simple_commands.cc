// ProgramOf, ShellCommands and CommandRunning (spec/command_line.h): the program a simple
// command runs past its wrappers, and the simple commands of a shell's -c string.
#include <algorithm>
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

// Whether LexCommands can read shell text: none of the constructs whose words it would take for
// commands (heredocs, command substitutions, [[ ]], arithmetic, ANSI-C quotes, functions,
// arrays, case patterns) stands in it. (A launcher in one that is not read is refused as it
// runs, by the Python watch: docs/python.md.)
bool Readable(absl::string_view text) {
  for (absl::string_view construct : {"<<", "$(", "`", "[[", "((", "$'", "()", "=(", "function"}) {
    if (absl::StrContains(text, construct)) return false;
  }
  for (absl::string_view word : absl::StrSplit(text, absl::ByAnyChar(" \t\n;&|"))) {
    if (word == "case") return false;
  }
  return true;
}

// The simple commands of shell text LexCommands reads.
class ShellLexer {
 public:
  explicit ShellLexer(absl::string_view text) : text_(text) {}

  std::vector<std::vector<std::string>> Commands() {
    for (i_ = 0; i_ < text_.size(); ++i_) Next(text_[i_]);
    EndCommand();
    return std::move(commands_);
  }

 private:
  struct Word {
    std::string value;  // quotes and backslashes removed
    std::string raw;    // as written (for redirections)
  };
  enum class Quote { kNone, kSingle, kDouble };

  char Peek() const { return i_ + 1 < text_.size() ? text_[i_ + 1] : '\0'; }

  void Add(char c) {
    word_.value += c;
    word_.raw += c;
    in_word_ = true;
  }

  void Next(char c) {
    if (quote_ != Quote::kNone) {
      if (quote_ == Quote::kDouble && c == '\\' && Peek() != '\0' &&
          absl::StrContains("$`\"\\", Peek())) {
        word_.raw += c;
        word_.value += text_[++i_];
        word_.raw += text_[i_];
        return;
      }
      word_.raw += c;
      if (c == (quote_ == Quote::kSingle ? '\'' : '"')) {
        quote_ = Quote::kNone;
      } else {
        word_.value += c;
      }
      return;
    }
    if (c == '\\' && Peek() != '\0') {
      if (text_[++i_] == '\n') return;  // a line continued
      word_.raw += c;
      Add(text_[i_]);
      return;
    }
    if (c == '\'' || c == '"') {
      quote_ = c == '\'' ? Quote::kSingle : Quote::kDouble;
      word_.raw += c;
      in_word_ = true;
    } else if (c == '#' && !in_word_) {  // a comment, to the end of its line
      const size_t end = text_.find('\n', i_);
      i_ = end == absl::string_view::npos ? text_.size() : end - 1;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      EndWord();
    } else if (in_word_ && (c == '&' || c == '|') &&
               (word_.raw.back() == '<' || word_.raw.back() == '>')) {
      Add(c);  // 2>&1, >|: the redirection's own
    } else if (c == '&' && Peek() == '>') {  // &> FILE
      EndWord();
      Add(c);
    } else if (c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '\n') {
      EndCommand();
    } else {
      Add(c);
    }
  }

  void EndWord() {
    if (!in_word_) return;
    words_.push_back(std::move(word_));
    word_ = Word();
    in_word_ = false;
  }

  // The words so far, past redirections (and their targets) and leading reserved words.
  void EndCommand() {
    EndWord();
    std::vector<std::string> kept;
    for (size_t i = 0; i < words_.size(); ++i) {
      const Redirection r = RedirectionOf(words_[i].raw);
      if (r != Redirection::kNone) {
        if (r == Redirection::kOperator) ++i;  // and its target
        continue;
      }
      if (kept.empty() && IsReservedWord(words_[i].raw)) continue;
      kept.push_back(std::move(words_[i].value));
    }
    if (!kept.empty()) commands_.push_back(std::move(kept));
    words_.clear();
  }

  const absl::string_view text_;
  size_t i_ = 0;
  Quote quote_ = Quote::kNone;
  Word word_;
  bool in_word_ = false;     // word_ was started (quotes may leave it empty)
  std::vector<Word> words_;  // the command's words so far
  std::vector<std::vector<std::string>> commands_;
};

// The simple commands of shell text that is Readable (else none): split at ; & | ( ) and
// newline outside quotes, words at blanks outside quotes, quotes and backslashes removed (in
// double quotes, a backslash only before $ ` " \), comments, redirections and their targets and
// leading reserved words dropped.
std::vector<std::vector<std::string>> LexCommands(absl::string_view text) {
  if (!Readable(text)) return {};
  return ShellLexer(text).Commands();
}

int CommandRunningAt(const std::vector<std::string>& argv, ProgramTest runs, int depth);

// Where a shell's commands (ShellCommands) or the program `words` run (a shell too, read in
// turn) run a program `runs` accepts: the index in `words`, or -1.
int ProgramRunning(const std::vector<std::string>& words, ProgramTest runs, int depth) {
  std::vector<std::string> command;
  const int at = ProgramFrom(words, 0, &command, depth, nullptr);
  if (at < 0) return -1;
  if (runs(command)) return at;
  if (!IsShell(command[0])) return -1;
  if (command.size() == words.size() && command[0] == words[0]) return -1;  // argv itself:
                                                                            // CommandRunningAt
  const int inner = CommandRunningAt(command, runs, depth + 1);
  if (inner < 0) return -1;
  // The shell's words are argv's from `at` on, unless env's -S string gave them.
  const bool same = at + command.size() == words.size() &&
                    std::equal(command.begin(), command.end(), words.begin() + at);
  return same ? at + inner : at;
}

int CommandRunningAt(const std::vector<std::string>& argv, ProgramTest runs, int depth) {
  if (depth > kMaxDepth) return -1;
  for (const auto& [index, words] : ShellCommands(argv)) {
    if (CommandRunningAt(words, runs, depth + 1) >= 0) return index;
  }
  return ProgramRunning(argv, runs, depth);
}

}  // namespace

bool IsShell(absl::string_view program) {
  const absl::string_view name = ProgramName(program);
  return name == "sh" || name == "bash" || name == "dash" || name == "zsh" || name == "ksh";
}

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
  bool runs_arguments = false;  // a command whose program is "$@" (`exec "$@"`)
  for (std::vector<std::string>& words : LexCommands(argv[i])) {
    std::vector<std::string> command;
    if (ProgramOf(words, &command) >= 0) {
      const std::string& program = command[0];
      runs_arguments = runs_arguments || program == "$@" || program == "${@}" ||
                       program == "$*" || program == "${*}";
    }
    out.emplace_back(static_cast<int>(i), std::move(words));
  }
  // Then the words after $0 are one command.
  if (runs_arguments && i + 2 < argv.size()) {
    out.emplace_back(static_cast<int>(i) + 2,
                     std::vector<std::string>(argv.begin() + static_cast<long>(i) + 2, argv.end()));
  }
  return out;
}

int CommandRunning(const std::vector<std::string>& argv, ProgramTest runs) {
  return CommandRunningAt(argv, runs, 0);
}

}  // namespace ringmaster::spec
