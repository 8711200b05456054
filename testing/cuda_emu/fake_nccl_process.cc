// The emulated NCCL across processes (fake_nccl_clique.h).
//
// A process that makes a unique id listens on an abstract Unix socket named after a random
// nonce of its own, which the id carries ("ringmaster-emu <nonce> <n>"). A rank of another
// process connects there and asks to join; a thread of the host (Serve) answers for it from then
// on as its stand-in ncclComm (a proxy): it issues the rank's operations in the clique with the
// inputs the rank sent, and a second thread (Answer) sends back each output once the operation
// completed, and the communicator's View whenever it changes: completions before a rank gone (a
// rank never sees a peer gone before its own completed work), misuse before the completions (a
// refused operation answers with no output, after its misuse). The remote rank's side has a
// writer thread (its join, then its requests, in order, never written under Mu(): two processes
// can each host a communicator the other is a rank of) and a reader thread (the join's answer,
// outputs into the rank's buffers, completing its work; the views).
//
// A closed connection is the end of a rank: the host's proxy leaves the clique (as
// ncclCommAbort; a rank's abort or destroy closes it at once, without flushing), and a remote
// rank whose host is gone sees the communicator quiet with a rank gone (its queued work fails
// with ncclRemoteError; a finalize completes). A finalize of one of the host's own ranks
// completes only once its proxies have sent every completed operation's output (OwesAnswers),
// so that a host exiting right after it does not take a remote rank's last outputs with it (on
// GPUs, they are in that rank's memory by then).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/cuda_emu/fake_nccl_clique.h"

