// libFuzzer target: the coordinator's job-spec validation (coordinator/spec_validation.h) on the
// specs a user can submit. The first byte picks the encoding of the rest: even, protobuf wire
// format (what SubmitJob carries); odd, JSON (what `ringctl submit --json` sends and what an
// agent hands its trainer as RINGMASTER_JOB_SPEC_JSON), with unknown fields ignored when bit 1
// is set.
//
// Beyond "no crash and no sanitizer report" it checks what the header promises:
//  - ApplyDefaults is idempotent;
//  - a refusal is INVALID_ARGUMENT with a message;
//  - a spec ValidateJobSpec accepts reaches a trainer through the agent's JSON
//  (MessageToJsonString,
//    then JsonStringToMessage as trainer/trainer_config.cc reads it) unchanged but for unknown
//    fields, which JSON does not carry, and is accepted there again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "coordinator/spec_validation.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/util/json_util.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace {

using ringmaster::fuzz::DeterministicBytes;
namespace v1 = ringmaster::v1;

void CheckRefusal(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument,
             std::string(what) + ": " + status.ToString());
  FUZZ_CHECK(!status.message().empty(), what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  v1::JobSpec spec;
  if (mode & 1) {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = (mode & 2) != 0;
    if (!google::protobuf::util::JsonStringToMessage(body, &spec, options).ok()) return 0;
  } else if (!spec.ParseFromString(body)) {
    return 0;
  }

  // Before the defaults, as a spec arrives (ValidateJobSpec must not assume them).
  CheckRefusal(ringmaster::coordinator::ValidateJobSpec(spec), "ValidateJobSpec before defaults");
  (void)ringmaster::coordinator::FusedAttentionTakesHeads(spec.trainer().model());

  ringmaster::coordinator::ApplyDefaults(&spec);
  const std::string once = DeterministicBytes(spec);
  v1::JobSpec twice = spec;
  ringmaster::coordinator::ApplyDefaults(&twice);
  FUZZ_CHECK(DeterministicBytes(twice) == once, "ApplyDefaults is not idempotent");

  const absl::Status valid = ringmaster::coordinator::ValidateJobSpec(spec);
  CheckRefusal(valid, "ValidateJobSpec");
  CheckRefusal(ringmaster::coordinator::ValidateClusterPaths(spec), "ValidateClusterPaths");
  if (!valid.ok()) return 0;

  // The agent's RINGMASTER_JOB_SPEC_JSON, read back as the trainer reads it.
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(spec, &json);
  FUZZ_CHECK(printed.ok(), "an accepted spec does not print as JSON: " + printed.ToString());
  v1::JobSpec trainer_spec;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &trainer_spec);
  FUZZ_CHECK(parsed.ok(), "the trainer cannot read an accepted spec's JSON: " + parsed.ToString() +
                              "\n  " + json);
  // JSON carries no unknown fields (the API edge drops them too): the rest must arrive as is.
  v1::JobSpec known = spec;
  known.DiscardUnknownFields();
  FUZZ_CHECK(DeterministicBytes(trainer_spec) == DeterministicBytes(known),
             "an accepted spec changes on its way to the trainer as JSON: " + json +
                 "\n--- the trainer reads:\n" + trainer_spec.DebugString() + "--- was:\n" +
                 spec.DebugString());
  const absl::Status again = ringmaster::coordinator::ValidateJobSpec(trainer_spec);
  FUZZ_CHECK(again.ok(), "the trainer refuses an accepted spec: " + again.ToString());
  return 0;
}
