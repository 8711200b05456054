#include "trainer/cpu_peak.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace ringmaster::trainer {

CpuPeak EstimateCpuPeak() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  double mhz = 0;
  while (std::getline(cpuinfo, line)) {
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + line + " ";
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        (void)absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(colon + 1)), &mhz);
      }
    }
  }
  std::ifstream max_freq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  int64_t khz = 0;
  std::string source = "cpu MHz in /proc/cpuinfo";
  if (max_freq >> khz && khz > 0) {
    mhz = khz / 1000.0;
    source = "cpufreq cpuinfo_max_freq";
  }
  int lanes = 4;
  std::string isa = "SSE";
  if (flags.find(" avx512f ") != std::string::npos) {
    lanes = 16;
    isa = "AVX-512";
  } else if (flags.find(" avx2 ") != std::string::npos &&
             flags.find(" fma ") != std::string::npos) {
    lanes = 8;
    isa = "AVX2+FMA";
  }
  CpuPeak peak;
  if (mhz <= 0) {
    peak.explanation = "unknown clock: MFU not computed";
    return peak;
  }
  const double per_cycle = 2.0 * lanes * 2;
  peak.flops_per_core = mhz * 1e6 * per_cycle;
  peak.explanation = absl::StrFormat("%.1f GFLOP/s per core (%s: %.0f FLOP/cycle at %.0f MHz, %s)",
                                     peak.flops_per_core / 1e9, isa, per_cycle, mhz, source);
  return peak;
}

}  // namespace ringmaster::trainer
