#include "agent/devices.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

#ifdef RINGMASTER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ringmaster::agent {
namespace {

// Asked of the CUDA runtime directly, not through the code under test.
int VisibleGpus() {
#ifdef RINGMASTER_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
#else
  return 0;
#endif
}

TEST(ParseDevicesTest, CpuSlotsAreNumberedInDomainZero) {
  absl::StatusOr<std::vector<v1::Device>> devices = ParseDevices("cpu:3");
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const v1::Device& d = (*devices)[i];
    EXPECT_EQ(d.index(), i);
    EXPECT_EQ(d.kind(), "cpu");
    EXPECT_EQ(d.model(), "cpu-slot");
    EXPECT_EQ(d.memory_bytes(), 0);
    EXPECT_EQ(d.interconnect_domain(), 0);
    EXPECT_EQ(d.compute_capability(), "");
  }
}

TEST(ParseDevicesTest, AcceptsTheBoundsOfTheSlotCount) {
  absl::StatusOr<std::vector<v1::Device>> one = ParseDevices("cpu:1");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->size(), 1u);
  absl::StatusOr<std::vector<v1::Device>> most = ParseDevices("cpu:1024");
  ASSERT_TRUE(most.ok()) << most.status();
  ASSERT_EQ(most->size(), 1024u);
  EXPECT_EQ(most->back().index(), 1023);
}

struct BadFlag {
  std::string flag;
  std::string message;
};

class ParseDevicesErrorTest : public ::testing::TestWithParam<BadFlag> {};

TEST_P(ParseDevicesErrorTest, IsInvalidArgumentNamingTheFlag) {
  absl::StatusOr<std::vector<v1::Device>> devices = ParseDevices(GetParam().flag);
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(devices.status().message(), GetParam().message);
}

constexpr char kForms[] = "expected \"cpu:N\" (1 <= N <= 1024), \"gpu\" or \"auto\"";

INSTANTIATE_TEST_SUITE_P(
    Flags, ParseDevicesErrorTest,
    ::testing::Values(
        BadFlag{"cpu:0", "--devices: the N of \"cpu:N\" must be between 1 and 1024, got 0"},
        BadFlag{"cpu:2000", "--devices: the N of \"cpu:N\" must be between 1 and 1024, got 2000"},
        BadFlag{"cpu:99999999999999999999999",
                "--devices: the N of \"cpu:N\" must be between 1 and 1024, got "
                "99999999999999999999999"},
        BadFlag{"cpu:x", "--devices: the N of \"cpu:N\" must be a whole number, got \"x\""},
        BadFlag{"cpu:", "--devices: the N of \"cpu:N\" must be a whole number, got \"\""},
        BadFlag{"cpu:-2", "--devices: the N of \"cpu:N\" must be a whole number, got \"-2\""},
        BadFlag{"cpu: 2", "--devices: the N of \"cpu:N\" must be a whole number, got \" 2\""},
        BadFlag{"cpu:2.5", "--devices: the N of \"cpu:N\" must be a whole number, got \"2.5\""},
        BadFlag{"tpu:3", std::string("--devices: unknown value \"tpu:3\"; ") + kForms},
        BadFlag{"GPU", std::string("--devices: unknown value \"GPU\"; ") + kForms},
        BadFlag{"", std::string("--devices: is empty; ") + kForms}));

TEST(ParseDevicesTest, GpuNeedsAVisibleGpu) {
  absl::StatusOr<std::vector<v1::Device>> devices = ParseDevices("gpu");
  if (VisibleGpus() > 0) {
    ASSERT_TRUE(devices.ok()) << devices.status();
    EXPECT_EQ(devices->size(), DiscoverGpus().size());
    return;
  }
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(devices.status().message().find("--devices=gpu"), absl::string_view::npos)
      << devices.status();
}

TEST(ParseDevicesTest, AutoPicksGpusOrOneCpuSlot) {
  absl::StatusOr<std::vector<v1::Device>> devices = ParseDevices("auto");
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (VisibleGpus() > 0) {
    ASSERT_FALSE(devices->empty());
    EXPECT_EQ((*devices)[0].kind(), "gpu");
    return;
  }
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_EQ((*devices)[0].kind(), "cpu");
  EXPECT_EQ((*devices)[0].index(), 0);
  EXPECT_EQ((*devices)[0].interconnect_domain(), 0);
}

