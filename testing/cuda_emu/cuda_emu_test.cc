// The emulator itself (cuda_emu.h): thread and block indices, barriers, warp shuffles,
// __syncwarp, tensor-core instructions (mma_emu.h), and what it must refuse or report: shapes a
// GPU would not launch, barriers some threads never reach, shuffles over exited lanes, misaligned
// ldmatrix rows, and a read of shared memory that lacks its barrier (caught by running the threads
// in both orders).
#include "testing/cuda_emu/cuda_emu.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cuda_emu/fake_streams.h"

namespace ringmaster::kernels {
namespace {

using ::testing::HasSubstr;

__global__ void WriteIndices(int* out) {
  const int block_threads = blockDim.x * blockDim.y;
  const int in_block = threadIdx.y * blockDim.x + threadIdx.x;
  const int block = blockIdx.y * gridDim.x + blockIdx.x;
  out[block * block_threads + in_block] = block * 1000 + in_block;
}

TEST(CudaEmuTest, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  const dim3 grid(3, 2), block(32, 4);
  std::vector<int> out(6 * 128, -1);
  emu::Launch(emu::MakeConfig(grid, block), [&] { WriteIndices(out.data()); });
  ASSERT_EQ(emu::GetLastError(), cudaSuccess) << emu::TakeFailures();
  for (int b = 0; b < 6; ++b) {
    for (int t = 0; t < 128; ++t) EXPECT_EQ(out[b * 128 + t], b * 1000 + t);
  }
}

// Reverses each block's values through shared memory, with or without the barrier between the
// writes and the reads.
__global__ void ReverseInBlock(int* data, bool barrier) {
  __shared__ int staged[256];
  const int i = threadIdx.x;
  staged[i] = data[blockIdx.x * blockDim.x + i];
  if (barrier) __syncthreads();
  data[blockIdx.x * blockDim.x + i] = staged[blockDim.x - 1 - i];
}

std::vector<int> Reversed(bool barrier, emu::Order order) {
  std::vector<int> data(2 * 256);
  for (int i = 0; i < 512; ++i) data[i] = i;
  emu::SetOrder(order);
  emu::Launch(emu::MakeConfig(2, 256), [&] { ReverseInBlock(data.data(), barrier); });
  emu::SetOrder(emu::Order::kAlternate);
  EXPECT_EQ(emu::GetLastError(), cudaSuccess) << emu::TakeFailures();
  return data;
}

TEST(CudaEmuTest, AMissingBarrierShowsInOneOfTheTwoOrders) {
  std::vector<int> want(512);
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 256; ++i) want[b * 256 + i] = b * 256 + 255 - i;
  }
  for (emu::Order order : {emu::Order::kForward, emu::Order::kReverse}) {
    EXPECT_EQ(Reversed(/*barrier=*/true, order), want);
  }
  EXPECT_TRUE(Reversed(false, emu::Order::kForward) != want ||
              Reversed(false, emu::Order::kReverse) != want);
  // By default two launches in a row from one launch site take the two orders, even with
  // other launches between them.
  std::vector<int> other(32);
  bool differs = false;
  for (int i = 0; i < 2; ++i) {
    differs |= Reversed(false, emu::Order::kAlternate) != want;
    emu::Launch(emu::MakeConfig(1, 32), [&] { WriteIndices(other.data()); });
  }
  EXPECT_TRUE(differs);
}

__global__ void CountAndShuffle(int* counts, float* sums) {
  const int n = __syncthreads_count(threadIdx.x % 3 == 0);
  float v = static_cast<float>(threadIdx.x);
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  counts[threadIdx.x] = n;
  sums[threadIdx.x] = v;
}

TEST(CudaEmuTest, SyncThreadsCountAndWarpShufflesSeeTheWholeBlockAndWarp) {
  std::vector<int> counts(96);
  std::vector<float> sums(96);
  emu::Launch(emu::MakeConfig(1, 96), [&] { CountAndShuffle(counts.data(), sums.data()); });
  ASSERT_EQ(emu::GetLastError(), cudaSuccess) << emu::TakeFailures();
  for (int t = 0; t < 96; ++t) {
    EXPECT_EQ(counts[t], 32);  // 0, 3, ..., 93
    const int warp = t / 32;
    EXPECT_EQ(sums[t], static_cast<float>(32 * 32 * warp + 31 * 32 / 2)) << t;
  }
}

TEST(CudaEmuTest, AFullMaskShuffleInAPartialWarpIsAFailure) {
  std::vector<int> counts(40);
  std::vector<float> sums(40);
  emu::Launch(emu::MakeConfig(1, 40), [&] { CountAndShuffle(counts.data(), sums.data()); });
  EXPECT_EQ(emu::GetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::TakeFailures(),
              HasSubstr("full-mask warp shuffle or __syncwarp in a warp of 8 live lanes"));
}

