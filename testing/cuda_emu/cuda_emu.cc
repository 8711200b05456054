#include "testing/cuda_emu/cuda_emu.h"

#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "testing/cuda_emu/fake_streams.h"

#if defined(__x86_64__)
// Saves the callee-saved registers (and the SSE and x87 control words) on the current stack,
// stores the stack pointer in *from, and resumes the context whose stack pointer is `to`: a
// stack switch of a few instructions, where _setjmp/_longjmp cost a signal-mask check and an
// unwind of pthread cleanups per switch (the emulator switches at every thread start, barrier
// and shuffle). At file scope: a C-linkage function belongs to no namespace.
extern "C" __attribute__((visibility("hidden"))) void ringmaster_emu_switch(void** from,
                                                                            void* to);
asm(R"(
  .pushsection .text
  .p2align 4
  .hidden ringmaster_emu_switch
  .type ringmaster_emu_switch, @function
ringmaster_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ringmaster_emu_switch, .-ringmaster_emu_switch
  .popsection
)");
#endif

namespace emu {
namespace {

// Kernels here use small frames; the guard page below each stack turns an overflow into a crash
// rather than a corruption.
constexpr size_t kStackBytes = 256 * 1024;
constexpr int kMaxBlockThreads = 1024;

enum class State { kReady, kBlockBarrier, kWarpBarrier, kDone };

// A cp.async in flight: what lands at `dst` once the thread waits for its group.
struct PendingCopy {
  void* dst;
  unsigned char bytes[16];
};

// A fiber is entered the first time on a fresh stack and then switched with
// ringmaster_emu_switch (x86-64), or elsewhere through its ucontext and then _setjmp/_longjmp,
// which unlike swapcontext do not save the signal mask: no system call per switch.
struct Fiber {
#if defined(__x86_64__)
  void* sp = nullptr;  // where the fiber waits at a barrier
#else
  ucontext_t context;
  jmp_buf resume;  // where the fiber waits at a barrier
#endif
  bool started = false;
  char* stack = nullptr;  // usable part, above the guard page
  State state = State::kDone;
  ThreadDims dims;
  int linear = 0;  // index in the block (x fastest): lane = linear % 32
  int predicate = 0;
  int result = 0;
  std::vector<PendingCopy> open_copies;               // since the last CommitCopies
  std::vector<std::vector<PendingCopy>> copy_groups;  // committed, oldest first
};

// The launch being run (one at a time: kernels run on the calling thread).
struct Block {
  const std::function<void()>* kernel = nullptr;
  std::vector<Fiber> fibers;
  std::vector<uint64_t> slots;  // shuffle values, one per thread
  std::vector<unsigned char> gathered;  // WarpAllGather's, kMaxGatherBytes per thread
#if defined(__x86_64__)
  void* back = nullptr;  // the scheduler, waiting for the fiber it switched to
#else
  ucontext_t scheduler;
  jmp_buf back;  // the scheduler, waiting for the fiber it switched to
#endif
  Fiber* current = nullptr;
  bool reverse = false;  // the order of this launch's threads
};

// One launch at a time in the process; the launch state below is the running launch's.
std::mutex g_launch;
Block* g_block = nullptr;
std::vector<char*> g_stacks;  // reused across launches
std::atomic<Order> g_order{Order::kAlternate};
// A host thread's last error and failures, as CUDA's last error. A deferred launch that another
// thread runs reports to the launching thread's.
struct ErrorState {
  std::mutex mu;
  cudaError_t error = cudaSuccess;
  std::string failures;
};
thread_local std::shared_ptr<ErrorState> t_errors = std::make_shared<ErrorState>();
thread_local ErrorState* t_sink = nullptr;  // while running another thread's launch
thread_local bool g_launch_thread = false;  // this thread holds g_launch
thread_local cudaError_t t_launch_error = cudaSuccess;  // the running launch's first failure

void Fail(cudaError_t error, const std::string& what) {
  ErrorState& sink = t_sink != nullptr ? *t_sink : *t_errors;
  {
    std::lock_guard<std::mutex> lock(sink.mu);
    if (sink.error == cudaSuccess) sink.error = error;
    sink.failures += what + "\n";
  }
  if (g_launch_thread && t_launch_error == cudaSuccess) t_launch_error = error;
  std::fprintf(stderr, "cuda_emu: %s\n", what.c_str());  // also where no test asks for it
}

char* Stack(int i) {
  while (static_cast<int>(g_stacks.size()) <= i) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED || mprotect(p, page, PROT_NONE) != 0) {
      std::fprintf(stderr, "cuda_emu: no memory for a fiber stack\n");
      std::abort();
    }
    g_stacks.push_back(static_cast<char*>(p) + page);
  }
  return g_stacks[i];
}

