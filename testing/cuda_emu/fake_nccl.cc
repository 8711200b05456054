// The NCCL calls of the trainer, answered on the CPU for the emulated configuration
// (--config=emu): the ranks of a communicator are threads of one process, or processes (an
// agent's workers), each on its own emulated device (fake_streams.h), and an operation completes
// once every rank has issued it. Linked into a binary, these definitions take precedence over
// libnccl's.
//
// Processes: the process that made the ncclUniqueId hosts the communicator (the clique,
// fake_nccl_clique.h): its ranks' operations are matched and run there. A rank in another
// process joins it through a Unix socket the id names (fake_nccl_process.cc), sending its
// inputs there and receiving its outputs; the host's own ranks, if any, are threads beside it.
// A rank whose process dies (its connection closes) has left, as after ncclCommAbort; when the
// host's process dies, the other ranks see the communicator quiet with a rank gone. Two ranks on
// one GPU of the machine (CUDA_VISIBLE_DEVICES mapped, see fake_streams.h) are refused, across
// processes too.
//
// What it models, as NCCL does it:
// - Non-blocking communicators only (config.blocking = 0, as the trainer's): a blocking one is
//   refused (ncclInvalidArgument).
// - Rendezvous by ncclUniqueId: ncclCommInitRankConfig answers ncclInProgress, and
//   ncclCommGetAsyncError too until all ranks have joined. Two ranks on one device are refused
//   ("Duplicate GPU"), as are ranks that disagree on the size.
// - Operations are queued on the caller's stream: the stream holds them (emu::PendingWork) until
//   the last rank issues its part, which completes it on every rank. The inputs are read when a
//   rank issues its part (the work its stream deferred, and that of the streams it waits
//   for, runs first; an operation issued behind NCCL work still pending on its stream is refused,
//   see below), the outputs
//   written at completion. Buffers must lie within device memory of the communicator's device
//   (ncclInvalidArgument otherwise, as NCCL's argument checks).
// - Every other operation or ncclGroupEnd answers ncclInProgress, and ncclCommGetAsyncError
//   then answers ncclInProgress once before ncclSuccess, so that callers' waits for an enqueue
//   run; another call on the communicator before that poll is misuse (as NCCL documents it).
// - Failure: after ncclCommAbort of one rank, its queued work completes (aborted), nothing of
//   the communicator completes any more, and every other rank that has work queued gets
//   ncclRemoteError from ncclCommGetAsyncError, as when NCCL sees a peer's connection close
//   (across nodes; within a node NCCL may instead leave the work pending until the caller's
//   timeout). A rank that never issues an operation leaves the others' work pending: callers
//   must time out, as with NCCL.
// - ncclCommFinalize: ncclInProgress until this rank's work has completed and every rank has
//   finalized or left ("globally quiescent"); in the hosting process, also until the outputs of
//   the other processes' ranks have been sent to them (so a remote rank's process that is
//   stopped while an output too large for the socket's buffer is sent holds it until resumed or
//   killed). ncclCommDestroy of a
//   communicator not finalized finalizes it first, waiting as NCCL's does (without a time
//   limit).
//
// What NCCL would not tell, it reports (ncclInvalidUsage, through every rank's
// ncclCommGetAsyncError, with the detail in ncclGetLastError): ranks whose n-th collectives
// differ (operation, count, type or root: a hang or garbage on GPUs), a send and its receive
// of different sizes, an operation issued while its stream still holds unfinished NCCL work from
// outside the current group (not emulated: it would read its input before that work wrote it),
// and a call on a communicator whose previous call is still in progress.
//
// Sums only (ncclSum), of the integer and floating-point types but the fp8 ones, in rank order;
// bf16 and fp16 round after each addition, as a ring's steps do. Thread-safe: one lock.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/enum_name.h"
#include "testing/cuda_emu/fake_memory.h"
#include "testing/cuda_emu/fake_nccl_clique.h"
#include "testing/cuda_emu/fake_streams.h"

