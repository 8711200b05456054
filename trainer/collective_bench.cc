#include "trainer/collective_bench.h"

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

// Deterministic small integers: every sum below is exact in fp32.
float Value(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 13); }

Tensor View(std::vector<float>& v, int64_t offset = 0, int64_t count = -1) {
  return Tensor{v.data() + offset, count < 0 ? static_cast<int64_t>(v.size()) : count};
}

struct OpRun {
  CollectiveOp op;
  int64_t count;  // elements of the full buffer (nccl-tests' count)
};

// Prepares the buffers for one iteration, runs it, and (when `check`) counts wrong elements.
absl::Status RunOnce(Communicator& comm, const std::string& name, int64_t count,
                     std::vector<float>& a, std::vector<float>& b, bool check, int64_t* wrong) {
  const int n = comm.size();
  const int r = comm.rank();
  const int64_t chunk = count / n;
  if (name == "all_reduce") {
    for (int64_t i = 0; i < count; ++i) a[i] = Value(r, i);
    RETURN_IF_ERROR(comm.AllReduce(View(a, 0, count)));
    if (check) {
      for (int64_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(n * (n + 1) / 2 + n * (i % 13));
        *wrong += a[i] != want;
      }
    }
  } else if (name == "all_gather") {
    for (int64_t i = 0; i < chunk; ++i) a[i] = Value(r, i);
    RETURN_IF_ERROR(comm.AllGather(View(a, 0, chunk), View(b, 0, chunk * n)));
    if (check) {
      for (int p = 0; p < n; ++p) {
        for (int64_t i = 0; i < chunk; ++i) *wrong += b[p * chunk + i] != Value(p, i);
      }
    }
  } else if (name == "reduce_scatter") {
    for (int64_t i = 0; i < chunk * n; ++i) a[i] = Value(r, i);
    RETURN_IF_ERROR(comm.ReduceScatter(View(a, 0, chunk * n), View(b, 0, chunk)));
    if (check) {
      for (int64_t i = 0; i < chunk; ++i) {
        const int64_t g = r * chunk + i;
        *wrong += b[i] != static_cast<float>(n * (n + 1) / 2 + n * (g % 13));
      }
    }
  } else if (name == "broadcast") {
    for (int64_t i = 0; i < count; ++i) a[i] = r == 0 ? Value(0, i) : -1.0f;
    RETURN_IF_ERROR(comm.Broadcast(View(a, 0, count), 0));
    if (check) {
      for (int64_t i = 0; i < count; ++i) *wrong += a[i] != Value(0, i);
    }
  } else if (name == "send_recv") {
    if (n == 1) return absl::OkStatus();
    for (int64_t i = 0; i < count; ++i) a[i] = Value(r, i);
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    // Even ranks send first, odd ranks receive first: no cycle of blocked senders.
    if (r % 2 == 0) {
      RETURN_IF_ERROR(comm.Send(View(a, 0, count), right));
      RETURN_IF_ERROR(comm.Recv(View(b, 0, count), left));
    } else {
      RETURN_IF_ERROR(comm.Recv(View(b, 0, count), left));
      RETURN_IF_ERROR(comm.Send(View(a, 0, count), right));
    }
    if (check) {
      for (int64_t i = 0; i < count; ++i) *wrong += b[i] != Value(left, i);
    }
  } else {
    return FieldError("--bench_ops", absl::StrCat("unknown operation \"", name, "\""));
  }
  return absl::OkStatus();
}

CollectiveOp OpOf(const std::string& name) {
  if (name == "all_gather") return CollectiveOp::kAllGather;
  if (name == "reduce_scatter") return CollectiveOp::kReduceScatter;
  if (name == "broadcast") return CollectiveOp::kBroadcast;
  if (name == "send_recv") return CollectiveOp::kSend;
  return CollectiveOp::kAllReduce;
}

}  // namespace

absl::StatusOr<std::vector<CollectiveBenchRow>> RunCollectiveBench(
    Communicator& comm, const CollectiveBenchOptions& options) {
  const int n = comm.size();
  std::vector<CollectiveBenchRow> rows;
  if (comm.rank() == 0) {
    std::printf("# collective bench: %d rank(s), fp32, %d warm-up + %d timed iterations, "
                "time = mean per iteration averaged over ranks\n",
                n, options.warmup, options.iters);
    std::printf("%-15s %12s %10s %11s %12s %12s %7s\n", "op", "size(B)", "count", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  for (const std::string& name : options.ops) {
    if (name == "send_recv" && n == 1) continue;
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;
         bytes *= std::max(2, options.factor)) {
      // Full-buffer element count, a multiple of the group size (as nccl-tests rounds).
      const int64_t count = std::max<int64_t>(n, bytes / 4 / n * n);
      std::vector<float> a(count), b(count);
      int64_t wrong = 0;
      for (int i = 0; i < options.warmup; ++i) {
        RETURN_IF_ERROR(RunOnce(comm, name, count, a, b, false, &wrong));
      }
      RETURN_IF_ERROR(comm.Barrier());
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < options.iters; ++i) {
        RETURN_IF_ERROR(RunOnce(comm, name, count, a, b, i + 1 == options.iters, &wrong));
      }
      float result[2] = {
          static_cast<float>(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
              options.iters),
          static_cast<float>(wrong)};
      RETURN_IF_ERROR(comm.AllReduce(Tensor{result, 2, DType::kF32}));
      comm.TakeTotals();  // the sweep's own bookkeeping is not a step's traffic
      CollectiveBenchRow row;
      row.op = name;
      row.count = count;
      row.bytes = count * 4;
      row.seconds = result[0] / n;
      row.wrong = static_cast<int64_t>(result[1]);
      row.algbw = row.bytes / row.seconds;
      row.busbw = row.algbw * BusBandwidthFactor(OpOf(name), n);
      if (comm.rank() == 0) {
        std::printf("%-15s %12lld %10lld %11.1f %12.3f %12.3f %7lld\n", name.c_str(),
                    static_cast<long long>(row.bytes), static_cast<long long>(row.count),
                    row.seconds * 1e6, row.algbw / 1e9, row.busbw / 1e9,
                    static_cast<long long>(row.wrong));
        std::fflush(stdout);
      }
      rows.push_back(row);
    }
  }
  int64_t wrong = 0;
  for (const CollectiveBenchRow& row : rows) wrong += row.wrong;
  if (wrong > 0) {
    return absl::DataLossError(absl::StrCat("collective bench: ", wrong, " wrong elements"));
  }
  if (comm.rank() == 0) std::printf("# data check passed: 0 wrong elements\n");
  return rows;
}

}  // namespace ringmaster::trainer
