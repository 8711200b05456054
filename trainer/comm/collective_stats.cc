#include "trainer/comm/collective_stats.h"

namespace ringmaster::trainer {

const char* CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return "all_reduce";
    case CollectiveOp::kReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::kAllGather:
      return "all_gather";
    case CollectiveOp::kBroadcast:
      return "broadcast";
    case CollectiveOp::kSend:
      return "send";
    case CollectiveOp::kRecv:
      return "recv";
  }
  return "?";
}

double BusBandwidthFactor(CollectiveOp op, int ranks) {
  const double n = ranks;
  switch (op) {
    case CollectiveOp::kAllReduce:
      return 2.0 * (n - 1) / n;
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllGather:
      return (n - 1) / n;
    case CollectiveOp::kBroadcast:
    case CollectiveOp::kSend:
    case CollectiveOp::kRecv:
      return 1.0;
  }
  return 1.0;
}

void CollectiveTotals::Add(CollectiveOp op, int64_t bytes, double seconds) {
  OpTotals& t = totals_[static_cast<int>(op)];
  t.op = op;
  t.count += 1;
  t.bytes += bytes;
  t.seconds += seconds;
}

std::vector<OpTotals> CollectiveTotals::NonZero() const {
  std::vector<OpTotals> out;
  for (const OpTotals& t : totals_) {
    if (t.count > 0) out.push_back(t);
  }
  return out;
}

}  // namespace ringmaster::trainer
