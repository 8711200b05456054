// Who holds up a hung job: from every rank's last reported collective sequence numbers per
// communicator, the ranks that have not entered the collective the rest of their group has
// entered (and waits in). Pure logic.
//
// A rank behind the front that is itself inside a collective (entered > completed) is waiting
// too — collectives can complete on some ranks before others (a ring passes data along), so a
// group can be spread over two collectives. The culprit is the rank behind the front that is
// not inside any collective of the group: it is computing, or stopped, or stuck outside the
// communication layer.
#ifndef RINGMASTER_COORDINATOR_HANG_ANALYSIS_H_
#define RINGMASTER_COORDINATOR_HANG_ANALYSIS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ringmaster::coordinator {

// Per communicator (group name): (last entered, last completed) sequence numbers of one rank.
using RankCollectives = std::map<std::string, std::pair<int64_t, int64_t>>;

struct Laggard {
  int rank = 0;
  std::string group;
  int64_t entered = 0;     // the last collective this rank entered
  int64_t waited_in = 0;   // the collective its peers entered and wait in
  std::vector<int> waiting;  // the peers that entered it and have not completed it
};

// Laggards of every group, ordered by rank then group: ranks behind their group's front and not
// inside a collective of the group. Empty when no group has one (every rank at the same
// collective, everyone behind waiting inside one, or no sequence numbers reported).
std::vector<Laggard> FindLaggards(const std::map<int, RankCollectives>& ranks);

// "rank 2 has not entered all_reduce #57 of dp0 that ranks 0, 1, 3 wait in" lines, joined by "; ".
std::string DescribeLaggards(const std::vector<Laggard>& laggards);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_HANG_ANALYSIS_H_
