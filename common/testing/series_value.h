// Reading one sample off a Prometheus text page in tests.
#ifndef RINGMASTER_COMMON_TESTING_SERIES_VALUE_H_
#define RINGMASTER_COMMON_TESTING_SERIES_VALUE_H_

#include <limits>
#include <string>

#include "absl/strings/numbers.h"

namespace ringmaster::testing {

// The value of the series `series` (name and labels, as rendered) on `page`; NaN if absent.
inline double SeriesValue(const std::string& page, const std::string& series) {
  const size_t at = page.find(series + " ");
  double value = std::numeric_limits<double>::quiet_NaN();
  if (at == std::string::npos) return value;
  const size_t begin = at + series.size() + 1;
  (void)absl::SimpleAtod(page.substr(begin, page.find('\n', begin) - begin), &value);
  return value;
}

}  // namespace ringmaster::testing

#endif  // RINGMASTER_COMMON_TESTING_SERIES_VALUE_H_
