#include "trainer/cuda/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "trainer/comm/unique_id_exchange.h"
#include "trainer/cuda/async_wait.h"
#include "trainer/cuda/collective_buffers.h"
#include "trainer/cuda/cuda_status.h"
#include "trainer/cuda/device_scratch.h"
#include "trainer/cuda/nccl_types.h"

namespace ringmaster::trainer {
namespace {

// Teardown waits at most this long for a healthy communicator to finalise before aborting it.
constexpr absl::Duration kFinalizeTimeout = absl::Seconds(30);
constexpr size_t kInitialStagingBytes = 1 << 20;

// Polls a non-blocking communicator until a pending NCCL call has finished.
Poll PollComm(ncclComm_t comm, absl::string_view what) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  if (r != ncclSuccess) return Poll{PollState::kFailed, NcclStatus(r, what)};
  if (state == ncclInProgress) return Poll{PollState::kPending};
  if (state != ncclSuccess) return Poll{PollState::kFailed, NcclStatus(state, what)};
  return Poll{PollState::kDone};
}

// True when `p` is device (or managed) memory NCCL can use directly; false for host memory,
// pageable or pinned, which is staged.
absl::StatusOr<bool> IsDeviceMemory(const void* p) {
  cudaPointerAttributes attr{};
  RETURN_IF_ERROR(CudaStatus(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes"));
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::string name, int rank, int size, const NcclOptions& options)
      : Communicator(std::move(name), rank, size),
        device_(options.device),
        producer_(options.producer),
        timeout_(options.timeout),
        staging_(options.device) {}
  ~NcclCommunicator() override;
  const char* transport() const override { return "nccl"; }
  void Abandon() override { abandoned_.store(true); }

  // Takes ownership of an initialised communicator; creates the stream and events.
  absl::Status Init(ncclComm_t comm);

 protected:
  bool CanReduce(DType dtype) const override {
    return dtype == DType::kF32 || dtype == DType::kBF16;
  }

  absl::Status DoAllReduce(Tensor data) override {
    return Execute(CollectiveOp::kAllReduce, data, data, [&](const void* in, void* out) {
      return ncclAllReduce(in, out, data.size, NcclDataType(data.dtype), ncclSum, comm_, stream_);
    });
  }
  absl::Status DoReduceScatter(Tensor input, Tensor output) override {
    return Execute(CollectiveOp::kReduceScatter, input, output, [&](const void* in, void* out) {
      return ncclReduceScatter(in, out, output.size, NcclDataType(output.dtype), ncclSum, comm_,
                               stream_);
    });
  }
  absl::Status DoAllGather(Tensor input, Tensor output) override {
    return Execute(CollectiveOp::kAllGather, input, output, [&](const void* in, void* out) {
      return ncclAllGather(in, out, input.size, NcclDataType(input.dtype), comm_, stream_);
    });
  }
  absl::Status DoBroadcast(Tensor data, int root) override {
    return Execute(CollectiveOp::kBroadcast, data, data, [&](const void* in, void* out) {
      return ncclBroadcast(in, out, data.size, NcclDataType(data.dtype), root, comm_, stream_);
    });
  }
  absl::Status DoSend(Tensor data, int peer) override {
    return Execute(CollectiveOp::kSend, data, Tensor{}, [&](const void* in, void*) {
      return ncclSend(in, data.size, NcclDataType(data.dtype), peer, comm_, stream_);
    });
  }
  absl::Status DoRecv(Tensor data, int peer) override {
    return Execute(CollectiveOp::kRecv, Tensor{}, data, [&](const void*, void* out) {
      return ncclRecv(out, data.size, NcclDataType(data.dtype), peer, comm_, stream_);
    });
  }
  // One NCCL group of a send and a receive: both are posted together, so two ranks exchanging
  // with each other cannot block on one another (send and recv buffers are distinct).
  absl::Status DoExchange(Tensor send, Tensor recv, int peer) override {
    return Execute(CollectiveOp::kSend, send, recv, [&](const void* in, void* out) {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      r = ncclSend(in, send.size, NcclDataType(send.dtype), peer, comm_, stream_);
      const ncclResult_t r2 = ncclRecv(out, recv.size, NcclDataType(recv.dtype), peer, comm_,
                                       stream_);
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : (r2 != ncclSuccess ? r2 : end);
    });
  }
  absl::Status DoBarrier() override {
    // An all-reduce of one float of device memory (not counted in the totals).
    return Execute(CollectiveOp::kAllReduce, barrier_, barrier_, [&](const void* in, void* out) {
      return ncclAllReduce(in, out, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }

 private:
  using Launch = std::function<ncclResult_t(const void* in, void* out)>;
  // Runs one operation: orders it after the producer (device memory) or stages host memory,
  // launches it between timing events, waits for it with the timeout, and aborts the
  // communicator on failure.
  absl::Status Execute(CollectiveOp op, Tensor in, Tensor out, const Launch& launch);
  // Sets *launched once NCCL was called: errors before that leave the communicator usable.
  absl::Status Run(CollectiveOp op, Tensor in, Tensor out, const Launch& launch, bool* launched);
  // Waits until the work on stream_ so far has completed, watching the communicator's errors.
  absl::Status WaitForStream(absl::string_view what);
  absl::Status WaitForComm(absl::string_view what);
  void Abort();
  WaitOptions Wait() const {
    WaitOptions o;
    o.timeout = timeout_;
    o.abandoned = &abandoned_;  // a wait in progress ends when the trainer gives up
    return o;
  }

  const int device_;
  const cudaStream_t producer_;
  const absl::Duration timeout_;
  ncclComm_t comm_ = nullptr;
  bool broken_ = false;  // aborted after an error: every later operation fails
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the producer, waited for on stream_
  cudaEvent_t start_ = nullptr, end_ = nullptr, done_ = nullptr;
  DeviceScratch staging_;
  Tensor barrier_;
  void* barrier_memory_ = nullptr;
  // Set by Abandon (any thread): an operation waiting on another thread ends (CANCELLED) and
  // aborts the communicator, so that nothing torn down next (a cudaFree waits for every stream)
  // waits behind its kernels; the destructor aborts rather than finalizes.
  std::atomic<bool> abandoned_{false};
};

NcclCommunicator::~NcclCommunicator() {
  // Best effort at teardown: failures here leave nothing to recover (the process is about to
  // exit or rebuild its groups).
  (void)cudaSetDevice(device_);
  // Finalizing waits for the peers to finalize too (up to kFinalizeTimeout), and after a
  // failure some may never: abort at once.
  if (abandoned_.load()) Abort();
  if (comm_ != nullptr) {
    const ncclResult_t r = ncclCommFinalize(comm_);
    WaitOptions o;
    o.timeout = std::min(timeout_, kFinalizeTimeout);
    const bool finalized =
        (r == ncclSuccess || r == ncclInProgress) &&
        AwaitCompletion([this] { return PollComm(comm_, "finalize"); }, "finalize", o).ok();
    if (finalized) {
      (void)ncclCommDestroy(comm_);
    } else {
      (void)ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  for (cudaEvent_t e : {ready_, start_, end_, done_}) {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  if (barrier_memory_ != nullptr) (void)cudaFree(barrier_memory_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

absl::Status NcclCommunicator::Init(ncclComm_t comm) {
  comm_ = comm;
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  int least = 0, greatest = 0;
  RETURN_IF_ERROR(
      CudaStatus(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities"));
  // Higher priority than the compute stream: a ready reduction is scheduled ahead of backward
  // kernels, which is what makes it overlap them.
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest),
                 "communication stream"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "event"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start_), "event"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&end_), "event"));
  RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "event"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&barrier_memory_, sizeof(float)), "barrier buffer"));
  // On this stream: a non-blocking stream is not ordered after the legacy default stream.
  RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(barrier_memory_, 0, sizeof(float), stream_), "barrier buffer"));
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "barrier buffer"));
  barrier_ = Tensor{barrier_memory_, 1, DType::kF32};
  // Room for the host values the trainer reduces (losses, norms, checkpoint records), so that
  // staging does not allocate while training (growing would not wait either: device_scratch.h).
  return staging_.Get(kInitialStagingBytes, stream_).status();
}

