// The inside of the emulated NCCL (fake_nccl.cc), for its two halves:
// - the clique (fake_nccl.cc): what the ranks of one communicator share, kept by the process that
//   made its ncclUniqueId, where its ranks' operations are matched and run;
// - the process transport (fake_nccl_process.cc): a rank in another process reaches that clique
//   through a Unix socket, served there by a stand-in rank (a proxy) that issues its operations.
// Everything here is guarded by Mu() unless it says otherwise.
#ifndef RINGMASTER_TESTING_CUDA_EMU_FAKE_NCCL_CLIQUE_H_
#define RINGMASTER_TESTING_CUDA_EMU_FAKE_NCCL_CLIQUE_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "testing/cuda_emu/fake_streams.h"

namespace emu::nccl {

using Work = std::shared_ptr<emu::PendingWork>;

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

// A collective as one rank issued it.
struct Signature {
  Kind kind;
  size_t count;  // NCCL's count argument
  ncclDataType_t type;
  int root;  // broadcast only
  bool operator==(const Signature& o) const {
    return std::tie(kind, count, type, root) == std::tie(o.kind, o.count, o.type, o.root);
  }
};

const char* KindName(Kind k);
// The element size of `t`; 0 for the types not emulated (fp8).
size_t TypeSize(ncclDataType_t t);
// The bytes a rank of `size` reads and writes for `s`.
size_t InputBytes(const Signature& s, int rank, int size);
size_t OutputBytes(const Signature& s, int size);

// What a rank knows of its communicator as a whole.
struct View {
  ncclResult_t misuse = ncclSuccess;  // reported to every rank
  std::string misuse_detail;
  bool joined = false;      // every rank has joined
  bool quiet = false;       // every rank has finalized or left
  int gone = -1;            // the first rank that aborted or destroyed its communicator, or -1
  std::string gone_detail;  // why, when not that ("" otherwise)
  bool operator==(const View& o) const {
    return std::tie(misuse, misuse_detail, joined, quiet, gone, gone_detail) ==
           std::tie(o.misuse, o.misuse_detail, o.joined, o.quiet, o.gone, o.gone_detail);
  }
};

struct Clique;  // fake_nccl.cc
class Remote;   // fake_nccl_process.cc

// The one lock of the emulated NCCL, and its signal: operations completed, ranks joined,
// finalized or left, a view changed.
std::mutex& Mu();
std::condition_variable& Changed();

// Records `detail` as the calling thread's last error (ncclGetLastError) and returns `r`.
ncclResult_t Fail(ncclResult_t r, const std::string& detail);

}  // namespace emu::nccl

// The opaque communicator of nccl.h: one rank's, or a proxy's stand-in for a rank in another
// process. Exactly one of `clique` and `remote` is set.
struct ncclComm {
  std::shared_ptr<emu::nccl::Clique> clique;  // this process hosts the communicator
  std::shared_ptr<emu::nccl::Remote> remote;  // another process does
  int rank = 0;
  int size = 0;
  int device = 0;  // CUDA ordinal in this process (a proxy's: -1)
  bool finalizing = false;
  uint64_t collectives = 0;           // issued so far
  std::map<int, uint64_t> sends;      // to each peer, so far
  std::map<int, uint64_t> receives;   // from each peer, so far
  std::vector<emu::nccl::Work> work;  // queued by this rank, not known to be complete
  unsigned calls = 0;                 // operations issued outside groups, for ncclInProgress
  int in_progress = 0;                // ncclCommGetAsyncError answers ncclInProgress this often
};

namespace emu::nccl {

// The clique (fake_nccl.cc), under Mu().
//
// Joins rank `rank` of `nranks`, on the machine's GPU `machine_device`, to the clique of `key`
// (a unique id), making it when it is the first: ncclInvalidUsage for a size that disagrees, a
// rank that joined twice, or a GPU another rank has.
ncclResult_t JoinClique(const std::string& key, int nranks, int rank, int machine_device,
                        std::shared_ptr<Clique>* clique);
View ViewOf(const Clique& k);
// Rank `c`'s part of its next collective (`in`: InputBytes of it, read now; `out`: OutputBytes,
// written when every rank has issued it, unless null), completing `w` then.
ncclResult_t AddCollective(ncclComm* c, const Signature& s, const void* in, void* out, Work w);
// Rank `c`'s next message to (`send`) or from `peer`, of `bytes` from or into `buffer`.
ncclResult_t AddTransfer(ncclComm* c, bool send, void* buffer, size_t bytes, int peer, Work w);
// Every rank's ncclCommGetAsyncError answers ncclInvalidUsage with `detail` from now on.
void Misuse(ncclComm* c, const std::string& detail);
void Finalized(ncclComm* c);
// Rank `c` leaves (abort or destroy): its queued work ends, nothing is written to its buffers.
void Leave(ncclComm* c);

// The process transport (fake_nccl_process.cc).
//
// A unique id naming this process, which serves it to the ranks of other processes (from now
// on, on a thread of its own). Not under Mu().
ncclResult_t MakeUniqueId(ncclUniqueId* id);
// Whether this process made `id`.
bool HostedHere(const ncclUniqueId& id);
// Whether a proxy of `k` (hosted here) has yet to send the outputs of operations that have
// completed: a finalize of the host's own ranks waits for them. Under Mu().
bool OwesAnswers(const Clique& k);
// Joins `c` (rank, device set) to the clique `id` names in another process, through a
// connection of its own: ncclSystemError when that process cannot be reached; its refusal (a
// duplicate GPU...) comes later, as RemoteView's misuse. Not under Mu(); does not wait.
ncclResult_t JoinRemote(ncclComm* c, const ncclUniqueId& id, int nranks, int machine_device);
// What `c`'s host last said of the communicator; once the connection is lost, a communicator
// that is quiet and has a rank gone.
View RemoteView(const ncclComm* c);
// Sends `c`'s part of an operation, as AddCollective and AddTransfer take them, to its host;
// `w` completes when the host's answer has been written to `out` (or `buffer`, for a receive).
void SendCollective(ncclComm* c, const Signature& s, const void* in, void* out, Work w);
void SendTransfer(ncclComm* c, bool send, void* buffer, size_t bytes, int peer, Work w);
void SendFinalized(ncclComm* c);
void SendMisuse(ncclComm* c, const std::string& detail);
// Leaves the clique and closes the connection at once (requests not sent yet are dropped):
// `c`'s queued work ends, nothing more is written to its buffers. Not under Mu() (it joins the
// connection's threads).
void CloseRemote(ncclComm* c);

}  // namespace emu::nccl

#endif  // RINGMASTER_TESTING_CUDA_EMU_FAKE_NCCL_CLIQUE_H_