namespace emu::nccl {
namespace {

enum class Type : uint32_t {
  // To the host.
  kJoin,        // a: rank, b: ranks, c: the machine's GPU; payload: the unique id
  kCollective,  // a: Kind, b: count, c: type, d: root; payload: the input
  kTransfer,    // a: peer, b: 1 send / 0 receive, c: bytes; payload: a send's data
  kFinalized,
  kMisuse,  // payload: what
  // To a remote rank.
  kJoinResult,  // a: ncclResult_t; payload: the error's detail
  kDone,        // b: the operation's number, in the order sent; payload: its output
  kView,        // a: misuse, b: 1 joined | 2 quiet, c: gone; payload: the misuse's detail
};

struct Header {
  Type type;
  int32_t a = 0;
  int64_t b = 0, c = 0, d = 0;
  uint64_t bytes = 0;  // of the payload that follows
};

struct Message {
  Header header{};
  std::vector<char> payload;
};

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool Send(int fd, Header h, const void* payload, size_t bytes) {
  h.bytes = bytes;
  return WriteAll(fd, &h, sizeof(h)) && (bytes == 0 || WriteAll(fd, payload, bytes));
}

bool Send(int fd, const Message& m) {
  return Send(fd, m.header, m.payload.data(), m.payload.size());
}

// False at the connection's end (or on a malformed message).
bool Receive(int fd, Message* m) {
  if (!ReadAll(fd, &m->header, sizeof(m->header))) return false;
  if (m->header.bytes > (uint64_t{1} << 40)) return false;
  m->payload.resize(m->header.bytes);
  return m->payload.empty() || ReadAll(fd, m->payload.data(), m->payload.size());
}

Message Make(Type type, int32_t a = 0, int64_t b = 0, int64_t c = 0, int64_t d = 0) {
  Message m;
  m.header.type = type;
  m.header.a = a;
  m.header.b = b;
  m.header.c = c;
  m.header.d = d;
  return m;
}

// The abstract socket address of the process with `nonce`.
sockaddr_un Address(uint64_t nonce, socklen_t* length) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const int n = std::snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1,
                              "ringmaster-emu-nccl-%016" PRIx64, nonce);
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

uint64_t OwnNonce() {
  static const uint64_t nonce = [] {
    std::random_device random;
    return (uint64_t{random()} << 32) ^ random();
  }();
  return nonce;
}

// The nonce of the process that made `id`; false for an id no emulated NCCL made.
bool NonceOf(const ncclUniqueId& id, uint64_t* nonce) {
  char text[sizeof(id.internal) + 1] = {};
  std::memcpy(text, id.internal, sizeof(id.internal));
  return std::sscanf(text, "ringmaster-emu %" SCNx64, nonce) == 1;
}

// ---- The host's side: a proxy for each remote rank.

struct Proxy {
  explicit Proxy(int socket) : fd(socket) {}
  const int fd;
  ncclComm comm;  // the remote rank's stand-in
  bool closed = false;
  uint64_t next = 0;  // the number of its next operation
  struct Op {
    Work work;
    std::vector<char> out;
  };
  std::map<uint64_t, Op> ops;  // not answered yet
  bool sending = false;        // Answer is sending some (without Mu())
  bool view_sent = false;
  View sent;
};

// The proxies serving their ranks now (under Mu()).
std::set<const Proxy*>& Proxies() {
  static auto* proxies = new std::set<const Proxy*>;  // never destroyed: used until exit
  return *proxies;
}

// A request of the remote rank; under Mu(). A malformed one is misuse.
void Handle(Proxy& p, const Message& m) {
  ncclComm* c = &p.comm;
  const Header& h = m.header;
  if (h.type == Type::kFinalized) return Finalized(c);
  if (h.type == Type::kMisuse) return Misuse(c, std::string(m.payload.begin(), m.payload.end()));
  Proxy::Op& op = p.ops[p.next++];
  op.work = std::make_shared<emu::PendingWork>();
  c->work.push_back(op.work);
  if (h.type == Type::kCollective) {
    const Signature s{static_cast<Kind>(h.a), static_cast<size_t>(h.b),
                      static_cast<ncclDataType_t>(h.c), static_cast<int>(h.d)};
    if (m.payload.size() != InputBytes(s, c->rank, c->size)) {
      return Misuse(c, "a malformed collective from rank " + std::to_string(c->rank));
    }
    op.out.resize(OutputBytes(s, c->size));
    if (AddCollective(c, s, m.payload.data(), op.out.empty() ? nullptr : op.out.data(), op.work) !=
        ncclSuccess) {
      op.out.clear();  // refused: nothing to write (the misuse reaches every rank in the view)
    }
  } else if (h.type == Type::kTransfer) {
    const bool send = h.b != 0;
    const size_t bytes = static_cast<size_t>(h.c);
    if (send ? m.payload.size() != bytes : !m.payload.empty()) {
      return Misuse(c, "a malformed transfer from rank " + std::to_string(c->rank));
    }
    if (!send) op.out.resize(bytes);
    void* buffer = send ? const_cast<char*>(m.payload.data()) : op.out.data();
    (void)AddTransfer(c, send, buffer, bytes, h.a, op.work);
  } else {
    Misuse(c, "an unknown request from rank " + std::to_string(c->rank));
  }
}

// Sends the proxy's completed operations and the view when it changed, until the connection
// closes.
void Answer(std::shared_ptr<Proxy> p) {
  std::unique_lock<std::mutex> lock(Mu());
  while (!p->closed) {
    std::vector<Message> out;
    for (auto it = p->ops.begin(); it != p->ops.end();) {
      if (!it->second.work->done()) {
        ++it;
        continue;
      }
      Message m = Make(Type::kDone, 0, static_cast<int64_t>(it->first));
      m.payload = std::move(it->second.out);
      out.push_back(std::move(m));
      it = p->ops.erase(it);
    }
    const View v = ViewOf(*p->comm.clique);
    if (!p->view_sent || !(v == p->sent)) {
      Message m = Make(Type::kView, v.misuse, (v.joined ? 1 : 0) | (v.quiet ? 2 : 0), v.gone);
      m.payload.assign(v.misuse_detail.begin(), v.misuse_detail.end());
      // Misuse before the completions it refused (the rank must not see them succeed), a rank
      // gone after the completions that came before it.
      out.insert(v.misuse != ncclSuccess ? out.begin() : out.end(), std::move(m));
      p->view_sent = true;
      p->sent = v;
    }
    if (out.empty()) {
      Changed().wait(lock);
      continue;
    }
    auto& work = p->comm.work;
    work.erase(std::remove_if(work.begin(), work.end(), [](const Work& w) { return w->done(); }),
               work.end());
    p->sending = true;
    lock.unlock();
    bool sent = true;
    for (const Message& m : out) sent = sent && Send(p->fd, m);
    lock.lock();
    p->sending = false;
    Changed().notify_all();  // a finalize of the host's may wait for these (OwesAnswers)
    if (!sent) {
      p->closed = true;  // the connection is gone: owes nothing more; Serve sees it end too
      return;
    }
  }
}

// Serves one remote rank, from its join to its connection's end.
void Serve(int fd) {
  Message m;
  if (!Receive(fd, &m) || m.header.type != Type::kJoin) {
    ::close(fd);
    return;
  }
  auto p = std::make_shared<Proxy>(fd);
  ncclResult_t joined = ncclInvalidArgument;
  std::string detail = "a malformed join";
  {
    std::lock_guard<std::mutex> lock(Mu());
    const int rank = m.header.a;
    const int size = static_cast<int>(m.header.b);
    if (size >= 1 && rank >= 0 && rank < size) {
      p->comm.rank = rank;
      p->comm.size = size;
      p->comm.device = -1;
      joined = JoinClique(std::string(m.payload.begin(), m.payload.end()), size, rank,
                          static_cast<int>(m.header.c), &p->comm.clique);
      detail = joined == ncclSuccess ? "" : ncclGetLastError(nullptr);
    }
  }
  if (!Send(fd, Make(Type::kJoinResult, joined).header, detail.data(), detail.size()) ||
      joined != ncclSuccess) {
    ::close(fd);  // a rank that joined and left at once has left, as below
    if (joined == ncclSuccess) {
      std::lock_guard<std::mutex> lock(Mu());
      Leave(&p->comm);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(Mu());
    Proxies().insert(p.get());
  }
  std::thread answer(Answer, p);
  while (Receive(fd, &m)) {  // until the rank closes the connection: it has left
    std::lock_guard<std::mutex> lock(Mu());
    Handle(*p, m);
  }
  {
    std::lock_guard<std::mutex> lock(Mu());
    Leave(&p->comm);
    p->closed = true;
    Changed().notify_all();
  }
  answer.join();
  {
    std::lock_guard<std::mutex> lock(Mu());
    Proxies().erase(p.get());
  }
  ::close(fd);
}

void AcceptLoop(int listener) {
  while (true) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      std::thread(Serve, fd).detach();
    } else if (errno != EINTR && errno != ECONNABORTED) {
      std::fprintf(stderr,
                   "emulated NCCL: accept failed (%s): ranks of other processes cannot join "
                   "communicators of this one any more\n",
                   std::strerror(errno));
      ::close(listener);  // their connections are refused rather than left waiting
      return;
    }
  }
}

