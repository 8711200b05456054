// The CUDA device's Device contract: creation without a GPU (runs everywhere), memory, copies,
// conversions, reductions, GEMMs and the error contract (skipped without a GPU).
#include "trainer/cuda/cuda_device.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/kernels/adamw.h"
#include "trainer/kernels/bf16.h"
#include "trainer/kernels/cuda_test_util.h"
#include "trainer/kernels/gemm_test_util.h"
#include "trainer/kernels/reduce.h"

namespace ringmaster::trainer {
namespace {

using kernels::testing::Uniform;

TEST(CudaDeviceCreationTest, AnAbsentDeviceIsUnavailable) {
  // Without a GPU (this machine, CI, laptops) every index is absent; with one, the index after
  // the last visible device is.
  const int visible = VisibleCudaDevices();
  EXPECT_GE(visible, 0);
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = MakeCudaDevice(visible);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kUnavailable) << device.status();
  EXPECT_EQ(MakeCudaDevice(-1).status().code(), absl::StatusCode::kUnavailable);
}

TEST(CudaDeviceCreationTest, ComputesInBf16OrF32Only) {
  CudaDeviceOptions options;
  options.compute_dtype = DType::kI32;
  EXPECT_EQ(MakeCudaDevice(0, options).status().code(), absl::StatusCode::kInvalidArgument);
}

class CudaDeviceTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    RM_SKIP_WITHOUT_GPU();
    CudaDeviceOptions options;
    options.compute_dtype = GetParam();
    absl::StatusOr<std::unique_ptr<CudaDevice>> d = MakeCudaDevice(0, options);
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = std::move(*d);
  }
  // Host floats of a device tensor of either float type.
  std::vector<float> Read(Tensor t) {
    std::vector<float> out(t.size);
    if (t.dtype == DType::kF32) {
      EXPECT_TRUE(device_->CopyToHost(out.data(), t).ok());
      return out;
    }
    std::vector<uint16_t> bits(t.size);
    EXPECT_TRUE(device_->CopyToHost(bits.data(), t).ok());
    kernels::Bf16ToFloatCpu(out.data(), bits.data(), t.size);
    return out;
  }
  void Write(Tensor t, const std::vector<float>& values) {
    if (t.dtype == DType::kF32) {
      ASSERT_TRUE(device_->CopyToDevice(t, values.data()).ok());
      return;
    }
    std::vector<uint16_t> bits(t.size);
    kernels::FloatToBf16Cpu(bits.data(), values.data(), t.size);
    ASSERT_TRUE(device_->CopyToDevice(t, bits.data()).ok());
  }
  std::unique_ptr<CudaDevice> device_;
};

TEST_P(CudaDeviceTest, DescribesItself) {
  EXPECT_EQ(device_->name(), "cuda:0");
  EXPECT_EQ(device_->compute_dtype(), GetParam());
  EXPECT_NE(device_->description().find("sm_"), std::string::npos) << device_->description();
  EXPECT_NE(device_->stream(), nullptr);
}

TEST_P(CudaDeviceTest, AllocationsAreZeroedCountedAndReleased) {
  const int64_t before = device_->allocated_bytes();
  {
    absl::StatusOr<DeviceBuffer> f = device_->Allocate(1000, DType::kF32);
    absl::StatusOr<DeviceBuffer> b = device_->Allocate(1001, DType::kBF16);
    absl::StatusOr<DeviceBuffer> i = device_->Allocate(3, DType::kI32);
    ASSERT_TRUE(f.ok() && b.ok() && i.ok());
    EXPECT_EQ(device_->allocated_bytes(), before + 4000 + 2002 + 12);
    EXPECT_GE(device_->peak_allocated_bytes(), device_->allocated_bytes());
    EXPECT_EQ(Read(f->tensor()), std::vector<float>(1000, 0.0f));
    EXPECT_EQ(Read(b->tensor()), std::vector<float>(1001, 0.0f));
    std::vector<int32_t> ints = {7, 7, 7};
    ASSERT_TRUE(device_->CopyToHost(ints.data(), i->tensor()).ok());
    EXPECT_EQ(ints, std::vector<int32_t>(3, 0));
  }
  EXPECT_EQ(device_->allocated_bytes(), before);
  // Far more than any GPU has.
  EXPECT_EQ(device_->Allocate(int64_t{1} << 50, DType::kF32).status().code(),
            absl::StatusCode::kResourceExhausted);
  // That failure was answered; it must not be reported again by the next kernel launched on
  // this thread (the runtime's last error is per thread and stays set until read).
  absl::StatusOr<DeviceBuffer> x = device_->Allocate(1000, DType::kF32);
  ASSERT_TRUE(x.ok());
  Write(x->tensor(), std::vector<float>(1000, 2.0f));
  device_->Scale(x->tensor(), 0.5f);
  EXPECT_TRUE(device_->Synchronize().ok());
  EXPECT_EQ(Read(x->tensor()), std::vector<float>(1000, 1.0f));
}

