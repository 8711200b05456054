// The startup choice, in both build configurations: built with CUDA (RINGMASTER_CUDA_BUILD) a
// named GPU is used or its absence is an error; built without, the CPU is always used.
#include "trainer/cuda/accelerator.h"

#include <map>

#include "gtest/gtest.h"

namespace ringmaster::trainer {
namespace {

std::function<std::optional<std::string>(const char*)> Env(
    std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(AcceleratorTest, NoGpuNamedMeansTheCpu) {
  for (auto env :
       {Env({}), Env({{"CUDA_VISIBLE_DEVICES", ""}}), Env({{"CUDA_VISIBLE_DEVICES", "-1"}})}) {
    absl::StatusOr<std::unique_ptr<Accelerator>> a = OpenAccelerator(env);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(*a, nullptr);
  }
}

TEST(AcceleratorTest, ANamedGpu) {
  absl::StatusOr<std::unique_ptr<Accelerator>> a =
      OpenAccelerator(Env({{"CUDA_VISIBLE_DEVICES", "0"}}));
#ifndef RINGMASTER_CUDA_BUILD
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, nullptr) << "a build without CUDA always uses the CPU";
#else
  // The test process sees the machine's GPUs whatever the variable says (the variable was not
  // applied to this process): without a GPU, the device cannot be opened.
  if (!a.ok()) {
    EXPECT_EQ(a.status().code(), absl::StatusCode::kUnavailable) << a.status();
    return;
  }
  ASSERT_NE(*a, nullptr);
  EXPECT_EQ((*a)->device()->name(), "cuda:0");
  EXPECT_EQ((*a)->device()->compute_dtype(), DType::kBF16);
  EXPECT_NE((*a)->description().find("sm_"), std::string::npos);
#endif
}

// Launched by hand with two GPUs visible, local rank 2 has none of its own: a configuration
// error before any GPU is touched (with CUDA), not a restart loop on NCCL's duplicate-GPU error.
TEST(AcceleratorTest, TooFewVisibleGpusForTheLocalRank) {
  absl::StatusOr<std::unique_ptr<Accelerator>> a =
      OpenAccelerator(Env({{"CUDA_VISIBLE_DEVICES", "0,1"}, {"LOCAL_RANK", "2"}}));
#ifndef RINGMASTER_CUDA_BUILD
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, nullptr);
#else
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << a.status();
  EXPECT_NE(a.status().message().find("LOCAL_RANK=2"), std::string::npos) << a.status();
#endif
}

}  // namespace
}  // namespace ringmaster::trainer
