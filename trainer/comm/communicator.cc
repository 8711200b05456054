#include "trainer/comm/communicator.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

int64_t Bytes(const Tensor& t) { return static_cast<int64_t>(t.bytes()); }

thread_local double thread_seconds = 0;  // Communicator::ThreadSeconds
thread_local int thread_depth = 0;       // operations under way on this thread (nested: shm)

}  // namespace

double Communicator::ThreadSeconds() { return thread_seconds; }

void Communicator::CountThreadWait(double seconds) {
  if (thread_depth == 0) thread_seconds += seconds;
}

absl::Status Communicator::Run(std::vector<Counted> counted,
                               const std::function<absl::Status()>& body) {
  entered_.fetch_add(1, std::memory_order_relaxed);
  device_seconds_ = -1;
  const auto start = std::chrono::steady_clock::now();
  ++thread_depth;
  absl::Status status = body();
  --thread_depth;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double seconds = device_seconds_ >= 0 ? device_seconds_ : wall;
  if (thread_depth == 0) thread_seconds += seconds;  // an operation inside another counts once
  if (!status.ok()) {
    const char* what = counted.empty()       ? "any_of"
                       : counted.size() == 1 ? CollectiveOpName(counted[0].op)
                                             : "exchange";
    return Annotate(status, absl::StrCat(what, " #", entered(), " on ", name_));
  }
  completed_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  for (const Counted& c : counted) totals_.Add(c.op, c.bytes, seconds);
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
  return Run({{CollectiveOp::kAllReduce, Bytes(data)}}, [&] { return DoAllReduce(data); });
}

absl::Status Communicator::ReduceScatter(Tensor input, Tensor output) {
  if (input.size != output.size * size_ || input.dtype != output.dtype ||
      !CanReduce(input.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter of ", input.size, " into ",
                                                   output.size, " elements over ", size_,
                                                   " ranks"));
  }
  return Run({{CollectiveOp::kReduceScatter, Bytes(input)}},
             [&] { return DoReduceScatter(input, output); });
}

absl::Status Communicator::AllGather(Tensor input, Tensor output) {
  if (output.size != input.size * size_ || input.dtype != output.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather of ", input.size, " into ",
                                                   output.size, " elements over ", size_,
                                                   " ranks"));
  }
  return Run({{CollectiveOp::kAllGather, Bytes(output)}},
             [&] { return DoAllGather(input, output); });
}

absl::Status Communicator::Broadcast(Tensor data, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " outside ", name_));
  }
  return Run({{CollectiveOp::kBroadcast, Bytes(data)}}, [&] { return DoBroadcast(data, root); });
}

absl::Status Communicator::Send(Tensor data, int peer) {
  RETURN_IF_ERROR(CheckPeer(peer));
  return Run({{CollectiveOp::kSend, Bytes(data)}}, [&] { return DoSend(data, peer); });
}

absl::Status Communicator::Recv(Tensor data, int peer) {
  RETURN_IF_ERROR(CheckPeer(peer));
  return Run({{CollectiveOp::kRecv, Bytes(data)}}, [&] { return DoRecv(data, peer); });
}

absl::Status Communicator::Exchange(Tensor send, Tensor recv, int peer) {
  RETURN_IF_ERROR(CheckPeer(peer));
  return Run({{CollectiveOp::kSend, Bytes(send)}, {CollectiveOp::kRecv, Bytes(recv)}},
             [&] { return DoExchange(send, recv, peer); });
}

absl::Status Communicator::Barrier() { return DoBarrier(); }

absl::Status Communicator::AnyOf(absl::Span<bool> flags) {
  float votes[8];
  if (flags.empty() || flags.size() > 8) {
    return absl::InvalidArgumentError(absl::StrCat("AnyOf takes 1 to 8 flags, got ", flags.size()));
  }
  for (size_t i = 0; i < flags.size(); ++i) votes[i] = flags[i] ? 1.0f : 0.0f;
  const int64_t n = static_cast<int64_t>(flags.size());
  RETURN_IF_ERROR(Run({}, [&] { return DoAllReduce(Tensor{votes, n, DType::kF32}); }));
  for (size_t i = 0; i < flags.size(); ++i) flags[i] = votes[i] > 0;
  return absl::OkStatus();
}

std::vector<OpTotals> Communicator::TakeTotals() {
  absl::MutexLock lock(&mu_);
  std::vector<OpTotals> out = totals_.NonZero();
  totals_.Clear();
  return out;
}

}  // namespace ringmaster::trainer
