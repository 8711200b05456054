// The Communicator base class's contract with its backends: which element types reach a
// reduction, which seconds the totals record, and each thread's time in operations.
#include "trainer/comm/communicator.h"

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/comm/no_op_communicator.h"

namespace ringmaster::trainer {
namespace {

// A one-rank backend that sleeps in every operation and, when told, reports its own timing.
class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(bool reduces_bf16, double device_seconds)
      : Communicator("dp0", 0, 1), reduces_bf16_(reduces_bf16), device_seconds_(device_seconds) {}
  int calls = 0;
  std::vector<const DeviceMark*> marks;  // order_after() as each operation saw it
  const char* transport() const override { return "fake"; }

 protected:
  bool CanReduce(DType dtype) const override {
    return dtype == DType::kF32 || (reduces_bf16_ && dtype == DType::kBF16);
  }
  absl::Status DoAllReduce(Tensor) override { return Body(); }
  absl::Status DoReduceScatter(Tensor, Tensor) override { return Body(); }
  absl::Status DoAllGather(Tensor, Tensor) override { return Body(); }
  absl::Status DoBroadcast(Tensor, int) override { return Body(); }
  absl::Status DoSend(Tensor, int) override { return Body(); }
  absl::Status DoRecv(Tensor, int) override { return Body(); }
  absl::Status DoExchange(Tensor, Tensor, int) override { return Body(); }
  absl::Status DoBarrier() override { return absl::OkStatus(); }

 private:
  absl::Status Body() {
    ++calls;
    marks.push_back(order_after());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (device_seconds_ >= 0) RecordDeviceSeconds(device_seconds_);
    return absl::OkStatus();
  }
  const bool reduces_bf16_;
  const double device_seconds_;
};

// A backend that runs its all-reduce as an operation of another communicator, as shared memory
// runs its point to point over Gloo.
class NestingCommunicator final : public testing::NoOpCommunicator {
 public:
  NestingCommunicator() : NoOpCommunicator("tp0", 0, 1), inner_(false, /*device_seconds=*/1000) {}

 protected:
  absl::Status DoAllReduce(Tensor data) override { return inner_.AllReduce(data); }

