// The NCCL backend of Communicator (trainer/comm/communicator.h): one NCCL communicator per
// group, on this rank's GPU.
//
// Rendezvous: rank 0 of the group makes the ncclUniqueId and publishes it through the
// KeyValueStore under "nccl/<group>/unique_id" (trainer/comm/unique_id_exchange.h); under an
// agent that is the coordinator's store of the job's generation, so a stale generation can
// never join. Every group (world, dp<i>, tp<i>, pp<i>) is its own NCCL communicator with its
// own id, built independently of the others by its members only (no ncclCommSplit: each group
// has the same Connect contract as Gloo's, and no rank waits for ranks outside its groups).
//
// Streams and ordering: each communicator has its own high-priority stream. An operation on
// device memory first makes that stream wait, with an event, for the producer stream's work
// (the CUDA device's compute stream): up to the Device::Mark of the Communicator::ScopedOrder
// around it, taken by the thread that queued it right after issuing the kernels that wrote the
// data (a CudaDeviceMark), or else everything issued on the producer by the time the operation
// starts. So a gradient bucket queued during the backward pass is reduced as soon as its own
// kernels have run, while later backward kernels keep running, even when the host has queued
// the whole backward pass before the GPU reaches that bucket. Every operation returns when it
// has completed on the GPU, so the caller (a communication thread) can hand the memory back at
// once. Host memory (a loss, a norm, checkpoint records) is staged through device memory on the
// same stream.
//
// Teardown: the destructor finalizes the communicator (waiting, at most 30 s, for the peers to
// finalize too) unless it was aborted or Abandon()ed after a failure, when it aborts at once.
//
// Measurement: the base class's totals get the collective's own GPU time, between events
// recorded around the NCCL call on the communicator's stream (not the wait for the producer,
// not the staging copies), so algbw/busbw are the collective's.
//
// Failures never hang: the communicator runs in NCCL's non-blocking mode and every wait polls
// ncclCommGetAsyncError and the completion event with the timeout (async_wait.h). A peer that
// fails or leaves (ncclRemoteError, ncclSystemError) gives UNAVAILABLE, an operation that does
// not complete within the timeout DEADLINE_EXCEEDED; either way the communicator is aborted
// (ncclCommAbort) and every later operation returns UNAVAILABLE. Both codes are retryable: the
// trainer exits 75 and the job restarts.
//
// Threading: as Communicator says (one thread issues operations at a time; it may be another
// thread than the one that connected; each call selects the device).
//
// Two NCCL communicators used concurrently by two threads on one GPU can deadlock when ranks
// issue them in different orders; the trainer should therefore keep the checkpoint writer's
// "world" group on Gloo (host memory) and use NCCL for the groups the training thread and its
// communication thread use.
#ifndef RINGMASTER_TRAINER_CUDA_NCCL_COMMUNICATOR_H_
#define RINGMASTER_TRAINER_CUDA_NCCL_COMMUNICATOR_H_

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/communicator.h"
#include "trainer/comm/key_value_store.h"
#include "trainer/cuda/cuda_device.h"

namespace ringmaster::trainer {

struct NcclOptions {
  // The CUDA device (this rank's GPU).
  int device = 0;
  // The stream whose work writes and reads the group's device buffers (the CUDA device's
  // compute stream); null: none, the caller orders its work itself.
  cudaStream_t producer = nullptr;
  // The rendezvous, the communicator's initialisation and every operation must each complete
  // within this.
  absl::Duration timeout = absl::Seconds(600);
};

// Options for a group on `device`'s GPU, ordered after its compute stream.
NcclOptions NcclOptionsFor(const CudaDevice& device, absl::Duration timeout);

// Communicators connect every peer and algorithm at initialisation (NCCL_RUNTIME_CONNECT=0),
// not at their first operation of each kind, unless the environment already says otherwise.
// The trainer issues NCCL work from two threads (the training thread's tp/pp/emb groups, the
// communication thread's dp group); connecting lazily would set up connections inside the first
// step, on both threads at once, while the other thread's kernels wait on peers (NCCL asks for
// such setup to be ordered across communicators), and would count the setup in the first step's
// busbw. Costs start-up time and the memory of algorithms a group never uses. Sets the variable
// once, before NCCL reads it; ConnectNccl calls it, and a program with other threads calls it
// first (setenv is not safe beside a getenv on another thread).
void ConnectNcclAtInit();

// Joins group `name` as `rank` of `size`. Errors: INVALID_ARGUMENT for a rank outside
// [0, size); UNAVAILABLE when the GPU or NCCL cannot be used or a member failed during
// initialisation; DEADLINE_EXCEEDED when rank 0's id or a member did not arrive within the
// timeout (the half-made communicator is aborted); the store's errors.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const std::string& name, int rank,
                                                          int size, KeyValueStore* store,
                                                          const NcclOptions& options);

}  // namespace ringmaster::trainer

#endif  // RINGMASTER_TRAINER_CUDA_NCCL_COMMUNICATOR_H_