// Half of warp 0 waits at the block barrier while its other half waits in a shuffle.
__global__ void Deadlock(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  }
}

TEST(CudaEmuTest, ABarrierSomeThreadsNeverReachIsADeadlock) {
  std::vector<float> out(32);
  emu::Launch(emu::MakeConfig(1, 32), [&] { Deadlock(out.data()); });
  EXPECT_EQ(emu::GetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::TakeFailures(), HasSubstr("deadlock in block (0,0,0)"));
  // The next launch starts clean.
  std::vector<int> ok(32 * 1, -1);
  emu::Launch(emu::MakeConfig(1, 32), [&] { WriteIndices(ok.data()); });
  EXPECT_EQ(emu::GetLastError(), cudaSuccess);
}

// On a created stream the launch is deferred: its failure shows when the stream runs it, as a
// sticky error of the device (on a device of its own here, which stays failed).
TEST(CudaEmuTest, ADeferredKernelsFailureIsTheDevicesStickyError) {
  emu::SetCurrentDevice(emu::DeviceCount() - 1);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> out(32);
  float* data = out.data();
  emu::Launch(emu::MakeConfig(1, 32, 0, stream), [=] { Deadlock(data); });
  EXPECT_EQ(emu::GetLastError(), cudaSuccess) << "a launch error, not the kernel's";
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::TakeFailures(), HasSubstr("deadlock in block (0,0,0)"));
  emu::GetLastError();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorLaunchFailure) << "not sticky";
  emu::GetLastError();
  emu::SetCurrentDevice(0);
}

TEST(CudaEmuTest, ShapesAGpuRefusesAreInvalidConfigurations) {
  int unused = 0;
  const auto kernel = [&] { ++unused; };
  for (const emu::LaunchConfig& config :
       {emu::MakeConfig(1, 1025), emu::MakeConfig(dim3(1, 65536), 32),
        emu::MakeConfig(int64_t{1} << 31, 32), emu::MakeConfig(0, 32), emu::MakeConfig(-1, 32),
        emu::MakeConfig(dim3(0x80000000u), 32), emu::MakeConfig(1, dim3(1, 1, 65))}) {
    emu::Launch(config, kernel);
    EXPECT_EQ(emu::GetLastError(), cudaErrorInvalidConfiguration);
    EXPECT_THAT(emu::TakeFailures(), HasSubstr("invalid launch configuration"));
  }
  EXPECT_EQ(unused, 0);
  EXPECT_EQ(emu::GetLastError(), cudaSuccess);  // read once, then cleared
}

// d = a b + c over one m16n8k16 tile, with PTX's fragment layouts, twice: B read by ldmatrix
// from its transpose (rows n, leading dimension 24) and, transposed by ldmatrix, from B itself
// (rows k, 16). a is row-major with leading dimension 24, c and the two d row-major [16, 8].
__global__ void TileProduct(const __nv_bfloat16* a, const __nv_bfloat16* b_t,
                            const __nv_bfloat16* b, const float* c, float* d_from_b_t,
                            float* d_from_b) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  uint32_t fa[4], fb_t[4], fb[4];
  // Matrices: rows 0-7 and 8-15 of columns 0-7, then of columns 8-15.
  emu::LoadMatricesX4(fa, a + (lane % 16) * 24 + (lane / 16) * 8, /*transposed=*/false);
  // Matrix j % 2: k 8(j % 2) .. of the 8 columns (j = 2, 3 read the same again).
  emu::LoadMatricesX4(fb_t, b_t + (lane % 8) * 24 + (lane / 8 % 2) * 8, false);
  emu::LoadMatricesX4(fb, b + ((lane / 8 % 2) * 8 + lane % 8) * 16, /*transposed=*/true);
  float d1[4], d2[4];
  for (int i = 0; i < 4; ++i) d1[i] = d2[i] = c[(g + i / 2 * 8) * 8 + 2 * t + i % 2];
  emu::MmaM16N8K16(d1, fa, {fb_t[0], fb_t[1]});
  emu::MmaM16N8K16(d2, fa, {fb[0], fb[1]});
  for (int i = 0; i < 4; ++i) {
    d_from_b_t[(g + i / 2 * 8) * 8 + 2 * t + i % 2] = d1[i];
    d_from_b[(g + i / 2 * 8) * 8 + 2 * t + i % 2] = d2[i];
  }
}

