// Streams and events of the emulated CUDA runtime (fake_streams.h), and the runtime's stream
// and event calls.
#include "testing/cuda_emu/fake_streams.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "testing/cuda_emu/cuda_emu.h"

namespace emu {

using Clock = std::chrono::steady_clock;
using Work = std::vector<std::shared_ptr<PendingWork>>;

// The streams and events, under one lock (mu_); deferred work runs outside it, one item of a
// stream at a time (Stream::exec).
class StreamTable {
 public:
  // A deferred item's completion, read by the events recorded after it.
  struct ItemState {
    bool done = false;
    Clock::time_point time;  // when it ran
  };
  struct Stream;
  using StreamPtr = std::shared_ptr<Stream>;
  // A deferred item of another stream (what a cudaStreamWaitEvent waits for).
  struct Dependency {
    StreamPtr stream;
    std::shared_ptr<ItemState> item;
  };
  // A queued item: work to run, or a wait (cudaStreamWaitEvent) for another stream's item,
  // done once that item is.
  struct Deferred {
    std::function<cudaError_t()> run;
    Dependency wait;
    std::shared_ptr<ItemState> state;
  };
  struct Stream {
    int device = 0;
    bool blocking = true;  // synchronizes with the legacy default stream
    bool defers = false;   // created streams defer their work; default streams do not
    Work pending;          // NCCL work not yet complete
    std::deque<Deferred> queue;
    std::shared_ptr<ItemState> last;  // of the latest queued item
    std::mutex exec;                  // held while running this stream's items, in order
  };
  struct Event {
    bool timing = true;
    bool recorded = false;
    // When the record was issued, then when the work it waits for completed, if later.
    Clock::time_point time;
    Work pending;         // the NCCL work the stream held at the record, not yet complete
    Dependency deferred;  // the stream's latest deferred item at the record
  };

  static StreamTable& Get() {
    static StreamTable* table = new StreamTable;  // never destroyed: used until exit
    return *table;
  }

  cudaStream_t CreateStream(unsigned int flags) {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = std::make_shared<Stream>();
    s->device = CurrentDevice();
    s->blocking = (flags & cudaStreamNonBlocking) == 0;
    s->defers = true;
    streams_[s.get()] = s;
    return reinterpret_cast<cudaStream_t>(s.get());
  }
  cudaError_t DestroyStream(cudaStream_t handle) {
    StreamPtr s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = streams_.find(reinterpret_cast<Stream*>(handle));
      if (it == streams_.end()) return cudaErrorInvalidResourceHandle;
      s = it->second;
    }
    Run(s, nullptr);  // what it deferred runs now rather than never, while cudaFree sees it
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(s.get());
    // Its pending NCCL work completes all the same, as on a GPU, and the device (and, for a
    // blocking stream, the legacy default stream) waits for it.
    Append(&orphans_[{s->device, s->blocking}], Prune(&s->pending));
    return cudaSuccess;
  }
  cudaEvent_t CreateEvent(unsigned int flags) {
    std::lock_guard<std::mutex> lock(mu_);
    auto* e = new Event;
    e->timing = (flags & cudaEventDisableTiming) == 0;
    events_.insert(e);
    return reinterpret_cast<cudaEvent_t>(e);
  }
  cudaError_t DestroyEvent(cudaEvent_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto* e = reinterpret_cast<Event*>(handle);
    if (events_.erase(e) == 0) return cudaErrorInvalidResourceHandle;
    delete e;
    return cudaSuccess;
  }

