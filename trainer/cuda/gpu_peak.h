// The dense bf16 tensor-core peak of a GPU, the denominator of MFU on the CUDA path (llm.c's
// convention: 989 TFLOP/s for an H100 SXM, without sparsity). Looked up from the device's name
// and compute capability as cudaGetDeviceProperties reports them; 0 (unknown) for GPUs not in
// the table, in which case the trainer needs --peak_flops.
#ifndef RINGMASTER_TRAINER_CUDA_GPU_PEAK_H_
#define RINGMASTER_TRAINER_CUDA_GPU_PEAK_H_

#include <string>

namespace ringmaster::trainer {

struct GpuPeak {
  double bf16_flops = 0;    // 0 when unknown
  std::string explanation;  // which entry matched, for logs and benchmarks
};

// `name` as cudaDeviceProp::name ("NVIDIA H100 80GB HBM3"), compute capability major.minor.
GpuPeak LookUpGpuPeak(const std::string& name, int major, int minor);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_GPU_PEAK_H_
