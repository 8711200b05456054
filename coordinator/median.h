// The median of a list of figures, for the coordinator's judgements (stragglers, slow links, the
// input-bound straggler's cause). Pure; no threads, no errors.
#ifndef RINGMASTER_COORDINATOR_MEDIAN_H_
#define RINGMASTER_COORDINATOR_MEDIAN_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ringmaster::coordinator {

// The middle value of `v`, the mean of the middle two for an even count; 0 for none. Takes its
// own copy to reorder (linear time).
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  return (*std::max_element(v.begin(), v.begin() + mid) + upper) / 2;
}

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_MEDIAN_H_
