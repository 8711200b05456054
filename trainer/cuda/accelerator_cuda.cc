// OpenAccelerator in builds with CUDA.
#include <cuda_runtime.h>

#include "common/status.h"
#include "trainer/cuda/accelerator.h"
#include "trainer/cuda/cuda_device.h"
#include "trainer/cuda/cuda_status.h"
#include "trainer/cuda/device_selection.h"
#include "trainer/cuda/gpu_peak.h"
#include "trainer/cuda/nccl_communicator.h"

namespace ringmaster::trainer {
namespace {

class CudaAccelerator final : public Accelerator {
 public:
  CudaAccelerator(std::unique_ptr<CudaDevice> device, GpuPeak peak)
      : device_(std::move(device)), peak_(std::move(peak)) {}

  Device* device() override { return device_.get(); }
  std::string description() const override {
    return device_->description() + "; MFU against " + peak_.explanation;
  }
  double peak_flops() const override { return peak_.flops; }
  absl::StatusOr<std::unique_ptr<Communicator>> Connect(const std::string& name, int rank, int size,
                                                        KeyValueStore* store,
                                                        absl::Duration timeout) override {
    return ConnectNccl(name, rank, size, store, NcclOptionsFor(*device_, timeout));
  }

 private:
  std::unique_ptr<CudaDevice> device_;
  const GpuPeak peak_;
};

}  // namespace

void PrepareAcceleratorEnvironment() { ConnectNcclAtInit(); }

absl::StatusOr<std::unique_ptr<Accelerator>> OpenAccelerator(
    const std::function<std::optional<std::string>(const char* name)>& env, DType compute_dtype,
    bool fused_attention) {
  ASSIGN_OR_RETURN(const std::optional<int> index, CudaDeviceFromEnvironment(env));
  if (!index.has_value()) return nullptr;
  CudaDeviceOptions options;
  options.compute_dtype = compute_dtype;
  options.fuse_attention = fused_attention;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device, MakeCudaDevice(*index, options));
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&prop, device->index()), "cudaGetDeviceProperties"));
  // MFU against the peak of the type the GEMMs run in (fp32 GEMMs do not use TF32).
  return std::unique_ptr<Accelerator>(new CudaAccelerator(
      std::move(device),
      LookUpGpuPeak(prop.name, prop.major, prop.minor, compute_dtype != DType::kF32)));
}

}  // namespace ringmaster::trainer
