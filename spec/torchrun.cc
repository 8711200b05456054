#include "spec/torchrun.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "spec/command_line.h"

namespace ringmaster::spec {
namespace {

// torchrun's options: the name with underscores (either spelling is read), whether it takes a
// value.
struct Option {
  const char* name;
  bool takes_value;
};
constexpr Option kOptions[] = {
    {"--nnodes", true},
    {"--nproc_per_node", true},
    {"--rdzv_backend", true},
    {"--rdzv_endpoint", true},
    {"--rdzv_id", true},
    {"--rdzv_conf", true},
    {"--standalone", false},
    {"--max_restarts", true},
    {"--monitor_interval", true},
    {"--start_method", true},
    {"--role", true},
    {"--module", false},
    {"--no_python", false},
    {"--run_path", false},
    {"--log_dir", true},
    {"--redirects", true},
    {"--tee", true},
    {"--local_ranks_filter", true},
    {"--node_rank", true},
    {"--master_addr", true},
    {"--master_port", true},
    {"--local_addr", true},
    {"--logs_specs", true},
};

std::string Underscored(absl::string_view word) {
  std::string out(word);
  for (size_t i = 2; i < out.size(); ++i) {
    if (out[i] == '-') out[i] = '_';
  }
  return out;
}

// The option `word` ("--nproc-per-node", "--nproc", without "=value") names: exactly, or as
// the only option it begins (argparse's abbreviations); nullptr with `why` otherwise.
const Option* FindLong(absl::string_view word, std::string* why) {
  const std::string name = Underscored(word);
  std::vector<const Option*> prefixed;
  for (const Option& option : kOptions) {
    if (name == option.name) return &option;
    if (absl::StartsWith(option.name, name)) prefixed.push_back(&option);
  }
  if (prefixed.size() == 1) return prefixed[0];
  if (prefixed.empty()) {
    *why = "is not a torchrun option (torchrun's options come before the program)";
  } else {
    std::vector<std::string> names;
    for (const Option* option : prefixed) names.push_back(option->name);
    *why = absl::StrCat("is ambiguous: it may be ", absl::StrJoin(names, ", "));
  }
  return nullptr;
}

std::string Field(int index) { return absl::StrCat("trainer.command[", index, "]"); }

// `s` in double quotes, C-escaped: one line whatever it holds.
std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CHexEscape(s), "\""); }

// A value read from the word after an option: argparse takes none that looks like an option.
bool UsableValue(const std::string& word) { return word.empty() || word[0] != '-'; }

}  // namespace

bool RunsTorchrun(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  if (ProgramName(argv[0]) == "torchrun") return true;
  std::string module;  // (PythonModule reads only a Python interpreter's line)
  return PythonModule(argv, &module) >= 0 &&
         (module == "torch.distributed.run" || module == "torch.distributed.launch");
}

int HiddenTorchrun(const std::vector<std::string>& argv) {
  if (argv.empty() || RunsTorchrun(argv)) return -1;
  return CommandRunning(argv, RunsTorchrun);
}