namespace emu::nccl {

namespace {

std::string Describe(const Signature& s) {
  return std::string(KindName(s.kind)) + "(count " + std::to_string(s.count) + ", type " +
         std::to_string(s.type) +
         (s.kind == Kind::kBroadcast ? ", root " + std::to_string(s.root) : std::string()) + ")";
}

// The n-th collective of a communicator, as its ranks issue it.
struct Collective {
  Signature signature{};
  int first = -1;  // the rank that issued it first
  int issued = 0;
  std::vector<std::vector<char>> inputs;  // per rank, read when it issued
  std::vector<void*> outputs;             // per rank; null once the rank left
  std::vector<Work> work;
};

// The n-th message from one rank to another.
struct Transfer {
  bool sent = false, received = false;
  size_t send_bytes = 0, recv_bytes = 0;
  std::vector<char> data;
  void* out = nullptr;
  Work send_work, recv_work;
};

template <typename T>
void AddAs(void* acc, const void* x, size_t n) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(x);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<T>(a[i] + b[i]);
}

// acc += x, elementwise; the 16-bit floats rounded after the addition.
void Add(ncclDataType_t t, void* acc, const void* x, size_t n) {
  switch (t) {
    case ncclInt8:
      return AddAs<int8_t>(acc, x, n);
    case ncclUint8:
      return AddAs<uint8_t>(acc, x, n);
    case ncclInt32:  // wraps, as on a GPU
    case ncclUint32:
      return AddAs<uint32_t>(acc, x, n);
    case ncclInt64:
    case ncclUint64:
      return AddAs<uint64_t>(acc, x, n);
    case ncclFloat32:
      return AddAs<float>(acc, x, n);
    case ncclFloat64:
      return AddAs<double>(acc, x, n);
    case ncclBfloat16: {
      auto* a = static_cast<__nv_bfloat16*>(acc);
      const auto* b = static_cast<const __nv_bfloat16*>(x);
      for (size_t i = 0; i < n; ++i) {
        a[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
      }
      return;
    }
    case ncclFloat16: {
      auto* a = static_cast<__half*>(acc);
      const auto* b = static_cast<const __half*>(x);
      for (size_t i = 0; i < n; ++i)
        a[i] = __float2half_rn(__half2float(a[i]) + __half2float(b[i]));
      return;
    }
    default:
      return;
  }
}

thread_local std::string t_last_error;

}  // namespace

// What the ranks of one communicator share.
struct Clique {
  explicit Clique(int n) : size(n), devices(n, -1), gone(n, false), quiet(n, false) {}
  const int size;
  int joined = 0;
  std::vector<int> devices;  // the machine's GPU of each rank; -1: not joined
  std::vector<bool> gone;    // aborted or destroyed
  std::vector<bool> quiet;   // finalized or gone
  std::map<uint64_t, Collective> collectives;
  std::map<std::tuple<int, int, uint64_t>, Transfer> transfers;  // (from, to, n)
  ncclResult_t misuse = ncclSuccess;                             // reported to every rank
  std::string misuse_detail;
  bool AnyGone() const { return std::find(gone.begin(), gone.end(), true) != gone.end(); }
};

std::mutex& Mu() {
  static auto* mu = new std::mutex;  // never destroyed: connection threads outlive main
  return *mu;
}
std::condition_variable& Changed() {
  static auto* changed = new std::condition_variable;
  return *changed;
}

ncclResult_t Fail(ncclResult_t r, const std::string& detail) {
  t_last_error = detail;
  return r;
}

const char* KindName(Kind k) {
  static constexpr std::pair<Kind, const char*> kNames[] = {
      {Kind::kAllReduce, "ncclAllReduce"},
      {Kind::kReduceScatter, "ncclReduceScatter"},
      {Kind::kAllGather, "ncclAllGather"},
      {Kind::kBroadcast, "ncclBroadcast"}};
  return ringmaster::EnumName(kNames, k, "?");
}

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;  // fp8: not emulated
  }
}

size_t InputBytes(const Signature& s, int rank, int size) {
  const size_t bytes = s.count * TypeSize(s.type);
  if (s.kind == Kind::kBroadcast) return rank == s.root ? bytes : 0;
  return s.kind == Kind::kReduceScatter ? bytes * size : bytes;
}

