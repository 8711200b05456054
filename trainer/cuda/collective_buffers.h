// Buffer rules of the NCCL communicator, as pure functions of addresses (tested on CPU in
// collective_buffers_test.cc):
//  - Aliasing: NCCL allows an operation in place only in its own pattern (all-reduce and
//    broadcast: the same buffer; reduce-scatter: output = input + rank * output bytes;
//    all-gather: input = output + rank * input bytes); any other overlap is a programming error.
//  - Staging: host memory (the trainer all-reduces a host float for the step's loss, the
//    checkpointer gathers host records) is copied into device memory around the operation. The
//    plan keeps the input/output relation of an in-place operation inside the staging buffer.
#ifndef RINGMASTER_TRAINER_CUDA_COLLECTIVE_BUFFERS_H_
#define RINGMASTER_TRAINER_CUDA_COLLECTIVE_BUFFERS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "trainer/comm/collective_stats.h"

namespace ringmaster::trainer {

// A byte range of memory; empty (bytes == 0 or data == nullptr) when the operation has no such
// buffer (send has no output, recv no input).
struct ByteRange {
  const void* data = nullptr;
  size_t bytes = 0;
  bool empty() const { return data == nullptr || bytes == 0; }
};

// OK when `in` and `out` are disjoint or aliased as NCCL allows for `op` on rank `rank`;
// INVALID_ARGUMENT otherwise.
absl::Status CheckAliasing(CollectiveOp op, ByteRange in, ByteRange out, int rank);

// Where the operation's buffers go in one staging allocation: the input is copied to
// [in_offset, + in.bytes) before the operation, the output is read back from
// [out_offset, + out.bytes) after it. Overlapping (in-place) buffers keep their relative offset.
struct StagingPlan {
  size_t bytes = 0;       // staging bytes needed
  size_t in_offset = 0;   // of the input inside the staging buffer
  size_t out_offset = 0;  // of the output
};
StagingPlan PlanStaging(ByteRange in, ByteRange out);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_COLLECTIVE_BUFFERS_H_
