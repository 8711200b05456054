#include "coordinator/spec_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/format_double.h"
#include "google/protobuf/util/json_util.h"
#include "spec/command_line.h"
#include "spec/elastic.h"
#include "spec/launchers.h"
#include "spec/torchrun.h"
#include "spec/trainer_keys.h"

namespace ringmaster::coordinator {
namespace {

// Defaults documented in job.proto. The optimizer's are GPT-2/3-style pretraining settings
// (nanoGPT's and llm.c's): AdamW at 3e-4 with betas 0.9/0.95, weight decay 0.1, gradient
// clipping at norm 1.0, a short linear warmup and a cosine decay to lr/10.
constexpr double kDefaultLr = 3e-4;
constexpr int64_t kDefaultWarmupDivisor = 20;  // 5% of the steps...
constexpr int64_t kMaxDefaultWarmupSteps = 1000;  // ...at most this many
constexpr double kDefaultWeightDecay = 0.1;
constexpr double kDefaultClipGradNorm = 1.0;
constexpr double kDefaultBeta1 = 0.9;
constexpr double kDefaultBeta2 = 0.95;
constexpr double kDefaultEpsilon = 1e-8;
constexpr int32_t kDefaultCheckpointKeep = 3;
constexpr int32_t kDefaultMaxRestarts = 3;
constexpr double kDefaultStragglerThreshold = 1.2;
constexpr int64_t kDefaultLinkCheckBytes = 4 << 20;
constexpr int64_t kMaxLinkCheckBytes = int64_t{1} << 30;
constexpr double kDefaultSlowLinkRatio = 0.5;
constexpr double kDefaultAutoLinkCheckInterval = 60;  // seconds
constexpr double kMaxAutoLinkCheckInterval = 86400;
constexpr uint64_t kDefaultDataSeed = 1234;

// Limits (see spec_validation.h).
constexpr int64_t kMaxNodes = 100000;
constexpr int64_t kMaxDevicesPerNode = 1024;
constexpr int64_t kMaxSpares = 64;  // JobSpec.spares
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxDModel = 65536;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxSeqLen = 1048576;
constexpr int64_t kMaxVocab = 10000000;
// The built-in corpus is ASCII text, one token per byte.
constexpr int64_t kBuiltinCorpusVocab = 128;
constexpr int64_t kMaxSteps = 1000000000;
constexpr double kMaxLr = 10.0;
constexpr int64_t kMaxZeroStage = 3;
constexpr int64_t kMaxRestarts = 1000;
constexpr int64_t kMaxRestartWindowMinutes = 525600;  // a year
constexpr int64_t kMaxCheckpointFailures = 1000000;
// Workers get the whole spec in one environment variable, which Linux caps at 128 KiB.
constexpr size_t kMaxSpecBytes = 64 * 1024;
constexpr int kMaxEnvEntries = 256;
// Longest value quoted back in an error.
constexpr size_t kMaxQuotedBytes = 64;

// The shortest decimal form that reads back as `v` ("0.0003", not "0.00029999999999999997"),
// without an exponent for whole numbers below 1e17 ("30", not "3e+01").
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return FormatFiniteDouble(v);
}

// `s` escaped and quoted for an error; a long one cut to its first 64 bytes and its length.
std::string Quote(absl::string_view s) {
  if (s.size() <= kMaxQuotedBytes) return absl::StrCat("\"", absl::CHexEscape(s), "\"");
  return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMaxQuotedBytes)), "\"... (", s.size(),
                      " bytes)");
}

// a*b*c, or nullopt when it does not fit in int64 (the operands are all >= 1).
std::optional<int64_t> Product(int64_t a, int64_t b, int64_t c) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (a > kMax / b) return std::nullopt;
  const int64_t ab = a * b;
  if (ab > kMax / c) return std::nullopt;
  return ab * c;
}

// Every problem found, in field order; one line each.
class Problems {
 public:
  void Add(absl::string_view field, absl::string_view rule) {
    lines_.push_back(absl::StrCat(field, ": ", rule));
  }