size_t OutputBytes(const Signature& s, int size) {
  const size_t bytes = s.count * TypeSize(s.type);
  return s.kind == Kind::kAllGather ? bytes * size : bytes;
}

namespace {

std::map<std::string, std::shared_ptr<Clique>>& Rendezvous() {  // by unique id, until all joined
  static auto* rendezvous = new std::map<std::string, std::shared_ptr<Clique>>;
  return *rendezvous;
}

thread_local int t_group_depth = 0;
thread_local std::vector<const emu::PendingWork*> t_group_work;  // queued in the current group
thread_local std::vector<ncclComm*> t_group_comms;
thread_local unsigned t_group_ends = 0;

bool Undone(ncclComm* c) {
  c->work.erase(
      std::remove_if(c->work.begin(), c->work.end(), [](const Work& w) { return w->done(); }),
      c->work.end());
  return !c->work.empty();
}

View ViewFor(const ncclComm* c) { return c->remote ? RemoteView(c) : ViewOf(*c->clique); }

// The communicator's state, as ncclCommGetAsyncError answers it. Under Mu(). An error answers
// for the call in progress too.
ncclResult_t State(ncclComm* c) {
  const View v = ViewFor(c);
  if (v.misuse != ncclSuccess) {
    c->in_progress = 0;
    return Fail(v.misuse, v.misuse_detail);
  }
  if (!v.joined) return ncclInProgress;
  const bool undone = Undone(c);
  if (undone && v.gone >= 0) {
    c->in_progress = 0;
    return Fail(ncclRemoteError, !v.gone_detail.empty()
                                     ? v.gone_detail
                                     : "emulated NCCL: rank " + std::to_string(v.gone) +
                                           " aborted or destroyed its communicator while rank " +
                                           std::to_string(c->rank) + " had operations queued");
  }
  if (c->in_progress > 0) {
    --c->in_progress;
    return ncclInProgress;
  }
  if (c->finalizing && (undone || !v.quiet || (c->clique && OwesAnswers(*c->clique)))) {
    return ncclInProgress;
  }
  return ncclSuccess;
}

// Misuse seen by this rank: every rank's (through its host, for a remote one).
ncclResult_t Misused(ncclComm* c, const std::string& detail) {
  if (c->remote) {
    SendMisuse(c, detail);
  } else {
    Misuse(c, detail);
  }
  return ViewFor(c).misuse;
}

// What a call that queued work answers: inside a group ncclSuccess (ncclGroupEnd answers for
// the group), outside every other call is still "being enqueued".
ncclResult_t Queued(ncclComm* c) {
  if (t_group_depth > 0) {
    if (std::find(t_group_comms.begin(), t_group_comms.end(), c) == t_group_comms.end()) {
      t_group_comms.push_back(c);
    }
    return ncclSuccess;
  }
  if (c->calls++ % 2 == 1) return ncclSuccess;
  c->in_progress = 1;
  return ncclInProgress;
}

// A call on `c` while its previous call is still in progress; under Mu().
ncclResult_t CheckNotInProgress(ncclComm* c, const char* what) {
  if (c->in_progress == 0) return ncclSuccess;
  return Misused(c, std::string(what) + " on rank " + std::to_string(c->rank) +
                        " while its previous call was still in progress (poll "
                        "ncclCommGetAsyncError until it is not)");
}

// Checks common to every operation; under Mu().
ncclResult_t CheckIssue(ncclComm* c, const char* what, cudaStream_t stream) {
  if (c == nullptr) return Fail(ncclInvalidArgument, std::string(what) + ": null communicator");
  const View v = ViewFor(c);
  if (v.misuse != ncclSuccess) return Fail(v.misuse, v.misuse_detail);
  if (!v.joined) {
    return Fail(ncclInvalidUsage, std::string(what) +
                                      " before the communicator's initialisation "
                                      "completed");
  }
  if (c->finalizing) return Fail(ncclInvalidUsage, std::string(what) + " after ncclCommFinalize");
  if (ncclResult_t r = CheckNotInProgress(c, what); r != ncclSuccess) return r;
  // The group's own operations run together: they do not wait for each other.
  if (emu::HasPendingWork(stream, t_group_work)) {
    return Misused(c, std::string(what) + " on rank " + std::to_string(c->rank) +
                          " was issued while its stream still held unfinished NCCL work (not "
                          "emulated)");
  }
  return ncclSuccess;
}

// `p` as a buffer of `bytes` NCCL may use on `c`'s device.
ncclResult_t CheckBuffer(ncclComm* c, const void* p, size_t bytes, const char* what) {
  if (bytes == 0 || emu::IsDeviceRange(p, bytes, c->device)) return ncclSuccess;
  return Fail(ncclInvalidArgument, std::string(what) + ": the " + std::to_string(bytes) +
                                       " bytes of the buffer are not device memory of CUDA "
                                       "device " +
                                       std::to_string(c->device));
}

Work Enqueue(ncclComm* c, cudaStream_t stream) {
  auto w = std::make_shared<emu::PendingWork>();
  if (emu::Enqueue(stream, w) != cudaSuccess) {
    w->Complete();  // an invalid stream: nothing will wait for it
  }
  c->work.push_back(w);
  if (t_group_depth > 0) t_group_work.push_back(w.get());
  return w;
}

// Runs a collective every rank has issued: writes every rank's output, completes its work.
void Run(Collective& op, int n) {
  const Signature& s = op.signature;
  const size_t esize = TypeSize(s.type);
  const size_t bytes = s.count * esize;
  auto write = [&](int r, const void* data, size_t size) {
    if (op.outputs[r] != nullptr && size > 0) std::memcpy(op.outputs[r], data, size);
  };
  switch (s.kind) {
    case Kind::kAllReduce:
    case Kind::kReduceScatter: {
      std::vector<char> sum = op.inputs[0];
      for (int r = 1; r < n; ++r) Add(s.type, sum.data(), op.inputs[r].data(), sum.size() / esize);
      for (int r = 0; r < n; ++r) {
        write(r, sum.data() + (s.kind == Kind::kReduceScatter ? r * bytes : 0), bytes);
      }
      break;
    }
    case Kind::kAllGather: {
      std::vector<char> all;
      for (int r = 0; r < n; ++r) all.insert(all.end(), op.inputs[r].begin(), op.inputs[r].end());
      for (int r = 0; r < n; ++r) write(r, all.data(), all.size());
      break;
    }
    case Kind::kBroadcast:
      for (int r = 0; r < n; ++r) write(r, op.inputs[s.root].data(), bytes);
      break;
  }
  for (const Work& w : op.work) w->Complete();
  Changed().notify_all();
}

ncclResult_t IssueCollective(const Signature& s, const void* in, void* out, ncclComm* c,
                             cudaStream_t stream) {
  const char* what = KindName(s.kind);
  // The work its stream deferred, and what that waits for, writes the input first.
  (void)emu::RunDeferred(stream);  // an invalid stream has nothing deferred
  std::lock_guard<std::mutex> lock(Mu());
  if (ncclResult_t r = CheckIssue(c, what, stream); r != ncclSuccess) return r;
  const int n = c->size;
  if (TypeSize(s.type) == 0) {
    return Fail(ncclInvalidArgument, std::string(what) + ": type not emulated");
  }
  if (s.kind == Kind::kBroadcast && (s.root < 0 || s.root >= n)) {
    return Fail(ncclInvalidArgument, std::string(what) + ": root out of range");
  }
  if (ncclResult_t r = CheckBuffer(c, in, InputBytes(s, c->rank, n), what); r != ncclSuccess) {
    return r;
  }
  if (ncclResult_t r = CheckBuffer(c, out, OutputBytes(s, n), what); r != ncclSuccess) return r;
  Work w = Enqueue(c, stream);
  if (c->remote) {
    SendCollective(c, s, in, out, std::move(w));
  } else if (ncclResult_t r = AddCollective(c, s, in, out, std::move(w)); r != ncclSuccess) {
    return r;
  }
  return Queued(c);
}

// Completes a transfer both sides have issued.
void Deliver(Clique& k, ncclComm* c, const std::tuple<int, int, uint64_t>& key) {
  Transfer& t = k.transfers[key];
  if (!t.sent || !t.received || k.AnyGone()) return;
  if (t.send_bytes != t.recv_bytes) {
    Misuse(c, "message #" + std::to_string(std::get<2>(key)) + " from rank " +
                  std::to_string(std::get<0>(key)) + " to rank " +
                  std::to_string(std::get<1>(key)) + " is " + std::to_string(t.send_bytes) +
                  " bytes sent, " + std::to_string(t.recv_bytes) + " received");
    return;
  }
  if (t.out != nullptr && t.recv_bytes > 0) std::memcpy(t.out, t.data.data(), t.recv_bytes);
  t.send_work->Complete();
  t.recv_work->Complete();
  k.transfers.erase(key);
  Changed().notify_all();
}

ncclResult_t IssuePointToPoint(bool send, void* buffer, size_t count, ncclDataType_t type, int peer,
                               ncclComm* c, cudaStream_t stream) {
  const char* what = send ? "ncclSend" : "ncclRecv";
  (void)emu::RunDeferred(stream);  // what writes the input first
  std::lock_guard<std::mutex> lock(Mu());
  if (ncclResult_t r = CheckIssue(c, what, stream); r != ncclSuccess) return r;
  const size_t esize = TypeSize(type);
  if (esize == 0) return Fail(ncclInvalidArgument, std::string(what) + ": type not emulated");
  if (peer < 0 || peer >= c->size) {
    return Fail(ncclInvalidArgument, std::string(what) + ": peer");
  }
  const size_t bytes = count * esize;
  if (ncclResult_t r = CheckBuffer(c, buffer, bytes, what); r != ncclSuccess) return r;
  Work w = Enqueue(c, stream);
  if (c->remote) {
    SendTransfer(c, send, buffer, bytes, peer, std::move(w));
  } else if (ncclResult_t r = AddTransfer(c, send, buffer, bytes, peer, std::move(w));
             r != ncclSuccess) {
    return r;
  }
  return Queued(c);
}

// Ends `c`: leaves its clique, and frees it. Under `lock` (of Mu()), which a remote rank's
// closing releases for a while.
void End(ncclComm* c, std::unique_lock<std::mutex>& lock) {
  if (c->remote) {
    lock.unlock();
    CloseRemote(c);
    lock.lock();
  } else {
    Leave(c);
  }
  delete c;
}

}  // namespace

