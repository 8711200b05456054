// libFuzzer target: the job-file reader (ctl/job_yaml.h), which ringctl and a trainer run by hand
// (--spec) use on files users write.
//
// The input is the file's text. Beyond "no crash and no sanitizer report" it checks what the
// header promises: a refusal is INVALID_ARGUMENT naming the file, and a spec that was read
// writes back (JobSpecToYaml) as a file that reads back to an equal spec.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "ctl/job_yaml.h"
#include "fuzz/fuzz_check.h"

namespace {

constexpr char kFile[] = "fuzz.yaml";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ringmaster::v1::JobSpec> spec = ringmaster::ctl::ParseJobYaml(text, kFile);
  if (!spec.ok()) {
    FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument,
               spec.status().ToString());
    FUZZ_CHECK(absl::StartsWith(spec.status().message(), kFile),
               "a refusal that does not name the file: " + spec.status().ToString());
    return 0;
  }
  const std::string written = ringmaster::ctl::JobSpecToYaml(*spec);
  absl::StatusOr<ringmaster::v1::JobSpec> again = ringmaster::ctl::ParseJobYaml(written, kFile);
  FUZZ_CHECK(again.ok(), "a spec read from a file does not read back from JobSpecToYaml: " +
                             again.status().ToString() + "\n--- written:\n" + written);
  FUZZ_CHECK(
      ringmaster::fuzz::DeterministicBytes(*again) == ringmaster::fuzz::DeterministicBytes(*spec),
      "JobSpecToYaml then ParseJobYaml changes the spec\n--- written:\n" + written +
          "--- read back:\n" + again->DebugString() + "--- was:\n" + spec->DebugString());
  return 0;
}
