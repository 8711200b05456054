#include "trainer/model/blas_kernels.h"

#include <strings.h>
#include <unistd.h>

#include <cstdlib>

extern "C" char* openblas_get_corename(void);

namespace ringmaster::trainer {
namespace {

// OpenBLAS core names older than AVX2: a CPU with AVX2 that gets one of these was misdetected.
constexpr const char* kPreAvx2Cores[] = {
    "prescott", "core2",     "penryn",   "dunnington", "nehalem",   "atom",      "sandybridge",
    "banias",   "northwood", "katmai",   "coppermine", "opteron",   "barcelona", "bobcat",
    "bulldozer", "piledriver", "steamroller", "excavator", "unknown"};

}  // namespace

std::string OpenBlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

std::string BetterOpenBlasCoreType() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
#if defined(__x86_64__)
  const char* want = __builtin_cpu_supports("avx512f")  ? "SkylakeX"
                     : __builtin_cpu_supports("avx2") ? "Haswell"
                                                       : nullptr;
  if (want == nullptr) return "";
  const std::string core = OpenBlasCoreName();
  for (const char* old : kPreAvx2Cores) {
    if (strcasecmp(core.c_str(), old) == 0) return want;
  }
#endif
  return "";
}

void ReexecWithBetterOpenBlasKernels(char** argv) {
  const std::string core = BetterOpenBlasCoreType();
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed: keep running with the kernels already loaded.
}

}  // namespace ringmaster::trainer
