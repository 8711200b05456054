// Straggler detection for one job: a rank whose compute time (the time it spends before and
// between collectives, which a slow rank stretches and its peers do not) stays above its
// group's by a factor is a straggler. The job manager's groups are pipeline stages: a stage's
// ranks (its data- and tensor-parallel peers) run the same layers on equal shares of the work. Pure
// logic; the job manager feeds it the agents' step summaries.
//
// Each summary brings a rank's mean compute seconds over the steps since its previous summary.
// A rank's level is the median of its last `window` samples; its ratio is that level over the
// median of the other ranks' levels in its group (leave-one-out, so a group of two compares the
// two directly). A rank is flagged after `hysteresis` consecutive samples with ratio >=
// `threshold`, and cleared after `hysteresis` consecutive samples with ratio below
// 1 + (threshold - 1) / 2. Ranks with fewer than `min_samples` samples, and groups where no
// other rank has them, are not judged. A rank alone in its group (a pipeline stage of a job
// without data or tensor parallelism: stages run different layers, so their times cannot be
// compared) is judged by how much it slowed down instead: its level over its own baseline (its
// level once it had `min_samples` + `window` samples; the first `min_samples` are warm-up), over
// the median of the same for the other lone ranks (the other stages), so a stage that became
// slower than it was is flagged, and a slowdown of every stage (longer sequences, a busier
// host) is not.
//
// A straggler slows its group by its excess compute (its level less what its peers' suggest):
// the time they wait for it. An excess under `min_step_share` of the rank's step time (the
// median of its last `window` step times, when the summaries give them) delays nothing that
// matters, whatever the ratio: when a slow link makes the steps almost all waiting, a rank's
// sub-millisecond compute varies by more than the threshold with a busy host's scheduling, and
// must not be blamed. Such a sample counts towards clearing a flag, not towards setting one.
//
// Not thread-safe (the job manager's lock guards it).
#ifndef RINGMASTER_COORDINATOR_STRAGGLER_DETECTOR_H_
#define RINGMASTER_COORDINATOR_STRAGGLER_DETECTOR_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>

namespace ringmaster::coordinator {

// Defaults: a rank must be over the threshold in 5 consecutive summaries (about 5 s with the
// agents' 1 s summaries) judged on medians of 8, after 5 samples: conservative on purpose, since
// CPU contention on shared hosts makes any rank slow for a few seconds (tests on an
// oversubscribed 2-core machine flagged clean runs with 3-of-3 on medians of 5).
struct StragglerOptions {
  double threshold = 1.2;  // spec.watchdog.straggler_threshold
  int window = 8;
  int min_samples = 5;
  int hysteresis = 5;
  double min_step_share = 0.05;  // excess compute under this share of the step: not a straggler
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options) : options_(options) {}

  // A change of a rank's flag.
  struct Change {
    int rank = 0;
    bool flagged = false;
    double ratio = 0;
    bool against_baseline = false;  // alone in its group: judged by its slowdown (see above)
  };

  // Records a sample of `rank` in group `group`, of `group_size` ranks, and judges the rank;
  // returns a change of its flag, if any. Samples <= 0 are ignored. `step_seconds` (the rank's
  // latest step time; 0: unknown, then the excess is not weighed against it) for
  // min_step_share. `step` (the rank's latest step; 0: unknown, not checked): a sample whose
  // step is not after the rank's previous sample's covers no new step (a summary repeated while
  // training is held, e.g. through a link check) and is ignored.
  std::optional<Change> Add(int rank, int group, int group_size, double mean_compute_seconds,
                            double step_seconds = 0, int64_t step = 0);

  bool flagged(int rank) const;
  // The rank's last ratio (0 before it was judged).
  double ratio(int rank) const;
  // The rank's level: the median of its last `window` samples (0 before its first).
  double level(int rank) const;
  // Ranks judged so far, with their ratios.
  const std::map<int, double>& ratios() const { return ratios_; }

 private:
  struct Rank {
    int group = 0;
    bool alone = false;  // its group has no other rank
    std::deque<double> samples;
    std::deque<double> step_samples;  // its step times (those > 0), the last `window`
    int64_t count = 0;      // samples ever
    int64_t last_step = 0;  // the step of its latest sample (0: unknown)
    double baseline = 0;    // alone in its group: its level after warm-up (0: not yet)
    bool flagged = false;
    int streak = 0;  // consecutive samples pointing at the opposite of `flagged`
  };
  double Level(const Rank& r) const;

  const StragglerOptions options_;
  std::map<int, Rank> ranks_;
  std::map<int, double> ratios_;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_STRAGGLER_DETECTOR_H_
