// Memory a test process takes on purpose, to meet a memory limit (the kernel's OOM killer ends
// it there).
#ifndef RINGMASTER_AGENT_TESTING_TOUCH_MEMORY_H_
#define RINGMASTER_AGENT_TESTING_TOUCH_MEMORY_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstring>

namespace ringmaster::agent {

// Maps and writes `mb` MiB of anonymous memory, 8 MiB at a time, and keeps it. Returns false if
// a mapping failed first. Only mmap and memset: fit for the forked child of a multi-threaded
// process.
inline bool TouchMemory(int mb) {
  constexpr size_t kPiece = 8 << 20;
  for (int touched = 0; touched < mb; touched += 8) {
    void* p = mmap(nullptr, kPiece, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    std::memset(p, 1, kPiece);
  }
  return true;
}

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_TESTING_TOUCH_MEMORY_H_
