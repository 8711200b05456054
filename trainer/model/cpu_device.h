// The CPU device: fp32 everywhere, host memory, OpenBLAS GEMMs, and the CPU reference kernels of
// trainer/kernels for the fused operations. Everything runs synchronously on the calling thread
// (OpenBLAS may use its own threads inside a GEMM; see `blas_threads`).
#ifndef RINGMASTER_TRAINER_MODEL_CPU_DEVICE_H_
#define RINGMASTER_TRAINER_MODEL_CPU_DEVICE_H_

#include <memory>
#include <string>

#include "trainer/model/device.h"

namespace ringmaster::trainer {

// `blas_threads` >= 1 sets OpenBLAS's thread count for the process (a process-wide setting:
// the last CpuDevice created wins). 0 leaves OpenBLAS's default.
std::unique_ptr<Device> MakeCpuDevice(int blas_threads);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_CPU_DEVICE_H_