// Starts this process's listener, once. Without it (reported on stderr) the ranks of this
// process still form communicators; those of other processes cannot join them (refused).
void StartListener() {
  static const bool started = [] {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t length = 0;
    const sockaddr_un a = Address(OwnNonce(), &length);
    if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&a), length) != 0 ||
        ::listen(fd, SOMAXCONN) != 0) {
      std::fprintf(stderr, "emulated NCCL: cannot listen for ranks of other processes: %s\n",
                   std::strerror(errno));
      if (fd >= 0) ::close(fd);
      return false;
    }
    std::thread(AcceptLoop, fd).detach();  // for the life of the process
    return true;
  }();
  (void)started;
}

}  // namespace

// ---- A remote rank's side.

class Remote {
 public:
  int fd = -1;
  std::thread reader, writer;
  View view;  // the host's last
  bool lost = false;
  bool closing = false;
  uint64_t next = 0;  // the number of the next operation
  struct Op {
    Work work;
    void* out;
    size_t bytes;
  };
  std::map<uint64_t, Op> ops;    // not answered yet
  std::deque<Message> outgoing;  // for the writer

  void Queue(Message m) {
    outgoing.push_back(std::move(m));
    Changed().notify_all();
  }
};

namespace {

void Write(Remote* r) {
  std::unique_lock<std::mutex> lock(Mu());
  while (true) {
    Changed().wait(lock, [r] { return !r->outgoing.empty() || r->closing; });
    if (r->outgoing.empty()) return;  // closing, everything sent
    Message m = std::move(r->outgoing.front());
    r->outgoing.pop_front();
    lock.unlock();
    const bool sent = Send(r->fd, m);
    lock.lock();
    if (!sent) {
      r->outgoing.clear();  // the reader sees the connection end
      if (r->closing) return;
    }
  }
}

void Read(Remote* r) {
  Message m;
  while (Receive(r->fd, &m)) {
    std::lock_guard<std::mutex> lock(Mu());
    const Header& h = m.header;
    if (h.type == Type::kDone) {
      auto it = r->ops.find(static_cast<uint64_t>(h.b));
      if (it == r->ops.end()) continue;
      const Remote::Op& op = it->second;
      if (op.out != nullptr && !m.payload.empty()) {  // a refused operation answers with none
        std::memcpy(op.out, m.payload.data(), std::min(op.bytes, m.payload.size()));
      }
      op.work->Complete();
      r->ops.erase(it);
    } else if (h.type == Type::kJoinResult && h.a != ncclSuccess) {
      r->view.misuse = static_cast<ncclResult_t>(h.a);
      r->view.misuse_detail.assign(m.payload.begin(), m.payload.end());
    } else if (h.type == Type::kView) {
      if (r->view.misuse == ncclSuccess) {  // this rank's own misuse may not have reached it yet
        r->view.misuse = static_cast<ncclResult_t>(h.a);
        r->view.misuse_detail.assign(m.payload.begin(), m.payload.end());
      }
      r->view.joined = (h.b & 1) != 0;
      r->view.quiet = (h.b & 2) != 0;
      r->view.gone = static_cast<int>(h.c);
    }
    Changed().notify_all();
  }
  std::lock_guard<std::mutex> lock(Mu());
  r->lost = true;
  Changed().notify_all();
}

// Registers an operation of `c` whose answer is written to `out`, and queues its request.
void Request(ncclComm* c, Message m, void* out, size_t bytes, Work w) {
  Remote& r = *c->remote;
  r.ops[r.next++] = Remote::Op{std::move(w), out, bytes};
  r.Queue(std::move(m));
}

}  // namespace

