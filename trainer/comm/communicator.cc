#include "trainer/comm/communicator.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {

absl::Status Communicator::Run(CollectiveOp op, int64_t bytes,
                               const std::function<absl::Status()>& body) {
  entered_.fetch_add(1, std::memory_order_relaxed);
  device_seconds_ = -1;
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = body();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double seconds = device_seconds_ >= 0 ? device_seconds_ : wall;
  if (!status.ok()) {
    return Annotate(status, absl::StrCat(CollectiveOpName(op), " #", entered(), " on ", name_));
  }
  completed_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  totals_.Add(op, bytes, seconds);
  return absl::OkStatus();
}

absl::Status Communicator::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is not another rank of ", name_, " (size ", size_, ")"));
  }
  return absl::OkStatus();
}

absl::Status Communicator::AllReduce(Tensor data) {
  if (!CanReduce(data.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("all_reduce of ", DTypeName(data.dtype)));
  }
  return Run(CollectiveOp::kAllReduce, data.bytes(), [&] { return DoAllReduce(data); });
}

absl::Status Communicator::ReduceScatter(Tensor input, Tensor output) {
  if (input.size != output.size * size_ || input.dtype != output.dtype ||
      !CanReduce(input.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter of ", input.size, " into ",
                                                   output.size, " elements over ", size_,
                                                   " ranks"));
  }
  return Run(CollectiveOp::kReduceScatter, input.bytes(),
             [&] { return DoReduceScatter(input, output); });
}

absl::Status Communicator::AllGather(Tensor input, Tensor output) {
  if (output.size != input.size * size_ || input.dtype != output.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather of ", input.size, " into ",
                                                   output.size, " elements over ", size_,
                                                   " ranks"));
  }
  return Run(CollectiveOp::kAllGather, output.bytes(), [&] { return DoAllGather(input, output); });
}

absl::Status Communicator::Broadcast(Tensor data, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " outside ", name_));
  }
  return Run(CollectiveOp::kBroadcast, data.bytes(), [&] { return DoBroadcast(data, root); });
}

absl::Status Communicator::Send(Tensor data, int peer) {
  RETURN_IF_ERROR(CheckPeer(peer));
  return Run(CollectiveOp::kSend, data.bytes(), [&] { return DoSend(data, peer); });
}

absl::Status Communicator::Recv(Tensor data, int peer) {
  RETURN_IF_ERROR(CheckPeer(peer));
  return Run(CollectiveOp::kRecv, data.bytes(), [&] { return DoRecv(data, peer); });
}

absl::Status Communicator::Barrier() { return DoBarrier(); }

std::vector<OpTotals> Communicator::TakeTotals() {
  absl::MutexLock lock(&mu_);
  std::vector<OpTotals> out = totals_.NonZero();
  totals_.Clear();
  return out;
}

}  // namespace ringmaster::trainer