void Land(const std::vector<PendingCopy>& copies) {
  for (const PendingCopy& c : copies) std::memcpy(c.dst, c.bytes, sizeof c.bytes);
}

void RunThread() {
  (*g_block->kernel)();
  // Copies the thread never waited for land when it ends (a GPU completes them eventually).
  Fiber& f = *g_block->current;
  for (const auto& group : f.copy_groups) Land(group);
  Land(f.open_copies);
  f.copy_groups.clear();
  f.open_copies.clear();
  g_block->current->state = State::kDone;
  // Never returns: the stack is reused by the next thread.
#if defined(__x86_64__)
  void* abandoned;
  ringmaster_emu_switch(&abandoned, g_block->back);
  __builtin_unreachable();
#else
  _longjmp(g_block->back, 1);
#endif
}

void Yield(State state) {
  Fiber* f = g_block->current;
  f->state = state;
#if defined(__x86_64__)
  ringmaster_emu_switch(&f->sp, g_block->back);
#else
  if (_setjmp(f->resume) == 0) _longjmp(g_block->back, 1);
#endif
}

#if defined(__x86_64__)
// The stack pointer of a fiber about to start: a frame ringmaster_emu_switch resumes into
// RunThread, entered as if called (the stack 16-byte aligned before the return address), with
// the scheduler's SSE and x87 control words.
void* FreshFrame(char* stack) {
  auto* top = reinterpret_cast<uint64_t*>(stack + kStackBytes);  // 16-byte aligned
  uint64_t* sp = top - 9;
  uint32_t mxcsr = 0;
  uint16_t fpu_cw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_cw));
  sp[0] = uint64_t{mxcsr} | uint64_t{fpu_cw} << 32;  // the control words
  for (int i = 1; i <= 6; ++i) sp[i] = 0;             // r15, r14, r13, r12, rbx, rbp
  sp[7] = reinterpret_cast<uint64_t>(&RunThread);     // ringmaster_emu_switch's return
  sp[8] = 0;                                          // RunThread's (it never returns)
  return sp;
}
#else
// Starts RunThread on `f`'s stack. It never returns here: the thread jumps back to the scheduler.
void Start(Block& b, Fiber& f) { swapcontext(&b.scheduler, &f.context); }
#endif

// Runs `f` until it waits at a barrier or ends.
void SwitchTo(Block& b, Fiber& f) {
  b.current = &f;
#if defined(__x86_64__)
  if (!f.started) {
    f.started = true;
    f.sp = FreshFrame(f.stack);
  }
  ringmaster_emu_switch(&b.back, f.sp);
#else
  if (_setjmp(b.back) != 0) return;
  if (!f.started) {
    f.started = true;
    Start(b, f);
  }
  _longjmp(f.resume, 1);
#endif
}

std::string Where(const Fiber& f) {
  const ThreadDims& d = f.dims;
  return "block (" + std::to_string(d.block.x) + "," + std::to_string(d.block.y) + "," +
         std::to_string(d.block.z) + ") thread (" + std::to_string(d.thread.x) + "," +
         std::to_string(d.thread.y) + "," + std::to_string(d.thread.z) + ")";
}

