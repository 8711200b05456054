#include "trainer/cuda/gpu_peak.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {
namespace {

struct Entry {
  int major;
  const char* name_part;  // matched against the device name, case-insensitively; "" = any
  double tflops;          // dense bf16
  const char* label;
};

// First match wins: specific names before the generic entry of their architecture.
constexpr Entry kTable[] = {
    {9, "H100 PCIe", 756, "H100 PCIe"}, {9, "H100 NVL", 835, "H100 NVL"},
    {9, "H800 PCIe", 756, "H800 PCIe"}, {9, "GH200", 989, "GH200"},
    {9, "H200", 989, "H200"},           {9, "H100", 989, "H100 SXM"},
    {9, "H800", 989, "H800 SXM"},       {8, "A100", 312, "A100"},
    {8, "A800", 312, "A800"},
};

}  // namespace

GpuPeak LookUpGpuPeak(const std::string& name, int major, int minor) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const Entry& e : kTable) {
    if (e.major == major && absl::StrContains(lower, absl::AsciiStrToLower(e.name_part))) {
      return GpuPeak{e.tflops * 1e12, absl::StrCat(e.label, " dense bf16 peak, ", e.tflops,
                                                   " TFLOP/s (sm_", major, minor, ")")};
    }
  }
  return GpuPeak{0, absl::StrCat("no bf16 peak known for \"", name, "\" (sm_", major, minor,
                                 "); pass --peak_flops")};
}

}  // namespace ringmaster::trainer
