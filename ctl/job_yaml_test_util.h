// Helpers shared by the job-file reader's tests (job_yaml_test, job_yaml_errors_test).
// Threading: none of their own. Ownership: values returned by copy. Errors: ReadTestFile records a
// gtest failure for a file it cannot read and returns what it read (nothing).
#ifndef RINGMASTER_CTL_JOB_YAML_TEST_UTIL_H_
#define RINGMASTER_CTL_JOB_YAML_TEST_UTIL_H_

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "proto/ringmaster/v1/job.pb.h"

namespace ringmaster::ctl::yaml_testing {

// The whole file at `path` (relative to the runfiles' workspace root).
inline std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The refusal's message.
inline std::string Message(const absl::StatusOr<v1::JobSpec>& parsed) {
  return std::string(parsed.status().message());
}

// The refusal's message, a problem per line.
inline std::vector<std::string> Lines(const absl::StatusOr<v1::JobSpec>& parsed) {
  return absl::StrSplit(parsed.status().message(), '\n');
}

}  // namespace ringmaster::ctl::yaml_testing

#endif  // RINGMASTER_CTL_JOB_YAML_TEST_UTIL_H_
