#include "agent/rendezvous_replay.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::RendezvousRequest Request(int64_t id, const std::string& job, int64_t generation,
                              const std::string& key) {
  v1::RendezvousRequest r;
  r.set_request_id(id);
  r.mutable_job()->set_job_id(job);
  r.mutable_job()->set_generation(generation);
  r.set_key(key);
  return r;
}

v1::RendezvousRequest Set(int64_t id, const std::string& job, int64_t generation,
                          const std::string& key, const std::string& value) {
  v1::RendezvousRequest r = Request(id, job, generation, key);
  r.set_set_value(value);
  return r;
}

v1::RendezvousRequest Wait(int64_t id, const std::string& job, int64_t generation,
                           const std::string& key) {
  v1::RendezvousRequest r = Request(id, job, generation, key);
  r.set_wait(true);
  r.set_deadline_unix_nanos(123);
  return r;
}

// "id job/generation key=value" or "id job/generation wait key", per request to resend.
std::vector<std::string> Describe(const std::vector<v1::RendezvousRequest>& requests) {
  std::vector<std::string> out;
  for (const auto& r : requests) {
    std::string line = std::to_string(r.request_id()) + " " + r.job().job_id() + "/" +
                       std::to_string(r.job().generation()) + " ";
    if (r.op_case() == v1::RendezvousRequest::kSetValue) {
      line += r.key() + "=" + r.set_value();
    } else {
      line += (r.wait() ? "wait " : "get ") + r.key() + " until " +
              std::to_string(r.deadline_unix_nanos());
    }
    out.push_back(line);
  }
  return out;
}

TEST(RendezvousReplayTest, AcknowledgedSetsFirstThenTheUnansweredRequests) {
  RendezvousReplay replay;
  replay.Sent(Set(1, "gpt", 2, "nccl/world", "id-a"));
  replay.Sent(Wait(2, "gpt", 2, "gloo/0"));
  replay.Sent(Set(3, "gpt", 2, "refused", "x"));
  // Unanswered: both come again as they were.
  EXPECT_THAT(
      Describe(replay.ToResend()),
      ElementsAre("1 gpt/2 nccl/world=id-a", "2 gpt/2 wait gloo/0 until 123", "3 gpt/2 refused=x"));
  replay.Answered(1, 0);
  replay.Answered(3, 9);  // FAILED_PRECONDITION: not remembered
  EXPECT_THAT(Describe(replay.ToResend()),
              ElementsAre("0 gpt/2 nccl/world=id-a", "2 gpt/2 wait gloo/0 until 123"));
  replay.Answered(2, 0);  // a read, answered: nothing to resend
  replay.Answered(2, 0);  // twice (answered again after a resend): ignored
  EXPECT_THAT(Describe(replay.ToResend()), ElementsAre("0 gpt/2 nccl/world=id-a"));
}

TEST(RendezvousReplayTest, ALaterSetOfAKeyReplacesItsValue) {
  RendezvousReplay replay;
  replay.Sent(Set(1, "gpt", 1, "k", "first"));
  replay.Answered(1, 0);
  replay.Sent(Set(2, "gpt", 1, "k", "second!"));
  replay.Answered(2, 0);
  EXPECT_THAT(Describe(replay.ToResend()), ElementsAre("0 gpt/1 k=second!"));
  EXPECT_EQ(replay.bytes(), std::string("k").size() + std::string("second!").size());
}

TEST(RendezvousReplayTest, AbandonedRequestsAreNotResent) {
  RendezvousReplay replay;
  replay.Sent(Wait(7, "gpt", 1, "k"));
  replay.Abandoned(7);
  EXPECT_THAT(replay.ToResend(), IsEmpty());
  replay.Answered(7, 0);  // a late answer for it changes nothing
  EXPECT_THAT(replay.ToResend(), IsEmpty());
}

TEST(RendezvousReplayTest, ANewGenerationForgetsTheJobsOlderOnesOnly) {
  RendezvousReplay replay;
  int64_t id = 1;
  for (auto [job, generation] : std::vector<std::pair<std::string, int64_t>>{
           {"gpt", 1}, {"gpt", 2}, {"bert", 1}, {"gpt", 3}}) {
    replay.Sent(Set(id, job, generation, "k", "v"));
    replay.Answered(id++, 0);
  }
  replay.NewGeneration("gpt", 3);
  EXPECT_THAT(Describe(replay.ToResend()), ElementsAre("0 bert/1 k=v", "0 gpt/3 k=v"));
  EXPECT_EQ(replay.bytes(), 4u);
}

TEST(RendezvousReplayTest, GenerationsWithNoWorkerLeftHereAreForgotten) {
  RendezvousReplay replay;
  int64_t id = 1;
  for (auto [job, generation] : std::vector<std::pair<std::string, int64_t>>{
           {"gpt", 2}, {"bert", 1}, {"gpt", 3}, {"gpt", 4}}) {
    replay.Sent(Set(id, job, generation, "k", "v"));
    replay.Answered(id++, 0);
  }
  replay.Sent(Wait(9, "gpt", 3, "w"));  // a request still waiting is its requester's to abandon
  // Generation 3's last worker here exited; generation 4 was launched meanwhile: it stays.
  replay.ForgetThrough("gpt", 3);
  EXPECT_THAT(Describe(replay.ToResend()),
              ElementsAre("0 bert/1 k=v", "0 gpt/4 k=v", "9 gpt/3 wait w until 123"));
  EXPECT_EQ(replay.bytes(), 4u);
}

TEST(RendezvousReplayTest, TheOldestGenerationsAreForgottenPastTheBounds) {
  RendezvousReplay replay;
  int64_t id = 1;
  for (size_t g = 1; g <= RendezvousReplay::kMaxGenerations + 2; ++g) {
    replay.Sent(Set(id, "job", static_cast<int64_t>(g), "k", "v"));
    replay.Answered(id++, 0);
  }
  std::vector<v1::RendezvousRequest> kept = replay.ToResend();
  ASSERT_EQ(kept.size(), RendezvousReplay::kMaxGenerations);
  EXPECT_EQ(kept.front().job().generation(), 3);

  // Bytes: two values of 60% of the bound cannot both stay.
  RendezvousReplay by_bytes;
  const std::string big(RendezvousReplay::kMaxBytes * 6 / 10, 'x');
  by_bytes.Sent(Set(1, "a", 1, "k", big));
  by_bytes.Answered(1, 0);
  by_bytes.Sent(Set(2, "b", 1, "k", big));
  by_bytes.Answered(2, 0);
  kept = by_bytes.ToResend();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].job().job_id(), "b");
  // One larger than the bound alone is not remembered at all.
  by_bytes.Sent(Set(3, "c", 1, "k", std::string(RendezvousReplay::kMaxBytes, 'y')));
  by_bytes.Answered(3, 0);
  EXPECT_EQ(by_bytes.ToResend().size(), 1u);
  EXPECT_EQ(by_bytes.bytes(), 1 + big.size());
}

}  // namespace
}  // namespace ringmaster::agent