TEST(WorkerVisibleDeviceTest, IsTheOrdinalWhenTheAgentSeesEveryGpu) {
  EXPECT_EQ(WorkerVisibleDevice(0, nullptr), "0");
  EXPECT_EQ(WorkerVisibleDevice(3, nullptr), "3");
}

TEST(WorkerVisibleDeviceTest, MapsTheOrdinalThroughTheAgentsOwnList) {
  // An agent started with CUDA_VISIBLE_DEVICES=2,3 sees GPU 2 as ordinal 0.
  EXPECT_EQ(WorkerVisibleDevice(0, "2,3"), "2");
  EXPECT_EQ(WorkerVisibleDevice(1, "2,3"), "3");
  // The list's order, not the indices' order, numbers the ordinals.
  EXPECT_EQ(WorkerVisibleDevice(0, "5,1"), "5");
  // UUIDs (whole GPUs or MIG instances) pass through as given, surrounding spaces dropped.
  EXPECT_EQ(
      WorkerVisibleDevice(
          1, "GPU-8f6a1c2e-0b1d-4c3e-9f00-123456789abc, MIG-1f2e3d4c-aaaa-bbbb-cccc-0123456789ab"),
      "MIG-1f2e3d4c-aaaa-bbbb-cccc-0123456789ab");
}

TEST(WorkerVisibleDeviceTest, FallsBackToTheOrdinalWithoutAnEntry) {
  EXPECT_EQ(WorkerVisibleDevice(2, "0,1"), "2");
  EXPECT_EQ(WorkerVisibleDevice(0, ""), "0");
  EXPECT_EQ(WorkerVisibleDevice(1, "4,,6"), "1");
}

TEST(DiscoverGpusTest, EmptyWithoutAGpu) {
  if (VisibleGpus() > 0) GTEST_SKIP() << "a GPU is visible";
  EXPECT_TRUE(DiscoverGpus().empty());
  // A second call after the first failed query still answers cleanly.
  EXPECT_TRUE(DiscoverGpus().empty());
}

#ifdef RINGMASTER_WITH_CUDA
TEST(DiscoverGpusTest, DescribesEveryGpuAndGroupsPeersIntoDomains) {
  const int count = VisibleGpus();
  if (count == 0) GTEST_SKIP() << "no CUDA device visible";
  std::vector<v1::Device> gpus = DiscoverGpus();
  ASSERT_EQ(static_cast<int>(gpus.size()), count);
  int next_new_domain = 0;
  for (int i = 0; i < count; ++i) {
    const v1::Device& d = gpus[i];
    cudaDeviceProp prop;
    ASSERT_EQ(cudaGetDeviceProperties(&prop, i), cudaSuccess);
    EXPECT_EQ(d.index(), i);
    EXPECT_EQ(d.kind(), "gpu");
    EXPECT_EQ(d.model(), prop.name);
    EXPECT_EQ(d.memory_bytes(), static_cast<int64_t>(prop.totalGlobalMem));
    EXPECT_EQ(d.compute_capability(),
              std::to_string(prop.major) + "." + std::to_string(prop.minor));
    // Domains are numbered in order of their lowest ordinal: a device opens at most the next one.
    EXPECT_LE(d.interconnect_domain(), next_new_domain) << "GPU " << i;
    if (d.interconnect_domain() == next_new_domain) ++next_new_domain;
    for (int j = 0; j < i; ++j) {
      int ij = 0;
      int ji = 0;
      if (cudaDeviceCanAccessPeer(&ij, i, j) == cudaSuccess &&
          cudaDeviceCanAccessPeer(&ji, j, i) == cudaSuccess && ij && ji) {
        EXPECT_EQ(d.interconnect_domain(), gpus[j].interconnect_domain())
            << "GPUs " << j << " and " << i << " are peers";
      }
    }
  }
}
#endif

}  // namespace
}  // namespace ringmaster::agent
