#include "trainer/cuda/device_selection.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace ringmaster::trainer {
namespace {

// A device entry CUDA accepts: a non-negative index, or a GPU-/MIG- UUID.
bool NamesADevice(absl::string_view entry) {
  entry = absl::StripAsciiWhitespace(entry);
  if (entry.empty()) return false;
  if (absl::StartsWith(entry, "GPU-") || absl::StartsWith(entry, "MIG-")) return true;
  for (char c : entry) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::optional<int> CudaDeviceFromEnvironment(
    const std::function<std::optional<std::string>(const char* name)>& env) {
  const std::optional<std::string> visible = env("CUDA_VISIBLE_DEVICES");
  if (!visible.has_value()) return std::nullopt;
  // CUDA stops at the first invalid entry, so only the first one decides whether any is left.
  const std::vector<absl::string_view> entries = absl::StrSplit(*visible, ',');
  if (entries.empty() || !NamesADevice(entries.front())) return std::nullopt;
  return 0;
}

}  // namespace ringmaster::trainer
