#include "agent/output_tail.h"

#include <utility>

#include "common/one_line.h"

namespace ringmaster::agent {

void OutputTail::Add(absl::string_view data) {
  absl::MutexLock lock(&mu_);
  for (const char c : data) {
    if (carriage_) {
      carriage_ = false;
      if (c != '\n') current_.clear();  // redrawn in place
    }
    if (c == '\r') {
      carriage_ = true;
    } else if (c == '\n') {
      // Made one line now: a line of colour codes only is as blank as one of spaces.
      if (std::string line = OneLine(current_, kMaxBytes); !line.empty()) last_ = std::move(line);
      current_.clear();
    } else if (current_.size() < kLineBytes) {
      current_.push_back(c);
    }
  }
}

std::string OutputTail::LastLine() const {
  absl::MutexLock lock(&mu_);
  std::string unfinished = OneLine(current_, kMaxBytes);
  return unfinished.empty() ? last_ : unfinished;
}

}  // namespace ringmaster::agent
