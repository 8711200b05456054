#include "spec/command_line.h"

#include <deque>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace ringmaster::spec {

absl::string_view ProgramName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

bool IsPythonInterpreter(const std::string& argv0) {
  const absl::string_view name = ProgramName(argv0);
  if (!absl::StartsWith(name, "python")) return false;
  for (char c : name.substr(6)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.') return false;
  }
  return true;
}

int PythonModule(const std::vector<std::string>& argv, std::string* module) {
  if (argv.empty() || !IsPythonInterpreter(argv[0])) return -1;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    if (word == "--check-hash-based-pycs") {
      ++i;
      continue;
    }
    if (word == "--" || word.size() < 2 || word[0] != '-') return -1;
    if (word[1] == '-') continue;  // another long option: no argument
    for (size_t c = 1; c < word.size(); ++c) {
      const char flag = word[c];
      if (flag == 'c') return -1;
      if (flag != 'm' && flag != 'W' && flag != 'X') continue;
      std::string argument = word.substr(c + 1);
      if (argument.empty()) {
        if (++i >= argv.size()) return -1;
        argument = argv[i];
      }
      if (flag == 'm') {
        *module = argument;
        return static_cast<int>(i) + 1;
      }
      break;  // -W, -X: the rest of the word was their argument
    }
  }
  return -1;
}

namespace {

// env's long options: the short option each stands for (0: none), and its argument.
enum class Argument { kNone, kRequired, kOptional };
struct LongOption {
  absl::string_view name;
  char flag;
  Argument argument;
};
constexpr LongOption kLongOptions[] = {
    {"ignore-environment", 'i', Argument::kNone},
    {"null", '0', Argument::kNone},
    {"unset", 'u', Argument::kRequired},
    {"chdir", 'C', Argument::kRequired},
    {"split-string", 'S', Argument::kRequired},
    {"argv0", 'a', Argument::kRequired},  // coreutils 9.7 on
    {"block-signal", 0, Argument::kOptional},
    {"default-signal", 0, Argument::kOptional},
    {"ignore-signal", 0, Argument::kOptional},
    {"list-signal-handling", 0, Argument::kNone},
    {"debug", 'v', Argument::kNone},
    {"help", 'h', Argument::kNone},     // env prints and exits: no command runs
    {"version", 'V', Argument::kNone},  // the same
};

// The long option `name` names (exactly, else as the unique prefix of one); null where none or
// more than one.
const LongOption* FindLong(absl::string_view name) {
  const LongOption* found = nullptr;
  for (const LongOption& option : kLongOptions) {
    if (option.name == name) return &option;
    if (!name.empty() && absl::StartsWith(option.name, name)) {
      if (found != nullptr) return nullptr;  // ambiguous
      found = &option;
    }
  }
  return found;
}

bool TakesArgument(char flag) { return flag == 'u' || flag == 'C' || flag == 'S' || flag == 'a'; }

bool IsEnvBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// -S's string split as env splits it (the EnvCommand comment); false where env refuses it (an
// unterminated quote, an unknown escape, $ not followed by {, \c inside double quotes).
bool SplitEnvString(absl::string_view s, std::vector<std::string>* out) {
  enum class Quote { kNone, kSingle, kDouble };
  Quote quote = Quote::kNone;
  std::string word;
  bool in_word = false;  // `word` was started (quotes may leave it empty)
  auto finish = [&] {
    if (in_word) out->push_back(std::move(word));
    word.clear();
    in_word = false;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote == Quote::kSingle) {
      if (c == '\'') {
        quote = Quote::kNone;
      } else if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '\\' || s[i + 1] == '\'')) {
        word += s[++i];
      } else {
        word += c;
      }
      continue;
    }
    if (c == '\\') {
      if (i + 1 >= s.size()) return false;
      const char escaped = s[++i];
      switch (escaped) {
        case 'c':
          if (quote == Quote::kDouble) return false;
          finish();
          return true;  // the rest is ignored
        case '_':
          if (quote == Quote::kNone) {
            finish();
            continue;
          }
          word += ' ';
          break;
        case 'f':
          word += '\f';
          break;
        case 'n':
          word += '\n';
          break;
        case 'r':
          word += '\r';
          break;
        case 't':
          word += '\t';
          break;
        case 'v':
          word += '\v';
          break;
        case '#':
        case '$':
        case '"':
        case '\'':
        case '\\':
          word += escaped;
          break;
        default:
          return false;
      }
      in_word = true;
      continue;
    }
    if (c == '$') {  // ${NAME}, kept as written
      const size_t close = s.find('}', i);
      if (i + 1 >= s.size() || s[i + 1] != '{' || close == absl::string_view::npos) return false;
      word.append(s.data() + i, close - i + 1);
      in_word = true;
      i = close;
      continue;
    }
    if (quote == Quote::kDouble) {
      if (c == '"') {
        quote = Quote::kNone;
      } else {
        word += c;
      }
      continue;
    }
    if (IsEnvBlank(c)) {
      finish();
    } else if (c == '#' && !in_word) {
      break;  // a comment to the end
    } else if (c == '\'' || c == '"') {
      quote = c == '\'' ? Quote::kSingle : Quote::kDouble;
      in_word = true;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != Quote::kNone) return false;
  finish();
  return true;
}

}  // namespace