  cudaError_t Enqueue(cudaStream_t handle, std::shared_ptr<PendingWork> work) {
    std::lock_guard<std::mutex> lock(mu_);
    Stream* s = Find(handle).get();
    if (s == nullptr) return cudaErrorInvalidResourceHandle;
    s->pending.push_back(std::move(work));
    return cudaSuccess;
  }
  cudaError_t Defer(cudaStream_t handle, std::function<cudaError_t()> fn, const char* what) {
    StreamPtr s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s = Find(handle);
      if (s == nullptr) return cudaErrorInvalidResourceHandle;
    }
    if (!s->defers) {
      const cudaError_t e = AwaitStream(handle, what);
      return e == cudaSuccess ? fn() : e;
    }
    // Behind NCCL work pending on the stream: the host waits for it here (it may need the
    // launch lock of the ranks completing it, which the deferred item would hold).
    std::unique_lock<std::mutex> lock(mu_);
    const Work pending = Ahead(handle);
    Await(lock, pending, what);
    Push(s.get(), Deferred{std::move(fn), Dependency{}, nullptr});
    return Sticky(s->device);
  }
  // Runs what `handle` deferred, and what it waits for on other streams.
  cudaError_t RunDeferred(cudaStream_t handle) {
    std::vector<StreamPtr> streams;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Find(handle) == nullptr) return cudaErrorInvalidResourceHandle;
      streams = Synchronized(handle);
    }
    for (const StreamPtr& s : streams) Run(s, nullptr);
    std::lock_guard<std::mutex> lock(mu_);
    return Sticky(streams.front()->device);
  }
  bool HasPending(cudaStream_t handle, const std::vector<const PendingWork*>& besides) {
    std::lock_guard<std::mutex> lock(mu_);
    if (Find(handle) == nullptr) return false;
    for (const auto& w : Ahead(handle)) {
      if (std::find(besides.begin(), besides.end(), w.get()) == besides.end()) return true;
    }
    return false;
  }
  cudaError_t AwaitStream(cudaStream_t handle, const char* what) {
    if (const cudaError_t e = RunDeferred(handle); e != cudaSuccess) return e;
    std::unique_lock<std::mutex> lock(mu_);
    if (Find(handle) == nullptr) return cudaErrorInvalidResourceHandle;
    const Work work = Ahead(handle);  // the stream may be destroyed while we wait
    Await(lock, work, what);
    return Sticky(CurrentDevice());
  }
  // Behind the deferred items of a created stream, `fn` is one more of them (the host does not
  // wait for them); otherwise it runs once the NCCL work pending ahead of it has completed.
  cudaError_t WhenComplete(cudaStream_t handle, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      StreamPtr s = Find(handle);
      if (s == nullptr) return cudaErrorInvalidResourceHandle;
      if (s->defers && s->last != nullptr && !s->last->done) {
        Push(s.get(), Deferred{[this, work = Ahead(handle), fn = std::move(fn)]() mutable {
                                 AfterWork(std::move(work), std::move(fn));
                                 return cudaSuccess;
                               },
                               Dependency{}, nullptr});
        return cudaSuccess;
      }
    }
    if (const cudaError_t e = RunDeferred(handle); e != cudaSuccess) return e;
    std::unique_lock<std::mutex> lock(mu_);
    if (Find(handle) == nullptr) return cudaErrorInvalidResourceHandle;
    Work work = Ahead(handle);
    lock.unlock();
    AfterWork(std::move(work), std::move(fn));
    return cudaSuccess;
  }
  void RunDeviceDeferred(int device) {
    for (const StreamPtr& s : OfDevice(device)) Run(s, nullptr);
  }
  cudaError_t AwaitDevice(int device, const char* what) {
    RunDeviceDeferred(device);
    std::unique_lock<std::mutex> lock(mu_);
    const Work work = PendingOfDevice(device);
    Await(lock, work, what);
    return Sticky(device);
  }
  bool DeviceHasPending(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const StreamPtr& s : StreamsOf(device)) {
      if (!s->queue.empty()) return true;
    }
    return !PendingOfDevice(device).empty();
  }

  // A created stream queues the wait in its order; a default stream, whose work runs when
  // issued, runs what it waits for now.
  cudaError_t WaitEvent(cudaStream_t stream, cudaEvent_t event) {
    Dependency now;
    {
      std::lock_guard<std::mutex> lock(mu_);
      StreamPtr s = Find(stream);
      Event* e = FindEvent(event);
      if (s == nullptr || e == nullptr) return cudaErrorInvalidResourceHandle;
      Append(&s->pending, Prune(e));
      if (e->deferred.item == nullptr || e->deferred.item->done) return cudaSuccess;
      if (s->defers) {
        Push(s.get(), Deferred{nullptr, e->deferred, nullptr});
        return cudaSuccess;
      }
      now = e->deferred;
    }
    Run(now.stream, now.item);
    return cudaSuccess;
  }
  cudaError_t Record(cudaEvent_t event, cudaStream_t stream) {
    // The legacy default stream runs what the blocking streams deferred first.
    if (IsLegacy(stream)) {
      if (const cudaError_t e = RunDeferred(stream); e != cudaSuccess) return e;
    }
    std::lock_guard<std::mutex> lock(mu_);
    StreamPtr s = Find(stream);
    Event* e = FindEvent(event);
    if (s == nullptr || e == nullptr) return cudaErrorInvalidResourceHandle;
    e->recorded = true;
    e->time = Clock::now();
    e->pending = Ahead(stream);
    e->deferred = Dependency{s, s->last != nullptr && !s->last->done ? s->last : nullptr};
    return cudaSuccess;
  }
  cudaError_t Query(cudaEvent_t event) {
    Reach(event);
    std::lock_guard<std::mutex> lock(mu_);
    Event* e = FindEvent(event);
    if (e == nullptr) return cudaErrorInvalidResourceHandle;
    if (const cudaError_t sticky = Sticky(CurrentDevice()); sticky != cudaSuccess) return sticky;
    return Prune(e).empty() ? cudaSuccess : cudaErrorNotReady;
  }
  cudaError_t SynchronizeEvent(cudaEvent_t event) {
    Reach(event);
    std::unique_lock<std::mutex> lock(mu_);
    Event* e = FindEvent(event);
    if (e == nullptr) return cudaErrorInvalidResourceHandle;
    const Work work = Prune(e);
    Await(lock, work, "cudaEventSynchronize");
    return Sticky(CurrentDevice());
  }
  cudaError_t ElapsedMs(float* ms, cudaEvent_t start, cudaEvent_t end) {
    Reach(start);
    Reach(end);
    std::lock_guard<std::mutex> lock(mu_);
    Event* a = FindEvent(start);
    Event* b = FindEvent(end);
    if (a == nullptr || b == nullptr || !a->recorded || !b->recorded || !a->timing || !b->timing) {
      return cudaErrorInvalidResourceHandle;
    }
    if (!Prune(a).empty() || !Prune(b).empty()) return cudaErrorNotReady;
    *ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
    return cudaSuccess;
  }

  void Complete(PendingWork* work) {
    std::vector<std::function<void()>> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (work->done_) return;
      work->done_ = true;
      work->completed_ = Clock::now();
      for (auto it = deferred_frees_.begin(); it != deferred_frees_.end();) {
        if (Prune(&it->first).empty()) {
          ready.push_back(std::move(it->second));
          it = deferred_frees_.erase(it);
        } else {
          ++it;
        }
      }
    }
    // The deferred frees first: whoever wakes finds them done.
    for (auto& fn : ready) fn();
    changed_.notify_all();
  }
  // Runs `fn` now if `work` has completed, else when it does (Complete).
  void AfterWork(Work work, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!Prune(&work).empty()) {
        deferred_frees_.emplace_back(std::move(work), std::move(fn));
        return;
      }
    }
    fn();
  }
  bool Done(const PendingWork& work) {
    std::lock_guard<std::mutex> lock(mu_);
    return work.done_;
  }

 private:
  static bool IsLegacy(cudaStream_t handle) {
    return handle == nullptr || handle == cudaStreamLegacy;
  }
  // The default streams: the legacy one of the current device (null, cudaStreamLegacy), shared
  // by every thread, and the calling thread's own (cudaStreamPerThread). Under mu_.
  StreamPtr Find(cudaStream_t handle) {
    if (reinterpret_cast<uintptr_t>(handle) <= 2) {
      const std::thread::id owner =
          handle == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id();
      return Default(CurrentDevice(), owner);
    }
    auto it = streams_.find(reinterpret_cast<Stream*>(handle));
    return it != streams_.end() ? it->second : nullptr;
  }
  StreamPtr Default(int device, std::thread::id owner) {
    StreamPtr& s = defaults_[{device, owner}];
    if (s == nullptr) {
      s = std::make_shared<Stream>();
      s->device = device;
    }
    return s;
  }
  Event* FindEvent(cudaEvent_t handle) {
    auto* e = reinterpret_cast<Event*>(handle);
    return events_.count(e) != 0 ? e : nullptr;
  }
  // The streams whose work runs before work issued on `handle` (valid; under mu_), the stream
  // itself first: a blocking stream's after the legacy default stream's, the legacy default
  // stream's after the device's blocking and per-thread streams'.
  std::vector<StreamPtr> Synchronized(cudaStream_t handle) {
    StreamPtr s = Find(handle);
    std::vector<StreamPtr> out = {s};
    if (!s->blocking && !IsLegacy(handle)) return out;
    StreamPtr legacy = Default(s->device, std::thread::id());
    if (s != legacy) out.push_back(legacy);
    if (!IsLegacy(handle)) return out;
    for (const StreamPtr& other : StreamsOf(s->device)) {
      if (other != s && other->blocking) out.push_back(other);
    }
    return out;
  }
  // The device's streams, created and default (under mu_).
  std::vector<StreamPtr> StreamsOf(int device) {
    std::vector<StreamPtr> out;
    for (auto& [raw, s] : streams_) {
      if (s->device == device) out.push_back(s);
    }
    for (auto& [key, s] : defaults_) {
      if (key.first == device) out.push_back(s);
    }
    return out;
  }
  // Queues `item` on `s` (under mu_): the item events recorded from now on wait for.
  static void Push(Stream* s, Deferred item) {
    item.state = std::make_shared<ItemState>();
    s->last = item.state;
    s->queue.push_back(std::move(item));
  }
  // The first failure of a deferred kernel on `device` (under mu_): sticky, as CUDA's
  // asynchronous errors are.
  cudaError_t Sticky(int device) {
    auto it = sticky_.find(device);
    return it == sticky_.end() ? cudaSuccess : it->second;
  }
  // Runs `s`'s queued items up to `until` (null: all of them) in order; a wait at the head runs
  // what it waits for first, without holding `s`'s order (two streams may wait on each other).
  void Run(const StreamPtr& s, const std::shared_ptr<ItemState>& until) {
    for (;;) {
      Dependency wait;
      {
        std::lock_guard<std::mutex> exec(s->exec);
        for (;;) {
          Deferred item;
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (s->queue.empty() || (until != nullptr && until->done)) return;
            Deferred& head = s->queue.front();
            if (head.run == nullptr && !head.wait.item->done) {
              wait = head.wait;
              break;
            }
            item = std::move(head);
            s->queue.pop_front();
          }
          const cudaError_t e = item.run != nullptr ? item.run() : cudaSuccess;
          std::lock_guard<std::mutex> lock(mu_);
          if (e != cudaSuccess) sticky_.emplace(s->device, e);
          item.state->done = true;
          item.state->time = item.run != nullptr ? Clock::now() : item.wait.item->time;
        }
      }
      Run(wait.stream, wait.item);
    }
  }
  // Runs the queued work an event waits for, and moves its time to when that ran.
  void Reach(cudaEvent_t handle) {
    Dependency d;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Event* e = FindEvent(handle);
      if (e == nullptr) return;
      d = e->deferred;
    }
    if (d.item == nullptr) return;
    Run(d.stream, d.item);
    std::lock_guard<std::mutex> lock(mu_);
    if (Event* e = FindEvent(handle); e != nullptr && e->deferred.item == d.item) {
      e->time = std::max(e->time, d.item->time);
    }
  }
  // NCCL work that work issued on `handle` (valid; under mu_) runs after: that of the streams it
  // synchronizes with, and for the legacy default stream that of destroyed blocking streams.
  Work Ahead(cudaStream_t handle) {
    Work work;
    for (const StreamPtr& s : Synchronized(handle)) Append(&work, Prune(&s->pending));
    if (IsLegacy(handle)) Append(&work, Prune(&orphans_[{CurrentDevice(), true}]));
    return work;
  }
  std::vector<StreamPtr> OfDevice(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    return StreamsOf(device);
  }
  // The NCCL work of every stream of `device`, destroyed ones included (under mu_).
  Work PendingOfDevice(int device) {
    Work work = Prune(&orphans_[{device, true}]);
    Append(&work, Prune(&orphans_[{device, false}]));
    for (const StreamPtr& s : StreamsOf(device)) Append(&work, Prune(&s->pending));
    return work;
  }
  // Drops the completed work; returns what is left.
  static const Work& Prune(Work* work) {
    work->erase(std::remove_if(work->begin(), work->end(),
                               [](const std::shared_ptr<PendingWork>& w) { return w->done_; }),
                work->end());
    return *work;
  }
  // Prune for an event: its time becomes the completion of the work it drops, if later.
  static const Work& Prune(Event* e) {
    for (const auto& w : e->pending) {
      if (w->done_) e->time = std::max(e->time, w->completed_);
    }
    return Prune(&e->pending);
  }
  static void Append(Work* to, const Work& from) {
    to->insert(to->end(), from.begin(), from.end());
  }
  void Await(std::unique_lock<std::mutex>& lock, const Work& work, const char* what) {
    auto done = [&] {
      return std::all_of(work.begin(), work.end(),
                         [](const std::shared_ptr<PendingWork>& w) { return w->done_; });
    };
    if (changed_.wait_for(lock, std::chrono::seconds(10), done)) return;
    std::fprintf(stderr,
                 "cuda_emu: %s has waited 10 s for a stream's pending NCCL work (its peers have "
                 "not all issued it): a hang on a GPU too\n",
                 what);
    changed_.wait(lock, done);
  }

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<Stream*, StreamPtr> streams_;
  std::map<std::pair<int, std::thread::id>, StreamPtr> defaults_;  // by device and owner
  // The pending work of destroyed streams, by device and whether the stream was blocking.
  std::map<std::pair<int, bool>, Work> orphans_;
  std::vector<std::pair<Work, std::function<void()>>> deferred_frees_;
  std::map<int, cudaError_t> sticky_;  // by device
  std::set<Event*> events_;
};

