#include "coordinator/job_id.h"

#include <set>

#include "gtest/gtest.h"

namespace ringmaster::coordinator {
namespace {

TEST(JobIdTest, FourHexDigitsWhenFree) {
  uint64_t next = 0x12345678abcdULL;
  EXPECT_EQ(NewJobId(
                "train", [&] { return next; }, [](const std::string&) { return false; }),
            "train-abcd");
}

TEST(JobIdTest, ACollisionDrawsAgain) {
  uint64_t next = 0;
  const std::set<std::string> taken = {"train-0001", "train-0002"};
  EXPECT_EQ(NewJobId(
                "train", [&] { return ++next; },
                [&](const std::string& id) { return taken.count(id) > 0; }),
            "train-0003");
}

// Every 4-digit id of the name is taken (65,536 jobs of one name): the id gets longer instead of
// the search going on forever.
TEST(JobIdTest, WhenTheShortIdsAreAllTakenTheSuffixWidens) {
  uint64_t next = 0x0123456789abcdefULL;
  auto all_short_taken = [](const std::string& id) {
    return id.size() == std::string("n-").size() + 4;
  };
  EXPECT_EQ(NewJobId(
                "n", [&] { return next; }, all_short_taken),
            "n-89abcdef");
  auto up_to_eight_taken = [](const std::string& id) { return id.size() <= 2 + 8; };
  EXPECT_EQ(NewJobId(
                "n", [&] { return next; }, up_to_eight_taken),
            "n-0123456789abcdef");
}

}  // namespace
}  // namespace ringmaster::coordinator
