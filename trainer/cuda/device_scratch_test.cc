// DeviceScratch: sizes on CPU; on a GPU (skipped without one), growth while work queued on the
// stream still uses the old allocation: Get does not wait for it, and that work still reads and
// writes the old memory intact (the free is ordered after it).
#include "trainer/cuda/device_scratch.h"

#include <cuda_runtime.h>

#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "trainer/kernels/cuda_test_util.h"

namespace ringmaster::trainer {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(DeviceScratchTest, RoundsUpToWholeMebibytes) {
  EXPECT_EQ(DeviceScratch::RoundedSize(0), kMiB);
  EXPECT_EQ(DeviceScratch::RoundedSize(1), kMiB);
  EXPECT_EQ(DeviceScratch::RoundedSize(kMiB), kMiB);
  EXPECT_EQ(DeviceScratch::RoundedSize(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(DeviceScratch::RoundedSize(5 * kMiB - 3), 5 * kMiB);
}

// Blocks the stream it is queued on until `release` is notified (at most a minute, so that a
// Get that waited for the stream fails the test instead of hanging it).
struct StreamGate {
  absl::Notification release;
  bool released_in_time = false;
  static void CUDART_CB Hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    gate->released_in_time = gate->release.WaitForNotificationWithTimeout(absl::Seconds(60));
  }
};

TEST(DeviceScratchTest, GrowsInStreamOrderWithoutWaitingAndReusesWhatFits) {
  RM_SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  unsigned char* host = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, kMiB), cudaSuccess);
  {
    DeviceScratch scratch(0);
    absl::StatusOr<void*> small = scratch.Get(100, stream);
    ASSERT_TRUE(small.ok()) << small.status();
    EXPECT_EQ(scratch.capacity(), kMiB);
    absl::StatusOr<void*> again = scratch.Get(kMiB, stream);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *small) << "a request that fits reuses the allocation";

    // Work on the old allocation, held in the queue while the scratch grows: fill it, copy it
    // out. Growing must neither wait for it (the gate is released only after Get returns) nor
    // free the memory under it.
    StreamGate gate;
    ASSERT_EQ(cudaLaunchHostFunc(stream, &StreamGate::Hold, &gate), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(*small, 0x5a, kMiB, stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(host, *small, kMiB, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    absl::StatusOr<void*> big = scratch.Get(3 * kMiB + 1, stream);
    gate.release.Notify();
    ASSERT_TRUE(big.ok()) << big.status();
    EXPECT_EQ(scratch.capacity(), 4 * kMiB);
    ASSERT_EQ(cudaMemsetAsync(*big, 0x11, 4 * kMiB, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_TRUE(gate.released_in_time) << "Get waited for the stream's queued work";
    for (size_t i = 0; i < kMiB; i += 4099) {
      ASSERT_EQ(host[i], 0x5a) << "byte " << i << " of the old allocation";
    }
    std::vector<unsigned char> grown(4 * kMiB, 0);
    ASSERT_EQ(cudaMemcpy(grown.data(), *big, grown.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(grown.front(), 0x11);
    EXPECT_EQ(grown.back(), 0x11);
  }
  EXPECT_EQ(cudaFreeHost(host), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace ringmaster::trainer
