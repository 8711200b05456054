#include "agent/output_tail.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "common/one_line.h"

namespace ringmaster::agent {
namespace {

bool Blank(absl::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); });
}

}  // namespace

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
      if (!Blank(current_)) last_.swap(current_);
      current_.clear();
    } else if (current_.size() < kLineBytes) {
      current_.push_back(c);
    }
  }
}

std::string OutputTail::LastLine() const {
  absl::MutexLock lock(&mu_);
  return OneLine(Blank(current_) ? last_ : current_, kMaxBytes);
}

}  // namespace ringmaster::agent
