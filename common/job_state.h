// Small facts about job states shared by the coordinator and ringctl.
#ifndef RINGMASTER_COMMON_JOB_STATE_H_
#define RINGMASTER_COMMON_JOB_STATE_H_

#include <string>

#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster {

// "RUNNING" for JOB_STATE_RUNNING, and so on.
inline std::string StateName(v1::JobState state) {
  const std::string name = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// SUCCEEDED, FAILED and CANCELLED: nothing happens to the job any more.
inline bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_JOB_STATE_H_
