// Streams and events of the emulated CUDA runtime (fake_cuda, --config=emu), and the work that
// can stay pending on a stream: an emulated NCCL operation (fake_nccl.cc) waiting for its peers.
//
// Everything else the emulated runtime does (kernels, copies, host functions, GEMMs) runs when
// it is issued, on the issuing thread, so a stream is complete unless it holds pending work.
// Pending work is ordered as on a GPU: an event recorded on a stream completes when the work the
// stream held then completes, a stream made to wait for an event holds that work too, and a copy,
// memset or host function issued on a stream runs only once the stream's pending work is
// complete (the issuing thread waits for it: the one place where the host blocks where a GPU's
// host would go on). cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize and
// cudaFree (which synchronizes the device) wait as on a GPU, without a time limit; a wait of more
// than 10 s is reported on stderr, as the likely hang it is.
//
// Events carry time: an event's time is when it was recorded or, if its stream held pending work,
// when that work completed; cudaEventElapsedTime is the difference.
//
// Devices: RINGMASTER_EMU_GPUS of them (1 to 16, default 4), so that multi-GPU tests run, one
// thread per rank; cudaSetDevice is per host thread, as in CUDA. Streams belong to the device
// current when they were created; the default stream (null, cudaStreamLegacy,
// cudaStreamPerThread) is the current device's. A stream or event handle that was never created,
// or was destroyed, is cudaErrorInvalidResourceHandle.
//
// Thread-safe: one lock for every stream and event.
#ifndef RINGMASTER_TRAINER_KERNELS_EMU_FAKE_STREAMS_H_
#define RINGMASTER_TRAINER_KERNELS_EMU_FAKE_STREAMS_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>

namespace emu {

// Work on a stream that another thread completes.
class PendingWork {
 public:
  // Completes the work (again: no effect) and wakes whoever waits for it.
  void Complete();
  bool done() const;

 private:
  friend class StreamTable;  // fake_streams.cc: reads both under its lock
  bool done_ = false;
  std::chrono::steady_clock::time_point completed_;  // when done_ was set
};

// Queues `work` on `stream`: what is issued on the stream after it waits for it.
cudaError_t Enqueue(cudaStream_t stream, std::shared_ptr<PendingWork> work);
// True when `stream` holds work not yet complete; false also for an invalid handle.
bool HasPendingWork(cudaStream_t stream);
// Waits until the work `stream` holds has completed (before a copy, memset or host function on
// it). cudaErrorInvalidResourceHandle for an unknown stream.
cudaError_t AwaitStream(cudaStream_t stream, const char* what);
// Waits until every stream of the calling thread's current device is complete.
void AwaitDevice(const char* what);

// The number of emulated devices, and the calling thread's current one (cudaSetDevice's).
int DeviceCount();
int CurrentDevice();
void SetCurrentDevice(int device);

}  // namespace emu

#endif  // RINGMASTER_TRAINER_KERNELS_EMU_FAKE_STREAMS_H_
