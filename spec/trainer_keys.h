// Which keys of a job's `trainer` only the builtin trainer reads, and which programs are the
// builtin trainer. One rule, used by the coordinator's ValidateJobSpec (the authority),
// ringctl's job-file reader (ctl/job_yaml.h) and, ported word for word, the Python client's
// (python/ringmaster/_job_file.py).
//
// A command job runs the user's own program: the builtin trainer's settings (model, batch,
// optimizer, precision, attention, zero_stage, data) would be silently ignored there, so they
// are refused with kBuiltinOnlyRule. The exception is a command whose argv[0] is the builtin
// trainer's own program (basename `trainer`, as Bazel builds it, or `ringmaster-trainer`, as the
// images install it): it reads them just as a builtin job does (tests and benches run it so, to
// pass it flags).
//
// Threading: pure functions; safe from any thread. Ownership: the returned views point at static
// strings. Errors: none.
#ifndef RINGMASTER_SPEC_TRAINER_KEYS_H_
#define RINGMASTER_SPEC_TRAINER_KEYS_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::spec {

// The problem text for a builtin-only key set in a command job, after "FIELD: ".
inline constexpr absl::string_view kBuiltinOnlyRule =
    "only the builtin trainer reads it; a command job's program takes its settings from its own "
    "argv and trainer.env (remove the key, or use builtin: gpt)";

// The dotted job-file keys only the builtin trainer reads, in job-file order:
// trainer.model, trainer.batch, trainer.optimizer, trainer.precision, trainer.attention,
// trainer.zero_stage, trainer.data.
absl::Span<const absl::string_view> BuiltinOnlyKeys();

// Whether `argv0` names the builtin trainer's program: its basename is `trainer` or
// `ringmaster-trainer`.
bool IsBuiltinTrainerProgram(absl::string_view argv0);

// Whether the program `trainer` selects reads the builtin-only keys: the builtin trainer, or a
// command running its program. False for a command of any other program, and when neither is
// set.
bool ReadsBuiltinKeys(const v1::TrainerSpec& trainer);

// The builtin-only keys `trainer` sets, in BuiltinOnlyKeys() order: a message key when its
// message is present (even empty), an enum or integer key when not 0 (its unset value).
std::vector<absl::string_view> BuiltinOnlyKeysSet(const v1::TrainerSpec& trainer);

// The builtin-only keys set in a command job that does not run the builtin trainer's program
// (each refused with kBuiltinOnlyRule); empty for every other spec.
std::vector<absl::string_view> RefusedBuiltinOnlyKeys(const v1::TrainerSpec& trainer);

}  // namespace ringmaster::spec

#endif  // RINGMASTER_SPEC_TRAINER_KEYS_H_
