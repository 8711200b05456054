#include "agent/devices.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status.h"

#ifdef RINGMASTER_WITH_CUDA
#include <cuda_runtime.h>

#include "common/cuda_device_count.h"
#include "common/logging.h"
#endif

namespace ringmaster::agent {
namespace {

constexpr int kMaxCpuSlots = 1024;
constexpr char kFlag[] = "--devices";
constexpr char kForms[] = "expected \"cpu:N\" (1 <= N <= 1024), \"gpu\" or \"auto\"";

std::vector<v1::Device> CpuSlots(int n) {
  std::vector<v1::Device> devices(n);
  for (int i = 0; i < n; ++i) {
    devices[i].set_index(i);
    devices[i].set_kind("cpu");
    devices[i].set_model("cpu-slot");
    devices[i].set_memory_bytes(0);
    devices[i].set_interconnect_domain(0);
  }
  return devices;
}

// Parses the N of "cpu:N": digits only (no sign, no spaces), 1 <= N <= kMaxCpuSlots.
absl::StatusOr<int> ParseSlotCount(absl::string_view text) {
  bool digits = !text.empty();
  for (char c : text) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
  if (!digits) {
    return FieldError(
        kFlag, absl::StrCat("the N of \"cpu:N\" must be a whole number, got \"", text, "\""));
  }
  int64_t n = 0;
  // SimpleAtoi fails only on overflow here (the text is all digits): out of range either way.
  if (!absl::SimpleAtoi(text, &n) || n < 1 || n > kMaxCpuSlots) {
    return FieldError(kFlag, absl::StrCat("the N of \"cpu:N\" must be between 1 and ", kMaxCpuSlots,
                                          ", got ", text));
  }
  return static_cast<int>(n);
}

#ifdef RINGMASTER_WITH_CUDA
// Disjoint sets over device ordinals, for grouping peer-accessible GPUs.
int FindRoot(std::vector<int>& parent, int i) {
  while (parent[i] != i) {
    parent[i] = parent[parent[i]];
    i = parent[i];
  }
  return i;
}

// Mutual peer access, both directions. A failed query counts as no access.
bool MutualPeerAccess(int a, int b) {
  int ab = 0;
  int ba = 0;
  return cudaDeviceCanAccessPeer(&ab, a, b) == cudaSuccess &&
         cudaDeviceCanAccessPeer(&ba, b, a) == cudaSuccess && ab != 0 && ba != 0;
}
#endif

}  // namespace

std::vector<v1::Device> DiscoverGpus() {
#ifdef RINGMASTER_WITH_CUDA
  const absl::StatusOr<int> visible = CudaDeviceCount();
  if (!visible.ok()) {
    // GPUs this build cannot use (e.g. a driver older than its CUDA runtime): none are offered,
    // and the operator is told why rather than seeing a GPU node with no devices.
    RM_LOG(ERROR) << "offering no GPU: " << visible.status().message();
    return {};
  }
  const int count = *visible;
  if (count == 0) {
    RM_LOG(INFO) << "no GPU visible to the CUDA runtime";
    return {};
  }
  std::vector<v1::Device> gpus;
  std::vector<int> ordinals;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    const cudaError_t error = cudaGetDeviceProperties(&prop, i);
    if (error != cudaSuccess) {
      // A GPU the runtime cannot describe is not offered; the others still are.
      cudaGetLastError();
      RM_LOG(WARNING) << "skipping GPU " << i << ": " << cudaGetErrorString(error);
      continue;
    }
    v1::Device& d = gpus.emplace_back();
    d.set_index(i);
    d.set_kind("gpu");
    d.set_model(prop.name);
    d.set_memory_bytes(static_cast<int64_t>(prop.totalGlobalMem));
    d.set_compute_capability(absl::StrCat(prop.major, ".", prop.minor));
    ordinals.push_back(i);
  }
  // Union of mutually peer-accessible GPUs; a domain is a connected component.
  const int n = static_cast<int>(gpus.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (!MutualPeerAccess(ordinals[a], ordinals[b])) continue;
      int ra = FindRoot(parent, a);
      int rb = FindRoot(parent, b);
      if (ra != rb) parent[std::max(ra, rb)] = std::min(ra, rb);
    }
  }
  cudaGetLastError();  // Peer queries that failed were counted as "no access" above.
  // Roots are the lowest member of each set, so numbering roots in ordinal order numbers domains
  // in order of their lowest ordinal.
  std::vector<int> domain_of_root(n, -1);
  int next_domain = 0;
  for (int i = 0; i < n; ++i) {
    int root = FindRoot(parent, i);
    if (domain_of_root[root] < 0) domain_of_root[root] = next_domain++;
    gpus[i].set_interconnect_domain(domain_of_root[root]);
  }
  return gpus;
#else
  return {};
#endif
}

std::string WorkerVisibleDevice(int ordinal, const char* agent_visible) {
  if (agent_visible != nullptr && ordinal >= 0) {
    const std::vector<absl::string_view> entries = absl::StrSplit(agent_visible, ',');
    if (ordinal < static_cast<int>(entries.size())) {
      const absl::string_view entry = absl::StripAsciiWhitespace(entries[ordinal]);
      if (!entry.empty()) return std::string(entry);
    }
  }
  return absl::StrCat(ordinal);
}

absl::StatusOr<std::vector<v1::Device>> ParseDevices(const std::string& flag) {
  if (absl::StartsWith(flag, "cpu:")) {
    ASSIGN_OR_RETURN(int n, ParseSlotCount(absl::string_view(flag).substr(4)));
    return CpuSlots(n);
  }
  if (flag == "gpu" || flag == "auto") {
    std::vector<v1::Device> gpus = DiscoverGpus();
    if (!gpus.empty()) return gpus;
    if (flag == "auto") return CpuSlots(1);
#ifdef RINGMASTER_WITH_CUDA
    return absl::FailedPreconditionError(
        "--devices=gpu: no GPU is visible to the CUDA runtime (use --devices=cpu:N for CPU slots)");
#else
    return absl::FailedPreconditionError(
        "--devices=gpu: this agent was built without CUDA (use --devices=cpu:N for CPU slots)");
#endif
  }
  if (flag.empty()) return FieldError(kFlag, absl::StrCat("is empty; ", kForms));
  return FieldError(kFlag, absl::StrCat("unknown value \"", flag, "\"; ", kForms));
}

}  // namespace ringmaster::agent