// Releases the threads waiting at a barrier once every live thread concerned has reached it.
// False when none can be released (a deadlock on a GPU).
bool ReleaseBarriers(Block& b) {
  const int n = static_cast<int>(b.fibers.size());
  bool released = false;
  for (int warp = 0; warp * 32 < n; ++warp) {
    int live = 0, waiting = 0;
    for (int i = warp * 32; i < std::min(n, warp * 32 + 32); ++i) {
      live += b.fibers[i].state != State::kDone;
      waiting += b.fibers[i].state == State::kWarpBarrier;
    }
    if (waiting == 0 || waiting != live) continue;
    if (live != 32) {
      Fail(cudaErrorLaunchFailure, "full-mask warp shuffle or __syncwarp in a warp of " +
                                       std::to_string(live) + " live lanes (" +
                                       Where(b.fibers[warp * 32]) + ")");
    }
    for (int i = warp * 32; i < std::min(n, warp * 32 + 32); ++i) {
      if (b.fibers[i].state == State::kWarpBarrier) b.fibers[i].state = State::kReady;
    }
    released = true;
  }
  if (released) return true;
  int live = 0, waiting = 0, count = 0;
  for (const Fiber& f : b.fibers) {
    live += f.state != State::kDone;
    if (f.state == State::kBlockBarrier) {
      ++waiting;
      count += f.predicate;
    }
  }
  if (waiting == 0 || waiting != live) return false;
  for (Fiber& f : b.fibers) {
    if (f.state != State::kBlockBarrier) continue;
    f.result = count;
    f.state = State::kReady;
  }
  return true;
}

void RunBlock(Block& b) {
  for (Fiber& f : b.fibers) {
#if !defined(__x86_64__)
    // getcontext once per fiber of the launch (a system call); makecontext is not one.
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, RunThread, 0);
#endif
    f.started = false;
    f.open_copies.clear();  // an abandoned block's (a deadlock) never land
    f.copy_groups.clear();
    f.state = State::kReady;
  }
  const int n = static_cast<int>(b.fibers.size());
  for (;;) {
    bool ran = false;
    for (int k = 0; k < n; ++k) {
      Fiber& f = b.fibers[b.reverse ? n - 1 - k : k];
      if (f.state != State::kReady) continue;
      ran = true;
      SwitchTo(b, f);
    }
    if (ran) continue;
    bool live = false;
    for (const Fiber& f : b.fibers) live |= f.state != State::kDone;
    if (!live) return;
    if (!ReleaseBarriers(b)) {
      int at_block = 0, at_warp = 0, done = 0;
      for (const Fiber& f : b.fibers) {
        at_block += f.state == State::kBlockBarrier;
        at_warp += f.state == State::kWarpBarrier;
        done += f.state == State::kDone;
      }
      Fail(cudaErrorLaunchFailure,
           "deadlock in " + Where(b.fibers[0]) + ": " + std::to_string(at_block) +
               " threads at __syncthreads, " + std::to_string(at_warp) +
               " at a warp shuffle or __syncwarp, " + std::to_string(done) + " exited");
      return;  // the block's fibers are abandoned (their stacks are reused)
    }
  }
}

bool Valid(const LaunchConfig& c, std::string* why) {
  const dim3 g = c.grid.dim, t = c.block.dim;
  const int64_t threads = int64_t{t.x} * t.y * t.z;
  if ((c.grid.integer && (c.grid.whole_x < 1 || c.grid.whole_x > 0x7fffffffLL)) ||
      (c.block.integer && (c.block.whole_x < 1 || c.block.whole_x > kMaxBlockThreads))) {
    *why = "grid.x " + std::to_string(c.grid.whole_x) + " or block.x " +
           std::to_string(c.block.whole_x) + " out of range";
    return false;
  }
  if (g.x == 0 || g.x > 0x7fffffffu || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535 ||
      threads == 0 || threads > kMaxBlockThreads || t.z > 64) {
    *why = "grid (" + std::to_string(g.x) + "," + std::to_string(g.y) + "," + std::to_string(g.z) +
           ") block (" + std::to_string(t.x) + "," + std::to_string(t.y) + "," +
           std::to_string(t.z) + ")";
    return false;
  }
  return true;
}