void PendingWork::Complete() { StreamTable::Get().Complete(this); }
bool PendingWork::done() const { return StreamTable::Get().Done(*this); }

cudaError_t Enqueue(cudaStream_t stream, std::shared_ptr<PendingWork> work) {
  return StreamTable::Get().Enqueue(stream, std::move(work));
}
bool HasPendingWork(cudaStream_t stream, const std::vector<const PendingWork*>& besides) {
  return StreamTable::Get().HasPending(stream, besides);
}
cudaError_t AwaitStream(cudaStream_t stream, const char* what) {
  return StreamTable::Get().AwaitStream(stream, what);
}
cudaError_t Defer(cudaStream_t stream, std::function<cudaError_t()> work, const char* what) {
  return StreamTable::Get().Defer(stream, std::move(work), what);
}
cudaError_t RunDeferred(cudaStream_t stream) { return StreamTable::Get().RunDeferred(stream); }
cudaError_t WhenStreamComplete(cudaStream_t stream, std::function<void()> fn) {
  return StreamTable::Get().WhenComplete(stream, std::move(fn));
}
cudaError_t AwaitDevice(int device, const char* what) {
  return StreamTable::Get().AwaitDevice(device, what);
}
void RunDeviceDeferred(int device) { StreamTable::Get().RunDeviceDeferred(device); }
bool DeviceHasPendingWork(int device) { return StreamTable::Get().DeviceHasPending(device); }

