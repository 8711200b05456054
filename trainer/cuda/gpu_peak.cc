#include "trainer/cuda/gpu_peak.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {
namespace {

struct Entry {
  int major;
  const char* name_part;  // matched against the device name, case-insensitively; "" = any
  double bf16_tflops;     // dense, tensor cores
  double fp32_tflops;     // CUDA cores (no TF32)
  const char* label;
};

// First match wins: specific names before the generic entry of their architecture. Figures from
// NVIDIA's data sheets.
constexpr Entry kTable[] = {
    {9, "H100 PCIe", 756, 51, "H100 PCIe"}, {9, "H100 NVL", 835, 60, "H100 NVL"},
    {9, "H800 PCIe", 756, 51, "H800 PCIe"}, {9, "GH200", 989, 67, "GH200"},
    {9, "H200", 989, 67, "H200"},           {9, "H100", 989, 67, "H100 SXM"},
    {9, "H800", 989, 67, "H800 SXM"},       {8, "A100", 312, 19.5, "A100"},
    {8, "A800", 312, 19.5, "A800"},
};

}  // namespace

GpuPeak LookUpGpuPeak(const std::string& name, int major, int minor, bool bf16) {
  const char* type = bf16 ? "bf16" : "fp32";
  const std::string lower = absl::AsciiStrToLower(name);
  for (const Entry& e : kTable) {
    if (e.major == major && absl::StrContains(lower, absl::AsciiStrToLower(e.name_part))) {
      const double tflops = bf16 ? e.bf16_tflops : e.fp32_tflops;
      return GpuPeak{tflops * 1e12, absl::StrCat(e.label, " dense ", type, " peak, ", tflops,
                                                 " TFLOP/s (sm_", major, minor, ")")};
    }
  }
  return GpuPeak{0, absl::StrCat("no ", type, " peak known for \"", name, "\" (sm_", major, minor,
                                 "); pass --peak_flops")};
}

}  // namespace ringmaster::trainer
