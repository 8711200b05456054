#include "trainer/cuda/device_selection.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

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

absl::StatusOr<std::optional<int>> CudaDeviceFromEnvironment(
    const std::function<std::optional<std::string>(const char* name)>& env) {
  const std::optional<std::string> visible = env("CUDA_VISIBLE_DEVICES");
  if (!visible.has_value()) return std::nullopt;
  // CUDA stops at the first invalid entry: the devices are the valid entries before it.
  int devices = 0;
  for (absl::string_view entry : absl::StrSplit(*visible, ',')) {
    if (!NamesADevice(entry)) break;
    ++devices;
  }
  if (devices == 0) return std::nullopt;
  if (devices == 1) return 0;
  const std::optional<std::string> local = env("LOCAL_RANK");
  if (!local.has_value()) return 0;
  int rank = 0;
  if (!absl::SimpleAtoi(*local, &rank) || rank < 0) {
    return FieldError("LOCAL_RANK",
                      absl::StrCat("must be a non-negative integer, got \"", *local, "\""));
  }
  if (rank >= devices) {
    return FieldError(
        "CUDA_VISIBLE_DEVICES",
        absl::StrCat("lists ", devices, " devices (\"", *visible,
                     "\"): too few for LOCAL_RANK=", rank, " (each local rank needs its own GPU)"));
  }
  return rank;
}

}  // namespace ringmaster::trainer
