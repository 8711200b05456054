// Streams and events of the emulated CUDA runtime (--config=emu), the work they defer (kernels,
// GEMMs, copies, memsets, host functions), and the work that can stay pending on a stream: an
// emulated NCCL operation (fake_nccl.cc) waiting for its peers.
//
// Kernels, GEMMs, copies, memsets and host functions issued on a created stream are deferred:
// they run, in stream order, only when something needs them: a synchronize, an event query or
// synchronize (up to the event), a copy into pageable host memory on the same stream (it has
// completed when the call returns, as in CUDA), work on a stream made to wait for an event
// recorded after them (and an NCCL operation is such work), cudaFree, or the stream's
// destruction. So a reader that does not order itself after them (a copy on another stream or on
// the legacy default stream from a non-blocking stream, a collective whose stream did not wait
// for the producer's event, a host reading pinned memory a copy has not filled yet) reads the
// memory before they wrote it, as it could on a GPU, where a test shows it. On the default
// streams they run when issued. A host function therefore runs only when something waits for
// its stream, not when a GPU's stream would reach it: a host that waits for a host function's
// effect without synchronizing waits forever here.
//
// NCCL work is ordered as on a GPU, except that the host waits where a GPU's host would go on:
// - an event recorded on a stream completes when the NCCL work the stream held then completes;
//   a stream made to wait for an event holds that work too;
// - a kernel, GEMM, copy, memset or host function issued on a stream waits for the stream's
//   pending NCCL work (the issuing thread waits for it: AwaitStream);
// - cudaFreeAsync behind pending work frees the memory once the work completes, without waiting;
// - the legacy default stream (null, cudaStreamLegacy; synchronous cudaMemcpy and cudaMemset)
//   waits for the work of the device's blocking streams (created without
//   cudaStreamNonBlocking), and they for its; cudaStreamPerThread is the calling thread's own;
// - cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize and cudaFree wait as on a
//   GPU, without a time limit (the work of a stream destroyed while it was pending included); a
//   wait of more than 10 s is reported on stderr, as the likely hang it is.
//
// Events carry time: an event's time is when it was recorded or, if its stream held work, when
// that work ran (lazily: when something needed it) or completed; cudaEventElapsedTime is the
// difference (cudaErrorNotReady before, cudaErrorInvalidResourceHandle for an event made with
// cudaEventDisableTiming, as CUDA).
//
// Devices: the machine has RINGMASTER_EMU_GPUS of them (1 to 16, default 4), so that multi-GPU
// tests run, one thread or one process per rank; a process sees those CUDA_VISIBLE_DEVICES names,
// by CUDA's rules (an agent's workers each see their own GPU as device 0). cudaSetDevice is per
// host thread, as in CUDA. A stream belongs to the device
// current when it was created, a default stream to the current device. A stream or event handle
// that was never created, or was destroyed, is cudaErrorInvalidResourceHandle.
//
// Thread-safe: one lock for every stream and event, and one per stream that orders the running
// of its deferred work (held while it runs, never while waiting for another stream's).
#ifndef RINGMASTER_TESTING_CUDA_EMU_FAKE_STREAMS_H_
#define RINGMASTER_TESTING_CUDA_EMU_FAKE_STREAMS_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace emu {

// Work on a stream that another thread completes.
class PendingWork {
 public:
  // Completes the work (again: no effect), wakes whoever waits for it, and runs what was
  // deferred until it (WhenStreamComplete) on the calling thread.
  void Complete();
  bool done() const;

 private:
  friend class StreamTable;  // fake_streams.cc: reads both under its lock
  bool done_ = false;
  std::chrono::steady_clock::time_point completed_;  // when done_ was set
};

// Queues `work` on `stream`: what is issued on the stream after it waits for it.
cudaError_t Enqueue(cudaStream_t stream, std::shared_ptr<PendingWork> work);
// True when `stream` holds work not yet complete other than `besides`; false for an invalid
// handle.
bool HasPendingWork(cudaStream_t stream, const std::vector<const PendingWork*>& besides = {});
// Runs the stream's deferred work and waits until its NCCL work has completed (a synchronize, a
// copy into pageable memory; `what` names it in the report of a long wait).
// cudaErrorInvalidResourceHandle for an unknown stream.
cudaError_t AwaitStream(cudaStream_t stream, const char* what);
// Issues `work` (a kernel, a GEMM, a copy, a memset, a host function) on `stream`: deferred on a
// created stream, run at once on a default one; either way after the stream's pending NCCL work,
// which the caller waits for. `work` answers its failure (an emulated kernel's): the device's
// sticky error from then on, as CUDA's asynchronous errors are, answered by the calls that run or
// wait for deferred work.
cudaError_t Defer(cudaStream_t stream, std::function<cudaError_t()> work, const char* what);
// Runs the deferred work of `stream` (for the legacy default stream, of the device's blocking
// streams too) and what it waits for, on the calling thread.
cudaError_t RunDeferred(cudaStream_t stream);
// Runs `fn` once the work `stream` holds now has completed: at once if there is none; behind a
// created stream's deferred items, as one more of them (the caller does not wait for them).
cudaError_t WhenStreamComplete(cudaStream_t stream, std::function<void()> fn);
// Runs every deferred item of `device` and waits until its NCCL work is complete; whether any
// deferred or NCCL work is left. RunDeviceDeferred only runs the deferred items (no waiting for
// NCCL work, no error).
cudaError_t AwaitDevice(int device, const char* what);
void RunDeviceDeferred(int device);
bool DeviceHasPendingWork(int device);

// The number of emulated devices this process sees, the machine's index of one of them (-1 for
// an ordinal out of range), and the calling thread's current one (cudaSetDevice's).
int DeviceCount();
int MachineDevice(int ordinal);
int CurrentDevice();
void SetCurrentDevice(int device);

}  // namespace emu

#endif  // RINGMASTER_TESTING_CUDA_EMU_FAKE_STREAMS_H_
