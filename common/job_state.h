// Small facts about job states shared by the coordinator and ringctl.
#ifndef RINGMASTER_COMMON_JOB_STATE_H_
#define RINGMASTER_COMMON_JOB_STATE_H_

#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster {

// "RUNNING" for JOB_STATE_RUNNING, and so on.
inline std::string StateName(v1::JobState state) {
  const std::string name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// The state named `name` ("running", "RUNNING", ...: StateName's, any case); nullopt for
// anything else (UNSPECIFIED included).
inline std::optional<v1::JobState> StateFromName(absl::string_view name) {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  if (!v1::JobState_Parse(absl::StrCat("JOB_STATE_", absl::AsciiStrToUpper(name)), &state) ||
      state == v1::JOB_STATE_UNSPECIFIED) {
    return std::nullopt;
  }
  return state;
}

// "pending, running, ...": every state's name in lower case, in the enum's order.
inline std::string StateNames() {
  std::string names;
  const google::protobuf::EnumDescriptor* e = v1::JobState_descriptor();
  for (int i = 0; i < e->value_count(); ++i) {
    const auto state = static_cast<v1::JobState>(e->value(i)->number());
    if (state == v1::JOB_STATE_UNSPECIFIED) continue;
    absl::StrAppend(&names, names.empty() ? "" : ", ", absl::AsciiStrToLower(StateName(state)));
  }
  return names;
}

// SUCCEEDED, FAILED and CANCELLED: nothing happens to the job any more.
inline bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_JOB_STATE_H_
