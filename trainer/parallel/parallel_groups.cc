#include "trainer/parallel/parallel_groups.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {

RankPlace RankPlace::Of(int rank, int tp, int pp, int dp) {
  RankPlace p;
  p.rank = rank;
  p.world = tp * pp * dp;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.tp_rank = rank % tp;
  p.pp_rank = (rank / tp) % pp;
  p.dp_rank = rank / (tp * pp);
  return p;
}

std::vector<GroupMembership> GroupsOf(const RankPlace& p) {
  auto global = [&](int dp, int pp, int tp) { return (dp * p.pp + pp) * p.tp + tp; };
  std::vector<GroupMembership> groups;
  GroupMembership tp{absl::StrCat("tp", p.dp_rank * p.pp + p.pp_rank), p.tp_rank, p.tp, {}};
  for (int i = 0; i < p.tp; ++i) tp.members.push_back(global(p.dp_rank, p.pp_rank, i));
  groups.push_back(tp);
  GroupMembership pp{absl::StrCat("pp", p.dp_rank * p.tp + p.tp_rank), p.pp_rank, p.pp, {}};
  for (int i = 0; i < p.pp; ++i) pp.members.push_back(global(p.dp_rank, i, p.tp_rank));
  groups.push_back(pp);
  GroupMembership dp{absl::StrCat("dp", p.pp_rank * p.tp + p.tp_rank), p.dp_rank, p.dp, {}};
  for (int i = 0; i < p.dp; ++i) dp.members.push_back(global(i, p.pp_rank, p.tp_rank));
  groups.push_back(dp);
  if (p.pp > 1 && (p.first_stage() || p.last_stage())) {
    GroupMembership emb{absl::StrCat("emb", p.dp_rank * p.tp + p.tp_rank),
                        p.first_stage() ? 0 : 1,
                        2,
                        {global(p.dp_rank, 0, p.tp_rank), global(p.dp_rank, p.pp - 1, p.tp_rank)}};
    groups.push_back(emb);
  }
  return groups;
}

std::vector<Communicator*> ParallelGroups::all() const {
  std::vector<Communicator*> out;
  for (const auto* c : {&tp, &pp, &dp, &emb}) {
    if (*c != nullptr) out.push_back(c->get());
  }
  return out;
}

absl::StatusOr<ParallelGroups> ConnectParallelGroups(const RankPlace& place,
                                                     const GroupConnector& connect) {
  ParallelGroups groups;
  for (const GroupMembership& g : GroupsOf(place)) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm = connect(g.name, g.rank, g.size);
    if (!comm.ok()) return Annotate(comm.status(), absl::StrCat("joining group ", g.name));
    std::unique_ptr<Communicator>* slot = g.name.rfind("tp", 0) == 0   ? &groups.tp
                                          : g.name.rfind("pp", 0) == 0 ? &groups.pp
                                          : g.name.rfind("dp", 0) == 0 ? &groups.dp
                                                                       : &groups.emb;
    *slot = std::move(*comm);
  }
  return groups;
}

absl::StatusOr<RankRequests> AnyRankAsks(const ParallelGroups& groups, RankRequests mine) {
  bool any[3] = {mine.stop, mine.check_links, mine.writer_failed};
  for (Communicator* line : {groups.tp.get(), groups.pp.get(), groups.dp.get()}) {
    if (line != nullptr && line->size() > 1) RETURN_IF_ERROR(line->AnyOf(absl::MakeSpan(any)));
  }
  return RankRequests{any[0], any[1], any[2]};
}

}  // namespace ringmaster::trainer