ncclResult_t MakeUniqueId(ncclUniqueId* id) {
  StartListener();
  static std::atomic<uint64_t> next{0};
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "ringmaster-emu %016" PRIx64 " %" PRIu64,
                OwnNonce(), next++);
  return ncclSuccess;
}

bool OwesAnswers(const Clique& k) {
  for (const Proxy* p : Proxies()) {
    if (p->comm.clique.get() != &k || p->closed) continue;
    if (p->sending) return true;
    for (const auto& [number, op] : p->ops) {
      if (op.work->done()) return true;
    }
  }
  return false;
}

bool HostedHere(const ncclUniqueId& id) {
  uint64_t nonce = 0;
  return NonceOf(id, &nonce) && nonce == OwnNonce();
}

ncclResult_t JoinRemote(ncclComm* c, const ncclUniqueId& id, int nranks, int machine_device) {
  uint64_t nonce = 0;
  if (!NonceOf(id, &nonce)) {
    return Fail(ncclInvalidArgument,
                "ncclCommInitRankConfig: not a unique id of the emulated NCCL");
  }
  const std::string who = "emulated NCCL: rank " + std::to_string(c->rank);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t length = 0;
  const sockaddr_un a = Address(nonce, &length);
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&a), length) != 0) {
    const std::string error = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return Fail(ncclSystemError, who + " cannot reach the process that made its unique id (" +
                                     error +
                                     "): has it exited, or could it not listen (its "
                                     "stderr says)?");
  }
  // The join is the first request; its answer comes to the reader, as the view's does.
  Message join = Make(Type::kJoin, c->rank, nranks, machine_device);
  join.payload.assign(id.internal, id.internal + sizeof(id.internal));
  auto r = std::make_shared<Remote>();
  r->fd = fd;
  r->outgoing.push_back(std::move(join));
  r->reader = std::thread(Read, r.get());
  r->writer = std::thread(Write, r.get());
  c->remote = std::move(r);
  return ncclSuccess;
}

