#include "trainer/kernels/gelu_cuda.h"

#include "absl/strings/str_cat.h"
#include "trainer/kernels/gelu_launch.h"

namespace ringmaster::kernels {
namespace {

absl::Status FromCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

}  // namespace

absl::Status GeluForwardCuda(float* out, const float* in, int64_t n, cudaStream_t stream) {
  return FromCuda(LaunchGeluForward(out, in, n, stream), "gelu forward");
}

absl::Status GeluBackwardCuda(float* din, const float* in, const float* dout, int64_t n,
                              bool accumulate, cudaStream_t stream) {
  return FromCuda(LaunchGeluBackward(din, in, dout, n, accumulate, stream), "gelu backward");
}

}  // namespace ringmaster::kernels
