#include "trainer/comm/collective_stats.h"

#include "common/collective_ops.h"

namespace ringmaster::trainer {

static_assert(kCollectiveOpNames.size() == kCollectiveOps, "one name per CollectiveOp");

const char* CollectiveOpName(CollectiveOp op) {
  const auto i = static_cast<size_t>(op);
  return i < kCollectiveOpNames.size() ? kCollectiveOpNames[i] : "?";
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