EnvCommand ReadEnvCommand(const std::vector<std::string>& argv) {
  EnvCommand out;
  // The words still to read, with their index in argv (-1: from -S's string).
  std::deque<std::pair<std::string, int>> words;
  for (size_t i = 1; i < argv.size(); ++i) words.emplace_back(argv[i], static_cast<int>(i));
  auto next = [&words](std::string* word) {
    if (words.empty()) return false;
    *word = std::move(words.front().first);
    words.pop_front();
    return true;
  };
  // Option `flag` with its argument (when it takes one); false where env stops here (it runs
  // nothing, or refuses the line: out.ok).
  auto apply = [&out, &words](char flag, const std::string& argument) {
    switch (flag) {
      case 'i':
        out.clears = true;
        break;
      case 'u':
        out.unset.push_back(argument);
        break;
      case 'S': {
        std::vector<std::string> split;
        if (!SplitEnvString(argument, &split)) {
          out.ok = false;
          return false;
        }
        for (auto it = split.rbegin(); it != split.rend(); ++it) words.emplace_front(*it, -1);
        break;
      }
      case 'h':
      case 'V':
        return false;
      default:  // -0, -v, -C, -a, the signal options: nothing read here
        break;
    }
    return true;
  };
  // The options.
  while (!words.empty()) {
    const std::string& word = words.front().first;
    if (word == "--") {
      words.pop_front();
      break;
    }
    if (word.size() < 2 || word[0] != '-') break;
    std::string option;
    next(&option);
    if (option[1] == '-') {
      const size_t equals = option.find('=');
      const LongOption* known = FindLong(absl::string_view(option).substr(2, equals - 2));
      if (known == nullptr) {
        out.ok = false;
        return out;
      }
      std::string argument;
      if (equals != std::string::npos) {
        if (known->argument == Argument::kNone) {
          out.ok = false;  // env: "option '--null' doesn't allow an argument"
          return out;
        }
        argument = option.substr(equals + 1);
      } else if (known->argument == Argument::kRequired && !next(&argument)) {
        out.ok = false;
        return out;
      }
      if (!apply(known->flag, argument)) return out;
      continue;
    }
    // A cluster of short options; u, C, S and a take the rest of the word, or the next one.
    for (size_t c = 1; c < option.size(); ++c) {
      const char flag = option[c];
      if (!absl::StrContains("i0uCSva", flag)) {
        out.ok = false;  // env: "invalid option"
        return out;
      }
      std::string argument;
      if (TakesArgument(flag)) {
        argument = option.substr(c + 1);
        if (argument.empty() && !next(&argument)) {
          out.ok = false;
          return out;
        }
      }
      if (!apply(flag, argument)) return out;
      if (TakesArgument(flag)) break;
    }
  }
  if (!words.empty() && words.front().first == "-") {
    out.clears = true;
    words.pop_front();
  }
  // The assignments, then the command.
  while (!words.empty() && absl::StrContains(words.front().first, '=')) {
    const std::string& word = words.front().first;
    out.assigned.push_back(word.substr(0, word.find('=')));
    words.pop_front();
  }
  if (!words.empty()) out.command_index = words.front().second;
  for (auto& [word, index] : words) out.command.push_back(std::move(word));
  return out;
}

}  // namespace ringmaster::spec