ncclResult_t JoinClique(const std::string& key, int nranks, int rank, int machine_device,
                        std::shared_ptr<Clique>* clique) {
  std::shared_ptr<Clique>& slot = Rendezvous()[key];
  if (slot == nullptr) slot = std::make_shared<Clique>(nranks);
  std::shared_ptr<Clique> k = slot;
  if (k->size != nranks) {
    return Fail(ncclInvalidUsage, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                      " says " + std::to_string(nranks) + " ranks, another said " +
                                      std::to_string(k->size));
  }
  if (k->devices[rank] != -1) {
    return Fail(ncclInvalidUsage,
                "ncclCommInitRankConfig: rank " + std::to_string(rank) + " joined twice");
  }
  for (int r = 0; r < nranks; ++r) {
    if (k->devices[r] == machine_device) {
      return Fail(ncclInvalidUsage, "Duplicate GPU detected: rank " + std::to_string(rank) +
                                        " and rank " + std::to_string(r) +
                                        " both on the machine's GPU " +
                                        std::to_string(machine_device));
    }
  }
  k->devices[rank] = machine_device;
  if (++k->joined == k->size) Rendezvous().erase(key);
  *clique = k;
  Changed().notify_all();
  return ncclSuccess;
}

View ViewOf(const Clique& k) {
  View v;
  v.misuse = k.misuse;
  v.misuse_detail = k.misuse_detail;
  v.joined = k.joined == k.size;
  v.quiet = std::find(k.quiet.begin(), k.quiet.end(), false) == k.quiet.end();
  const auto gone = std::find(k.gone.begin(), k.gone.end(), true);
  v.gone = gone == k.gone.end() ? -1 : static_cast<int>(gone - k.gone.begin());
  return v;
}

