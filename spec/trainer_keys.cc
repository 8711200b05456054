#include "spec/trainer_keys.h"

#include "spec/command_line.h"

namespace ringmaster::spec {
namespace {

constexpr absl::string_view kBuiltinOnlyKeys[] = {
    "trainer.model",     "trainer.batch",      "trainer.optimizer", "trainer.precision",
    "trainer.attention", "trainer.zero_stage", "trainer.data",
};

}  // namespace

absl::Span<const absl::string_view> BuiltinOnlyKeys() { return kBuiltinOnlyKeys; }

bool IsBuiltinTrainerProgram(absl::string_view argv0) {
  const absl::string_view base = ProgramName(argv0);
  return base == "trainer" || base == "ringmaster-trainer";
}

bool ReadsBuiltinKeys(const v1::TrainerSpec& trainer) {
  switch (trainer.program_case()) {
    case v1::TrainerSpec::kBuiltin:
      return true;
    case v1::TrainerSpec::kCommand:
      return !trainer.command().argv().empty() &&
             IsBuiltinTrainerProgram(trainer.command().argv(0));
    case v1::TrainerSpec::PROGRAM_NOT_SET:
      break;
  }
  return false;
}

std::vector<absl::string_view> BuiltinOnlyKeysSet(const v1::TrainerSpec& trainer) {
  const bool set[] = {
      trainer.has_model(),          trainer.has_batch(),         trainer.has_optimizer(),
      trainer.precision() != 0,     trainer.attention() != 0,    trainer.zero_stage() != 0,
      trainer.has_data(),
  };
  static_assert(std::size(set) == std::size(kBuiltinOnlyKeys), "one flag per key");
  std::vector<absl::string_view> keys;
  for (size_t i = 0; i < std::size(set); ++i) {
    if (set[i]) keys.push_back(kBuiltinOnlyKeys[i]);
  }
  return keys;
}

std::vector<absl::string_view> RefusedBuiltinOnlyKeys(const v1::TrainerSpec& trainer) {
  if (!trainer.has_command() || ReadsBuiltinKeys(trainer)) return {};
  return BuiltinOnlyKeysSet(trainer);
}

}  // namespace ringmaster::spec