  // "must be in [lo, hi], got v" unless lo <= v <= hi. Returns whether `value` is in range.
  bool InRange(absl::string_view field, int64_t value, int64_t lo, int64_t hi) {
    if (value >= lo && value <= hi) return true;
    Add(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
    return false;
  }

  // "must be >= lo, got v" unless lo <= v. Returns whether `value` is in range.
  bool AtLeast(absl::string_view field, int64_t value, int64_t lo, absl::string_view note = "") {
    if (value >= lo) return true;
    Add(field, absl::StrCat("must be >= ", lo, note, ", got ", value));
    return false;
  }

  // Refuses NaN and infinities. Returns whether `value` is finite.
  bool Finite(absl::string_view field, double value) {
    if (std::isfinite(value)) return true;
    Add(field, absl::StrCat("must be a finite number, got ", FormatDouble(value)));
    return false;
  }

  // Refuses a NUL byte, where exec would cut the string. Returns whether there is none.
  bool NoNul(absl::string_view field, const std::string& value) {
    if (value.find('\0') == std::string::npos) return true;
    Add(field, absl::StrCat("must not contain a NUL byte, got ", Quote(value)));
    return false;
  }

  // Refuses a relative path: a rank's working directory is its agent's, which need not be the
  // same on every node (nor the submitter's). Empty passes (no path). Returns whether it passes.
  bool Absolute(absl::string_view field, const std::string& path) {
    if (path.empty() || path[0] == '/') return true;
    Add(field, absl::StrCat("must be an absolute path (ranks start in their agent's working "
                            "directory, which differs from node to node), got ",
                            Quote(path)));
    return false;
  }

  absl::Status ToStatus() const {
    if (lines_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(lines_, "\n"));
  }

 private:
  std::vector<std::string> lines_;
};

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool LayoutGiven(const v1::ParallelismSpec& p) {
  return p.tensor() != 0 || p.pipeline() != 0 || p.data() != 0;
}

// The names the agent sets for every worker (MakeLaunchSpec), which the spec's env may not
// change: a job could otherwise claim another rank, group or device.
bool ReservedEnvName(absl::string_view name) {
  static const char* const kReserved[] = {"RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "GROUP_RANK",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "TORCHELASTIC_MAX_RESTARTS",
                                          "ROLE_NAME",
                                          "ROLE_RANK",
                                          "ROLE_WORLD_SIZE",
                                          "GROUP_WORLD_SIZE",
                                          "CUDA_VISIBLE_DEVICES",
                                          "CUDA_DEVICE_ORDER"};
  for (const char* r : kReserved) {
    if (name == r) return true;
  }
  return absl::StartsWith(name, "RINGMASTER_");
}

bool ValidEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

// What the agent passes to exec: names a shell could set, no reserved name, no NUL byte (exec
// would cut the string there), and the whole spec small enough for one environment variable.
void CheckForExec(const v1::JobSpec& spec, Problems* problems) {
  // Measured as the agent passes it: JSON, where a control character takes 6 bytes.
  std::string json;
  const size_t bytes = google::protobuf::util::MessageToJsonString(spec, &json).ok()
                           ? json.size()
                           : spec.ByteSizeLong();
  if (bytes > kMaxSpecBytes) {
    problems->Add("spec", absl::StrCat("must be at most ", kMaxSpecBytes,
                                       " bytes as JSON (workers get it in one environment "
                                       "variable), got ",
                                       bytes,
                                       " (trainer.env and trainer.command are the usual "
                                       "cause)"));
  }
  const v1::TrainerSpec& trainer = spec.trainer();
  if (trainer.env_size() > kMaxEnvEntries) {
    problems->Add("trainer.env", absl::StrCat("must have at most ", kMaxEnvEntries,
                                              " variables, got ", trainer.env_size()));
  }
  for (const auto& [name, value] : trainer.env()) {
    if (!ValidEnvName(name)) {
      problems->Add("trainer.env",
                    absl::StrCat("names must be [A-Za-z_][A-Za-z0-9_]*, got ", Quote(name)));
    } else if (ReservedEnvName(name)) {
      problems->Add(absl::StrCat("trainer.env.", name),
                    absl::StrCat("is set by the agent for every worker (rank, world, master, "
                                 "devices, RINGMASTER_*) and cannot be changed, got ",
                                 Quote(value)));
    } else {
      problems->NoNul(absl::StrCat("trainer.env.", name), value);
    }
  }
  if (trainer.has_command()) {
    for (int i = 0; i < trainer.command().argv_size(); ++i) {
      problems->NoNul(absl::StrCat("trainer.command[", i, "]"), trainer.command().argv(i));
    }
  }
  problems->NoNul("checkpoint.dir", spec.checkpoint().dir());
  problems->NoNul("trainer.data.path", trainer.data().path());
}

// The kernel's pseudo-filesystems: a checkpoint there writes into the kernel's interfaces (or
// fails), never to storage.
constexpr absl::string_view kPseudoFilesystems[] = {"proc", "sys", "dev"};

// Refuses a checkpoint.dir with ".." components (one that climbs out of where it seems to be:
// "/tmp/../etc") and one in /proc, /sys or /dev or below them (after "." components and repeated
// slashes are dropped). Symbolic links are not followed: the directory is on the ranks' nodes.
void CheckCheckpointDir(const std::string& dir, Problems* problems) {
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(dir, '/', absl::SkipEmpty())) {
    if (part != ".") parts.push_back(part);
  }
  if (std::find(parts.begin(), parts.end(), "..") != parts.end()) {
    problems->Add("checkpoint.dir",
                  absl::StrCat("must not have \"..\" components (name the directory itself), "
                               "got ",
                               Quote(dir)));
  } else if (!dir.empty() && dir[0] == '/' && !parts.empty() &&
             std::find(std::begin(kPseudoFilesystems), std::end(kPseudoFilesystems),
                       parts[0]) != std::end(kPseudoFilesystems)) {
    problems->Add("checkpoint.dir",
                  absl::StrCat("must not be in /proc, /sys or /dev (the kernel's "
                               "pseudo-filesystems, not storage), got ",
                               Quote(dir)));
  }
}