ncclResult_t AddCollective(ncclComm* c, const Signature& s, const void* in, void* out, Work w) {
  Clique& k = *c->clique;
  const int n = k.size;
  const uint64_t index = c->collectives++;
  Collective& op = k.collectives[index];
  if (op.issued == 0) {
    op.signature = s;
    op.first = c->rank;
    op.inputs.resize(n);
    op.outputs.assign(n, nullptr);
    op.work.resize(n);
  } else if (!(op.signature == s)) {
    Misuse(c, "collective #" + std::to_string(index) + " is " + Describe(s) + " on rank " +
                  std::to_string(c->rank) + " but " + Describe(op.signature) + " on rank " +
                  std::to_string(op.first));
    w->Complete();  // nothing will complete it now
    Changed().notify_all();
    return k.misuse;
  }
  const char* p = static_cast<const char*>(in);
  op.inputs[c->rank].assign(p, p + InputBytes(s, c->rank, n));
  op.outputs[c->rank] = out;
  op.work[c->rank] = std::move(w);
  if (++op.issued == n && !k.AnyGone()) {
    Run(op, n);
    k.collectives.erase(index);
  }
  return ncclSuccess;
}

ncclResult_t AddTransfer(ncclComm* c, bool send, void* buffer, size_t bytes, int peer, Work w) {
  Clique& k = *c->clique;
  const auto key = send ? std::make_tuple(c->rank, peer, c->sends[peer]++)
                        : std::make_tuple(peer, c->rank, c->receives[peer]++);
  Transfer& t = k.transfers[key];
  if (send) {
    const char* p = static_cast<const char*>(buffer);
    t.sent = true;
    t.send_bytes = bytes;
    t.data.assign(p, p + bytes);
    t.send_work = std::move(w);
  } else {
    t.received = true;
    t.recv_bytes = bytes;
    t.out = buffer;
    t.recv_work = std::move(w);
  }
  Deliver(k, c, key);
  return k.misuse;
}

