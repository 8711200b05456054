// The names of the collective operations a worker reports (v1.CollectiveStat.op): the builtin
// trainer's operations in the order of trainer::CollectiveOp, and the names the agent accepts.
#ifndef RINGMASTER_COMMON_COLLECTIVE_OPS_H_
#define RINGMASTER_COMMON_COLLECTIVE_OPS_H_

#include <array>

namespace ringmaster {

inline constexpr std::array<const char*, 6> kCollectiveOpNames = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv"};

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_COLLECTIVE_OPS_H_