void NcclCommunicator::Abort() {
  if (comm_ != nullptr) {
    // Abort ends the communicator's kernels still waiting for a lost peer; its own result
    // cannot be acted on.
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  broken_ = true;
}

absl::Status NcclCommunicator::WaitForComm(absl::string_view what) {
  return AwaitCompletion([&] { return PollComm(comm_, what); }, what, Wait());
}

absl::Status NcclCommunicator::WaitForStream(absl::string_view what) {
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(done_, stream_), "cudaEventRecord"));
  return AwaitCompletion(
      [&]() -> Poll {
        Poll comm = PollComm(comm_, what);
        if (comm.state == PollState::kFailed) return comm;
        const cudaError_t e = cudaEventQuery(done_);
        if (e == cudaSuccess) return Poll{PollState::kDone};
        if (e == cudaErrorNotReady) {
          // Not a failure, but the runtime records it as this thread's last error, which the
          // next kernel launch here would report as its own (kernel_utils.cuh).
          (void)cudaGetLastError();
          return Poll{PollState::kPending};
        }
        return Poll{PollState::kFailed, CudaStatus(e, what)};
      },
      what, Wait());
}

absl::Status NcclCommunicator::Execute(CollectiveOp op, Tensor in, Tensor out,
                                       const Launch& launch) {
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat("NCCL communicator ", name(), " was aborted after an earlier error"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  bool launched = false;
  absl::Status s = Run(op, in, out, launch, &launched);
  // A failed, timed-out or abandoned operation may leave NCCL kernels waiting for a peer (and a
  // communicator in error answers every later call with it): abort. Argument errors found
  // before NCCL was called leave the communicator usable.
  if (!s.ok() && (launched || s.code() != absl::StatusCode::kInvalidArgument)) Abort();
  return s;
}

absl::Status NcclCommunicator::Run(CollectiveOp op, Tensor in, Tensor out, const Launch& launch,
                                   bool* launched) {
  const std::string what = absl::StrCat(CollectiveOpName(op), " on ", name());
  const ByteRange in_range{in.data, in.bytes()}, out_range{out.data, out.bytes()};
  RETURN_IF_ERROR(CheckAliasing(op, in_range, out_range, rank()));
  // Where the buffers the operation has (send has no output, recv no input) live.
  std::optional<bool> on_device;
  for (const ByteRange& range : {in_range, out_range}) {
    if (range.empty()) continue;
    ASSIGN_OR_RETURN(const bool device, IsDeviceMemory(range.data));
    if (on_device.has_value() && *on_device != device) {
      return absl::InvalidArgumentError(what + ": one buffer in host memory, one on the device");
    }
    on_device = device;
  }
  const bool staged = on_device.has_value() && !*on_device;
  const void* send = in.data;
  void* recv = out.data;
  StagingPlan plan;
  if (staged) {
    plan = PlanStaging(in_range, out_range);
    ASSIGN_OR_RETURN(void* stage, staging_.Get(plan.bytes, stream_));
    char* base = static_cast<char*>(stage);
    if (!in_range.empty()) {
      // stream_ is idle here (every operation waits for its own completion), so this copy from
      // pageable memory cannot block behind anything.
      RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(base + plan.in_offset, in.data, in.bytes(),
                                                 cudaMemcpyHostToDevice, stream_),
                                 "staging in"));
      send = base + plan.in_offset;
    }
    if (!out_range.empty()) recv = base + plan.out_offset;
  } else if (const auto* mark = dynamic_cast<const CudaDeviceMark*>(order_after());
             mark != nullptr) {
    // The producer's work queued when the issuing thread took the mark (the kernels that wrote
    // this bucket and last read the output), however far the GPU is behind: the collective
    // starts as soon as they have run, while the rest of the backward pass runs on.
    RETURN_IF_ERROR(
        CudaStatus(cudaStreamWaitEvent(stream_, mark->event(), 0), "cudaStreamWaitEvent"));
  } else if (producer_ != nullptr) {
    // Everything issued on the producer so far (the kernels that wrote this bucket, and maybe
    // much more: all the work queued by now) before the collective; later producer work runs
    // on, overlapping it.
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ready_, producer_), "cudaEventRecord"));
    RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(start_, stream_), "cudaEventRecord"));
  *launched = true;
  const ncclResult_t r = launch(send, recv);
  if (r == ncclInProgress) {
    // Non-blocking mode: the call is still being enqueued.
    RETURN_IF_ERROR(WaitForComm(what));
  } else if (r != ncclSuccess) {
    return NcclStatus(r, what);
  }
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(end_, stream_), "cudaEventRecord"));
  RETURN_IF_ERROR(WaitForStream(what));
  if (staged && !out_range.empty()) {
    // Only now: a copy into pageable memory blocks the calling thread until it has run, which
    // behind a collective stuck on a lost peer would be a wait without a timeout.
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(out.data, recv, out.bytes(), cudaMemcpyDeviceToHost, stream_),
                   "staging out"));
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "staging out"));
  }
  float ms = 0;
  RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, start_, end_), "cudaEventElapsedTime"));
  RecordDeviceSeconds(ms / 1e3);
  return absl::OkStatus();
}

}  // namespace

