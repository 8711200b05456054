// The emulated NCCL and streams themselves (fake_nccl.cc, fake_streams.h): results, stream
// ordering of deferred and pending operations (events, waits, destroyed streams, the legacy
// default stream, cudaFreeAsync), grouped
// sends and receives, and what they must report: ranks issuing different collectives, a peer
// that left, two ranks on one GPU, buffers outside device memory, a call before the previous
// one's ncclInProgress was polled, and finalize waiting for every rank; the fake cuBLAS's answer
// to null handles. One test thread drives
// every rank (each call selects the rank's device first): the non-blocking calls never wait for
// peers.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cuda_emu/fake_memory.h"
#include "testing/cuda_emu/fake_streams.h"

namespace {

using ::testing::HasSubstr;

struct Rank {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* buffer = nullptr;  // kCount floats of device memory
};

constexpr size_t kCount = 8;

// Polls a non-blocking communicator until it is no longer in progress.
ncclResult_t Settle(const Rank& r) {
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 1000 && state == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(r.comm, &state) != ncclSuccess) return ncclInternalError;
  }
  return state;
}

class FakeNcclTest : public ::testing::Test {
 protected:
  // Ranks 0..n-1 of a new communicator on devices `devices` (by default rank i on device i),
  // all joined; appended to ranks_.
  void Join(int n, std::vector<int> devices = {}) {
    if (devices.empty()) {
      for (int i = 0; i < n; ++i) devices.push_back(i);
    }
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    const size_t base = ranks_.size();
    ranks_.resize(base + n);
    for (int i = 0; i < n; ++i) {
      Rank& r = ranks_[base + i];
      r.device = devices[i];
      ASSERT_EQ(cudaSetDevice(r.device), cudaSuccess);
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t init = ncclCommInitRankConfig(&r.comm, n, id, i, &config);
      ASSERT_TRUE(init == ncclSuccess || init == ncclInProgress) << ncclGetLastError(nullptr);
      ASSERT_EQ(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&r.buffer, kCount * sizeof(float)), cudaSuccess);
    }
    for (size_t i = base; i < ranks_.size(); ++i) {
      ASSERT_EQ(Settle(ranks_[i]), ncclSuccess) << ncclGetLastError(nullptr);
    }
  }
  void TearDown() override {
    for (Rank& r : ranks_) {
      cudaSetDevice(r.device);
      if (r.comm != nullptr) ncclCommAbort(r.comm);
      cudaFree(r.buffer);
      cudaStreamDestroy(r.stream);
    }
  }
  void Fill(const Rank& r, float value) {
    std::vector<float> v(kCount, value);
    ASSERT_EQ(cudaSetDevice(r.device), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(r.buffer, v.data(), sizeof(float) * kCount, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> Read(const Rank& r) {
    std::vector<float> v(kCount);
    cudaSetDevice(r.device);
    EXPECT_EQ(cudaMemcpy(v.data(), r.buffer, sizeof(float) * kCount, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return v;
  }
  ncclResult_t AllReduce(const Rank& r, size_t count = kCount) {
    cudaSetDevice(r.device);
    return ncclAllReduce(r.buffer, r.buffer, count, ncclFloat32, ncclSum, r.comm, r.stream);
  }
  std::vector<Rank> ranks_;
};

bool Queued(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// A call's result on rank `r`: queued, and polled until done if it was still in progress.
#define EXPECT_ISSUED(r, call)                                                   \
  do {                                                                           \
    const ncclResult_t result_ = (call);                                         \
    EXPECT_TRUE(Queued(result_)) << result_ << " " << ncclGetLastError(nullptr); \
    if (result_ == ncclInProgress) EXPECT_EQ(Settle(r), ncclSuccess);            \
  } while (false)

TEST_F(FakeNcclTest, AnOperationCompletesWhenEveryRankHasIssuedIt) {
  Join(3);
  for (int i = 0; i < 3; ++i) Fill(ranks_[i], static_cast<float>(i + 1));
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  EXPECT_ISSUED(ranks_[0], AllReduce(ranks_[0]));
  EXPECT_ISSUED(ranks_[1], AllReduce(ranks_[1]));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(done, ranks_[0].stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady) << "completed before rank 2 issued it";
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady) << "a query's not-ready is the last error";
  EXPECT_EQ(Read(ranks_[0]), std::vector<float>(kCount, 1.0f)) << "written before completion";
  // A stream made to wait for the event holds the operation too.
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(other, done, 0), cudaSuccess);
  cudaEvent_t after = nullptr;
  ASSERT_EQ(cudaEventCreate(&after), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(after, other), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(after), cudaErrorNotReady);

  EXPECT_ISSUED(ranks_[2], AllReduce(ranks_[2]));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(after), cudaSuccess);
  for (const Rank& r : ranks_) {
    EXPECT_EQ(Read(r), std::vector<float>(kCount, 6.0f));
    EXPECT_EQ(Settle(r), ncclSuccess);
  }
  cudaEventDestroy(done);
  cudaEventDestroy(after);
  cudaStreamDestroy(other);
}

TEST_F(FakeNcclTest, GatherScatterBroadcastAndBf16Sums) {
  Join(2);
  // Reduce-scatter in place: rank r keeps the sum of chunk r.
  for (int i = 0; i < 2; ++i) Fill(ranks_[i], static_cast<float>(10 * (i + 1)));
  for (int i = 0; i < 2; ++i) {
    Rank& r = ranks_[i];
    cudaSetDevice(r.device);
    EXPECT_ISSUED(r, ncclReduceScatter(r.buffer, r.buffer + i * kCount / 2, kCount / 2, ncclFloat32,
                                       ncclSum, r.comm, r.stream));
  }
  EXPECT_EQ(Read(ranks_[0])[0], 30.0f);
  EXPECT_EQ(Read(ranks_[1])[kCount - 1], 30.0f);
  // All-gather in place of each rank's own chunk.
  for (int i = 0; i < 2; ++i) Fill(ranks_[i], static_cast<float>(i + 1));
  for (int i = 0; i < 2; ++i) {
    Rank& r = ranks_[i];
    cudaSetDevice(r.device);
    EXPECT_ISSUED(r, ncclAllGather(r.buffer + i * kCount / 2, r.buffer, kCount / 2, ncclFloat32,
                                   r.comm, r.stream));
  }
  const std::vector<float> gathered = {1, 1, 1, 1, 2, 2, 2, 2};
  EXPECT_EQ(Read(ranks_[0]), gathered);
  EXPECT_EQ(Read(ranks_[1]), gathered);
  // Broadcast from rank 1.
  Fill(ranks_[1], 7.0f);
  for (int i = 0; i < 2; ++i) {
    Rank& r = ranks_[i];
    cudaSetDevice(r.device);
    EXPECT_ISSUED(r, ncclBroadcast(r.buffer, r.buffer, 1, ncclFloat32, 1, r.comm, r.stream));
  }
  EXPECT_EQ(Read(ranks_[0])[0], 7.0f);
  EXPECT_EQ(Read(ranks_[0])[1], 1.0f) << "beyond the count";
  // bf16: 256 + 1 rounds to 256 (8 significant bits), so 256 + 1 + 1 in rank order is 256.
  Join(3);
  const float values[3] = {256, 1, 1};
  for (int i = 0; i < 3; ++i) {
    const Rank& r = ranks_[2 + i];
    cudaSetDevice(r.device);
    const __nv_bfloat16 h = __float2bfloat16_rn(values[i]);
    ASSERT_EQ(cudaMemcpy(r.buffer, &h, sizeof(h), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_ISSUED(r, ncclAllReduce(r.buffer, r.buffer, 1, ncclBfloat16, ncclSum, r.comm, r.stream));
  }
  __nv_bfloat16 sum;
  ASSERT_EQ(cudaMemcpy(&sum, ranks_[4].buffer, sizeof(sum), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(__bfloat162float(sum), 256.0f);
}

TEST_F(FakeNcclTest, RanksIssuingDifferentCollectivesAreReportedToEveryRank) {
  Join(2);
  ASSERT_TRUE(Queued(AllReduce(ranks_[0], kCount)));
  EXPECT_EQ(AllReduce(ranks_[1], kCount / 2), ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("collective #0"));
  for (const Rank& r : ranks_) EXPECT_EQ(Settle(r), ncclInvalidUsage);
}

TEST_F(FakeNcclTest, SendsAndReceivesMatchInOrderAndByteCount) {
  Join(2);
  Fill(ranks_[0], 5.0f);
  Fill(ranks_[1], 0.0f);
  cudaSetDevice(0);
  EXPECT_ISSUED(ranks_[0],
                ncclSend(ranks_[0].buffer, 2, ncclFloat32, 1, ranks_[0].comm, ranks_[0].stream));
  cudaSetDevice(1);
  EXPECT_ISSUED(ranks_[1],
                ncclRecv(ranks_[1].buffer, 2, ncclFloat32, 0, ranks_[1].comm, ranks_[1].stream));
  EXPECT_EQ(Read(ranks_[1])[1], 5.0f);
  EXPECT_EQ(Read(ranks_[1])[2], 0.0f);
  cudaSetDevice(0);
  EXPECT_ISSUED(ranks_[0],
                ncclSend(ranks_[0].buffer, 2, ncclFloat32, 1, ranks_[0].comm, ranks_[0].stream));
  cudaSetDevice(1);
  EXPECT_EQ(ncclRecv(ranks_[1].buffer, 3, ncclFloat32, 0, ranks_[1].comm, ranks_[1].stream),
            ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("8 bytes sent, 12 received"));
}

TEST_F(FakeNcclTest, APeerThatLeftIsARemoteErrorForRanksWithQueuedWork) {
  Join(2);
  ASSERT_TRUE(Queued(AllReduce(ranks_[0])));  // the remote error outranks the in-progress poll
  cudaSetDevice(1);
  ASSERT_EQ(ncclCommAbort(ranks_[1].comm), ncclSuccess);
  ranks_[1].comm = nullptr;
  EXPECT_EQ(Settle(ranks_[0]), ncclRemoteError);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("rank 1 aborted"));
  // Its stream holds the operation until rank 0 aborts too, which ends it.
  cudaSetDevice(0);
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(done, ranks_[0].stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);
  ASSERT_EQ(ncclCommAbort(ranks_[0].comm), ncclSuccess);
  ranks_[0].comm = nullptr;
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
  cudaEventDestroy(done);
}

TEST_F(FakeNcclTest, IssuingBehindUnfinishedWorkOnTheStreamIsReported) {
  Join(2);
  EXPECT_ISSUED(ranks_[0], AllReduce(ranks_[0]));
  EXPECT_EQ(AllReduce(ranks_[0]), ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("still held unfinished NCCL work"));
}

TEST_F(FakeNcclTest, ACallBeforeTheInProgressPollIsMisuse) {
  Join(2);
  // Every other call answers ncclInProgress: one of two consecutive calls does.
  ncclResult_t r = AllReduce(ranks_[0], 1);
  if (r == ncclSuccess) {
    EXPECT_ISSUED(ranks_[1], AllReduce(ranks_[1], 1));
    r = AllReduce(ranks_[0], 1);
  }
  ASSERT_EQ(r, ncclInProgress);
  cudaSetDevice(0);
  EXPECT_EQ(ncclCommFinalize(ranks_[0].comm), ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("still in progress"));
}

TEST_F(FakeNcclTest, AGroupedExchangeCompletesWithoutOrderingItsOwnOperations) {
  Join(2);
  Fill(ranks_[0], 1.0f);
  Fill(ranks_[1], 2.0f);
  // Each rank sends its first half and receives into its second, on one stream, in one group.
  for (int i = 0; i < 2; ++i) {
    Rank& r = ranks_[i];
    cudaSetDevice(r.device);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(r.buffer, kCount / 2, ncclFloat32, 1 - i, r.comm, r.stream), ncclSuccess);
    ASSERT_EQ(ncclRecv(r.buffer + kCount / 2, kCount / 2, ncclFloat32, 1 - i, r.comm, r.stream),
              ncclSuccess);
    EXPECT_ISSUED(r, ncclGroupEnd());
  }
  EXPECT_EQ(Read(ranks_[0]), (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(Read(ranks_[1]), (std::vector<float>{2, 2, 2, 2, 1, 1, 1, 1}));
}

TEST_F(FakeNcclTest, PendingWorkHoldsDestroyedStreamsAndStreamOrderedFrees) {
  Join(2);
  cudaSetDevice(0);
  void* scratch = nullptr;
  ASSERT_EQ(cudaMalloc(&scratch, 64), cudaSuccess);
  EXPECT_ISSUED(ranks_[0], AllReduce(ranks_[0]));
  cudaSetDevice(0);
  ASSERT_EQ(cudaFreeAsync(scratch, ranks_[0].stream), cudaSuccess);  // does not wait
  EXPECT_TRUE(emu::IsDeviceRange(scratch, 64, 0)) << "freed before the stream's work completed";
  ASSERT_EQ(cudaStreamDestroy(ranks_[0].stream), cudaSuccess);
  ranks_[0].stream = nullptr;
  EXPECT_TRUE(emu::DeviceHasPendingWork(0)) << "cudaFree would not wait for the destroyed stream";
  EXPECT_ISSUED(ranks_[1], AllReduce(ranks_[1]));
  EXPECT_FALSE(emu::DeviceHasPendingWork(0));
  EXPECT_FALSE(emu::IsDeviceRange(scratch, 1, 0)) << "not freed once the work completed";
}

TEST(FakeStreamsTest, EventsWithoutTimingHaveNoElapsedTime) {
  cudaEvent_t timed = nullptr, untimed = nullptr;
  ASSERT_EQ(cudaEventCreate(&timed), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(timed, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed, nullptr), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, timed, timed), cudaSuccess);
  EXPECT_EQ(ms, 0.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, timed, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  cudaEventDestroy(timed);
  cudaEventDestroy(untimed);
}

TEST_F(FakeNcclTest, FinalizeWaitsForEveryRank) {
  Join(2);
  cudaSetDevice(0);
  EXPECT_EQ(ncclCommFinalize(ranks_[0].comm), ncclInProgress);
  EXPECT_EQ(Settle(ranks_[0]), ncclInProgress) << "rank 1 has not finalized";
  cudaSetDevice(1);
  EXPECT_EQ(ncclCommFinalize(ranks_[1].comm), ncclInProgress);
  for (Rank& r : ranks_) {
    EXPECT_EQ(Settle(r), ncclSuccess);
    cudaSetDevice(r.device);
    EXPECT_EQ(ncclCommDestroy(r.comm), ncclSuccess);
    r.comm = nullptr;
  }
}

TEST_F(FakeNcclTest, BlockingCommunicatorsTwoRanksOnOneGpuAndStrayBuffersAreRefused) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(ncclCommInitRankConfig(&a, 2, id, 0, &config), ncclInvalidArgument)
      << "blocking communicators are not emulated";
  config.blocking = 0;
  ASSERT_TRUE(Queued(ncclCommInitRankConfig(&a, 2, id, 0, &config)));
  EXPECT_EQ(ncclCommInitRankConfig(&b, 2, id, 1, &config), ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("Duplicate GPU"));
  ncclCommAbort(a);

  Join(2);
  float host[kCount] = {};
  cudaSetDevice(0);
  EXPECT_EQ(
      ncclAllReduce(host, host, kCount, ncclFloat32, ncclSum, ranks_[0].comm, ranks_[0].stream),
      ncclInvalidArgument);
  // Device memory of another GPU is refused too.
  EXPECT_EQ(ncclAllReduce(ranks_[1].buffer, ranks_[1].buffer, kCount, ncclFloat32, ncclSum,
                          ranks_[0].comm, ranks_[0].stream),
            ncclInvalidArgument);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("not device memory of CUDA device 0"));
  // Nor may a buffer run past its allocation.
  EXPECT_EQ(ncclAllReduce(ranks_[0].buffer, ranks_[0].buffer, kCount + 1, ncclFloat32, ncclSum,
                          ranks_[0].comm, ranks_[0].stream),
            ncclInvalidArgument);
  EXPECT_THAT(ncclGetLastError(nullptr), HasSubstr("36 bytes"));
}

TEST(FakeCublasTest, NullHandlesAreNotInitialized) {
  const float one = 1;
  float* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, sizeof(float)), cudaSuccess);
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasSetMathMode(nullptr, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(nullptr, CUBLASLT_MATMUL_DESC_TRANSA, &one, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(
      cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, x, CUDA_R_32F, 1, x,
                   CUDA_R_32F, 1, &one, x, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasLtMatmul(nullptr, nullptr, &one, x, nullptr, x, nullptr, &one, x, nullptr, x,
                           nullptr, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cudaFree(x), cudaSuccess);
}

TEST(FakeCudaRuntimeTest, PointerKindsAndForeignFrees) {
  cudaGetLastError();  // what earlier tests on this thread left
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* device = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 64), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 64), cudaSuccess);
  int pageable = 0;
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, static_cast<char*>(device) + 63), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 1);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, pinned), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, &pageable), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaFree(&pageable), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaErrorInvalidValue) << "freed twice";
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(99), cudaErrorInvalidDevice);
  cudaGetLastError();
  cudaSetDevice(0);
}