namespace {
thread_local int t_device = 0;
}  // namespace

namespace {

// The machine's GPUs this process sees, by ordinal: CUDA_VISIBLE_DEVICES's indices up to the
// first that is not one of the machine's or repeats one (CUDA's rule; "" and "-1" show none);
// every GPU when it is unset.
const std::vector<int>& Visible() {
  static const std::vector<int>* visible = [] {
    const char* env = std::getenv("RINGMASTER_EMU_GPUS");
    const int machine = std::clamp(env != nullptr ? std::atoi(env) : 4, 1, 16);
    auto* v = new std::vector<int>;
    const char* list = std::getenv("CUDA_VISIBLE_DEVICES");
    if (list == nullptr) {
      for (int i = 0; i < machine; ++i) v->push_back(i);
      return v;
    }
    std::stringstream entries(list);
    for (std::string entry; std::getline(entries, entry, ',');) {
      char* end = nullptr;
      const long i = std::strtol(entry.c_str(), &end, 10);
      if (entry.empty() || *end != '\0' || i < 0 || i >= machine ||
          std::find(v->begin(), v->end(), i) != v->end()) {
        break;
      }
      v->push_back(static_cast<int>(i));
    }
    return v;
  }();
  return *visible;
}

}  // namespace

int DeviceCount() { return static_cast<int>(Visible().size()); }
int MachineDevice(int ordinal) {
  return ordinal >= 0 && ordinal < DeviceCount() ? Visible()[ordinal] : -1;
}
int CurrentDevice() { return t_device; }
void SetCurrentDevice(int device) { t_device = device; }

}  // namespace emu