View RemoteView(const ncclComm* c) {
  const Remote& r = *c->remote;
  View v = r.view;
  if (!r.lost) return v;
  const std::string lost = "emulated NCCL: rank " + std::to_string(c->rank) +
                           " lost its connection to the process hosting its communicator "
                           "(that process exited?)";
  if (!v.joined && v.misuse == ncclSuccess) {
    v.misuse = ncclRemoteError;  // it never will join
    v.misuse_detail = lost;
  }
  v.quiet = true;
  if (v.gone < 0) {
    v.gone = 0;
    v.gone_detail = lost;
  }
  return v;
}

void SendCollective(ncclComm* c, const Signature& s, const void* in, void* out, Work w) {
  Message m = Make(Type::kCollective, static_cast<int32_t>(s.kind), static_cast<int64_t>(s.count),
                   s.type, s.root);
  const char* p = static_cast<const char*>(in);
  m.payload.assign(p, p + InputBytes(s, c->rank, c->size));
  Request(c, std::move(m), out, OutputBytes(s, c->size), std::move(w));
}

void SendTransfer(ncclComm* c, bool send, void* buffer, size_t bytes, int peer, Work w) {
  Message m = Make(Type::kTransfer, peer, send ? 1 : 0, static_cast<int64_t>(bytes));
  if (send) {
    const char* p = static_cast<const char*>(buffer);
    m.payload.assign(p, p + bytes);
  }
  Request(c, std::move(m), send ? nullptr : buffer, send ? 0 : bytes, std::move(w));
}

void SendFinalized(ncclComm* c) { c->remote->Queue(Make(Type::kFinalized)); }

void SendMisuse(ncclComm* c, const std::string& detail) {
  Remote& r = *c->remote;
  if (r.view.misuse == ncclSuccess) {  // this rank knows at once, the others through the host
    r.view.misuse = ncclInvalidUsage;
    r.view.misuse_detail = "emulated NCCL: " + detail;
  }
  Fail(r.view.misuse, r.view.misuse_detail);
  Message m = Make(Type::kMisuse);
  m.payload.assign(detail.begin(), detail.end());
  r.Queue(std::move(m));
}

void CloseRemote(ncclComm* c) {
  Remote& r = *c->remote;
  {
    std::lock_guard<std::mutex> lock(Mu());
    r.closing = true;
    Changed().notify_all();
  }
  // At once, without flushing what is queued (a host that stopped reading must not hold an
  // abort): the host sees the connection end, which is the rank leaving.
  ::shutdown(r.fd, SHUT_RDWR);
  r.writer.join();
  r.reader.join();
  ::close(r.fd);
  std::lock_guard<std::mutex> lock(Mu());
  for (const Work& w : c->work) w->Complete();
  r.ops.clear();
  Changed().notify_all();
}

}  // namespace emu::nccl
