#include "trainer/comm/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/status.h"

namespace ringmaster::trainer {
namespace {

constexpr int kMaxRanks = 256;
constexpr int kSpins = 2000;

struct alignas(64) Control {
  std::atomic<uint32_t> arrivals;
  std::atomic<uint32_t> epoch;  // the futex word
  int32_t size;
  int32_t pids[kMaxRanks];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be plain words");

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

size_t SegmentBytes(int size, int64_t slot_floats) {
  return sizeof(Control) + (static_cast<size_t>(size) + 1) * slot_floats * sizeof(float);
}

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(std::string name, int rank, int size, void* map, size_t bytes,
                  int64_t slot_floats, absl::Duration timeout,
                  std::unique_ptr<Communicator> peer_to_peer)
      : Communicator(std::move(name), rank, size),
        map_(map),
        bytes_(bytes),
        slot_floats_(slot_floats),
        timeout_(timeout),
        p2p_(std::move(peer_to_peer)),
        control_(static_cast<Control*>(map)),
        slots_(reinterpret_cast<float*>(static_cast<char*>(map) + sizeof(Control))) {}
  ~ShmCommunicator() override { munmap(map_, bytes_); }
  const char* transport() const override { return "shm"; }

 protected:
  absl::Status DoAllReduce(Tensor data) override {
    float* out = data.f32();
    for (int64_t c = 0; c < data.size; c += slot_floats_) {
      const int64_t len = std::min(slot_floats_, data.size - c);
      std::memcpy(Slot(rank()), out + c, len * sizeof(float));
      RETURN_IF_ERROR(Barrier());
      const int64_t lo = len * rank() / size(), hi = len * (rank() + 1) / size();
      float* result = Slot(size());
      SumSlots(lo, hi, result);
      RETURN_IF_ERROR(Barrier());
      std::memcpy(out + c, result, len * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status DoReduceScatter(Tensor input, Tensor output) override {
    const int64_t chunk = output.size;
    const int64_t step = std::max<int64_t>(1, slot_floats_ / size());
    for (int64_t a = 0; a < chunk; a += step) {
      const int64_t len = std::min(step, chunk - a);
      // My slot holds, for every rank r, my input's elements [r*chunk + a, +len) at r*len.
      for (int r = 0; r < size(); ++r) {
        std::memcpy(Slot(rank()) + r * len, input.f32() + r * chunk + a, len * sizeof(float));
      }
      RETURN_IF_ERROR(Barrier());
      float* out = output.f32() + a;
      for (int64_t i = 0; i < len; ++i) out[i] = 0;
      for (int k = 0; k < size(); ++k) {
        const float* in = Slot(k) + rank() * len;
        for (int64_t i = 0; i < len; ++i) out[i] += in[i];
      }
      RETURN_IF_ERROR(Barrier());
    }
    return absl::OkStatus();
  }

  absl::Status DoAllGather(Tensor input, Tensor output) override {
    const int64_t chunk = input.size;
    const size_t elem = DTypeSize(input.dtype);
    const int64_t step = std::max<int64_t>(1, slot_floats_ * 4 / static_cast<int64_t>(elem));
    for (int64_t a = 0; a < chunk; a += step) {
      const int64_t len = std::min(step, chunk - a);
      std::memcpy(Slot(rank()), static_cast<char*>(input.data) + a * elem, len * elem);
      RETURN_IF_ERROR(Barrier());
      for (int k = 0; k < size(); ++k) {
        std::memcpy(static_cast<char*>(output.data) + (k * chunk + a) * elem, Slot(k), len * elem);
      }
      RETURN_IF_ERROR(Barrier());
    }
    return absl::OkStatus();
  }

  absl::Status DoBroadcast(Tensor data, int root) override {
    const size_t total = data.bytes();
    const size_t step = static_cast<size_t>(slot_floats_) * sizeof(float);
    for (size_t a = 0; a < total; a += step) {
      const size_t len = std::min(step, total - a);
      char* p = static_cast<char*>(data.data) + a;
      if (rank() == root) std::memcpy(Slot(root), p, len);
      RETURN_IF_ERROR(Barrier());
      if (rank() != root) std::memcpy(p, Slot(root), len);
      RETURN_IF_ERROR(Barrier());
    }
    return absl::OkStatus();
  }

  absl::Status DoSend(Tensor data, int peer) override { return p2p_->Send(data, peer); }
  absl::Status DoRecv(Tensor data, int peer) override { return p2p_->Recv(data, peer); }
  absl::Status DoExchange(Tensor send, Tensor recv, int peer) override {
    return p2p_->Exchange(send, recv, peer);
  }
  absl::Status DoBarrier() override { return Barrier(); }

 private:
  float* Slot(int r) const { return slots_ + static_cast<int64_t>(r) * slot_floats_; }

  // result[lo, hi) = sum over ranks (in rank order) of their slots.
  void SumSlots(int64_t lo, int64_t hi, float* result) const {
    std::memcpy(result + lo, Slot(0) + lo, (hi - lo) * sizeof(float));
    for (int k = 1; k < size(); ++k) {
      const float* in = Slot(k);
      for (int64_t i = lo; i < hi; ++i) result[i] += in[i];
    }
  }

  absl::Status PeersAlive() const {
    for (int r = 0; r < size(); ++r) {
      const pid_t pid = control_->pids[r];
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
        return absl::UnavailableError(absl::StrCat("rank ", r, " of ", name(), " (pid ", pid,
                                                   ") is gone"));
      }
    }
    return absl::OkStatus();
  }

  // All ranks arrive before any leaves.
  absl::Status Barrier() {
    const uint32_t epoch = control_->epoch.load(std::memory_order_acquire);
    if (control_->arrivals.fetch_add(1, std::memory_order_acq_rel) + 1 ==
        static_cast<uint32_t>(size())) {
      control_->arrivals.store(0, std::memory_order_relaxed);
      control_->epoch.fetch_add(1, std::memory_order_release);
      Futex(&control_->epoch, FUTEX_WAKE, INT_MAX, nullptr);
      return absl::OkStatus();
    }
    for (int i = 0; i < kSpins; ++i) {
      if (control_->epoch.load(std::memory_order_acquire) != epoch) return absl::OkStatus();
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    const absl::Time deadline = absl::Now() + timeout_;
    const timespec slice = {0, 100 * 1000 * 1000};  // re-check peers every 100 ms
    while (control_->epoch.load(std::memory_order_acquire) == epoch) {
      Futex(&control_->epoch, FUTEX_WAIT, epoch, &slice);  // spurious wake-ups are fine
      if (control_->epoch.load(std::memory_order_acquire) != epoch) break;
      RETURN_IF_ERROR(PeersAlive());
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("shared-memory barrier of ", name(),
                                                        " timed out after ",
                                                        absl::FormatDuration(timeout_)));
      }
    }
    return absl::OkStatus();
  }

  void* const map_;
  const size_t bytes_;
  const int64_t slot_floats_;
  const absl::Duration timeout_;
  std::unique_ptr<Communicator> p2p_;
  Control* const control_;
  float* const slots_;
};

}  // namespace

std::string MachineIdentity() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot, id);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(absl::StripAsciiWhitespace(id), "/", host);
}

