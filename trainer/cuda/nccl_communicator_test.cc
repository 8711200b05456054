// The NCCL communicator: argument and no-GPU failures (run everywhere CUDA is built), then on
// GPUs: every operation on device and host memory with data checks, ordering after the producer
// stream, the measured seconds, a member that never arrives, a peer lost mid-collective, and
// (with two or more GPUs) real multi-rank reductions.
#include "trainer/cuda/nccl_communicator.h"

#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "trainer/comm/testing.h"
#include "trainer/comm/unique_id_exchange.h"
#include "trainer/cuda/cuda_device.h"
#include "trainer/kernels/bf16.h"
#include "trainer/kernels/cuda_test_util.h"

namespace ringmaster::trainer {
namespace {

using kernels::testing::HaveGpu;

TEST(NcclConnectTest, RanksOutsideTheGroupAreRefused) {
  InMemoryStore store;
  EXPECT_EQ(ConnectNccl("dp0", 2, 2, &store, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectNccl("dp0", -1, 2, &store, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConnectNccl("dp0", 0, 0, &store, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclConnectTest, WithoutAGpuConnectingFailsCleanlyAndPublishesNothing) {
  if (HaveGpu()) GTEST_SKIP() << "checks the path of machines without a GPU";
  InMemoryStore store;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = ConnectNccl("dp0", 0, 1, &store, {});
  // Retryable: the agent advertised a GPU this process cannot use.
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnavailable) << comm.status();
  EXPECT_EQ(store.Wait(UniqueIdKey("nccl", "dp0"), absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RM_SKIP_WITHOUT_GPU();
    absl::StatusOr<std::unique_ptr<CudaDevice>> d = MakeCudaDevice(0);
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = std::move(*d);
    absl::StatusOr<std::unique_ptr<Communicator>> c =
        ConnectNccl("solo", 0, 1, &store_, NcclOptionsFor(*device_, absl::Seconds(60)));
    ASSERT_TRUE(c.ok()) << c.status();
    comm_ = std::move(*c);
  }
  void TearDown() override {
    comm_.reset();
    device_.reset();
  }
  DeviceBuffer Floats(const std::vector<float>& values) {
    absl::StatusOr<DeviceBuffer> b = device_->Allocate(values.size(), DType::kF32);
    EXPECT_TRUE(b.ok());
    EXPECT_TRUE(device_->CopyToDevice(b->tensor(), values.data()).ok());
    return std::move(*b);
  }
  std::vector<float> Read(const Tensor& t) {
    std::vector<float> out(t.size);
    EXPECT_TRUE(device_->CopyToHost(out.data(), t).ok());
    return out;
  }
  InMemoryStore store_;
  std::unique_ptr<CudaDevice> device_;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(NcclCommunicatorTest, OneRankOperationsOnDeviceAndHostMemory) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
  DeviceBuffer a = Floats(values), b = Floats(std::vector<float>(8, -1));
  ASSERT_TRUE(comm_->AllReduce(a.tensor()).ok());
  EXPECT_EQ(Read(a.tensor()), values);
  ASSERT_TRUE(comm_->AllGather(a.tensor(), b.tensor()).ok());  // out of place
  EXPECT_EQ(Read(b.tensor()), values);
  ASSERT_TRUE(comm_->ReduceScatter(a.tensor(), a.tensor()).ok());  // in place, rank 0
  ASSERT_TRUE(comm_->Broadcast(a.tensor(), 0).ok());
  EXPECT_EQ(Read(a.tensor()), values);
  // bf16 reductions (NCCL sums them; Gloo cannot).
  absl::StatusOr<DeviceBuffer> h = device_->Allocate(8, DType::kBF16);
  ASSERT_TRUE(h.ok());
  device_->Convert(h->tensor(), a.tensor());
  ASSERT_TRUE(comm_->AllReduce(h->tensor()).ok());
  // Host memory is staged: the trainer sums its loss and norms this way.
  float host[3] = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(comm_->AllReduce(Tensor{host, 3, DType::kF32}).ok());
  EXPECT_EQ(host[0], 1.5f);
  EXPECT_EQ(host[2], 3.25f);
  int32_t records[4] = {0, 0, 0, 0};
  int32_t mine[2] = {7, 9};
  ASSERT_TRUE(comm_->AllGather(Tensor{mine, 2, DType::kI32}, Tensor{records, 2, DType::kI32}).ok());
  EXPECT_EQ(records[0], 7);
  EXPECT_EQ(records[1], 9);
  ASSERT_TRUE(comm_->Barrier().ok());
  // Mixed host and device buffers are a programming error.
  EXPECT_EQ(comm_->AllGather(Tensor{host, 1, DType::kF32}, a.Slice(0, 1)).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(comm_->entered(), comm_->completed() + 1);  // the refused all-gather entered
  const std::vector<OpTotals> totals = comm_->TakeTotals();
  ASSERT_FALSE(totals.empty());
  // GPU time is measured with events around each operation. One rank's in-place operations may
  // enqueue no work at all (event resolution is about 0.5 us), so only the sum must be positive.
  double seconds = 0;
  for (const OpTotals& t : totals) {
    EXPECT_GT(t.count, 0);
    EXPECT_GT(t.bytes, 0);
    EXPECT_GE(t.seconds, 0) << CollectiveOpName(t.op);
    seconds += t.seconds;
  }
  EXPECT_GT(seconds, 0);
}

// A host function on the compute stream holds it back; the collective must wait for the copy
// enqueued behind it, and its measured seconds must not include that wait.
void CUDART_CB Hold(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }

TEST_F(NcclCommunicatorTest, DeviceOperationsWaitForTheProducerStream) {
  DeviceBuffer in = Floats(std::vector<float>(1024, 0)), out = Floats(std::vector<float>(1024, 0));
  ASSERT_TRUE(device_->Synchronize().ok());
  const std::vector<float> values(1024, 42.0f);
  ASSERT_EQ(cudaLaunchHostFunc(device_->stream(), Hold, nullptr), cudaSuccess);
  // Pinned, so that this copy is truly asynchronous and still pending when the collective is
  // issued.
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 1024 * sizeof(float)), cudaSuccess);
  std::copy(values.begin(), values.end(), pinned);
  ASSERT_EQ(cudaMemcpyAsync(in.tensor().data, pinned, 1024 * sizeof(float), cudaMemcpyHostToDevice,
                            device_->stream()),
            cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  comm_->TakeTotals();
  ASSERT_TRUE(comm_->AllGather(in.tensor(), out.tensor()).ok());  // a copy with one rank
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(Read(out.tensor()), values) << "the collective ran before the producer's copy";
  const std::vector<OpTotals> totals = comm_->TakeTotals();
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_LT(totals[0].seconds, wall) << "the wait for the producer is not the collective's time";
  cudaFreeHost(pinned);
}

TEST(NcclFailureTest, AMemberThatNeverArrivesIsADeadlineNotAHang) {
  RM_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = MakeCudaDevice(0);
  ASSERT_TRUE(device.ok());
  InMemoryStore store;
  // Rank 1 of 2 never joins.
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      ConnectNccl("lonely", 0, 2, &store, NcclOptionsFor(**device, absl::Seconds(3)));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
}

TEST(NcclFailureTest, APeerLostMidCollectiveEndsInARetryableErrorAndAnAbort) {
  RM_SKIP_WITHOUT_GPU();
  if (VisibleCudaDevices() < 2) GTEST_SKIP() << "needs two GPUs";
  InMemoryStore store;
  std::vector<std::unique_ptr<CudaDevice>> devices(2);
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<absl::Status> statuses = testing::RunRanks(2, [&](int rank) -> absl::Status {
    absl::StatusOr<std::unique_ptr<CudaDevice>> d = MakeCudaDevice(rank);
    if (!d.ok()) return d.status();
    devices[rank] = std::move(*d);
    absl::StatusOr<std::unique_ptr<Communicator>> c =
        ConnectNccl("dp0", rank, 2, &store, NcclOptionsFor(*devices[rank], absl::Seconds(3)));
    if (!c.ok()) return c.status();
    comms[rank] = std::move(*c);
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  // Rank 1 is gone (it never calls the collective); rank 0 must not hang.
  absl::StatusOr<DeviceBuffer> buffer = devices[0]->Allocate(1 << 20, DType::kF32);
  ASSERT_TRUE(buffer.ok());
  const absl::Status s = comms[0]->AllReduce(buffer->tensor());
  EXPECT_TRUE(s.code() == absl::StatusCode::kDeadlineExceeded ||
              s.code() == absl::StatusCode::kUnavailable)
      << s;
  EXPECT_EQ(ExitCodeFor(s), kExitRetryable);
  // Aborted: later operations fail at once.
  EXPECT_EQ(comms[0]->AllReduce(buffer->tensor()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(comms[0]->completed(), 0);
  buffer = absl::UnknownError("released");
  comms[0].reset();
  comms[1].reset();
}

TEST(NcclMultiRankTest, ReductionsAcrossGpus) {
  RM_SKIP_WITHOUT_GPU();
  const int n = std::min(VisibleCudaDevices(), 8);
  if (n < 2) GTEST_SKIP() << "needs two GPUs";
  InMemoryStore store;
  std::vector<absl::Status> statuses = testing::RunRanks(n, [&](int rank) -> absl::Status {
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = MakeCudaDevice(rank);
    if (!device.ok()) return device.status();
    CudaDevice& d = **device;
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        ConnectNccl("dp0", rank, n, &store, NcclOptionsFor(d, absl::Seconds(60)));
    if (!comm.ok()) return comm.status();
    const int64_t chunk = 1000;
    std::vector<float> mine(chunk * n);
    for (int64_t i = 0; i < chunk * n; ++i) mine[i] = static_cast<float>(rank + 1 + i % 13);
    absl::StatusOr<DeviceBuffer> buf = d.Allocate(chunk * n, DType::kF32);
    absl::StatusOr<DeviceBuffer> out = d.Allocate(chunk * n, DType::kF32);
    if (!buf.ok() || !out.ok()) return absl::InternalError("allocation");
    RETURN_IF_ERROR(d.CopyToDevice(buf->tensor(), mine.data()));
    // All-reduce: small integers, exact in fp32.
    RETURN_IF_ERROR((*comm)->AllReduce(buf->tensor()));
    std::vector<float> got(chunk * n);
    RETURN_IF_ERROR(d.CopyToHost(got.data(), buf->tensor()));
    for (int64_t i = 0; i < chunk * n; ++i) {
      const float want = static_cast<float>(n * (n + 1) / 2 + n * (i % 13));
      if (got[i] != want) return absl::DataLossError(absl::StrCat("all_reduce[", i, "]"));
    }
    // Reduce-scatter in place (ZeRO-1's layout), then all-gather in place back.
    RETURN_IF_ERROR(d.CopyToDevice(buf->tensor(), mine.data()));
    Tensor own = buf->Slice(rank * chunk, chunk);
    RETURN_IF_ERROR((*comm)->ReduceScatter(buf->tensor(), own));
    RETURN_IF_ERROR((*comm)->AllGather(own, buf->tensor()));
    RETURN_IF_ERROR(d.CopyToHost(got.data(), buf->tensor()));
    for (int64_t i = 0; i < chunk * n; ++i) {
      const float want = static_cast<float>(n * (n + 1) / 2 + n * (i % 13));
      if (got[i] != want) return absl::DataLossError(absl::StrCat("rs+ag[", i, "]"));
    }
    // Broadcast from the last rank; a ring of send/recv.
    RETURN_IF_ERROR(d.CopyToDevice(buf->tensor(), mine.data()));
    RETURN_IF_ERROR((*comm)->Broadcast(buf->tensor(), n - 1));
    RETURN_IF_ERROR(d.CopyToHost(got.data(), buf->tensor()));
    if (got[0] != static_cast<float>(n)) return absl::DataLossError("broadcast");
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    RETURN_IF_ERROR(d.CopyToDevice(buf->tensor(), mine.data()));
    if (rank % 2 == 0) {
      RETURN_IF_ERROR((*comm)->Send(buf->tensor(), right));
      RETURN_IF_ERROR((*comm)->Recv(out->tensor(), left));
    } else {
      RETURN_IF_ERROR((*comm)->Recv(out->tensor(), left));
      RETURN_IF_ERROR((*comm)->Send(buf->tensor(), right));
    }
    RETURN_IF_ERROR(d.CopyToHost(got.data(), out->tensor()));
    if (got[0] != static_cast<float>(left + 1)) return absl::DataLossError("send/recv");
    // Point to point from host memory (staged; the send side has no output buffer).
    float token = static_cast<float>(rank), received = -1;
    if (rank % 2 == 0) {
      RETURN_IF_ERROR((*comm)->Send(Tensor{&token, 1, DType::kF32}, right));
      RETURN_IF_ERROR((*comm)->Recv(Tensor{&received, 1, DType::kF32}, left));
    } else {
      RETURN_IF_ERROR((*comm)->Recv(Tensor{&received, 1, DType::kF32}, left));
      RETURN_IF_ERROR((*comm)->Send(Tensor{&token, 1, DType::kF32}, right));
    }
    if (received != static_cast<float>(left)) return absl::DataLossError("host send/recv");
    // A host float, as the trainer sums its loss.
    float loss = 0.5f;
    RETURN_IF_ERROR((*comm)->AllReduce(Tensor{&loss, 1, DType::kF32}));
    if (loss != 0.5f * n) return absl::DataLossError("host all_reduce");
    // bf16 gradients: 1.0 per rank sums exactly.
    std::vector<uint16_t> ones(64, kernels::FloatToBf16Bits(1.0f));
    absl::StatusOr<DeviceBuffer> h = d.Allocate(64, DType::kBF16);
    if (!h.ok()) return h.status();
    RETURN_IF_ERROR(d.CopyToDevice(h->tensor(), ones.data()));
    RETURN_IF_ERROR((*comm)->AllReduce(h->tensor()));
    RETURN_IF_ERROR(d.CopyToHost(ones.data(), h->tensor()));
    if (kernels::Bf16BitsToFloat(ones[63]) != static_cast<float>(n)) {
      return absl::DataLossError("bf16 all_reduce");
    }
    buf = absl::UnknownError("released");
    out = absl::UnknownError("released");
    h = absl::UnknownError("released");
    comm->reset();
    return absl::OkStatus();
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
}

}  // namespace
}  // namespace ringmaster::trainer
