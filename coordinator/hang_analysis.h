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
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proto/ringmaster/v1/agent.pb.h"

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

// The Python watch's group for torch.distributed's init_process_group (worker.proto): its #1 is
// entered when a rank calls init_process_group and completed when that returns; every rank is
// in it. A rank with no sequence numbers at all has not called it (or is not watched).
inline constexpr char kRendezvousGroup[] = "rendezvous";

// Laggards of every group, ordered by rank then group: ranks behind their group's front and not
// inside a collective of the group. Empty when no group has one (every rank at the same
// collective, everyone behind waiting inside one, or no sequence numbers reported). With `world`,
// a rank of 0..world-1 that reported no sequence number at all counts as at #0 of the rendezvous
// when another rank reports it: the rank its peers wait for in init_process_group (stuck before
// it: a data download, a hung filesystem, a GPU that does not answer); but not one in `unknown`
// (a coordinator that restarted has not heard again from its node: it may have reported before).
std::vector<Laggard> FindLaggards(const std::map<int, RankCollectives>& ranks, int world = 0,
                                  const std::set<int>& unknown = {});

// "rank 2 has not entered collective #57 of dp0 (it is at #56) that ranks 0, 1, 3 wait in" lines
// ("rank 2 has not reached init_process_group's rendezvous that ranks 0, 1, 3 wait in" for the
// rendezvous), joined by "; ".
std::string DescribeLaggards(const std::vector<Laggard>& laggards);

// What the coordinator knows of one running rank, for RankActivity.
struct RankView {
  const RankCollectives* numbers = nullptr;  // its latest sequence numbers; null: none reported
  v1::WorkerPhase phase = v1::WORKER_PHASE_UNSPECIFIED;  // its latest summary's
  bool working = false;    // its agent says it works outside any collective (heard lately)
  bool unwatched = false;  // its watch ended
  bool finished = false;   // it exited 0
  // Its numbers have held a few seconds: a wait or a pause, not one sample of a moving step
  // (a live job's ranks are sampled up to a couple of seconds apart).
  bool settled = false;
  const Laggard* behind = nullptr;  // its first laggard entry among settled ranks, if any
};

// What the rank is doing now, for RankLiveState.activity (coordinator.proto). In order:
// "exited"; "unwatched"; "checkpoint" or "eval" (the phase); settled inside a collective: "in G
// #N" for the first group (by name) with one entered and not completed ("in init_process_group"
// for the rendezvous); "behind G #N (at #M)" ("not at init_process_group"); "starting" or "init"
// (the phase); "-" with no numbers; numbers that move: "stepping"; else "outside collectives".
// "behind", "not at init_process_group" and "outside collectives" take ", working" when it
// works.
std::string RankActivity(const RankView& view);

// One rank a hang's evidence names (a laggard, or a process that stopped reporting while its
// peers report), and the line that says why.
struct Suspect {
  int rank = 0;
  std::string why;
};

// The checkpoint rule: a rank that waits for a peer writing a checkpoint is not hung. A program
// may save on one rank only (PyTorch's `if rank == 0: torch.save(...)`) while the others go on to
// the next collective and wait there, silent, for longer than their step allowance; their agents
// then report them hung, and the evidence names the saving rank (behind the front, not in a
// collective, and silent). A rank in the CHECKPOINT phase is watched by its own agent with the
// checkpoint allowance (--hang_checkpoint_timeout, or the job's watchdog.checkpoint_timeout), which
// reports it hung past that; until then it is not a culprit. A rank in EVAL is the same (rank 0
// evaluating behind a barrier, the phase named by the program: ringmaster.worker.phase("eval")),
// its own agent watching it with its EVAL allowance (the STEP one, or the busy one of a rank the
// Python watch says is outside any collective: agent/local_watchdog.h). So is a rank, heard
// lately, whose agent says it works outside any collective (StepSummary.working: its training
// thread runs; rank 0 evaluating alone in a program that names no phase), watched by its own agent
// with the busy allowance; once its thread stops (stuck, not working) it is blamed as before.
//
// `checkpointing`: the ranks whose latest report put them in CHECKPOINT or EVAL, or said they
// work, without the rank whose hang is being judged (its agent's report is the newer word on it).
// Returns the suspects to blame: those not in `checkpointing`. `*checkpoint_waits` gets the suspects left out; when it
// is not empty and nothing is returned, the evidence names only ranks writing a checkpoint: the
// report is a wait for it, not a hang. A rank truly stuck outside a checkpoint is still named
// (and only it, when both kinds are named).
std::vector<Suspect> OutsideCheckpoints(const std::vector<Suspect>& suspects,
                                        const std::set<int>& checkpointing,
                                        std::vector<int>* checkpoint_waits);

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_HANG_ANALYSIS_H_