// Checks the trainer's program: exactly one of builtin and command, each well formed.
void CheckProgram(const v1::TrainerSpec& trainer, Problems* problems) {
  switch (trainer.program_case()) {
    case v1::TrainerSpec::kBuiltin:
      if (trainer.builtin() != "gpt") {
        problems->Add("trainer.builtin",
                      absl::StrCat("must be \"gpt\" (the only built-in trainer), got ",
                                   Quote(trainer.builtin())));
      }
      break;
    case v1::TrainerSpec::kCommand:
      if (trainer.command().argv().empty()) {
        problems->Add("trainer.command", "must be a non-empty argv list, got []");
      } else if (trainer.command().argv(0).empty()) {
        problems->Add("trainer.command[0]", "must not be empty (it names the program), got \"\"");
      }
      break;
    case v1::TrainerSpec::PROGRAM_NOT_SET:
      problems->Add("trainer", "must set exactly one of builtin and command, got neither");
      break;
  }
}

// The launcher `words` (argv's words from `offset` on) starts, as a (field, rule) problem, or
// none: torchrun where `torchrun` (an index in `words`, or -1) says, with `torchrun_rule`, else
// accelerate or deepspeed (spec/launchers.h).
std::optional<spec::Problem> LauncherProblem(const std::vector<std::string>& words, int offset,
                                             int torchrun, absl::string_view torchrun_rule) {
  if (torchrun >= 0) {
    return spec::Problem(absl::StrCat("trainer.command[", offset + torchrun, "]"), torchrun_rule);
  }
  spec::LauncherProblem other = spec::ForeignLauncher(words);
  if (other.index < 0) return std::nullopt;
  return spec::Problem(absl::StrCat("trainer.command[", offset + other.index, "]"),
                       std::move(other.rule));
}

