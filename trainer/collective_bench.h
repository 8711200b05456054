// --mode=collective-bench: an nccl-tests-style sweep through the trainer's own communication
// layer. For each operation and size it runs warm-up iterations (not timed), then timed ones,
// and checks the data of the last iteration; it prints one row per size:
//
//   op              size(B)     count   time(us)  algbw(GB/s)  busbw(GB/s)  #wrong
//
// time is the mean over the timed iterations on each rank, averaged over the ranks (nccl-tests'
// default aggregation); algbw and busbw use nccl-tests' definitions (collective_stats.h).
// send_recv is a ring: every rank sends to rank+1 and receives from rank-1 (busbw = algbw).
#ifndef RINGMASTER_TRAINER_COLLECTIVE_BENCH_H_
#define RINGMASTER_TRAINER_COLLECTIVE_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/communicator.h"

namespace ringmaster::trainer {

struct CollectiveBenchOptions {
  int64_t min_bytes = 1024;
  int64_t max_bytes = 16 << 20;
  int factor = 4;
  int warmup = 3;
  int iters = 10;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                  "send_recv"};
};

struct CollectiveBenchRow {
  std::string op;
  int64_t bytes = 0;
  int64_t count = 0;
  double seconds = 0;  // mean per iteration, averaged over ranks
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = 0;  // elements that failed the data check, summed over ranks
};

// Runs the sweep on `comm` (every member calls it). Rank 0 prints the table to stdout. Returns
// the rows, or DATA_LOSS if any element was wrong, or the communicator's error.
absl::StatusOr<std::vector<CollectiveBenchRow>> RunCollectiveBench(
    Communicator& comm, const CollectiveBenchOptions& options);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_COLLECTIVE_BENCH_H_
