#include "ctl/format.h"

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::ctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::GetJobResponse RestartingJob() {
  v1::GetJobResponse r;
  v1::JobStatus* j = r.mutable_job();
  j->set_job_id("gpt-1");
  j->set_state(v1::JOB_STATE_RESTARTING);
  j->set_generation(3);
  return r;
}

int64_t At(const char* when) {
  absl::Time t;
  std::string error;
  EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, when, &t, &error)) << error;
  return absl::ToUnixNanos(t);
}

TEST(DescribeJobTest, ADrainsWaitNamesTheRanksAndTheDeadline) {
  v1::GetJobResponse r = RestartingJob();
  r.mutable_job()->add_stopping_ranks(0);
  r.mutable_job()->add_stopping_ranks(5);
  r.mutable_job()->set_stopping_deadline_unix_nanos(At("2026-11-24T03:00:00Z"));
  EXPECT_THAT(DescribeJob(r), HasSubstr("Waiting for:  ranks 0, 5 of generation 3 to checkpoint "
                                        "and exit, until 2026-11-24T03:00:00Z\n"));
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Crash loop")));
}

TEST(DescribeJobTest, ACrashLoopsBackoffSaysWhenTheNextLaunchIs) {
  v1::GetJobResponse r = RestartingJob();
  r.mutable_job()->set_failures_before_a_step(4);
  r.mutable_job()->set_backoff_until_unix_nanos(At("2026-11-24T03:00:08Z"));
  EXPECT_THAT(DescribeJob(r),
              HasSubstr("Crash loop:   4 generations in a row failed before their first step; "
                        "next launch at 2026-11-24T03:00:08Z\n"));
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Waiting for")));
  // Once launched, the stored count stays until a step, but there is no wait to show.
  r.mutable_job()->set_state(v1::JOB_STATE_RUNNING);
  EXPECT_THAT(DescribeJob(r), Not(HasSubstr("Crash loop")));
}

}  // namespace
}  // namespace ringmaster::ctl