// A torchrun command line (spec/torchrun.h): readable, and its world the job's; no launcher that
// makes a world of its own on each node (spec/launchers.h), in it or in the program
// `torchrun --no_python` runs.
void CheckTorchrun(const v1::JobSpec& spec, Problems* problems) {
  if (!spec.trainer().has_command()) return;
  const auto& words = spec.trainer().command().argv();
  size_t bytes = 0;
  for (const std::string& word : words) bytes += word.size() + 1;
  if (bytes > kMaxSpecBytes) return;  // CheckForExec refuses it; not read further
  const std::vector<std::string> argv(words.begin(), words.end());
  const std::optional<spec::Problem> launcher = LauncherProblem(
      argv, 0, spec::HiddenTorchrun(argv),
      "must not start torchrun inside env, a wrapper (nohup, timeout, numactl, ...) or a shell "
      "(each rank's torchrun would make a world of its own): start the command with torchrun, "
      "whose program Ringmaster then runs as a rank, with the variables in trainer.env, or run "
      "the program itself (RANK, LOCAL_RANK and WORLD_SIZE are in its environment)");
  if (launcher.has_value()) {
    problems->Add(launcher->first, launcher->second);
    return;
  }
  if (!spec::RunsTorchrun(argv)) return;
  spec::TorchrunCommand command;
  std::vector<spec::Problem> found;
  spec::ReadTorchrun(argv, &command, &found);
  if (found.empty()) {
    found = spec::TorchrunWorldProblems(command, spec.nodes(), spec.min_nodes(),
                                        spec.devices_per_node());
  }
  if (found.empty() && command.kind == spec::TorchrunCommand::Kind::kNoPython) {
    const std::optional<spec::Problem> nested = LauncherProblem(
        command.program, static_cast<int>(argv.size() - command.program.size()),
        spec::CommandRunning(command.program, spec::RunsTorchrun),
        "must not start torchrun in the program torchrun --no_python runs (each rank's would "
        "make a world of its own): run that program itself");
    if (nested.has_value()) found.push_back(*nested);
  }
  for (const auto& [field, rule] : found) problems->Add(field, rule);
}

// Fused attention: the built-in trainer's bf16 kernels, for heads of 32 or 64 channels.
void CheckAttention(const v1::TrainerSpec& trainer, Problems* problems) {
  if (!v1::Attention_IsValid(trainer.attention())) {
    problems->Add(
        "trainer.attention",
        absl::StrCat("must be fused or materialized (or unset), got ", trainer.attention()));
    return;
  }
  // A command is checked only when it is the trainer binary, which validates its spec as a
  // builtin job's.
  if (trainer.attention() != v1::ATTENTION_FUSED ||
      trainer.program_case() != v1::TrainerSpec::kBuiltin) {
    return;
  }
  if (trainer.precision() == v1::PRECISION_FP32) {
    problems->Add("trainer.attention",
                  "must not be fused with precision fp32 (the fused kernels run in bf16), got "
                  "fused");
  }
  const v1::ModelSpec& m = trainer.model();
  if (m.heads() >= 1 && m.d_model() % m.heads() == 0 && !FusedAttentionTakesHeads(m)) {
    problems->Add("trainer.attention",
                  absl::StrCat("fused needs heads of 32 or 64 channels (model.d_model / "
                               "model.heads), got ",
                               m.d_model(), " / ", m.heads(), " = ", m.d_model() / m.heads()));
  }
}