void Misuse(ncclComm* c, const std::string& detail) {
  Clique& k = *c->clique;
  if (k.misuse != ncclSuccess) return;
  k.misuse = ncclInvalidUsage;
  k.misuse_detail = "emulated NCCL: " + detail;
  t_last_error = k.misuse_detail;
  Changed().notify_all();
}

void Finalized(ncclComm* c) {
  c->finalizing = true;
  c->clique->quiet[c->rank] = true;
  Changed().notify_all();
}

void Leave(ncclComm* c) {
  Clique& k = *c->clique;
  k.gone[c->rank] = true;
  k.quiet[c->rank] = true;
  for (auto& [index, op] : k.collectives) {
    if (!op.outputs.empty()) op.outputs[c->rank] = nullptr;
  }
  for (auto& [key, t] : k.transfers) {
    if (std::get<1>(key) == c->rank) t.out = nullptr;
  }
  for (const Work& w : c->work) w->Complete();
  Changed().notify_all();
}

}  // namespace emu::nccl

using emu::nccl::Fail;
using emu::nccl::Kind;
using emu::nccl::Mu;
using emu::nccl::Signature;

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return emu::nccl::t_last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return Fail(ncclInvalidArgument, "ncclGetUniqueId: null id");
  return emu::nccl::MakeUniqueId(id);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitRankConfig: null comm");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Fail(ncclInvalidArgument, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                         " of " + std::to_string(nranks));
  }
  if (config == nullptr || config->blocking != 0) {
    return Fail(ncclInvalidArgument,
                "emulated NCCL: blocking communicators are not emulated "
                "(config.blocking = 0)");
  }
  auto c = std::make_unique<ncclComm>();
  c->rank = rank;
  c->size = nranks;
  c->device = emu::CurrentDevice();
  const int machine_device = emu::MachineDevice(c->device);
  if (machine_device < 0) {
    return Fail(ncclInvalidUsage, "ncclCommInitRankConfig: no CUDA device is current");
  }
  if (!emu::nccl::HostedHere(id)) {
    if (ncclResult_t r = emu::nccl::JoinRemote(c.get(), id, nranks, machine_device);
        r != ncclSuccess) {
      return r;
    }
  } else {
    std::lock_guard<std::mutex> lock(Mu());
    const std::string key(id.internal, sizeof(id.internal));
    if (ncclResult_t r = emu::nccl::JoinClique(key, nranks, rank, machine_device, &c->clique);
        r != ncclSuccess) {
      return r;
    }
  }
  *comm = c.release();
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr || state == nullptr) {
    return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: null argument");
  }
  std::lock_guard<std::mutex> lock(Mu());
  *state = emu::nccl::State(comm);
  return ncclSuccess;
}

