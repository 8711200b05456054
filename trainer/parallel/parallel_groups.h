// A rank's place in a TP x PP x DP job and the communication groups it belongs to, named as the
// coordinator names them (coordinator/placement.h MakeGroups; the names are the `group` label of
// the collective metrics):
//   tp<dp*PP + pp>   the TP ranks of one stage of one replica (rank in group: tp_rank)
//   pp<dp*TP + tp>   the stages of one replica at one TP position (rank: pp_rank)
//   dp<pp*TP + tp>   the replicas of one (stage, TP position) (rank: dp_rank)
// and, with pipeline parallelism, the trainer's own
//   emb<dp*TP + tp>  the first and last stage of pp<dp*TP + tp>, which both hold the tied token
//                    embedding (rank 0: first stage, 1: last stage)
// Rank numbering: rank = (dp*PP + pp)*TP + tp.
#ifndef RINGMASTER_TRAINER_PARALLEL_PARALLEL_GROUPS_H_
#define RINGMASTER_TRAINER_PARALLEL_PARALLEL_GROUPS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"

namespace ringmaster::trainer {

// This rank's place in the job.
struct RankPlace {
  int rank = 0, world = 1;
  int tp_rank = 0, tp = 1;
  int pp_rank = 0, pp = 1;
  int dp_rank = 0, dp = 1;

  // The place of global rank `rank` in a tp x pp x dp job.
  static RankPlace Of(int rank, int tp, int pp, int dp);
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp - 1; }
};

// One group this rank joins: its name, this rank's rank in it, its size, and its members' global
// ranks in group-rank order.
struct GroupMembership {
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> members;
};

// This rank's groups in the order every rank joins them: tp, pp, dp, then emb (only with
// pipeline parallelism, and only on the first and last stage). A group of one rank is listed
// too (it needs no connection).
std::vector<GroupMembership> GroupsOf(const RankPlace& place);

// The communicators of one rank's groups (emb null where GroupsOf has none).
struct ParallelGroups {
  std::unique_ptr<Communicator> tp, pp, dp, emb;
  // The non-null ones, in joining order (for step reports).
  std::vector<Communicator*> all() const;
};

// Joins a group: Gloo's GlooNetwork::Connect, or NCCL's equivalent.
using GroupConnector = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    const std::string& name, int rank, int size)>;

// Joins every group of GroupsOf(place) in order. Every rank of the job must call it (with its own
// place) for any of them to finish. Errors are the connect function's, annotated with the group.
absl::StatusOr<ParallelGroups> ConnectParallelGroups(const RankPlace& place,
                                                     const GroupConnector& connect);

// What a rank can ask of every other at a step boundary.
struct RankRequests {
  bool stop = false;           // checkpoint and stop (SIGUSR1, stop_request.h)
  bool check_links = false;    // run the link check (ringctl check-links)
  bool writer_failed = false;  // its checkpoint writer failed: every rank stops (the job restarts)
  bool operator==(const RankRequests& o) const {
    return stop == o.stop && check_links == o.check_links && writer_failed == o.writer_failed;
  }
};

// For each request, whether any rank of the job made it: the same answer on every rank, from one
// AnyOf (three floats) over tp, then pp, then dp (each a line of the tp x pp x dp grid, so the
// three cover the job). Every rank must call it at the same point of its work. Errors are the
// communicators'.
absl::StatusOr<RankRequests> AnyRankAsks(const ParallelGroups& groups, RankRequests mine);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_PARALLEL_PARALLEL_GROUPS_H_