// Runs a launch (LaunchInOrder's, possibly deferred) on the calling thread, reporting failures
// to `sink`; the first of them, or cudaSuccess.
cudaError_t Execute(const LaunchConfig& config, const std::function<void()>& kernel, Order order,
                    ErrorState* sink);

}  // namespace

const ThreadDims& Current() { return g_block->current->dims; }

void LaunchInOrder(const LaunchConfig& config, const std::function<void()>& kernel, Order order) {
  std::string why;
  if (!Valid(config, &why)) {
    Fail(cudaErrorInvalidConfiguration, "invalid launch configuration: " + why);
    return;
  }
  if (g_launch_thread) {  // the lock is not recursive
    Fail(cudaErrorLaunchFailure, "a kernel launched from inside a kernel");
    return;
  }
  // In stream order, deferred on a created stream (fake_streams.h).
  std::shared_ptr<ErrorState> sink = t_errors;
  const cudaError_t e = Defer(
      config.stream,
      [config, kernel, order, sink] { return Execute(config, kernel, order, sink.get()); },
      "a kernel launch");
  if (e != cudaSuccess) Fail(e, "a kernel launched on an invalid stream");
}

namespace {

cudaError_t Execute(const LaunchConfig& config, const std::function<void()>& kernel, Order order,
                    ErrorState* sink) {
  ErrorState* const saved = t_sink;
  t_launch_error = cudaSuccess;
  t_sink = sink == t_errors.get() ? nullptr : sink;
  std::lock_guard<std::mutex> lock(g_launch);
  g_launch_thread = true;
  const dim3 g = config.grid.dim, t = config.block.dim;
  Block block;
  block.kernel = &kernel;
  block.reverse = order == Order::kReverse;
  block.fibers.resize(static_cast<size_t>(t.x) * t.y * t.z);
  block.slots.resize(block.fibers.size());
  block.gathered.resize(block.fibers.size() * kMaxGatherBytes);
  for (size_t i = 0; i < block.fibers.size(); ++i) {
    Fiber& f = block.fibers[i];
#if !defined(__x86_64__)
    getcontext(&f.context);
#endif
    f.stack = Stack(static_cast<int>(i));
    f.linear = static_cast<int>(i);
    f.dims.thread = uint3{static_cast<unsigned>(i % t.x), static_cast<unsigned>(i / t.x % t.y),
                          static_cast<unsigned>(i / (t.x * t.y))};
    f.dims.block_dim = t;
    f.dims.grid_dim = g;
  }
  g_block = &block;
  for (unsigned z = 0; z < g.z; ++z) {
    for (unsigned y = 0; y < g.y; ++y) {
      for (unsigned x = 0; x < g.x; ++x) {
        for (Fiber& f : block.fibers) f.dims.block = uint3{x, y, z};
        RunBlock(block);
      }
    }
  }
  g_block = nullptr;
  g_launch_thread = false;
  t_sink = saved;
  return t_launch_error;
}

}  // namespace

void SyncThreads() { Yield(State::kBlockBarrier); }

int SyncThreadsCount(int predicate) {
  g_block->current->predicate = predicate != 0;
  Yield(State::kBlockBarrier);
  return g_block->current->result;
}