// Model and batch rules of the built-in GPT trainer. `layout` is null when the planner chooses.
void CheckGpt(const v1::TrainerSpec& trainer, const v1::ParallelismSpec* layout,
              Problems* problems) {
  const v1::ModelSpec& m = trainer.model();
  const bool layers_ok = problems->InRange("trainer.model.layers", m.layers(), 1, kMaxLayers);
  const bool d_model_ok = problems->InRange("trainer.model.d_model", m.d_model(), 1, kMaxDModel);
  const bool heads_ok = problems->InRange("trainer.model.heads", m.heads(), 1, kMaxHeads);
  problems->InRange("trainer.model.seq_len", m.seq_len(), 1, kMaxSeqLen);
  if (problems->InRange("trainer.model.vocab", m.vocab(), 1, kMaxVocab) &&
      trainer.data().path().empty() && m.vocab() < kBuiltinCorpusVocab) {
    problems->Add("trainer.model.vocab",
                  absl::StrCat("must be >= ", kBuiltinCorpusVocab,
                               " for the built-in corpus (ASCII byte tokens; data.path names "
                               "your own), got ",
                               m.vocab()));
  }
  if (d_model_ok && heads_ok && m.d_model() % m.heads() != 0) {
    problems->Add("trainer.model.d_model",
                  absl::StrCat("must be divisible by heads (", m.heads(), "), got ", m.d_model()));
  }
  // Divisibility by the layout only where the layout's own degree is valid (reported otherwise).
  // Every pipeline stage holds at least one layer; the trainer balances uneven splits (a stage
  // with the LM head gets fewer layers), so divisibility is not required.
  if (layout != nullptr && layers_ok && layout->pipeline() >= 1 &&
      m.layers() < layout->pipeline()) {
    problems->Add("trainer.model.layers",
                  absl::StrCat("must be >= parallelism.pipeline (", layout->pipeline(),
                               ") so every pipeline stage holds a layer, got ", m.layers()));
  }
  if (layout != nullptr && heads_ok && layout->tensor() >= 1 && m.heads() % layout->tensor() != 0) {
    problems->Add("trainer.model.heads", absl::StrCat("must be divisible by parallelism.tensor (",
                                                      layout->tensor(), "), got ", m.heads()));
  }

  const v1::BatchSpec& b = trainer.batch();
  const bool micro_ok = problems->AtLeast("trainer.batch.micro_batch", b.micro_batch(), 1);
  // The trainer counts a micro-batch's tokens (and indexes its rows) with 32-bit integers.
  const int64_t tokens = int64_t{b.micro_batch()} * m.seq_len();
  if (micro_ok && m.seq_len() >= 1 && tokens > std::numeric_limits<int32_t>::max()) {
    problems->Add("trainer.batch.micro_batch",
                  absl::StrCat("micro_batch*model.seq_len (tokens per micro-batch) must be at "
                               "most ",
                               std::numeric_limits<int32_t>::max(), ", got ", b.micro_batch(), "*",
                               m.seq_len(), " = ", tokens));
  }
  const bool global_ok = problems->AtLeast("trainer.batch.global_batch", b.global_batch(), 1);
  if (micro_ok && global_ok) {
    if (layout == nullptr) {
      if (b.global_batch() % b.micro_batch() != 0) {
        problems->Add("trainer.batch.global_batch",
                      absl::StrCat("must be divisible by micro_batch (", b.micro_batch(), "), got ",
                                   b.global_batch()));
      }
    } else if (layout->data() >= 1) {
      const int64_t per_step = int64_t{b.micro_batch()} * layout->data();
      if (b.global_batch() % per_step != 0) {
        problems->Add(
            "trainer.batch.global_batch",
            absl::StrCat("must be divisible by micro_batch*parallelism.data (", b.micro_batch(),
                         "*", layout->data(), " = ", per_step, "), got ", b.global_batch()));
      }
    }
  }
}

void CheckOptimizer(const v1::TrainerSpec& trainer, Problems* problems) {
  const v1::OptimizerSpec& o = trainer.optimizer();
  bool lr_ok = false;
  if (problems->Finite("trainer.optimizer.lr", o.lr())) {
    lr_ok = o.lr() > 0 && o.lr() <= kMaxLr;
    if (!lr_ok) {
      problems->Add("trainer.optimizer.lr", absl::StrCat("must be in (0, ", FormatDouble(kMaxLr),
                                                         "], got ", FormatDouble(o.lr())));
    }
  }
  problems->AtLeast("trainer.optimizer.warmup_steps", o.warmup_steps(), 0);
  if (problems->Finite("trainer.optimizer.weight_decay", o.weight_decay()) &&
      o.weight_decay() < 0) {
    problems->Add("trainer.optimizer.weight_decay",
                  absl::StrCat("must be >= 0, got ", FormatDouble(o.weight_decay())));
  }
  if (problems->Finite("trainer.optimizer.clip_grad_norm", o.clip_grad_norm()) &&
      o.clip_grad_norm() < 0) {
    problems->Add(
        "trainer.optimizer.clip_grad_norm",
        absl::StrCat("must be >= 0 (0 disables clipping), got ", FormatDouble(o.clip_grad_norm())));
  }
  if (problems->Finite("trainer.optimizer.min_lr", o.min_lr()) && lr_ok &&
      (o.min_lr() < 0 || o.min_lr() > o.lr())) {
    problems->Add("trainer.optimizer.min_lr",
                  absl::StrCat("must be in [0, lr (", FormatDouble(o.lr()), ")], got ",
                               FormatDouble(o.min_lr())));
  }
  for (const auto& [field, beta] :
       {std::pair<const char*, double>{"trainer.optimizer.beta1", o.beta1()},
        {"trainer.optimizer.beta2", o.beta2()}}) {
    if (problems->Finite(field, beta) && (beta < 0 || beta >= 1)) {
      problems->Add(field, absl::StrCat("must be in [0, 1), got ", FormatDouble(beta)));
    }
  }
  if (problems->Finite("trainer.optimizer.epsilon", o.epsilon()) && o.epsilon() <= 0) {
    problems->Add("trainer.optimizer.epsilon",
                  absl::StrCat("must be > 0, got ", FormatDouble(o.epsilon())));
  }
}

}  // namespace