// A "kernel" on `stream` that writes `value` to `*data`, deferred as kernels are.
cudaError_t WriteLater(cudaStream_t stream, float* data, float value) {
  return emu::Defer(
      stream,
      [data, value] {
        *data = value;
        return cudaSuccess;
      },
      "a test kernel");
}

// Deferred work on created streams runs only when something orders itself after it.
TEST(FakeStreamsTest, DeferredWorkRunsOnlyForWhatIsOrderedAfterIt) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t producer = nullptr, consumer = nullptr, blocking = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault), cudaSuccess);
  float* data = nullptr;
  ASSERT_EQ(cudaMalloc(&data, sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(data, 0, sizeof(float)), cudaSuccess);
  // A "kernel" on the producer: not run by a copy on the legacy default stream, with which a
  // non-blocking stream does not synchronize.
  ASSERT_EQ(WriteLater(producer, data, 1.0f), cudaSuccess);
  float seen = -1;
  ASSERT_EQ(cudaMemcpy(&seen, data, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, 0.0f) << "a copy not ordered after the kernel saw its write";
  // Ordered through an event: the consumer's copy runs after it.
  cudaEvent_t written = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&written, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(written, producer), cudaSuccess);
  ASSERT_EQ(WriteLater(producer, data, 2.0f), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(consumer, written, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&seen, data, sizeof(float), cudaMemcpyDeviceToHost, consumer),
            cudaSuccess);
  EXPECT_EQ(seen, 1.0f) << "the copy ran before the kernel it waits for, or after a later one";
  ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&seen, data, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, 2.0f);
  // A blocking stream's deferred work runs before the legacy default stream's copy.
  ASSERT_EQ(WriteLater(blocking, data, 3.0f), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&seen, data, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, 3.0f);
  // Destroying a stream runs what it deferred; cudaFree runs the device's.
  ASSERT_EQ(WriteLater(producer, data, 4.0f), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(producer), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&seen, data, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, 4.0f);
  ASSERT_EQ(WriteLater(consumer, data, 5.0f), cudaSuccess);
  EXPECT_TRUE(emu::DeviceHasPendingWork(0));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_FALSE(emu::DeviceHasPendingWork(0));
  EXPECT_EQ(cudaFree(data), cudaSuccess);
  cudaEventDestroy(written);
  cudaStreamDestroy(consumer);
  cudaStreamDestroy(blocking);
}