std::string NodeIdentity(const std::string& node) {
  // The node's name after a byte no host name holds, so "a"+"/b" and "a/"+"b" differ.
  return node.empty() ? MachineIdentity() : absl::StrCat(MachineIdentity(), "\n", node);
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectSharedMemory(
    const std::string& name, int rank, int size, KeyValueStore* store,
    std::unique_ptr<Communicator> peer_to_peer, ShmOptions options) {
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory for rank ", rank, " of ", size, " (at most ", kMaxRanks, ")"));
  }
  const size_t bytes = SegmentBytes(size, options.slot_floats);
  const std::string key = absl::StrCat("shm/", name);
  std::string segment;
  int fd = -1;
  if (rank == 0) {
    static std::atomic<int> counter{0};
    segment = absl::StrCat("/ringmaster-", getpid(), "-", counter++, "-", name);
    fd = shm_open(segment.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoError(errno, absl::StrCat("shm_open ", segment));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int err = errno;
      close(fd);
      shm_unlink(segment.c_str());
      return ErrnoError(err, absl::StrCat("ftruncate ", segment));
    }
    RETURN_IF_ERROR(store->Set(key, segment));
  } else {
    ASSIGN_OR_RETURN(segment, store->Wait(key, options.timeout));
    fd = shm_open(segment.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("cannot open rank 0's shared memory ", segment,
                                                 " (not on the same machine?): ",
                                                 strerror(errno)));
    }
  }
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (map == MAP_FAILED) return ErrnoError(map_errno, absl::StrCat("mmap ", segment));
  Control* control = static_cast<Control*>(map);
  control->pids[rank] = getpid();
  // Everyone has the segment mapped (and its pid in it) before rank 0 removes the name.
  absl::Status attached = peer_to_peer->Barrier();
  if (rank == 0) shm_unlink(segment.c_str());
  if (!attached.ok()) {
    munmap(map, bytes);
    return attached;
  }
  return std::unique_ptr<Communicator>(new ShmCommunicator(name, rank, size, map, bytes,
                                                           options.slot_floats, options.timeout,
                                                           std::move(peer_to_peer)));
}

}  // namespace ringmaster::trainer