TEST_P(CudaDeviceTest, CopiesConvertsZeroesScalesAndSums) {
  const int64_t n = 100003;
  const std::vector<float> values = Uniform(n, -3, 3, 5);
  absl::StatusOr<DeviceBuffer> f = device_->Allocate(n, DType::kF32);
  absl::StatusOr<DeviceBuffer> b = device_->Allocate(n, DType::kBF16);
  absl::StatusOr<DeviceBuffer> f2 = device_->Allocate(n, DType::kF32);
  ASSERT_TRUE(f.ok() && b.ok() && f2.ok());
  Write(f->tensor(), values);
  EXPECT_EQ(Read(f->tensor()), values);
  // f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact.
  device_->Convert(b->tensor(), f->tensor());
  device_->Convert(f2->tensor(), b->tensor());
  std::vector<float> rounded(n);
  for (int64_t i = 0; i < n; ++i) rounded[i] = kernels::RoundToBf16(values[i]);
  EXPECT_EQ(Read(f2->tensor()), rounded);
  // Same-type conversion is a copy.
  device_->Convert(f2->tensor(), f->tensor());
  EXPECT_EQ(Read(f2->tensor()), values);
  // Sum of squares in double, of either type.
  absl::StatusOr<double> ss = device_->SumSquares({f->tensor()});
  ASSERT_TRUE(ss.ok());
  const double f_squares = kernels::SumSquaresCpu(values.data(), n);
  EXPECT_NEAR(*ss, f_squares, 1e-9 * *ss);
  ss = device_->SumSquares({b->tensor()});
  ASSERT_TRUE(ss.ok());
  const double b_squares = kernels::SumSquaresCpu(rounded.data(), n);
  EXPECT_NEAR(*ss, b_squares, 1e-9 * *ss);
  // Several tensors of both types in one read-back.
  ss = device_->SumSquares({f->tensor(), b->tensor(), f->tensor().Slice(0, 0)});
  ASSERT_TRUE(ss.ok());
  EXPECT_NEAR(*ss, f_squares + b_squares, 1e-9 * *ss);
  // More tensors than the device's first result slots (256): they grow.
  std::vector<Tensor> pieces;
  double pieces_squares = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    pieces.push_back(f->tensor().Slice(i * 100, 100));
    pieces_squares += kernels::SumSquaresCpu(values.data() + i * 100, 100);
  }
  ss = device_->SumSquares(pieces);
  ASSERT_TRUE(ss.ok());
  EXPECT_NEAR(*ss, pieces_squares, 1e-9 * *ss);
  EXPECT_EQ(device_->SumSquares({}).value_or(-1), 0.0);
  // Scale; Zero of a slice.
  device_->Scale(f->tensor(), 0.5f);
  std::vector<float> half = values;
  for (float& x : half) x *= 0.5f;
  EXPECT_EQ(Read(f->tensor()), half);
  device_->Zero(f->Slice(10, 20));
  for (int i = 10; i < 30; ++i) half[i] = 0;
  EXPECT_EQ(Read(f->tensor()), half);
  EXPECT_TRUE(device_->Synchronize().ok());
}

