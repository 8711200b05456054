#include "trainer/link_check.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// What global rank `rank` sends at element i: integers below 2^24, exact in fp32, that differ
// between ranks and along the buffer (so a shifted, truncated or foreign buffer is caught).
float Pattern(int rank, int64_t i) {
  const uint64_t v =
      (static_cast<uint64_t>(rank) + 1) * 1000003u + static_cast<uint64_t>(i) * 7919u;
  return static_cast<float>(v % (uint64_t{1} << 24));
}

// Runs the exchanges of one edge with `peer` (group rank; `peer_rank` global) and measures them.
absl::StatusOr<LinkResult> MeasureEdge(Device& device, Communicator& comm, int peer, int me,
                                       int peer_rank, const LinkCheckOptions& options,
                                       const DeviceBuffer& send, const DeviceBuffer& recv,
                                       std::vector<float>& host) {
  // Fault injection only: a fixed delay on one end (a delay proportional to the measured time,
  // which includes waiting for the peer, would compound from one exchange to the next).
  const bool delayed = options.slow_delay_seconds > 0 && me < peer_rank &&
                       ((me == options.slow_rank_a && peer_rank == options.slow_rank_b) ||
                        (me == options.slow_rank_b && peer_rank == options.slow_rank_a));
  for (int i = 0; i < options.warmup; ++i) {
    RETURN_IF_ERROR(comm.Exchange(send.tensor(), recv.tensor(), peer));
  }
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < std::max(1, options.iters); ++i) {
    const auto start = Clock::now();
    if (delayed) {
      std::this_thread::sleep_for(std::chrono::duration<double>(options.slow_delay_seconds));
    }
    RETURN_IF_ERROR(comm.Exchange(send.tensor(), recv.tensor(), peer));
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  RETURN_IF_ERROR(device.CopyToHost(host.data(), recv.tensor()));
  if (me == options.corrupt_to && peer_rank == options.corrupt_from) host[0] += 1;
  LinkResult result;
  result.group = comm.name();
  result.peer_rank = peer_rank;
  result.bytes = static_cast<int64_t>(recv.tensor().bytes());
  result.seconds = best;
  for (int64_t i = 0; i < static_cast<int64_t>(host.size()); ++i) {
    result.wrong += host[i] != Pattern(peer_rank, i);
  }
  return result;
}

}  // namespace

std::vector<std::vector<std::pair<int, int>>> RingRounds(int n) {
  if (n <= 1) return {};
  if (n == 2) return {{{0, 1}}};
  // Edge i joins i and i+1 (mod n). Even-numbered edges share no rank, nor do odd-numbered ones;
  // in an odd ring the last edge (n-1, 0) meets edge 0, so it takes a round of its own.
  std::vector<std::vector<std::pair<int, int>>> rounds(n % 2 == 0 ? 2 : 3);
  for (int i = 0; i < n; ++i) {
    const int j = (i + 1) % n;
    const int round = (n % 2 == 1 && i == n - 1) ? 2 : i % 2;
    rounds[round].push_back({std::min(i, j), std::max(i, j)});
  }
  return rounds;
}

absl::StatusOr<std::vector<LinkResult>> CheckLinks(Device& device,
                                                   const std::vector<LinkCheckGroup>& groups,
                                                   const LinkCheckOptions& options) {
  std::vector<LinkResult> results;
  const int64_t count = std::max<int64_t>(1, (options.bytes + 3) / 4);
  DeviceBuffer send, recv;
  std::vector<float> host;
  for (const LinkCheckGroup& group : groups) {
    Communicator& comm = *group.comm;
    if (static_cast<int>(group.members.size()) != comm.size()) {
      return absl::InvalidArgumentError(absl::StrCat("group ", comm.name(), " has ", comm.size(),
                                                     " members, ", group.members.size(),
                                                     " global ranks given"));
    }
    if (comm.size() < 2) continue;
    const int me = group.members[comm.rank()];
    if (send.tensor().empty()) {
      ASSIGN_OR_RETURN(send, device.Allocate(count, DType::kF32));
      ASSIGN_OR_RETURN(recv, device.Allocate(count, DType::kF32));
      host.resize(count);
    }
    for (int64_t i = 0; i < count; ++i) host[i] = Pattern(me, i);
    RETURN_IF_ERROR(device.CopyToDevice(send.tensor(), host.data()));
    for (const auto& round : RingRounds(comm.size())) {
      for (const auto& [a, b] : round) {
        if (a != comm.rank() && b != comm.rank()) continue;
        const int peer = a == comm.rank() ? b : a;
        ASSIGN_OR_RETURN(LinkResult r, MeasureEdge(device, comm, peer, me, group.members[peer],
                                                   options, send, recv, host));
        results.push_back(std::move(r));
      }
    }
    (void)comm.TakeTotals();  // probe traffic, not the training's: kept out of the step totals
  }
  return results;
}

}  // namespace ringmaster::trainer