 private:
  FakeCommunicator inner_;
};

TEST(CommunicatorTest, ReductionsTakeOnlyTheTypesTheBackendSums) {
  uint16_t bf16[4] = {};
  float f32[4] = {};
  FakeCommunicator gloo_like(/*reduces_bf16=*/false, -1);
  EXPECT_EQ(gloo_like.AllReduce(Tensor{bf16, 4, DType::kBF16}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      gloo_like.ReduceScatter(Tensor{bf16, 4, DType::kBF16}, Tensor{bf16, 4, DType::kBF16}).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gloo_like.AllReduce(Tensor{f32, 4, DType::kF32}).ok());
  // Moving data needs no arithmetic: any dtype.
  EXPECT_TRUE(
      gloo_like.AllGather(Tensor{bf16, 4, DType::kBF16}, Tensor{bf16, 4, DType::kBF16}).ok());
  EXPECT_EQ(gloo_like.calls, 2);

  FakeCommunicator nccl_like(/*reduces_bf16=*/true, -1);
  EXPECT_TRUE(nccl_like.AllReduce(Tensor{bf16, 4, DType::kBF16}).ok());
  EXPECT_TRUE(
      nccl_like.ReduceScatter(Tensor{bf16, 4, DType::kBF16}, Tensor{bf16, 4, DType::kBF16}).ok());
  EXPECT_EQ(nccl_like.AllReduce(Tensor{f32, 4, DType::kI32}).code(),
            absl::StatusCode::kInvalidArgument);
  // Mixed dtypes are refused whatever the backend sums.
  EXPECT_EQ(
      nccl_like.ReduceScatter(Tensor{f32, 4, DType::kF32}, Tensor{bf16, 4, DType::kBF16}).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nccl_like.calls, 2);
}

TEST(CommunicatorTest, TotalsUseTheBackendsOwnTimingWhenGiven) {
  float f32[4] = {};
  FakeCommunicator timed(false, /*device_seconds=*/0.5);
  ASSERT_TRUE(timed.AllReduce(Tensor{f32, 4, DType::kF32}).ok());
  ASSERT_TRUE(timed.AllReduce(Tensor{f32, 4, DType::kF32}).ok());
  std::vector<OpTotals> totals = timed.TakeTotals();
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_EQ(totals[0].count, 2);
  EXPECT_EQ(totals[0].bytes, 32);
  EXPECT_DOUBLE_EQ(totals[0].seconds, 1.0);  // not the ~40 ms of sleeping

  FakeCommunicator wall(false, -1);
  ASSERT_TRUE(wall.Broadcast(Tensor{f32, 4, DType::kF32}, 0).ok());
  totals = wall.TakeTotals();
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_GE(totals[0].seconds, 0.02);  // the wall time of the call, at least the sleep
}

// The calling thread's time in operations, AnyOf's too, each as the totals count it: a backend's
// own timing where it gives one (0.5 s, not the 20 ms of sleeping), else the wall time (at least
// the sleep); nothing on another thread.
TEST(CommunicatorTest, ThreadSecondsCountTheCallingThreadsTimeInOperations) {
  float f32[4] = {};
  bool flag[1] = {true};
  FakeCommunicator timed(false, /*device_seconds=*/0.5);
  double before = Communicator::ThreadSeconds();
  ASSERT_TRUE(timed.AllReduce(Tensor{f32, 4, DType::kF32}).ok());
  ASSERT_TRUE(timed.AnyOf(absl::MakeSpan(flag)).ok());
  EXPECT_NEAR(Communicator::ThreadSeconds() - before, 1.0, 1e-9);

  FakeCommunicator wall(false, -1);
  before = Communicator::ThreadSeconds();
  ASSERT_TRUE(wall.AllReduce(Tensor{f32, 4, DType::kF32}).ok());
  EXPECT_GE(Communicator::ThreadSeconds() - before, 0.02);

  // An operation inside another counts once, as the outer one's time (its wall time here, not
  // the inner one's 1000 s).
  NestingCommunicator nesting;
  before = Communicator::ThreadSeconds();
  ASSERT_TRUE(nesting.AllReduce(Tensor{f32, 4, DType::kF32}).ok());
  EXPECT_GE(Communicator::ThreadSeconds() - before, 0.02);
  EXPECT_LT(Communicator::ThreadSeconds() - before, 1000);

  double other_thread = -1;
  std::thread([&] { other_thread = Communicator::ThreadSeconds(); }).join();
  EXPECT_EQ(other_thread, 0);
}

TEST(CommunicatorTest, AnyOfIsNumberedLikeEveryCollectiveButStaysOutOfTheTotals) {
  FakeCommunicator comm(false, -1);
  bool flags[2] = {true, false};
  ASSERT_TRUE(comm.AnyOf(absl::MakeSpan(flags)).ok());
  EXPECT_TRUE(flags[0]);  // one member: its own votes
  EXPECT_FALSE(flags[1]);
  flags[0] = false;
  flags[1] = true;
  ASSERT_TRUE(comm.AnyOf(absl::MakeSpan(flags)).ok());
  EXPECT_FALSE(flags[0]);
  EXPECT_TRUE(flags[1]);
  EXPECT_EQ(comm.AnyOf({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.calls, 2);
  EXPECT_EQ(comm.entered(), 2);
  EXPECT_EQ(comm.completed(), 2);
  EXPECT_TRUE(comm.TakeTotals().empty());
}

// A mark reaches exactly the operations issued inside its ScopedOrder, also when one of them is
// refused before it runs: a stale mark would order a later collective after too little work.
TEST(CommunicatorTest, AScopedOrderReachesOnlyTheOperationsInsideIt) {
  float f32[4] = {};
  uint16_t bf16[4] = {};
  FakeCommunicator comm(/*reduces_bf16=*/false, 0);
  const auto mark = std::make_shared<const DeviceMark>();
  EXPECT_TRUE(comm.AllReduce(Tensor{f32, 4, DType::kF32}).ok());
  {
    Communicator::ScopedOrder order(&comm, mark);
    EXPECT_TRUE(comm.AllReduce(Tensor{f32, 4, DType::kF32}).ok());
  }
  {
    Communicator::ScopedOrder order(&comm, mark);
    EXPECT_EQ(comm.AllReduce(Tensor{bf16, 4, DType::kBF16}).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(comm.AllGather(Tensor{f32, 1, DType::kF32}, Tensor{f32, 1, DType::kF32}).ok());
  EXPECT_EQ(comm.marks, (std::vector<const DeviceMark*>{nullptr, mark.get(), nullptr}));
}

}  // namespace
}  // namespace ringmaster::trainer
