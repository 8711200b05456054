// The theoretical fp32 peak of this machine's CPU cores, the denominator of MFU on the CPU path:
// cores * clock * FLOPs per cycle per core, where FLOPs per cycle is 2 (FMA) * SIMD lanes * 2
// FMA units (AVX-512: 16 lanes, AVX2: 8 lanes, otherwise SSE: 4 lanes), and the clock is the
// highest the kernel reports (cpufreq's cpuinfo_max_freq, else /proc/cpuinfo's "cpu MHz").
#ifndef RINGMASTER_TRAINER_CPU_PEAK_H_
#define RINGMASTER_TRAINER_CPU_PEAK_H_

#include <string>

namespace ringmaster::trainer {

struct CpuPeak {
  double flops_per_core = 0;  // 0 when unknown
  std::string explanation;    // how it was computed, for logs and benchmarks
};

CpuPeak EstimateCpuPeak();

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CPU_PEAK_H_
