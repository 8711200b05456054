// A GPU's dense peak for the trainer's compute type, the denominator of MFU on the CUDA path
// (llm.c's convention: 989 TFLOP/s bf16 for an H100 SXM, without sparsity). bf16 is the tensor-core
// peak; fp32 the CUDA-core peak, since fp32 GEMMs here do not use TF32 (cublas_gemm.h). Looked up
// from the device's name and compute capability as cudaGetDeviceProperties reports them; 0
// (unknown) for GPUs not in the table, in which case the trainer needs --peak_flops.
#ifndef RINGMASTER_TRAINER_CUDA_GPU_PEAK_H_
#define RINGMASTER_TRAINER_CUDA_GPU_PEAK_H_

#include <string>

namespace ringmaster::trainer {

struct GpuPeak {
  double flops = 0;         // 0 when unknown
  std::string explanation;  // which entry and type matched, for logs and benchmarks
};

// `name` as cudaDeviceProp::name ("NVIDIA H100 80GB HBM3"), compute capability major.minor; the
// bf16 peak, or with `bf16` false the fp32 one.
GpuPeak LookUpGpuPeak(const std::string& name, int major, int minor, bool bf16 = true);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_GPU_PEAK_H_