bool KeepPreDefaultsOptimizerZeros(v1::JobSpec* spec) {
  if (!spec::ReadsBuiltinKeys(spec->trainer())) return false;
  v1::OptimizerSpec* optimizer = spec->mutable_trainer()->mutable_optimizer();
  bool changed = false;
  if (!optimizer->has_warmup_steps()) {
    optimizer->set_warmup_steps(0);
    changed = true;
  }
  if (!optimizer->has_weight_decay()) {
    optimizer->set_weight_decay(0);
    changed = true;
  }
  if (!optimizer->has_clip_grad_norm()) {
    optimizer->set_clip_grad_norm(0);
    changed = true;
  }
  return changed;
}

void ApplyDefaults(v1::JobSpec* spec) {
  // The builtin trainer's settings, only where its program runs: a command job may not set them.
  if (spec::ReadsBuiltinKeys(spec->trainer())) {
    v1::OptimizerSpec* optimizer = spec->mutable_trainer()->mutable_optimizer();
    if (optimizer->lr() == 0) optimizer->set_lr(kDefaultLr);
    // Fields with presence: only an unset one takes its default (0 is a value: no warmup, no
    // decay, no clipping, decay to zero).
    if (!optimizer->has_warmup_steps()) {
      const int64_t steps = spec->trainer().steps();
      optimizer->set_warmup_steps(static_cast<int32_t>(
          std::clamp<int64_t>(steps / kDefaultWarmupDivisor, 0, kMaxDefaultWarmupSteps)));
    }
    if (!optimizer->has_weight_decay()) optimizer->set_weight_decay(kDefaultWeightDecay);
    if (!optimizer->has_clip_grad_norm()) optimizer->set_clip_grad_norm(kDefaultClipGradNorm);
    if (!optimizer->has_min_lr()) optimizer->set_min_lr(optimizer->lr() / 10);
    if (!optimizer->has_beta1()) optimizer->set_beta1(kDefaultBeta1);
    if (!optimizer->has_beta2()) optimizer->set_beta2(kDefaultBeta2);
    if (optimizer->epsilon() == 0) optimizer->set_epsilon(kDefaultEpsilon);
    if (!spec->trainer().data().has_seed()) {
      spec->mutable_trainer()->mutable_data()->set_seed(kDefaultDataSeed);
    }
  }
  if (spec->checkpoint().keep() == 0) spec->mutable_checkpoint()->set_keep(kDefaultCheckpointKeep);
  if (!spec->restart().has_max_restarts()) {
    spec->mutable_restart()->set_max_restarts(kDefaultMaxRestarts);
  }
  if (spec->watchdog().straggler_threshold() == 0) {
    spec->mutable_watchdog()->set_straggler_threshold(kDefaultStragglerThreshold);
  }
  if (spec->watchdog().link_check_bytes() == 0) {
    spec->mutable_watchdog()->set_link_check_bytes(kDefaultLinkCheckBytes);
  }
  if (spec->watchdog().slow_link_ratio() == 0) {
    spec->mutable_watchdog()->set_slow_link_ratio(kDefaultSlowLinkRatio);
  }
  if (spec->watchdog().auto_link_check_interval_seconds() == 0) {
    spec->mutable_watchdog()->set_auto_link_check_interval_seconds(kDefaultAutoLinkCheckInterval);
  }
}

