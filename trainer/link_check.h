// The link check a rank runs when its generation starts (WatchdogSpec.link_check_*): it measures
// every link its communication groups rely on, so that a slow or corrupting link is named by its
// two ranks (and, at the coordinator, their nodes) before training depends on it.
//
// Which links: the ring edges of each group, rank i with rank i+1 (mod n): the neighbours a ring
// collective and the pipeline's sends use. Each edge is one Exchange in both directions at once,
// so every link is measured by both its ends. The edges are grouped into rounds in which every
// rank takes part in at most one (two rounds for an even ring, three for an odd one); all ranks
// go through the groups in the same order (the order given) and the rounds in order, so the
// check cannot deadlock and every member of a group issues the same number of operations.
//
// How: per edge, `warmup` untimed exchanges (they also bring both ends into step), then `iters`
// timed ones; the fastest is kept (nccl-tests keeps a mean, but a one-off check wants the link's
// capability, not the noise of a busy host). The last exchange's data is checked against the
// pattern the peer sends. Buffers come from the training device (GPU memory for NCCL groups).
// The operations count in the communicators' sequence numbers (hang blame stays consistent) but
// not in their totals: CheckLinks discards them, so the first step's bandwidth is its own.
#ifndef RINGMASTER_TRAINER_LINK_CHECK_H_
#define RINGMASTER_TRAINER_LINK_CHECK_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"
#include "trainer/model/device.h"

namespace ringmaster::trainer {

// A group to check: its communicator and its members' global ranks, in group-rank order.
struct LinkCheckGroup {
  Communicator* comm = nullptr;
  std::vector<int> members;
};

struct LinkCheckOptions {
  int64_t bytes = 4 << 20;  // sent each way per exchange (rounded up to whole floats)
  int warmup = 1;
  int iters = 3;
  // Fault injection (trainer --slow_link): each timed exchange between these two global ranks
  // starts `slow_delay_seconds` late on the lower one, so both ends measure the delay. -1: none.
  int slow_rank_a = -1, slow_rank_b = -1;
  double slow_delay_seconds = 0;
  // Fault injection (trainer --corrupt_link): global rank `corrupt_to` finds one element of what
  // it received from `corrupt_from` changed, as a corrupting link would deliver it. -1: none.
  int corrupt_from = -1, corrupt_to = -1;
};

// One edge as this rank measured it.
struct LinkResult {
  std::string group;
  int peer_rank = 0;  // global
  int64_t bytes = 0;
  double seconds = 0;  // the fastest timed exchange
  int64_t wrong = 0;   // elements received from the peer that differ from its pattern
};

// The ring edges of a group of `n` (as pairs of group ranks, the lower first), in rounds where
// no rank appears twice. n <= 1: none; n == 2: one edge.
std::vector<std::vector<std::pair<int, int>>> RingRounds(int n);

// Checks every edge this rank has in `groups`, in order. Every member of each group must call it
// with the same groups (its own communicators) and options. Errors are the communicators' (a
// lost peer, a timeout) or the device's; wrong data is a result, not an error.
absl::StatusOr<std::vector<LinkResult>> CheckLinks(Device& device,
                                                   const std::vector<LinkCheckGroup>& groups,
                                                   const LinkCheckOptions& options);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_LINK_CHECK_H_
