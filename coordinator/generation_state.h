// What the job manager knows of a job's current generation (one launch of its workers), in one
// value: a launch replaces it whole (GenerationState::Launched), so nothing of the previous
// generation's ranks can leak into the next one's. What outlives a generation (the job's status,
// events, checkpoint history, recovery measurement, node exclusions) stays in JobManager::Job.
//
// Threading: a plain value; the job manager guards it with its job lock, like the job holding it.
// Ownership: owns its straggler detector and link check. Errors: none.
#ifndef RINGMASTER_COORDINATOR_GENERATION_STATE_H_
#define RINGMASTER_COORDINATOR_GENERATION_STATE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/hang_analysis.h"
#include "coordinator/link_analysis.h"
#include "coordinator/link_watch.h"
#include "coordinator/straggler_detector.h"
#include "proto/ringmaster/v1/agent.pb.h"
#include "proto/ringmaster/v1/coordinator.pb.h"

namespace ringmaster::coordinator {

struct GenerationState {
  // A freshly launched generation of `world` ranks, its stragglers judged by `straggler_threshold`
  // (spec.watchdog.straggler_threshold).
  static GenerationState Launched(int world, double straggler_threshold);
  // The generation a coordinator restart finds running: its ranks' progress starts at 0 and no
  // straggler is judged until the job's next launch.
  static GenerationState Recovered(int world);

  // Ranks that exited 0.
  std::set<int> finished_ranks;
  // Each rank's latest step and (one rank per data-parallel replica) tokens per second.
  std::vector<int64_t> rank_step;
  std::vector<double> rank_tokens_per_second;
  // Each rank's figures from its latest step summary (GetJob's RankLiveState fields
  // step_seconds_p50 to mfu), by rank; absent before its first step.
  std::map<int, v1::RankLiveState> rank_figures;
  // A recovered running job's ranks that no registration has reported yet (running, or exited),
  // by node.
  std::map<std::string, std::set<int>> awaiting;

  // Watchdog: the last reported collective sequence numbers, by rank, and since when each
  // rank's have held (RankLiveState.activity tells a wait from a sample of a step by it).
  std::map<int, RankCollectives> collectives;
  std::map<int, absl::Time> numbers_since;
  // Each rank's phase as its latest summary said (hang_analysis.h's checkpoint rule).
  std::map<int, v1::WorkerPhase> phase;
  // Ranks whose latest summary said their watch ended (StepSummary.unwatched): not in `phase`,
  // `collectives` or `last_heard` until they report again.
  std::set<int> unwatched;
  // Ranks whose latest summary said they work outside any collective (StepSummary.working: rank
  // 0 evaluating alone while its peers wait for it): not blamed for their peers' wait while heard
  // (hang_analysis.h).
  std::set<int> working;
  // The stalled Python ranks' training-thread stacks (StepSummary.stack: one frame per line,
  // outermost first), by rank; a rank that moves again, or exited, is not here. GetJob shows
  // them; a hang that blames such a rank adds a "stack" event.
  std::map<int, std::string> stacks;
  // Each rank's mean seconds per step waiting for its next batch, from its last summaries that
  // covered steps (StepSummary.mean_input_seconds; at most kInputWindow, newest last): what
  // tells an input-bound straggler. A rank that exited or whose watch ended is not here.
  static constexpr size_t kInputWindow = 8;  // the straggler detector's window
  std::map<int, std::deque<double>> input_seconds;
  // When each rank's last summary arrived, or, after a coordinator restart, when its node
  // registered again listing it running (a stopped rank sends nothing more and must still count
  // as silent).
  std::map<int, absl::Time> last_heard;
  // When this coordinator began to hear the generation's ranks: for a recovered job, the latest
  // re-registration of one of its nodes (InfinitePast otherwise). A hang reported sooner than the
  // evidence wait after it waits for evidence, however long ago the hang began.
  absl::Time heard_from = absl::InfinitePast();
  std::unique_ptr<StragglerDetector> stragglers;  // null: not judged
  // The hang reports waiting for evidence of whom to blame, by reported rank: its node, the
  // report, and when the hang began. Each is decided on its own (a second report is never dropped
  // while a first waits: the first may be set aside by the checkpoint rule).
  struct PendingHang {
    std::string node;
    v1::WorkerState state;
    absl::Time began;
    absl::Time decide_by;  // blame whoever the evidence names by then
  };
  std::map<int, PendingHang> pending_hangs;
  // The hang reports set aside by the checkpoint rule, by reported rank. The agent reports that
  // rank again only once it reports again, so the coordinator judges it again itself: dropped
  // when the rank steps on, changes phase or its sequence numbers move; once none of the ranks
  // it waited for is in CHECKPOINT or EVAL or working any more, held again (pending_hangs) if the
  // rank stays silent as long again as when it was reported.
  struct SetAsideHang {
    PendingHang report;
    int64_t step = 0;                                      // the rank's step when set aside
    v1::WorkerPhase phase = v1::WORKER_PHASE_UNSPECIFIED;  // and its summaries' phase
    // When none of `waits_for` was in CHECKPOINT or EVAL or working.
    absl::Time checkpoints_over = absl::InfiniteFuture();
    // The rank's sequence numbers when set aside; other ones mean the wait ended.
    RankCollectives collectives;
    std::vector<int> waits_for;  // the ranks the evidence named that were checkpointing or working
  };
  std::map<int, SetAsideHang> set_aside_hangs;
  bool resumed = false;  // the reference rank's start step reached the goodput

  // Checkpoints: the newest committed one when the generation was launched (reported, or stored
  // with the previous generation's progress after a coordinator restart): where it should
  // resume.
  int64_t checkpoint_at_launch = -1;
  // What the job had when the generation was launched, for the steps a restart lost: the step its
  // predecessor trained to (that of the latest generation that stepped; 0 before any did), and
  // the saves that had failed since the newest committed checkpoint (how many, the last one's
  // step and error).
  struct AtLaunch {
    int64_t trained = 0;
    int64_t failures = 0;
    int64_t last_failed = 0;
    std::string last_error;
  };
  AtLaunch at_launch;
  // The furthest step a rank reported (its summaries, its exit).
  int64_t furthest_step = 0;
  // The step the generation resumed from (rank 0's report; 0 until then).
  int64_t start_step = 0;
  // What the generation lost of what its predecessor trained, said by its "recovered" event.
  std::string steps_lost;
  // The newest checkpoint step whose failed save was counted in this generation (its ranks'
  // reports of it, or of older ones, are not counted again).
  int64_t failed_checkpoint_step = 0;

  // The latest link check (made by its first report; a later step's replaces it), and each
  // rank's start-up check seconds (a recovery phase).
  std::unique_ptr<LinkCheckCollector> link_check;
  std::map<int, double> start_link_check_seconds;
  // When to check the links unasked (job_manager_links.cc; null until the generation stepped, and
  // for jobs without the automatic check).
  std::unique_ptr<LinkWatch> link_watch;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_GENERATION_STATE_H_
