#include "spec/command_line.h"

#include <deque>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace ringmaster::spec {

absl::string_view ProgramName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
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

bool TakesArgument(char flag) { return flag == 'u' || flag == 'C' || flag == 'S'; }

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
  // Option `flag` with its argument (when it takes one); false where env stops here.
  auto apply = [&out, &words](char flag, const std::string& argument) {
    switch (flag) {
      case 'i':
        out.clears = true;
        break;
      case 'u':
        out.unset.push_back(argument);
        break;
      case 'S': {
        const std::vector<std::string> split =
            absl::StrSplit(argument, absl::ByAnyChar(" \t"), absl::SkipEmpty());
        for (auto it = split.rbegin(); it != split.rend(); ++it) words.emplace_front(*it, -1);
        break;
      }
      case 'h':
      case 'V':
        return false;
      default:  // -0, -v, -C, the signal options: nothing read here
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
    // A cluster of short options; u, C and S take the rest of the word, or the next one.
    for (size_t c = 1; c < option.size(); ++c) {
      const char flag = option[c];
      if (!absl::StrContains("i0uCSv", flag)) {
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
