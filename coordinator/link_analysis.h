// The verdict on one generation's link check (WatchdogSpec.link_check_*; the trainer's side is
// trainer/link_check.h): every rank measures the exchange with each of its ring neighbours in
// each group, and reports it; this collects the reports and names the links that are slow or
// corrupt data. Pure logic, fed by the job manager.
//
// A link is one pair of ranks in one group. Both ends report it: the collector keeps the slower
// of their two times and adds up the wrong elements each received. Links are compared within
// their kind: the group kind ("tp", "pp", "dp", "emb": the group name without its number) and
// whether the two ends are on different nodes (an NVLink or shared-memory hop is not held
// against a network one). A link is slow when its bandwidth is below slow_ratio times the median
// of the *other* links of its kind (leave-one-out, so two links compare directly; a link alone
// in its kind has nothing to be compared with), or below the job's absolute floor when it sets
// one. The comparison is relative: a fault that slows every link of a kind alike (the one NIC of
// each node of a two-node job) is caught only by the floor, or seen in the kinds' figures. A link
// that delivered wrong data is always listed.
//
// Not thread-safe (the job manager's lock guards it).
#ifndef RINGMASTER_COORDINATOR_LINK_ANALYSIS_H_
#define RINGMASTER_COORDINATOR_LINK_ANALYSIS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/link_groups.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {

// One end's measurement of a link, with both ranks' nodes.
struct LinkSample {
  std::string group;
  int rank = 0;
  int peer_rank = 0;
  std::string node, peer_node;
  int64_t bytes = 0;
  double seconds = 0;
  int64_t wrong = 0;
};

// Most links a summary lists (slowest first).
inline constexpr int kMaxListedLinks = 16;

class LinkCheckCollector {
 public:
  // One check of `world` ranks of `generation`, run after `step` (0: at the generation's start);
  // slow_ratio in (0, 1); min_bytes_per_second 0 for no floor.
  LinkCheckCollector(int64_t generation, int64_t step, int world, double slow_ratio,
                     double min_bytes_per_second)
      : generation_(generation),
        step_(step),
        world_(world),
        slow_ratio_(slow_ratio),
        min_bytes_per_second_(min_bytes_per_second) {}

  int64_t step() const { return step_; }
  double slow_ratio() const { return slow_ratio_; }
  double min_bytes_per_second() const { return min_bytes_per_second_; }

  // Adds `rank`'s report; samples of groups common/link_groups.h does not name are ignored.
  // Returns false (and changes nothing) for a rank out of range or one that already reported.
  bool Add(int rank, const std::vector<LinkSample>& samples);
  // Every rank of the generation reported.
  bool complete() const { return static_cast<int>(reported_.size()) == world_; }

  // The links that have delivered wrong data and were not returned by an earlier call, as far as
  // the reports so far tell (wrong elements of the ends that reported). A corrupting link fails
  // its generation at once, so it is named before every rank has reported.
  std::vector<v1::LinkState> TakeNewCorruptions();

  // The kinds and the slow or corrupting links (corrupting first, then by bandwidth over their
  // kind's median, or over the floor for a link slow only by it, lowest first), judged
  // over the reports so far (judge once complete() for the final answer, which is kept);
  // ranks_reported says how many there were. O(L log L) in the links L.
  v1::LinkCheckSummary Summarize() const;

 private:
  struct Link {
    LinkSample sample;  // rank < peer_rank
    int reports = 0;
  };
  v1::LinkCheckSummary Judge() const;

  const int64_t generation_;
  const int64_t step_;
  const int world_;
  const double slow_ratio_;
  const double min_bytes_per_second_;
  std::set<int> reported_;  // ranks that reported
  // Keyed by (group, lower rank, higher rank).
  std::map<std::tuple<std::string, int, int>, Link> links_;
  std::set<std::tuple<std::string, int, int>> corruptions_taken_;
  mutable std::optional<v1::LinkCheckSummary> final_;  // once complete()
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_LINK_ANALYSIS_H_
