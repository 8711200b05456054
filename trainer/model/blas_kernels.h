// OpenBLAS chooses its GEMM kernels when the library is loaded, from the CPU model it detects.
// On CPUs it does not recognise (newer models, or virtual machines that report a generic model
// name) it falls back to its generic SSE3 ("Prescott") kernels, which run several times slower
// than the AVX2 / AVX-512 kernels the CPU supports. The choice can only be overridden before the
// library loads, through OPENBLAS_CORETYPE.
#ifndef RINGMASTER_TRAINER_MODEL_BLAS_KERNELS_H_
#define RINGMASTER_TRAINER_MODEL_BLAS_KERNELS_H_

#include <string>

namespace ringmaster::trainer {

// The OpenBLAS core type this process's CPU should use when OpenBLAS picked an older kernel family
// than the CPU supports ("SkylakeX" for AVX-512, "Haswell" for AVX2), or "" when its choice is
// fine (or OPENBLAS_CORETYPE is already set).
std::string BetterOpenBlasCoreType();

// The kernel family OpenBLAS uses in this process (e.g. "Haswell").
std::string OpenBlasCoreName();

// When BetterOpenBlasCoreType() names one, sets OPENBLAS_CORETYPE and re-executes this program
// (/proc/self/exe, same pid and arguments) so OpenBLAS loads with it. Returns only when nothing
// was done or the exec failed (then the process goes on with the slower kernels). Call first
// thing in main(), before any thread exists.
void ReexecWithBetterOpenBlasKernels(char** argv);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_MODEL_BLAS_KERNELS_H_
