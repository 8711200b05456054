// The elementwise CUDA kernels (gelu.cu, elementwise.cu, adamw.cu) run on the CPU (emulated:
// emu/cuda_emu.h) against their CPU references, in fp32 and bf16, with the threads of every
// block run in both orders. The same cases and tolerances as their GPU parity tests
// (*_cuda_test.cc), which need a GPU; the emulator's math is the host's, so the GPU tests
// remain the word on rounding.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/adamw_launch.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/elementwise.h"
#include "trainer/kernels/elementwise_launch.h"
#include "trainer/kernels/emulated_test_util.h"
#include "trainer/kernels/gelu.h"
#include "trainer/kernels/gelu_launch.h"

namespace ringmaster::kernels {
namespace {

using testing::ElementTypes;
using testing::ExpectClose;
using testing::Floats;
using testing::kOrders;
using testing::RoundTo;
using testing::ThreadOrder;
using testing::To;
using testing::Uniform;

template <typename T>
class EmulatedElementwiseTest : public ::testing::Test {};
TYPED_TEST_SUITE(EmulatedElementwiseTest, ElementTypes);

// 0 (no launch), below, at and above one block; several blocks.
const int64_t kSizes[] = {0, 1, 255, 256, 257, 100003};

TYPED_TEST(EmulatedElementwiseTest, GeluForwardAndBackwardMatchCpu) {
  using T = TypeParam;
  // gelu_cuda_test.cc's tolerances: the host's tanhf and the CPU's TanhFast differ by an ulp or
  // two, which 1 - tanh^2 magnifies near |tanh| = 1.
  const double atol = sizeof(T) == 2 ? 2e-5 : 1e-5, rtol = sizeof(T) == 2 ? 4e-3 : 1e-5;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " order " << static_cast<int>(order));
      const std::vector<float> in = RoundTo<T>(Uniform(n, -6, 6, n + 1));
      const std::vector<float> dout = RoundTo<T>(Uniform(n, -6, 6, n + 2));
      std::vector<float> din = RoundTo<T>(Uniform(n, -6, 6, n + 3));
      std::vector<T> x = To<T>(in), dy = To<T>(dout), y(n), dx = To<T>(din);

      std::vector<float> out(n);
      GeluForwardCpu(out.data(), in.data(), n);
      ASSERT_LAUNCHED(LaunchGeluForward(y.data(), x.data(), n, nullptr));
      ExpectClose(Floats(y), out, atol, rtol, "forward");
      for (bool accumulate : {true, false}) {
        GeluBackwardCpu(din.data(), in.data(), dout.data(), n, accumulate);
        ASSERT_LAUNCHED(LaunchGeluBackward(dx.data(), x.data(), dy.data(), n, accumulate, nullptr));
        ExpectClose(Floats(dx), din, atol, rtol, accumulate ? "accumulate" : "overwrite");
      }
    }
  }
}

// More elements than the grid's cap of 65535 blocks of 256 threads: the grid-stride loop goes
// round a second time (once, in fp32: 17 million emulated threads).
TEST(EmulatedGridStrideTest, GeluCoversElementsBeyondOneGrid) {
  const int64_t n = 65535LL * 256 + 4097;
  const std::vector<float> in = Uniform(n, -6, 6, 5);
  std::vector<float> out(n, NAN), want(n);
  GeluForwardCpu(want.data(), in.data(), n);
  ASSERT_LAUNCHED(LaunchGeluForward(out.data(), in.data(), n, nullptr));
  ExpectClose(out, want, 1e-5, 1e-5, "forward");
}

TYPED_TEST(EmulatedElementwiseTest, AddScaleAndBiasMatchCpuExactly) {
  using T = TypeParam;
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " order " << static_cast<int>(order));
      const std::vector<float> a = RoundTo<T>(Uniform(n, -3, 3, 1));
      const std::vector<float> b = RoundTo<T>(Uniform(n, -3, 3, 2));
      std::vector<float> sum(n);
      AddCpu(sum.data(), a.data(), b.data(), n);
      std::vector<T> ta = To<T>(a), tb = To<T>(b), out(n);
      ASSERT_LAUNCHED(LaunchAdd(out.data(), ta.data(), tb.data(), n, nullptr));
      EXPECT_EQ(Floats(out), RoundTo<T>(sum));
      ASSERT_LAUNCHED(LaunchAdd(ta.data(), ta.data(), tb.data(), n, nullptr));  // out = a
      EXPECT_EQ(Floats(ta), RoundTo<T>(sum));
      std::vector<float> scaled = b;
      ScaleCpu(scaled.data(), -0.37f, n);
      ASSERT_LAUNCHED(LaunchScale(tb.data(), -0.37f, n, nullptr));
      EXPECT_EQ(Floats(tb), RoundTo<T>(scaled));
    }
    for (auto [rows, cols] : {std::pair{1, 1}, {3, 7}, {64, 768}, {1000, 1}}) {
      const std::vector<float> out = RoundTo<T>(Uniform(int64_t{rows} * cols, -3, 3, rows));
      const std::vector<float> bias = RoundTo<T>(Uniform(cols, -1, 1, cols));
      std::vector<float> want = out;
      AddBiasCpu(want.data(), bias.data(), rows, cols);
      std::vector<T> got = To<T>(out), tbias = To<T>(bias);
      ASSERT_LAUNCHED(LaunchAddBias(got.data(), tbias.data(), rows, cols, nullptr));
      EXPECT_EQ(Floats(got), RoundTo<T>(want)) << rows << "x" << cols;
    }
  }
}