void ReadTorchrun(const std::vector<std::string>& argv, TorchrunCommand* out,
                  std::vector<Problem>* problems) {
  *out = TorchrunCommand();
  if (!RunsTorchrun(argv)) {
    problems->emplace_back("trainer.command", "does not run torchrun");
    return;
  }
  size_t i = 1;
  if (ProgramName(argv[0]) != "torchrun") {
    std::string module;
    const int after = PythonModule(argv, &module);
    if (module == "torch.distributed.launch") {
      problems->emplace_back(
          Field(after - 1),
          "must not be torch.distributed.launch (torchrun's deprecated form): Ringmaster is the "
          "launcher, so run the program itself (python3 train.py ...; LOCAL_RANK is in its "
          "environment) or through torch.distributed.run");
      return;
    }
    // torchrun starts its program with none of its own interpreter's options.
    out->interpreter = {argv[0]};
    i = static_cast<size_t>(after);
  }
  bool module = false, no_python = false, run_path = false;
  int module_index = -1, no_python_index = -1;
  // Records option `option` given at `index` with `value` (if it takes one).
  const auto take = [&](const Option& option, int index, const std::string& value) {
    const absl::string_view name = option.name;
    if (name == "--module") {
      module = true;
      module_index = index;
    } else if (name == "--no_python") {
      no_python = true;
      no_python_index = index;
    } else if (name == "--run_path") {
      run_path = true;
    } else if (name == "--nproc_per_node") {
      out->nproc_per_node = value;
      out->nproc_per_node_index = index;
    } else if (name == "--nnodes") {
      out->nnodes = value;
      out->nnodes_index = index;
    }
  };
  const auto not_an_option = [&](const std::string& word, int index) {
    problems->emplace_back(Field(index),
                           absl::StrCat(Quote(word),
                                        " is not a torchrun option (torchrun's options come "
                                        "before the program)"));
  };
  for (; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    const int index = static_cast<int>(i);
    if (word == "--") {
      ++i;
      break;
    }
    if (word.size() < 2 || word[0] != '-') break;  // the program
    if (word[1] != '-') {
      // A cluster of short options: -m; -r and -t take the rest of the word or the next one.
      static const Option kModule = {"--module", false};
      static const Option kRedirects = {"--redirects", true};
      static const Option kTee = {"--tee", true};
      for (size_t c = 1; c < word.size(); ++c) {
        const char flag = word[c];
        const Option* option = flag == 'm'   ? &kModule
                               : flag == 'r' ? &kRedirects
                               : flag == 't' ? &kTee
                                             : nullptr;
        if (option == nullptr) return not_an_option(word, index);
        if (!option->takes_value) {
          take(*option, index, "");
          continue;
        }
        std::string value = word.substr(c + 1);
        if (value.empty()) {
          if (i + 1 >= argv.size() || !UsableValue(argv[i + 1])) {
            problems->emplace_back(Field(index), absl::StrCat(option->name, " needs a value"));
            return;
          }
          value = argv[++i];
        }
        take(*option, index, value);
        break;
      }
      continue;
    }
    const size_t equals = word.find('=');
    const std::string name = word.substr(0, equals);
    std::string why;
    const Option* option = name == "--" ? nullptr : FindLong(name, &why);
    if (option == nullptr) {
      if (name == "--") return not_an_option(name, index);
      problems->emplace_back(Field(index), absl::StrCat(Quote(name), " ", why));
      return;
    }
    if (!option->takes_value) {
      if (equals != std::string::npos) {
        problems->emplace_back(Field(index),
                               absl::StrCat(option->name, " takes no value, got ", Quote(word)));
        return;
      }
      take(*option, index, "");
      continue;
    }
    std::string value;
    if (equals != std::string::npos) {
      value = word.substr(equals + 1);
    } else if (i + 1 < argv.size() && UsableValue(argv[i + 1])) {
      value = argv[++i];
    }
    if (value.empty()) {
      problems->emplace_back(Field(index), absl::StrCat(option->name, " needs a value"));
      return;
    }
    take(*option, index, value);
  }
  if (module && no_python && !run_path) {
    problems->emplace_back(Field(std::max(module_index, no_python_index)),
                           "torchrun's --module and --no_python exclude each other");
    return;
  }
  if (i >= argv.size()) {
    problems->emplace_back("trainer.command",
                           "names no program after torchrun's options (torchrun ... train.py)");
    return;
  }
  // --run_path runs the script in Python whatever -m or --no_python say.
  out->kind = run_path    ? TorchrunCommand::Kind::kScript
              : module    ? TorchrunCommand::Kind::kModule
              : no_python ? TorchrunCommand::Kind::kNoPython
                          : TorchrunCommand::Kind::kScript;
  out->program = {argv[i]};
  // argparse drops a "--" right after the program; the program gets the rest.
  size_t rest = i + 1;
  if (rest < argv.size() && argv[rest] == "--") ++rest;
  out->program.insert(out->program.end(), argv.begin() + static_cast<long>(rest), argv.end());
}

std::vector<Problem> TorchrunWorldProblems(const TorchrunCommand& command, int nodes, int min_nodes,
                                           int devices_per_node) {
  std::vector<Problem> problems;
  const std::string& nproc = command.nproc_per_node;
  int n = 0;
  if (nproc.empty() || nproc == "gpu" || nproc == "cpu" || nproc == "auto") {
    // Ringmaster's devices_per_node decides.
  } else if (!absl::SimpleAtoi(nproc, &n) || n < 1) {
    problems.emplace_back(Field(command.nproc_per_node_index),
                          absl::StrCat("torchrun's --nproc_per_node must be a positive integer, "
                                       "gpu, cpu or auto, got ",
                                       Quote(nproc)));
  } else if (n != devices_per_node) {
    problems.emplace_back(
        Field(command.nproc_per_node_index),
        absl::StrCat("torchrun's --nproc_per_node must equal devices_per_node (", devices_per_node,
                     ": Ringmaster starts one rank per device), got ", n));
  }
  if (command.nnodes.empty()) return problems;
  const int low = min_nodes == 0 ? nodes : min_nodes;
  const std::vector<std::string> parts = absl::StrSplit(command.nnodes, ':');
  int a = 0;  // MIN, or N
  int b = 0;  // MAX, or N
  bool read = false;
  if (parts.size() == 1) {
    read = absl::SimpleAtoi(parts[0], &a) && a > 0;
    b = a;
  } else if (parts.size() == 2) {
    read = absl::SimpleAtoi(parts[0], &a) && absl::SimpleAtoi(parts[1], &b) && a > 0 && a <= b;
  }
  const std::string want = low == nodes ? absl::StrCat(nodes) : absl::StrCat(low, ":", nodes);
  if (!read) {
    problems.emplace_back(
        Field(command.nnodes_index),
        absl::StrCat("torchrun's --nnodes must be N or MIN:MAX, got ", Quote(command.nnodes)));
  } else if (b != nodes || (parts.size() == 2 && a != low)) {
    problems.emplace_back(Field(command.nnodes_index),
                          absl::StrCat("torchrun's --nnodes must agree with nodes and min_nodes (",
                                       want, "), got ", Quote(command.nnodes)));
  }
  return problems;
}

std::vector<std::string> TorchrunProgramArgv(const TorchrunCommand& command,
                                             const std::vector<std::string>& python) {
  if (command.kind == TorchrunCommand::Kind::kNoPython) return command.program;
  std::vector<std::string> argv = command.interpreter.empty() ? python : command.interpreter;
  argv.push_back("-u");  // unbuffered, as torchrun starts it
  if (command.kind == TorchrunCommand::Kind::kModule) argv.push_back("-m");
  argv.insert(argv.end(), command.program.begin(), command.program.end());
  return argv;
}

}  // namespace ringmaster::spec
