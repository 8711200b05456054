#include "common/format_double.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace ringmaster {

std::string FormatFiniteDouble(double v) {
  int precision = 1;
  for (; precision < 17; ++precision) {
    double back = 0;
    if (absl::SimpleAtod(absl::StrFormat("%.*g", precision, v), &back) && back == v) break;
  }
  const double magnitude = std::fabs(v);
  if (magnitude >= 1 && magnitude < 1e17) {
    precision = std::max(precision, static_cast<int>(std::floor(std::log10(magnitude))) + 1);
  }
  return absl::StrFormat("%.*g", precision, v);
}

std::string FormatBandwidth(double bytes_per_second) {
  if (bytes_per_second < 1e8) return absl::StrFormat("%.2f MB/s", bytes_per_second / 1e6);
  return absl::StrFormat("%.2f GB/s", bytes_per_second / 1e9);
}

}  // namespace ringmaster