TEST(EmulatedConvertTest, RoundsToNearestEvenBothWays) {
  std::vector<float> in = Uniform(100000, -1e5f, 1e5f, 9);
  for (float x : {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -(1.0f + 3.0f / 256)}) {
    in.push_back(x);
  }
  const int64_t n = in.size();
  std::vector<__nv_bfloat16> bf16(n);
  std::vector<float> back(n);
  ASSERT_LAUNCHED(LaunchConvert(bf16.data(), in.data(), n, nullptr));
  ASSERT_LAUNCHED(LaunchConvert(back.data(), bf16.data(), n, nullptr));
  EXPECT_EQ(back, RoundTo<__nv_bfloat16>(in));
}

enum class Mode { kF32Aliased, kF32Separate, kBF16 };

// adamw_cuda_test.cc's steps: the host computes the bias corrections as AdamWCuda does.
void RunAdamWSteps(Mode mode, int64_t n, float weight_decay, float grad_scale) {
  SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << " n=" << n
                                    << " wd=" << weight_decay << " scale=" << grad_scale);
  const bool bf16 = mode == Mode::kBF16;
  std::vector<float> master = Uniform(n, -1, 1, 1), m(n, 0.0f), v(n, 0.0f);
  std::vector<float> e_master = master, e_m(n, 0.0f), e_v(n, 0.0f), e_working(n, 0.0f);
  std::vector<__nv_bfloat16> e_working_bf16 = To<__nv_bfloat16>(master);
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> grad = Uniform(n, -0.1f, 0.1f, 10 + t);
    if (bf16) grad = RoundTo<__nv_bfloat16>(grad);
    AdamWParams p{1e-2f, 0.9f, 0.95f, 1e-8f, weight_decay, 0, 0, grad_scale};
    p.c1 = 1.0f / (1.0f - static_cast<float>(std::pow(p.beta1, static_cast<double>(t))));
    p.c2 = 1.0f / (1.0f - static_cast<float>(std::pow(p.beta2, static_cast<double>(t))));
    AdamWCpu(master.data(), grad.data(), m.data(), v.data(), n, p.lr, p.beta1, p.beta2, p.epsilon,
             p.weight_decay, t, p.grad_scale);
    if (bf16) {
      const std::vector<__nv_bfloat16> g = To<__nv_bfloat16>(grad);
      ASSERT_LAUNCHED(LaunchAdamW(e_master.data(), e_working_bf16.data(), g.data(), e_m.data(),
                                  e_v.data(), n, p, nullptr));
    } else {
      ASSERT_LAUNCHED(LaunchAdamW(e_master.data(),
                                  mode == Mode::kF32Separate ? e_working.data() : nullptr,
                                  grad.data(), e_m.data(), e_v.data(), n, p, nullptr));
    }
    ExpectClose(e_master, master, 1e-7, 1e-5, "master");
    ExpectClose(e_m, m, 1e-7, 1e-5, "m");
    ExpectClose(e_v, v, 1e-9, 1e-5, "v");
    if (bf16) {
      EXPECT_EQ(Floats(e_working_bf16), RoundTo<__nv_bfloat16>(e_master)) << "master rounded";
    } else if (mode == Mode::kF32Separate) {
      EXPECT_EQ(e_working, e_master);
    }
  }
}

TEST(EmulatedAdamWTest, MatchesCpuOverSteps) {
  for (emu::Order order : kOrders) {
    ThreadOrder scope(order);
    for (Mode mode : {Mode::kF32Aliased, Mode::kF32Separate, Mode::kBF16}) {
      for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{70001}}) RunAdamWSteps(mode, n, 0, 1);
      RunAdamWSteps(mode, 4097, 0.1f, 0.5f);
    }
  }
}

}  // namespace
}  // namespace ringmaster::kernels
