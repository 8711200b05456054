// Flap damping: a node lost again and again (a flaky NIC, a crash-looping agent, a host that keeps
// rebooting) is *settling* once it registers again, for a hold that doubles with each of its
// recent losses. The job manager neither grows a shrunk elastic job onto a settling node nor takes
// it as a hot spare: those moves are voluntary, and each one onto a node that drops again costs
// the job a checkpoint and two restarts. Other placements keep off it while other capacity fits
// (scheduler.h's PlaceBehind).
//
// The rule (FlapDamping): the losses that count are those within `window` of now. With fewer than
// 2 a node is never settling (one loss is a reboot, or a maintenance restart). With n >= 2 it is
// settling until `hold` x 2^(n-2), at most `window`, after its latest registration. Losses age out
// of the window, so a node that stays up settles sooner, and is forgiven in full after `window`.
// A zero `hold` turns damping off. A node that said it was leaving before its stream ended (a
// planned restart) is not counted lost (NodeManager).
//
// Threading: FlapHistory is a plain value; its owner (NodeManager) guards it. Ownership: none.
// Errors: none (times are taken as given; a loss earlier than one recorded is kept in order).
#ifndef RINGMASTER_COORDINATOR_FLAP_DAMPING_H_
#define RINGMASTER_COORDINATOR_FLAP_DAMPING_H_

#include <deque>
#include <optional>

#include "absl/time/time.h"

namespace ringmaster::coordinator {

struct FlapDamping {
  absl::Duration window = absl::Minutes(30);
  absl::Duration hold = absl::Minutes(1);
};

// The hold after `losses` losses within the window: zero below 2 (or with a zero `hold`).
absl::Duration SettleHold(int losses, const FlapDamping& damping);

// One node's losses and latest registration.
class FlapHistory {
 public:
  // The node was declared lost at `at`. Keeps at most kMaxLosses, dropping those older than the
  // window before `at`.
  void Lost(absl::Time at, const FlapDamping& damping);
  // The node registered (again) at `at`.
  void Registered(absl::Time at) { registered_ = at; }

  // Its losses within the window before `now`.
  int RecentLosses(absl::Time now, const FlapDamping& damping) const;
  // When it stops settling, if it is settling at `now` (a node that never registered is not).
  std::optional<absl::Time> SettlingUntil(absl::Time now, const FlapDamping& damping) const;

  // More losses in a window than any hold needs to reach its cap (2^62 x 1 ns).
  static constexpr int kMaxLosses = 64;

 private:
  std::deque<absl::Time> losses_;  // ascending
  std::optional<absl::Time> registered_;
};

}  // namespace ringmaster::coordinator

#endif  // RINGMASTER_COORDINATOR_FLAP_DAMPING_H_
