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

}  // namespace ringmaster
