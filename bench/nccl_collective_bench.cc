// nccl-tests-style sweep of the NCCL communicator on this machine's GPUs: one rank per GPU (a
// thread each, rendezvous through an in-memory store), device buffers, every operation of the
// Communicator interface that the trainer uses. One GPU works too (NCCL's one-rank collectives
// are local copies: the figures are then copy bandwidth, useful only as a smoke test).
//
// Per operation and size: warm-up iterations (not timed), then timed ones, the data of the
// last one checked. Columns: wall time per iteration (each operation returns when it has
// completed on the GPU), averaged over ranks as nccl-tests does, with algbw and busbw from it;
// and the busbw the communicator itself records for step reports (its collectives timed with
// CUDA events on its stream), so the two measurements can be compared.
//
//   bazel run -c opt //bench:nccl_collective_bench -- --max_bytes=268435456
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cuda_device_count.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "trainer/comm/key_value_store.h"
#include "trainer/cuda/cuda_device.h"
#include "trainer/cuda/nccl_communicator.h"

ABSL_FLAG(int, gpus, 0, "GPUs (ranks) to use; 0: every visible GPU.");
ABSL_FLAG(int64_t, min_bytes, 1 << 10, "Smallest buffer.");
ABSL_FLAG(int64_t, max_bytes, 256 << 20, "Largest buffer.");
ABSL_FLAG(int, factor, 4, "Size multiplier between rows.");
ABSL_FLAG(int, warmup, 5, "Warm-up iterations per size.");
ABSL_FLAG(int, iters, 20, "Timed iterations per size.");
ABSL_FLAG(std::string, ops, "all_reduce,all_gather,reduce_scatter,broadcast",
          "Operations to sweep.");
ABSL_FLAG(double, timeout, 120, "Seconds any operation may take.");

namespace ringmaster::trainer {
namespace {

float Value(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 13); }

struct Row {
  std::string op;
  int64_t bytes = 0, count = 0;
  double seconds = 0;        // wall, mean per iteration
  double event_seconds = 0;  // the communicator's own (event-timed) seconds per iteration
  int64_t wrong = 0;
};

CollectiveOp OpOf(const std::string& name) {
  if (name == "all_gather") return CollectiveOp::kAllGather;
  if (name == "reduce_scatter") return CollectiveOp::kReduceScatter;
  if (name == "broadcast") return CollectiveOp::kBroadcast;
  return CollectiveOp::kAllReduce;
}

// One rank's sweep.
absl::StatusOr<std::vector<Row>> Sweep(int rank, int n, KeyValueStore* store) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device, MakeCudaDevice(rank));
  ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> comm,
      ConnectNccl("bench", rank, n, store,
                  NcclOptionsFor(*device, absl::Seconds(absl::GetFlag(FLAGS_timeout)))));
  std::vector<Row> rows;
  for (absl::string_view op_view :
       absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipEmpty())) {
    const std::string op(op_view);
    for (int64_t bytes = absl::GetFlag(FLAGS_min_bytes); bytes <= absl::GetFlag(FLAGS_max_bytes);
         bytes *= std::max(2, absl::GetFlag(FLAGS_factor))) {
      const int64_t count = std::max<int64_t>(n, bytes / 4 / n * n);  // full-buffer elements
      const int64_t chunk = count / n;
      ASSIGN_OR_RETURN(DeviceBuffer a, device->Allocate(count, DType::kF32));
      ASSIGN_OR_RETURN(DeviceBuffer b, device->Allocate(count, DType::kF32));
      std::vector<float> host(count);
      for (int64_t i = 0; i < count; ++i) host[i] = Value(rank, i);
      auto once = [&]() -> absl::Status {
        if (op == "all_reduce") return comm->AllReduce(a.tensor());
        if (op == "all_gather") return comm->AllGather(a.Slice(0, chunk), b.tensor());
        if (op == "reduce_scatter") return comm->ReduceScatter(a.tensor(), b.Slice(0, chunk));
        if (op == "broadcast") return comm->Broadcast(a.tensor(), 0);
        return FieldError("--ops", absl::StrCat("unknown operation \"", op, "\""));
      };
      for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) RETURN_IF_ERROR(once());
      Row row;
      row.op = op;
      row.count = count;
      row.bytes = count * 4;
      // Fresh data for the checked iteration, which is not timed. All-reduce in place changes its
      // input each time, so it is checked on one untimed iteration before the timed ones; the
      // other operations are checked after them (their results do not drift).
      RETURN_IF_ERROR(device->CopyToDevice(a.tensor(), host.data()));
      if (op == "all_reduce") {
        RETURN_IF_ERROR(once());
        std::vector<float> got(count);
        RETURN_IF_ERROR(device->CopyToHost(got.data(), a.tensor()));
        for (int64_t j = 0; j < count; ++j) {
          row.wrong += got[j] != static_cast<float>(n * (n + 1) / 2 + n * (j % 13));
        }
      }
      RETURN_IF_ERROR(comm->Barrier());
      comm->TakeTotals();
      const int iters = std::max(1, absl::GetFlag(FLAGS_iters));
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) RETURN_IF_ERROR(once());
      row.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
      for (const OpTotals& t : comm->TakeTotals()) {
        if (t.op == OpOf(op)) row.event_seconds = t.seconds / t.count;
      }
      if (op != "all_reduce") {
        std::vector<float> got(op == "broadcast" ? count : (op == "all_gather" ? count : chunk));
        RETURN_IF_ERROR(device->CopyToHost(
            got.data(), op == "broadcast" ? a.tensor() : b.Slice(0, got.size())));
        for (int64_t j = 0; j < static_cast<int64_t>(got.size()); ++j) {
          float want = 0;
          if (op == "broadcast") want = Value(0, j);
          if (op == "all_gather") want = Value(static_cast<int>(j / chunk), j % chunk);
          if (op == "reduce_scatter") {
            const int64_t g = rank * chunk + j;
            want = static_cast<float>(n * (n + 1) / 2 + n * (g % 13));
          }
          row.wrong += got[j] != want;
        }
      }
      rows.push_back(row);
    }
  }
  return rows;
}

