// The running (max, sum of exponentials) pair of a softmax computed in one pass (Milakov and
// Gimelshein, "Online normalizer calculation for softmax", 2018): the cross-entropy kernel folds
// each logit into a per-thread state and merges the threads' states; the result equals
// max = max_i z_i, sum = sum_i exp(z_i - max) up to rounding.
//
// These few lines are shared verbatim by the CUDA kernel (cross_entropy.cu) and the CPU tests
// (online_softmax_test.cc), hence inline in a header with __host__ __device__ under nvcc.
#ifndef RINGMASTER_TRAINER_KERNELS_ONLINE_SOFTMAX_H_
#define RINGMASTER_TRAINER_KERNELS_ONLINE_SOFTMAX_H_

#include <cmath>

#ifdef __CUDACC__
#define RM_HOST_DEVICE __host__ __device__
#else
#define RM_HOST_DEVICE
#endif

namespace ringmaster::kernels {

struct SoftmaxState {
  float max = -INFINITY;  // no element yet
  float sum = 0.0f;       // sum of exp(z - max) over the elements seen
};

// Folds one finite element into `s`.
RM_HOST_DEVICE inline SoftmaxState SoftmaxAdd(SoftmaxState s, float z) {
  if (z > s.max) {
    // exp(-inf) is 0, so the first element needs no special case.
    s.sum = s.sum * expf(s.max - z) + 1.0f;
    s.max = z;
  } else {
    s.sum += expf(z - s.max);
  }
  return s;
}

// Merges two states (of disjoint element sets); either may be empty.
RM_HOST_DEVICE inline SoftmaxState SoftmaxMerge(SoftmaxState a, SoftmaxState b) {
  const float m = a.max > b.max ? a.max : b.max;
  if (m == -INFINITY) return a;  // both empty: avoid exp(-inf - -inf) = NaN
  SoftmaxState r;
  r.max = m;
  r.sum = a.sum * expf(a.max - m) + b.sum * expf(b.max - m);
  return r;
}

}  // namespace ringmaster::kernels

#undef RM_HOST_DEVICE

#endif  // RINGMASTER_TRAINER_KERNELS_ONLINE_SOFTMAX_H_