uint64_t ShuffleXor(unsigned mask, uint64_t bits, int lane_mask, int width) {
  Fiber& f = *g_block->current;
  if (mask != 0xffffffffu || width != 32 || lane_mask < 0 || lane_mask >= 32) {
    Fail(cudaErrorLaunchFailure, "only full-warp __shfl_xor_sync is emulated (" + Where(f) + ")");
  }
  g_block->slots[f.linear] = bits;
  Yield(State::kWarpBarrier);
  const int source = (f.linear & ~31) | ((f.linear & 31) ^ (lane_mask & 31));
  const uint64_t result =
      source < static_cast<int>(g_block->slots.size()) ? g_block->slots[source] : 0;
  Yield(State::kWarpBarrier);  // nobody overwrites a slot before every lane has read
  return result;
}

int WarpAllGather(const void* mine, size_t bytes, void* all) {
  Fiber& f = *g_block->current;
  if (bytes > kMaxGatherBytes) {
    Fail(cudaErrorLaunchFailure,
         "WarpAllGather of " + std::to_string(bytes) + " bytes (" + Where(f) + ")");
    bytes = kMaxGatherBytes;
  }
  std::memcpy(&g_block->gathered[f.linear * kMaxGatherBytes], mine, bytes);
  Yield(State::kWarpBarrier);
  const int first = f.linear & ~31, threads = static_cast<int>(g_block->fibers.size());
  auto* out = static_cast<unsigned char*>(all);
  for (int lane = 0; lane < 32; ++lane) {
    // A lane missing from a partial warp gives zeros, an exited lane its last slot (a GPU has
    // no such lanes to exchange with: ReleaseBarriers reports both).
    if (first + lane < threads) {
      std::memcpy(out + lane * bytes, &g_block->gathered[(first + lane) * kMaxGatherBytes], bytes);
    } else {
      std::memset(out + lane * bytes, 0, bytes);
    }
  }
  Yield(State::kWarpBarrier);  // nobody overwrites a slot before every lane has read
  return f.linear & 31;
}

void CopyAsync(void* dst, const void* src, bool zeros) {
  PendingCopy copy{dst, {}};
  if (!zeros) std::memcpy(copy.bytes, src, sizeof copy.bytes);
  // In flight: whoever reads the destination before the wait, or while it is being refilled,
  // reads NaNs (all ones in bf16 and fp32).
  std::memset(dst, 0xff, sizeof copy.bytes);
  g_block->current->open_copies.push_back(copy);
}

void CommitCopies() {
  Fiber& f = *g_block->current;
  f.copy_groups.push_back(std::move(f.open_copies));
  f.open_copies.clear();
}

void WaitCopies(int pending) {
  Fiber& f = *g_block->current;
  const int complete = static_cast<int>(f.copy_groups.size()) - pending;
  for (int i = 0; i < complete; ++i) Land(f.copy_groups[i]);
  if (complete > 0) f.copy_groups.erase(f.copy_groups.begin(), f.copy_groups.begin() + complete);
}

void SyncWarp(unsigned mask) {
  Fiber& f = *g_block->current;
  if (mask != 0xffffffffu) {
    Fail(cudaErrorLaunchFailure, "only full-warp __syncwarp is emulated (" + Where(f) + ")");
  }
  Yield(State::kWarpBarrier);
}

cudaError_t GetLastError() {
  std::lock_guard<std::mutex> lock(t_errors->mu);
  const cudaError_t e = t_errors->error;
  t_errors->error = cudaSuccess;
  return e;
}

std::string TakeFailures() {
  std::lock_guard<std::mutex> lock(t_errors->mu);
  std::string f;
  f.swap(t_errors->failures);
  return f;
}

void SetOrder(Order order) { g_order = order; }

Order CurrentOrder() { return g_order; }

void RecordError(cudaError_t error, const std::string& what) { Fail(error, what); }

void SetLastError(cudaError_t error) {
  std::lock_guard<std::mutex> lock(t_errors->mu);
  if (t_errors->error == cudaSuccess) t_errors->error = error;
}

}  // namespace emu