absl::Status Main() {
  ASSIGN_OR_RETURN(const int visible, CudaDeviceCount());
  if (visible == 0) return absl::UnavailableError("no CUDA device visible");
  const int n = absl::GetFlag(FLAGS_gpus) > 0 ? absl::GetFlag(FLAGS_gpus) : visible;
  if (n > visible) return FieldError("--gpus", absl::StrCat("only ", visible, " visible"));
  InMemoryStore store;
  std::vector<absl::StatusOr<std::vector<Row>>> results(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { results[r] = Sweep(r, n, &store); });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!results[r].ok()) return Annotate(results[r].status(), absl::StrCat("rank ", r));
  }
  std::printf(
      "# nccl_collective_bench: %d rank(s), one per GPU, fp32, %d warm-up + %d timed "
      "iterations, time = mean per iteration averaged over ranks\n",
      n, absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_iters));
  std::printf("%-15s %12s %11s %11s %12s %12s %18s %7s\n", "op", "size(B)", "count", "time(us)",
              "algbw(GB/s)", "busbw(GB/s)", "event busbw(GB/s)", "#wrong");
  int64_t wrong = 0;
  for (size_t i = 0; i < results[0]->size(); ++i) {
    Row row = (*results[0])[i];
    double seconds = 0, event = 0;
    row.wrong = 0;
    for (int r = 0; r < n; ++r) {
      seconds += (*results[r])[i].seconds / n;
      event += (*results[r])[i].event_seconds / n;
      row.wrong += (*results[r])[i].wrong;
    }
    const double factor = BusBandwidthFactor(OpOf(row.op), n);
    const double algbw = row.bytes / seconds;
    const double event_busbw = event > 0 ? row.bytes / event * factor : 0;
    std::printf("%-15s %12lld %11lld %11.1f %12.3f %12.3f %18.3f %7lld\n", row.op.c_str(),
                static_cast<long long>(row.bytes), static_cast<long long>(row.count), seconds * 1e6,
                algbw / 1e9, algbw * factor / 1e9, event_busbw / 1e9,
                static_cast<long long>(row.wrong));
    wrong += row.wrong;
  }
  if (wrong > 0) return absl::DataLossError(absl::StrCat(wrong, " wrong elements"));
  std::printf("# data check passed: 0 wrong elements\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmaster::trainer

int main(int argc, char** argv) {
  absl::Status s = ringmaster::InitBinary(
      argc, argv,
      "nccl_collective_bench: the NCCL communicator's collectives on this machine's GPUs", nullptr);
  if (s.ok()) s = ringmaster::trainer::Main();
  if (!s.ok()) {
    RM_LOG(ERROR) << "nccl_collective_bench failed: " << s;
    return ringmaster::ExitCodeFor(s);
  }
  return 0;
}
