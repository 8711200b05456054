// Unasked link localisation for one generation of a builtin-trainer job: watches the ranks' step
// summaries and says when the coordinator should run the link check (link_analysis.h) by itself,
// because the job's step time rose above its own recent baseline with no compute slowdown to
// explain it (so the collectives got slower: the same bytes per step at a lower bandwidth), and
// when to run a confirming check because the step time came back. Pure logic; the job manager
// feeds it (job_manager_watchdog.cc) and sends the checks (job_manager_links.cc).
//
// Samples: one per step summary that covers steps (an agent forwards at most one a second per
// rank): the mean wall seconds and mean compute seconds of the steps it covers (compute excludes
// time blocked on peers, worker.proto; the job manager passes the last step's from an agent that
// sends no means). The first `warmup_steps` steps after the generation's first sample are
// ignored (start-up, the start-up link check, first-touch allocation).
//
// Windows: the recent window holds the samples of the last `window` of time, extended back to
// cover at least `window_steps` distinct steps (a job of 10 s steps has few samples in 5 s; a tiny
// job of 5 ms steps has 4 a second per 4 ranks). Samples older than the recent window move into
// the baseline (the newest `baseline_samples`) while the job is healthy; while it is degraded the
// baseline is frozen, so a slow link never becomes the norm; while the step time is up but compute
// explains it (below), too, until that lasted baseline_samples judgements: then the baseline is
// learnt again from the new normal. Judged only with `min_samples` in the
// window and twice that in the baseline.
//
// Drop: median step seconds of the window >= rise_ratio x the baseline's, while no rank's compute
// (its window median minus its baseline median) rose by compute_share of the step-time rise or
// more: the job becomes degraded and one check is owed. A compute straggler is such a rank (its
// peers wait for it in the collectives); the straggler detector's flag itself is not used: it
// compares a rank with its peers, not with itself, and a false flag (CPU contention on a shared
// host) must not hide a slow link.
// Recovery: degraded, the window's median <= recover_ratio x the baseline's: healthy again, and a
// confirming check is owed if a drop's check was sent since the last confirming one (a drop that
// ended before its check could run is not checked). At most one check per drop and one per
// recovery, never two within `min_interval`: an owed check waits for the interval (a drop that
// outlasts it is checked once, not again and again).
//
// Not thread-safe (the job manager's lock guards it). Errors: none; samples with a step time
// <= 0 are ignored.
#ifndef RINGMASTER_COORDINATOR_LINK_WATCH_H_
#define RINGMASTER_COORDINATOR_LINK_WATCH_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace ringmaster::coordinator {

struct LinkWatchOptions {
  absl::Duration window = absl::Seconds(5);
  int window_steps = 4;
  int min_samples = 8;
  int baseline_samples = 256;
  int warmup_steps = 5;
  double rise_ratio = 1.5;
  double recover_ratio = 1.2;
  double compute_share = 0.5;
  absl::Duration min_interval = absl::Seconds(60);  // spec.watchdog.auto_link_check_interval
};

struct LinkWatchSample {
  int rank = 0;
  int64_t step = 0;
  double step_seconds = 0;
  double compute_seconds = 0;
};

class LinkWatch {
 public:
  explicit LinkWatch(LinkWatchOptions options) : options_(options) {}

  // What to do now: run a check because the step time dropped (kDrop), or to confirm it came back
  // (kRecovered); `why` says it in one clause ("step time 0.52 s is 5.10x ...").
  struct Trigger {
    enum Kind { kDrop, kRecovered } kind = kDrop;
    std::string why;
  };

  // Records `sample`, received at `now`, and judges the job. Returns the check owed, if one is
  // owed and the rate limit allows it now; the caller then calls Sent(now) once it sent the check,
  // or leaves it owed (the next sample returns it again).
  std::optional<Trigger> Add(const LinkWatchSample& sample, absl::Time now);
  // The owed check was sent at `now`: it is no longer owed, and the next waits min_interval. The
  // window starts afresh (the steps before the check are not the ones after it).
  void Sent(absl::Time now);
  // A complete check named no slow link. Degraded, the slowdown is not a link's that the check
  // can see (every link of a kind alike, or not the network): the job is healthy again, and the
  // level of that drop becomes a floor the next drop is measured from (a link that slows right
  // after is still seen); the floor goes when the step time returns to the learnt baseline, and
  // becomes the learnt baseline if it lasts baseline_samples judgements. Otherwise nothing.
  void NothingFound();

  bool degraded() const { return degraded_; }
  // The baseline's median step seconds, or the floor a check that found nothing set above it (0
  // before the baseline has enough samples).
  double baseline_step_seconds() const;

 private:
  struct Timed {
    LinkWatchSample sample;
    absl::Time at;
  };
  // Moves the samples older than the recent window out of recent_ (into the baseline while
  // healthy).
  void Slide(absl::Time now);
  // The median of the learnt baseline's samples (0 before it has enough).
  double LearntBaseline() const;
  // Whether compute explains a step-time rise of `rise` seconds.
  bool ComputeExplains(double rise) const;

  const LinkWatchOptions options_;
  std::optional<int64_t> first_step_;
  std::deque<Timed> recent_;          // ascending arrival
  std::deque<LinkWatchSample> base_;  // ascending arrival, at most baseline_samples
  bool degraded_ = false;
  // Slower than the baseline, but compute explains it, in the last `elevated_for_`
  // judgements in a row.
  bool elevated_ = false;
  int elevated_for_ = 0;
  double floor_ = 0;          // the level of a drop no link explained (0: none)
  double drop_level_ = 0;     // the window's level when the last drop was judged
  bool unconfirmed_ = false;  // a drop's check was sent, and no confirming check since
  std::optional<Trigger> owed_;
  absl::Time last_sent_ = absl::InfinitePast();
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_LINK_WATCH_H_