// Streams waiting on each other's events, on their own, and an event recorded right after a
// wait: each runs what it must, in order, without recursing forever.
TEST(FakeStreamsTest, WaitsOnEachOtherAndOnThemselves) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int> order;
  auto step = [&order](int id) {
    return [&order, id] {
      order.push_back(id);
      return cudaSuccess;
    };
  };
  cudaEvent_t ea = nullptr, eb = nullptr, after_wait = nullptr;
  for (cudaEvent_t* e : {&ea, &eb, &after_wait}) ASSERT_EQ(cudaEventCreate(e), cudaSuccess);
  ASSERT_EQ(emu::Defer(a, step(1), "a1"), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ea, a), cudaSuccess);
  ASSERT_EQ(emu::Defer(b, step(2), "b1"), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(eb, b), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(a, eb, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, ea, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(a, ea, 0), cudaSuccess);  // itself: already ordered
  ASSERT_EQ(cudaEventRecord(after_wait, a), cudaSuccess);
  ASSERT_EQ(emu::Defer(a, step(3), "a2"), cudaSuccess);
  ASSERT_EQ(emu::Defer(b, step(4), "b2"), cudaSuccess);
  EXPECT_TRUE(order.empty());
  // Recorded right after A's wait for b1: it runs b1 too, and nothing queued after it.
  ASSERT_EQ(cudaEventSynchronize(after_wait), cudaSuccess);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4}));
  for (cudaEvent_t e : {ea, eb, after_wait}) cudaEventDestroy(e);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

}  // namespace