absl::Status ValidateClusterPaths(const v1::JobSpec& spec) {
  Problems problems;
  problems.Absolute("checkpoint.dir", spec.checkpoint().dir());
  problems.Absolute("trainer.data.path", spec.trainer().data().path());
  return problems.ToStatus();
}

bool FusedAttentionTakesHeads(const v1::ModelSpec& model) {
  if (model.heads() < 1 || model.d_model() % model.heads() != 0) return false;
  const int64_t head = model.d_model() / model.heads();
  return head == 32 || head == 64;
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  Problems problems;
  if (!ValidName(spec.name())) {
    problems.Add("name", absl::StrCat("must be 1-63 characters of [a-z0-9-] starting with a "
                                      "letter, got ",
                                      Quote(spec.name())));
  }
  const bool nodes_ok = problems.InRange("nodes", spec.nodes(), 1, kMaxNodes);
  const bool devices_ok =
      problems.InRange("devices_per_node", spec.devices_per_node(), 1, kMaxDevicesPerNode);

  const v1::ParallelismSpec& p = spec.parallelism();
  const bool layout_given = LayoutGiven(p);
  if (layout_given) {
    bool degrees_ok = true;
    for (const auto& [field, degree] :
         {std::pair<const char*, int32_t>{"parallelism.tensor", p.tensor()},
          {"parallelism.pipeline", p.pipeline()},
          {"parallelism.data", p.data()}}) {
      if (degree < 1) {
        degrees_ok = false;
        problems.Add(field, absl::StrCat("must be >= 1 (or set tensor, pipeline and data all to 0 "
                                         "to let the planner choose), got ",
                                         degree));
      }
    }
    if (degrees_ok && nodes_ok && devices_ok) {
      const int64_t world = int64_t{spec.nodes()} * spec.devices_per_node();
      const std::optional<int64_t> product = Product(p.tensor(), p.pipeline(), p.data());
      if (product != world) {
        problems.Add("parallelism",
                     absl::StrCat("tensor*pipeline*data must equal nodes*devices_per_node (",
                                  spec.nodes(), "*", spec.devices_per_node(), " = ", world,
                                  "), got ", p.tensor(), "*", p.pipeline(), "*", p.data(),
                                  product.has_value() ? absl::StrCat(" = ", *product) : ""));
      }
    }
    if (p.tensor() >= 1 && devices_ok && spec.devices_per_node() % p.tensor() != 0) {
      problems.Add("parallelism.tensor",
                   absl::StrCat("must divide devices_per_node (", spec.devices_per_node(),
                                "), got ", p.tensor()));
    }
  }

  // Elastic data parallelism (spec/elastic.h); 0 means nodes. With a planned layout, Submit
  // checks the reachable sizes against the plan's data-parallel degree.
  if (spec.min_nodes() != 0 && nodes_ok &&
      problems.InRange("min_nodes", spec.min_nodes(), 1, spec.nodes()) && layout_given &&
      p.data() >= 1) {
    const std::string rule = spec::UnreachableRule(spec, p.data());
    if (!rule.empty()) problems.Add("min_nodes", rule);
  }

  for (const auto& [field, rule] : spec::ElasticKeyProblems(spec)) problems.Add(field, rule);
  problems.InRange("spares", spec.spares(), 0, kMaxSpares);

  const v1::TrainerSpec& trainer = spec.trainer();
  CheckProgram(trainer, &problems);
  CheckTorchrun(spec, &problems);
  CheckForExec(spec, &problems);
  if (trainer.program_case() == v1::TrainerSpec::kBuiltin && trainer.builtin() == "gpt") {
    CheckGpt(trainer, layout_given ? &p : nullptr, &problems);
  }
  if (trainer.has_command() && !spec::ReadsBuiltinKeys(trainer)) {
    // A user's program: it succeeds when every rank exits 0, so steps is only information.
    problems.InRange("trainer.steps", trainer.steps(), 0, kMaxSteps);
    for (absl::string_view key : spec::RefusedBuiltinOnlyKeys(trainer)) {
      problems.Add(key, spec::kBuiltinOnlyRule);
    }
  } else {
    problems.InRange("trainer.steps", trainer.steps(), 1, kMaxSteps);
    CheckOptimizer(trainer, &problems);
    if (!v1::Precision_IsValid(trainer.precision())) {
      problems.Add("trainer.precision",
                   absl::StrCat("must be fp32 or bf16 (or unset), got ", trainer.precision()));
    }
    CheckAttention(trainer, &problems);
    problems.InRange("trainer.zero_stage", trainer.zero_stage(), 0, kMaxZeroStage);
  }

  const v1::CheckpointSpec& checkpoint = spec.checkpoint();
  problems.AtLeast("checkpoint.every_steps", checkpoint.every_steps(), 0,
                   " (0 disables periodic checkpoints)");
  problems.AtLeast("checkpoint.keep", checkpoint.keep(), 1);
  problems.InRange("checkpoint.max_consecutive_failures", checkpoint.max_consecutive_failures(), 0,
                   kMaxCheckpointFailures);
  CheckCheckpointDir(checkpoint.dir(), &problems);
  if (checkpoint.every_steps() > 0 && checkpoint.dir().empty()) {
    problems.Add("checkpoint.dir", absl::StrCat("is required when every_steps > 0 (every_steps is ",
                                                checkpoint.every_steps(), "), got \"\""));
  }

  problems.InRange("restart.max_restarts", spec.restart().max_restarts(), 0, kMaxRestarts);
  problems.InRange("restart.window_minutes", spec.restart().window_minutes(), 0,
                   kMaxRestartWindowMinutes);

  const v1::WatchdogSpec& watchdog = spec.watchdog();
  for (const auto& [field, seconds] :
       {std::pair<const char*, double>{"watchdog.hang_timeout", watchdog.hang_timeout_seconds()},
        {"watchdog.init_timeout", watchdog.init_timeout_seconds()},
        {"watchdog.checkpoint_timeout", watchdog.checkpoint_timeout_seconds()}}) {
    if (problems.Finite(field, seconds) && seconds < 0) {
      problems.Add(field, absl::StrCat("must be >= 0 seconds (0 means auto), got ",
                                       FormatDouble(seconds)));
    }
  }
  if (problems.Finite("watchdog.straggler_threshold", watchdog.straggler_threshold()) &&
      watchdog.straggler_threshold() <= 1) {
    problems.Add("watchdog.straggler_threshold",
                 absl::StrCat("must be > 1, got ", FormatDouble(watchdog.straggler_threshold())));
  }
  problems.InRange("watchdog.link_check_bytes", watchdog.link_check_bytes(), 1, kMaxLinkCheckBytes);
  if (problems.Finite("watchdog.slow_link_ratio", watchdog.slow_link_ratio()) &&
      (watchdog.slow_link_ratio() <= 0 || watchdog.slow_link_ratio() >= 1)) {
    problems.Add("watchdog.slow_link_ratio",
                 absl::StrCat("must be in (0, 1): a fraction of the median of the other links, "
                              "got ",
                              FormatDouble(watchdog.slow_link_ratio())));
  }
  if (problems.Finite("watchdog.min_link_bytes_per_second",
                      watchdog.min_link_bytes_per_second()) &&
      watchdog.min_link_bytes_per_second() < 0) {
    problems.Add("watchdog.min_link_bytes_per_second",
                 absl::StrCat("must be >= 0 (0: no floor), got ",
                              FormatDouble(watchdog.min_link_bytes_per_second())));
  }
  const double interval = watchdog.auto_link_check_interval_seconds();
  if (problems.Finite("watchdog.auto_link_check_interval", interval) && interval != 0 &&
      (interval < 1 || interval > kMaxAutoLinkCheckInterval)) {
    problems.Add("watchdog.auto_link_check_interval",
                 absl::StrCat("must be 0 (the default, 60) or in [1, 86400] seconds, got ",
                              FormatDouble(interval)));
  }
  return problems.ToStatus();
}

}  // namespace ringmaster::coordinator