TEST(CudaEmuTest, TensorCoreInstructionsFollowTheDocumentedLayouts) {
  alignas(16) __nv_bfloat16 a[16 * 24], b_t[8 * 24], b[16 * 16];
  float c[16 * 8], d_from_b_t[16 * 8], d_from_b[16 * 8];
  auto A = [](int m, int k) { return static_cast<float>((m * 3 + k * 5) % 7 - 3); };
  auto B = [](int k, int n) { return static_cast<float>((k * 2 + n * 3) % 5 - 2); };  // B^T differs
  auto Cv = [](int m, int n) { return static_cast<float>(m * 8 + n) / 4; };
  for (int m = 0; m < 16; ++m) {
    for (int k = 0; k < 16; ++k) a[m * 24 + k] = __float2bfloat16(A(m, k));
  }
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 8; ++n) {
      b_t[n * 24 + k] = __float2bfloat16(B(k, n));
      b[k * 16 + n] = __float2bfloat16(B(k, n));
    }
  }
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) c[m * 8 + n] = Cv(m, n);
  }
  emu::Launch(emu::MakeConfig(1, 32), [&] { TileProduct(a, b_t, b, c, d_from_b_t, d_from_b); });
  ASSERT_EQ(emu::GetLastError(), cudaSuccess) << emu::TakeFailures();
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      float want = Cv(m, n);
      for (int k = 0; k < 16; ++k) want += A(m, k) * B(k, n);  // small integers: exact
      EXPECT_EQ(d_from_b_t[m * 8 + n], want) << m << "," << n;
      EXPECT_EQ(d_from_b[m * 8 + n], want) << m << "," << n;
    }
  }
}

TEST(CudaEmuTest, LoadMatricesRefusesARowAddressAGpuWouldFaultOn) {
  alignas(16) __nv_bfloat16 rows[8 * 24 + 8] = {};
  emu::Launch(emu::MakeConfig(1, 32), [&] {
    uint32_t r[4];
    const int lane = static_cast<int>(threadIdx.x);
    // Lane 5's row starts one element (2 bytes) past a 16-byte boundary.
    emu::LoadMatricesX4(r, rows + (lane % 8) * 24 + (lane == 5 ? 1 : 0), false);
  });
  EXPECT_EQ(emu::GetLastError(), cudaErrorMisalignedAddress);
  EXPECT_THAT(emu::TakeFailures(), HasSubstr("ldmatrix: a row address not 16-byte aligned"));
}

TEST(CudaEmuTest, AsyncCopiesLandWhenTheirGroupIsWaitedFor) {
  alignas(16) unsigned char src[32], dst[32] = {};
  for (int i = 0; i < 32; ++i) src[i] = static_cast<unsigned char>(i + 1);
  std::vector<int> seen;  // dst[0] and dst[16] at each point
  emu::Launch(emu::MakeConfig(1, 1), [&] {
    emu::CopyAsync(dst, src, /*zeros=*/false);
    emu::CommitCopies();
    emu::CopyAsync(dst + 16, src + 16, false);
    emu::CommitCopies();
    seen.insert(seen.end(), {dst[0], dst[16]});  // both in flight
    emu::WaitCopies(1);                          // the older group lands
    seen.insert(seen.end(), {dst[0], dst[16]});
    emu::WaitCopies(0);
    seen.insert(seen.end(), {dst[0], dst[16]});
    emu::CopyAsync(dst, src, /*zeros=*/true);  // never waited for: lands when the thread ends
  });
  ASSERT_EQ(emu::GetLastError(), cudaSuccess) << emu::TakeFailures();
  EXPECT_EQ(seen, (std::vector<int>{0xff, 0xff, 1, 0xff, 1, 17}));
  EXPECT_EQ(dst[0], 0);
  EXPECT_EQ(dst[31], 32);
}

// Each lane publishes its index, then reads its neighbour's after __syncwarp.
__global__ void PassToNeighbour(int* out) {
  __shared__ int slots[64];
  slots[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncwarp();
  out[threadIdx.x] = slots[threadIdx.x ^ 1];
}

TEST(CudaEmuTest, SyncWarpOrdersTheWarpsLanesAndNeedsAFullWarp) {
  for (emu::Order order : {emu::Order::kForward, emu::Order::kReverse}) {
    std::vector<int> out(64, -1);
    emu::SetOrder(order);
    emu::Launch(emu::MakeConfig(1, 64), [&] { PassToNeighbour(out.data()); });
    emu::SetOrder(emu::Order::kAlternate);
    ASSERT_EQ(emu::GetLastError(), cudaSuccess) << emu::TakeFailures();
    for (int t = 0; t < 64; ++t) EXPECT_EQ(out[t], t ^ 1);
  }
  std::vector<int> out(40);
  emu::Launch(emu::MakeConfig(1, 40), [&] { PassToNeighbour(out.data()); });
  EXPECT_EQ(emu::GetLastError(), cudaErrorLaunchFailure);
  EXPECT_THAT(emu::TakeFailures(), HasSubstr("__syncwarp in a warp of 8 live lanes"));
}

}  // namespace
}  // namespace ringmaster::kernels