namespace {

// A failed call is also the thread's last error, as in CUDA.
cudaError_t Checked(cudaError_t error, const char* what) {
  if (error != cudaSuccess) emu::RecordError(error, what);
  return error;
}

// Not ready is a status, not a failure; CUDA still makes it the thread's last error.
cudaError_t Status(cudaError_t error, const char* what) {
  if (error != cudaErrorNotReady) return Checked(error, what);
  emu::SetLastError(error);
  return error;
}

}  // namespace

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  *stream = emu::StreamTable::Get().CreateStream(flags);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(stream, flags);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return Checked(emu::StreamTable::Get().DestroyStream(stream), "cudaStreamDestroy");
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return Checked(emu::AwaitStream(stream, "cudaStreamSynchronize"), "cudaStreamSynchronize");
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  return Checked(emu::StreamTable::Get().WaitEvent(stream, event), "cudaStreamWaitEvent");
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  return Checked(emu::Defer(
                     stream,
                     [fn, data] {
                       fn(data);
                       return cudaSuccess;
                     },
                     "cudaLaunchHostFunc"),
                 "cudaLaunchHostFunc");
}
cudaError_t cudaDeviceSynchronize() {
  return Checked(emu::AwaitDevice(emu::CurrentDevice(), "cudaDeviceSynchronize"),
                 "cudaDeviceSynchronize");
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = emu::StreamTable::Get().CreateEvent(flags);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return Checked(emu::StreamTable::Get().DestroyEvent(event), "cudaEventDestroy");
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return Checked(emu::StreamTable::Get().Record(event, stream), "cudaEventRecord");
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return Status(emu::StreamTable::Get().Query(event), "cudaEventQuery");
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return Checked(emu::StreamTable::Get().SynchronizeEvent(event), "cudaEventSynchronize");
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return Status(emu::StreamTable::Get().ElapsedMs(ms, start, end), "cudaEventElapsedTime");
}

}  // extern "C"
