#include "trainer/cuda/collective_buffers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ringmaster::trainer {
namespace {

uintptr_t Begin(ByteRange r) { return reinterpret_cast<uintptr_t>(r.data); }
uintptr_t End(ByteRange r) { return Begin(r) + r.bytes; }

bool Overlap(ByteRange a, ByteRange b) {
  return !a.empty() && !b.empty() && Begin(a) < End(b) && Begin(b) < End(a);
}

size_t Align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

absl::Status CheckAliasing(CollectiveOp op, ByteRange in, ByteRange out, int rank) {
  if (!Overlap(in, out)) return absl::OkStatus();
  bool allowed = false;
  switch (op) {
    case CollectiveOp::kAllReduce:
    case CollectiveOp::kBroadcast:
      allowed = Begin(in) == Begin(out) && in.bytes == out.bytes;
      break;
    case CollectiveOp::kReduceScatter:
      allowed =
          Begin(out) == Begin(in) + static_cast<uintptr_t>(rank) * out.bytes && End(out) <= End(in);
      break;
    case CollectiveOp::kAllGather:
      allowed =
          Begin(in) == Begin(out) + static_cast<uintptr_t>(rank) * in.bytes && End(in) <= End(out);
      break;
    case CollectiveOp::kSend:
    case CollectiveOp::kRecv:
      allowed = false;
      break;
  }
  if (allowed) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(CollectiveOpName(op),
                   " with overlapping input and output that is not NCCL's in-place "
                   "layout for rank ",
                   rank));
}

StagingPlan PlanStaging(ByteRange in, ByteRange out) {
  StagingPlan plan;
  if (in.empty() && out.empty()) return plan;
  if (in.empty()) {
    plan.bytes = out.bytes;
    return plan;
  }
  if (out.empty()) {
    plan.bytes = in.bytes;
    return plan;
  }
  if (Overlap(in, out)) {
    const uintptr_t lo = std::min(Begin(in), Begin(out));
    plan.bytes = std::max(End(in), End(out)) - lo;
    plan.in_offset = Begin(in) - lo;
    plan.out_offset = Begin(out) - lo;
    return plan;
  }
  plan.in_offset = 0;
  plan.out_offset = Align256(in.bytes);
  plan.bytes = plan.out_offset + out.bytes;
  return plan;
}

}  // namespace ringmaster::trainer