void ConnectNcclAtInit() {
  static std::once_flag once;
  std::call_once(once, [] { (void)setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0); });
}

NcclOptions NcclOptionsFor(const CudaDevice& device, absl::Duration timeout) {
  NcclOptions o;
  o.device = device.index();
  o.producer = device.stream();
  o.timeout = timeout;
  return o;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const std::string& name, int rank,
                                                          int size, KeyValueStore* store,
                                                          const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of ", size, " is not a member of group ", name));
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(options.device),
                 absl::StrCat("NCCL group ", name, ": cudaSetDevice(", options.device, ")")));
  ConnectNcclAtInit();
  auto make_id = []() -> absl::StatusOr<std::string> {
    ncclUniqueId id;
    RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    return std::string(id.internal, sizeof(id.internal));
  };
  ASSIGN_OR_RETURN(std::string bytes,
                   ExchangeUniqueId(store, "nccl", name, rank, size, sizeof(ncclUniqueId::internal),
                                    make_id, options.timeout));
  ncclUniqueId id;
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const std::string what =
      absl::StrCat("ncclCommInitRankConfig of ", name, " (rank ", rank, " of ", size, ")");
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  absl::Status s = r == ncclSuccess || r == ncclInProgress ? absl::OkStatus() : NcclStatus(r, what);
  if (s.ok()) {
    WaitOptions o;
    o.timeout = options.timeout;
    s = AwaitCompletion([&] { return PollComm(comm, what); }, what, o);
  }
  if (!s.ok()) {
    // A member that never arrives leaves the others waiting inside NCCL's bootstrap: abort.
    if (comm != nullptr) (void)ncclCommAbort(comm);
    return s;
  }
  auto communicator = std::make_unique<NcclCommunicator>(name, rank, size, options);
  RETURN_IF_ERROR(communicator->Init(comm));
  return std::unique_ptr<Communicator>(std::move(communicator));
}

}  // namespace ringmaster::trainer
