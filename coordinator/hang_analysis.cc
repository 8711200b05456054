#include "coordinator/hang_analysis.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringmaster::coordinator {

std::vector<Laggard> FindLaggards(const std::map<int, RankCollectives>& ranks, int world,
                                  const std::set<int>& unknown) {
  // Group -> (rank -> numbers).
  std::map<std::string, std::map<int, std::pair<int64_t, int64_t>>> groups;
  for (const auto& [rank, collectives] : ranks) {
    for (const auto& [group, numbers] : collectives) groups[group][rank] = numbers;
  }
  if (auto rendezvous = groups.find(kRendezvousGroup); rendezvous != groups.end()) {
    for (int rank = 0; rank < world; ++rank) {
      if (unknown.count(rank) > 0) continue;
      auto it = ranks.find(rank);
      if (it == ranks.end() || it->second.empty()) {
        rendezvous->second.emplace(rank, std::pair<int64_t, int64_t>{0, 0});
      }
    }
  }
  std::vector<Laggard> laggards;
  for (const auto& [group, members] : groups) {
    int64_t front = 0;
    for (const auto& [rank, n] : members) front = std::max(front, n.first);
    std::vector<int> waiting;
    for (const auto& [rank, n] : members) {
      if (n.first == front && n.second < front) waiting.push_back(rank);
    }
    if (waiting.empty()) continue;  // nobody is inside a collective the others have not reached
    for (const auto& [rank, n] : members) {
      const bool inside_a_collective = n.first > n.second;
      if (n.first < front && !inside_a_collective) {
        laggards.push_back({rank, group, n.first, front, waiting});
      }
    }
  }
  std::sort(laggards.begin(), laggards.end(), [](const Laggard& a, const Laggard& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.group < b.group;
  });
  return laggards;
}

std::string DescribeLaggards(const std::vector<Laggard>& laggards) {
  std::vector<std::string> lines;
  for (const Laggard& l : laggards) {
    if (l.group == kRendezvousGroup && l.entered == 0) {
      lines.push_back(absl::StrCat("rank ", l.rank, " has not reached init_process_group's ",
                                   "rendezvous that rank", l.waiting.size() == 1 ? " " : "s ",
                                   absl::StrJoin(l.waiting, ", "), " wait",
                                   l.waiting.size() == 1 ? "s" : "", " in"));
      continue;
    }
    lines.push_back(absl::StrCat("rank ", l.rank, " has not entered collective #", l.waited_in,
                                 " of ", l.group, " (it is at #", l.entered, ") that rank",
                                 l.waiting.size() == 1 ? " " : "s ",
                                 absl::StrJoin(l.waiting, ", "), " wait",
                                 l.waiting.size() == 1 ? "s" : "", " in"));
  }
  return absl::StrJoin(lines, "; ");
}

std::string RankActivity(const RankView& view) {
  if (view.finished) return "exited";
  if (view.unwatched) return "unwatched";
  if (view.phase == v1::WORKER_PHASE_CHECKPOINT) return "checkpoint";
  if (view.phase == v1::WORKER_PHASE_EVAL) return "eval";
  const std::string works = view.working ? ", working" : "";
  if (view.settled && view.numbers != nullptr) {
    for (const auto& [group, n] : *view.numbers) {
      if (n.first <= n.second) continue;
      if (group == kRendezvousGroup) return "in init_process_group";
      return absl::StrCat("in ", group, " #", n.first);
    }
  }
  if (const Laggard* l = view.behind; l != nullptr) {
    if (l->group == kRendezvousGroup) return "not at init_process_group" + works;
    return absl::StrCat("behind ", l->group, " #", l->waited_in, " (at #", l->entered, ")", works);
  }
  if (view.phase == v1::WORKER_PHASE_STARTING) return "starting";
  if (view.phase == v1::WORKER_PHASE_INIT) return "init";
  if (view.numbers == nullptr || view.numbers->empty()) return "-";
  if (!view.settled) return "stepping";
  return "outside collectives" + works;
}

std::vector<Suspect> OutsideCheckpoints(const std::vector<Suspect>& suspects,
                                        const std::set<int>& checkpointing,
                                        std::vector<int>* checkpoint_waits) {
  std::vector<Suspect> blamed;
  for (const Suspect& s : suspects) {
    if (checkpointing.count(s.rank) > 0) {
      if (std::find(checkpoint_waits->begin(), checkpoint_waits->end(), s.rank) ==
          checkpoint_waits->end()) {
        checkpoint_waits->push_back(s.rank);
      }
    } else {
      blamed.push_back(s);
    }
  }
  return blamed;
}

}  // namespace ringmaster::coordinator
