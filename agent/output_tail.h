// The last line a worker printed, kept as its output streams by (the log pump feeds it), so that
// the agent can say why a worker that exited without reporting a reason ended: a Python
// traceback's last line, a CUDA error, an NCCL warning.
//
// Lines end at '\n'; a '\r' not followed by '\n' starts its line again (a progress bar redrawn
// in place). Lines that OneLine (common/one_line.h) makes empty (spaces, colour codes) do not
// count. Of each line the first kLineBytes are kept.
//
// Thread-safe: one thread adds while another reads. Its lock is a leaf (WorkerSupervisor reads
// the last line under its own lock; nothing here calls out).
#ifndef RINGMASTER_AGENT_OUTPUT_TAIL_H_
#define RINGMASTER_AGENT_OUTPUT_TAIL_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ringmaster::agent {

class OutputTail {
 public:
  static constexpr size_t kLineBytes = 2048;
  // LastLine's limit.
  static constexpr size_t kMaxBytes = 512;

  // The next bytes of the output, in order (any chunking).
  void Add(absl::string_view data);

  // The last line with something besides spaces on it, an unfinished last line included, as
  // OneLine (common/one_line.h) makes it: at most kMaxBytes, valid UTF-8; "" if none.
  std::string LastLine() const;

 private:
  mutable absl::Mutex mu_;
  std::string last_ ABSL_GUARDED_BY(mu_);       // the last finished line not blank, as written
  std::string current_ ABSL_GUARDED_BY(mu_);    // the line being written
  bool carriage_ ABSL_GUARDED_BY(mu_) = false;  // the byte before was '\r'
};

}  // namespace ringmaster::agent

#endif  // RINGMASTER_AGENT_OUTPUT_TAIL_H_
