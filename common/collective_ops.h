// The names of the collective operations a worker reports (v1::CollectiveStat.op), and their
// bus-bandwidth factors (nccl-tests, doc/PERFORMANCE.md).
//
// kCollectiveOpNames are the builtin trainer's operations in the order of trainer::CollectiveOp
// (trainer/comm/collective_stats.h asserts it). kReportableCollectiveOpNames are every name the
// agent accepts: the trainer's, then those only other programs report (the Python watch,
// python/watch: torch.distributed's reduce, gather, scatter, all_to_all and barrier).
//
// Header-only constants and pure functions; thread-safe. No errors: an unknown op is nullopt.
#ifndef RINGMASTER_COMMON_COLLECTIVE_OPS_H_
#define RINGMASTER_COMMON_COLLECTIVE_OPS_H_

#include <array>
#include <optional>
#include <string_view>

namespace ringmaster {

inline constexpr std::array<const char*, 6> kCollectiveOpNames = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv"};

inline constexpr std::array<const char*, 11> kReportableCollectiveOpNames = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send",   "recv",
    "reduce",     "gather",         "scatter",    "all_to_all", "barrier"};

// busbw / algbw of `op` over `ranks` ranks (>= 1), nccl-tests' definitions:
//   all_reduce 2(n-1)/n; reduce_scatter, all_gather, gather, scatter, all_to_all (n-1)/n;
//   broadcast, reduce, send, recv 1; barrier 0 (it moves no data: its bytes are 0, and so are its
//   algbw and busbw).
// nullopt for a name not in kReportableCollectiveOpNames or ranks < 1.
inline std::optional<double> CollectiveBusBandwidthFactor(std::string_view op, int ranks) {
  if (ranks < 1) return std::nullopt;
  const double n = ranks;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather" || op == "gather" || op == "scatter" ||
      op == "all_to_all") {
    return (n - 1) / n;
  }
  if (op == "broadcast" || op == "reduce" || op == "send" || op == "recv") return 1.0;
  if (op == "barrier") return 0.0;
  return std::nullopt;
}

// Whether `op` is one of kReportableCollectiveOpNames.
inline bool IsReportableCollectiveOp(std::string_view op) {
  for (const char* name : kReportableCollectiveOpNames) {
    if (op == name) return true;
  }
  return false;
}

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_COLLECTIVE_OPS_H_
