#include "trainer/comm/unique_id_exchange.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

constexpr size_t kIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

std::string BinaryId() {
  std::string id(kIdBytes, '\0');
  for (size_t i = 0; i < kIdBytes; ++i) id[i] = static_cast<char>(i * 37 + 3);  // NULs, high bytes
  return id;
}

TEST(UniqueIdExchangeTest, EveryMemberGetsRankZerosId) {
  InMemoryStore store;
  const int size = 4;
  std::vector<absl::StatusOr<std::string>> got(size, absl::UnknownError("not run"));
  std::vector<int> made(size, 0);
  std::vector<std::thread> threads;
  // The waiting ranks start first: they must wait for rank 0, not fail.
  for (int r = size - 1; r >= 0; --r) {
    threads.emplace_back([&, r] {
      got[r] = ExchangeUniqueId(
          &store, "nccl", "dp0", r, size, kIdBytes,
          [&]() -> absl::StatusOr<std::string> {
            ++made[r];
            return BinaryId();
          },
          absl::Seconds(30));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(got[r].ok()) << r << ": " << got[r].status();
    EXPECT_EQ(*got[r], BinaryId()) << r;
    EXPECT_EQ(made[r], r == 0 ? 1 : 0) << "only rank 0 makes the id";
  }
  // Published as printable hex under the group's key.
  absl::StatusOr<std::string> raw = store.Wait(UniqueIdKey("nccl", "dp0"), absl::Seconds(1));
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->size(), 2 * kIdBytes);
  EXPECT_EQ(raw->substr(0, 4), "0328");
}

TEST(UniqueIdExchangeTest, GroupsAreIndependent) {
  InMemoryStore store;
  auto make = [](char fill) {
    return [fill]() -> absl::StatusOr<std::string> { return std::string(kIdBytes, fill); };
  };
  ASSERT_TRUE(
      ExchangeUniqueId(&store, "nccl", "dp0", 0, 2, kIdBytes, make('a'), absl::Seconds(1)).ok());
  ASSERT_TRUE(
      ExchangeUniqueId(&store, "nccl", "dp1", 0, 2, kIdBytes, make('b'), absl::Seconds(1)).ok());
  EXPECT_EQ(*ExchangeUniqueId(&store, "nccl", "dp1", 1, 2, kIdBytes, make('x'), absl::Seconds(1)),
            std::string(kIdBytes, 'b'));
  EXPECT_EQ(*ExchangeUniqueId(&store, "nccl", "dp0", 1, 2, kIdBytes, make('x'), absl::Seconds(1)),
            std::string(kIdBytes, 'a'));
}

TEST(UniqueIdExchangeTest, MissingRankZeroIsADeadline) {
  InMemoryStore store;
  absl::StatusOr<std::string> id = ExchangeUniqueId(
      &store, "nccl", "dp0", 1, 2, kIdBytes,
      []() -> absl::StatusOr<std::string> { return std::string(kIdBytes, 'a'); },
      absl::Milliseconds(50));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(id.status().message().find("nccl/dp0/unique_id"), std::string::npos) << id.status();
}

TEST(UniqueIdExchangeTest, MalformedValuesAreDataLoss) {
  InMemoryStore store;
  auto never = []() -> absl::StatusOr<std::string> { return absl::InternalError("not rank 0"); };
  ASSERT_TRUE(store.Set(UniqueIdKey("nccl", "short"), "abcd").ok());
  EXPECT_EQ(ExchangeUniqueId(&store, "nccl", "short", 1, 2, kIdBytes, never, absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  ASSERT_TRUE(store.Set(UniqueIdKey("nccl", "nothex"), std::string(2 * kIdBytes, 'z')).ok());
  EXPECT_EQ(ExchangeUniqueId(&store, "nccl", "nothex", 1, 2, kIdBytes, never, absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST(UniqueIdExchangeTest, RankZeroErrorsAndBadRanks) {
  InMemoryStore store;
  EXPECT_EQ(ExchangeUniqueId(
                &store, "nccl", "g", 0, 2, kIdBytes,
                []() -> absl::StatusOr<std::string> { return absl::UnavailableError("no net"); },
                absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      ExchangeUniqueId(
          &store, "nccl", "g", 0, 2, kIdBytes,
          []() -> absl::StatusOr<std::string> { return std::string(3, 'a'); }, absl::Seconds(1))
          .status()
          .code(),
      absl::StatusCode::kInternal);
  auto any = []() -> absl::StatusOr<std::string> { return std::string(kIdBytes, 'a'); };
  EXPECT_EQ(
      ExchangeUniqueId(&store, "nccl", "g", 2, 2, kIdBytes, any, absl::Seconds(1)).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ExchangeUniqueId(&store, "nccl", "g", -1, 2, kIdBytes, any, absl::Seconds(1)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmaster::trainer
