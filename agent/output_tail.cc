#include "agent/output_tail.h"

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
      // A line of colour codes only is as blank as one of spaces.
      if (HasVisibleText(current_)) last_.swap(current_);
      current_.clear();
    } else if (current_.size() < kLineBytes) {
      current_.push_back(c);
    }
  }
}

std::string OutputTail::LastLine() const {
  absl::MutexLock lock(&mu_);
  return OneLine(HasVisibleText(current_) ? current_ : last_, kMaxBytes);
}

}  // namespace ringmaster::agent
