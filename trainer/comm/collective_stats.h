// What a communicator measures about its collectives: per-operation counts, bytes and seconds,
// turned into bandwidth with nccl-tests' definitions, and per-communicator sequence numbers
// (the n-th collective entered / completed) that tell which rank did not reach a collective the
// others wait in.
//
// Bandwidth (nccl-tests, doc/PERFORMANCE.md):
//   algbw = size / time, where size is the bytes of the full buffer: the all-reduce buffer,
//           the all-gather output, the reduce-scatter input, the broadcast or point-to-point
//           buffer;
//   busbw = algbw * 2(n-1)/n for all-reduce, * (n-1)/n for all-gather and reduce-scatter,
//           * 1 for broadcast, send and recv.
#ifndef RINGMASTER_TRAINER_COMM_COLLECTIVE_STATS_H_
#define RINGMASTER_TRAINER_COMM_COLLECTIVE_STATS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ringmaster::trainer {

// In the order of common/collective_ops.h's kCollectiveOpNames.
enum class CollectiveOp { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSend, kRecv };
constexpr int kCollectiveOps = 6;

// The op's name in kCollectiveOpNames: "all_reduce", "reduce_scatter", ...
const char* CollectiveOpName(CollectiveOp op);
// busbw / algbw for `op` over `ranks` ranks.
double BusBandwidthFactor(CollectiveOp op, int ranks);

// Totals of one operation over a period.
struct OpTotals {
  CollectiveOp op = CollectiveOp::kAllReduce;
  int64_t count = 0;
  int64_t bytes = 0;
  double seconds = 0;
  double algbw() const { return seconds > 0 ? bytes / seconds : 0; }
};

// Accumulates OpTotals per operation. Not thread-safe (the communicator guards it).
class CollectiveTotals {
 public:
  void Add(CollectiveOp op, int64_t bytes, double seconds);
  // The operations with count > 0, in CollectiveOp order.
  std::vector<OpTotals> NonZero() const;
  void Clear() { totals_ = {}; }

 private:
  std::array<OpTotals, kCollectiveOps> totals_{};
};

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_COMM_COLLECTIVE_STATS_H_