TEST_P(CudaDeviceTest, GemmMatchesANaiveGemm) {
  const DType dt = GetParam();
  const int m = 5, n = 7, k = 9;
  const std::vector<float> a = Uniform(m * k, -1, 1, 1), b = Uniform(k * n, -1, 1, 2);
  std::vector<float> c = Uniform(m * n, -1, 1, 3);
  auto da = device_->Allocate(m * k, dt), db = device_->Allocate(k * n, dt),
       dc = device_->Allocate(m * n, dt);
  ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
  Write(da->tensor(), a);
  Write(db->tensor(), b);
  Write(dc->tensor(), c);
  // Reference on exactly the values the device holds.
  const std::vector<float> ra = Read(da->tensor()), rb = Read(db->tensor());
  std::vector<float> want = Read(dc->tensor());
  kernels::testing::NaiveRowMajorGemm({false, false, m, n, k, k, n, n}, 2.0f, ra.data(), rb.data(),
                                      0.5f, want.data());
  device_->Gemm(false, false, m, n, k, 2.0f, da->tensor(), k, db->tensor(), n, 0.5f, dc->tensor(),
                n);
  kernels::testing::ExpectClose(Read(dc->tensor()), want, dt == DType::kBF16 ? 2e-2 : 1e-5,
                                dt == DType::kBF16 ? 1e-2 : 1e-5, "c");
}

TEST_P(CudaDeviceTest, AdamWUpdatesMasterAndWorkingCopies) {
  const DType dt = GetParam();
  const int64_t n = 3000;
  const std::vector<float> master0 = Uniform(n, -1, 1, 1), grad = Uniform(n, -1, 1, 2);
  auto master = device_->Allocate(n, DType::kF32), working = device_->Allocate(n, dt),
       g = device_->Allocate(n, dt), m = device_->Allocate(n, DType::kF32),
       v = device_->Allocate(n, DType::kF32);
  ASSERT_TRUE(master.ok() && working.ok() && g.ok() && m.ok() && v.ok());
  Write(master->tensor(), master0);
  Write(g->tensor(), grad);
  const std::vector<float> device_grad = Read(g->tensor());
  AdamWStep step;
  step.lr = 0.01f;
  step.weight_decay = 0.1f;
  // fp32: the working copy is the master itself (the optimizer passes the same memory).
  const Tensor work = dt == DType::kF32 ? master->tensor() : working->tensor();
  device_->AdamW(step, master->tensor(), work, g->tensor(), m->tensor(), v->tensor());
  std::vector<float> want = master0, mm(n, 0), vv(n, 0);
  kernels::AdamWCpu(want.data(), device_grad.data(), mm.data(), vv.data(), n, step.lr, step.beta1,
                    step.beta2, step.epsilon, step.weight_decay, step.t, step.grad_scale);
  const std::vector<float> got = Read(master->tensor());
  kernels::testing::ExpectClose(got, want, 1e-7, 1e-5, "master");
  if (dt == DType::kBF16) {
    std::vector<float> rounded(n);
    for (int64_t i = 0; i < n; ++i) rounded[i] = kernels::RoundToBf16(got[i]);
    EXPECT_EQ(Read(working->tensor()), rounded);
  }
}

TEST_P(CudaDeviceTest, AWrongDtypeIsReportedByTheNextSynchronizeAndStopsLaterWork) {
  auto i32 = device_->Allocate(16, DType::kI32);
  auto f = device_->Allocate(16, GetParam());
  ASSERT_TRUE(i32.ok() && f.ok());
  // An i32 tensor where the compute dtype is required: a programming error, recorded.
  device_->Add(f->tensor(), i32->tensor(), f->tensor(), 16);
  const absl::Status s = device_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s;
  // Sticky: later host reads report it too.
  std::vector<float> host(16);
  EXPECT_EQ(device_->CopyToHost(host.data(), f->tensor()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->SumSquares({f->tensor()}).status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(ComputeTypes, CudaDeviceTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace ringmaster::trainer