namespace {

void Finalize(ncclComm_t comm) {
  if (comm->remote) {
    comm->finalizing = true;
    emu::nccl::SendFinalized(comm);
  } else {
    emu::nccl::Finalized(comm);
  }
}

}  // namespace

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommFinalize: null comm");
  std::lock_guard<std::mutex> lock(Mu());
  if (ncclResult_t r = emu::nccl::CheckNotInProgress(comm, "ncclCommFinalize"); r != ncclSuccess) {
    return r;
  }
  Finalize(comm);
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::unique_lock<std::mutex> lock(Mu());
  if (ncclResult_t r = emu::nccl::CheckNotInProgress(comm, "ncclCommDestroy"); r != ncclSuccess) {
    return r;
  }
  if (!comm->finalizing) {
    // NCCL finalizes first, waiting until the communicator is quiescent.
    Finalize(comm);
    auto settled = [comm] { return emu::nccl::State(comm) != ncclInProgress; };
    if (!emu::nccl::Changed().wait_for(lock, std::chrono::seconds(10), settled)) {
      std::fprintf(stderr,
                   "emulated NCCL: ncclCommDestroy of rank %d has waited 10 s for the other ranks "
                   "to finalize: a hang on a GPU too\n",
                   comm->rank);
      emu::nccl::Changed().wait(lock, settled);
    }
  }
  emu::nccl::End(comm, lock);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::unique_lock<std::mutex> lock(Mu());
  emu::nccl::End(comm, lock);
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  if (emu::nccl::t_group_depth++ == 0) {
    emu::nccl::t_group_work.clear();
    emu::nccl::t_group_comms.clear();
  }
  return ncclSuccess;
}

// The group's operations were queued as they were issued; every other group that queued some
// is still "being enqueued" on each of its communicators.
ncclResult_t ncclGroupEnd() {
  using emu::nccl::t_group_comms;
  if (emu::nccl::t_group_depth == 0) {
    return Fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  }
  if (--emu::nccl::t_group_depth > 0) return ncclSuccess;
  std::lock_guard<std::mutex> lock(Mu());
  const bool in_progress = !t_group_comms.empty() && emu::nccl::t_group_ends++ % 2 == 0;
  for (ncclComm* c : t_group_comms) c->in_progress = in_progress ? 1 : 0;
  emu::nccl::t_group_work.clear();
  t_group_comms.clear();
  return in_progress ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* in, void* out, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return Fail(ncclInvalidArgument, "ncclAllReduce: emulated NCCL sums only");
  return emu::nccl::IssueCollective(Signature{Kind::kAllReduce, count, type, 0}, in, out, comm,
                                    stream);
}

ncclResult_t ncclReduceScatter(const void* in, void* out, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return Fail(ncclInvalidArgument, "ncclReduceScatter: emulated NCCL sums only");
  return emu::nccl::IssueCollective(Signature{Kind::kReduceScatter, count, type, 0}, in, out, comm,
                                    stream);
}

ncclResult_t ncclAllGather(const void* in, void* out, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return emu::nccl::IssueCollective(Signature{Kind::kAllGather, count, type, 0}, in, out, comm,
                                    stream);
}

ncclResult_t ncclBroadcast(const void* in, void* out, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return emu::nccl::IssueCollective(Signature{Kind::kBroadcast, count, type, root}, in, out, comm,
                                    stream);
}

ncclResult_t ncclSend(const void* data, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return emu::nccl::IssuePointToPoint(true, const_cast<void*>(data), count, type, peer, comm,
                                      stream);
}

ncclResult_t ncclRecv(void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return emu::nccl::IssuePointToPoint(false, data, count, type, peer, comm, stream);
}

}  // extern "C"
