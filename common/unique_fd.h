// An owned file descriptor, closed when it goes (or is reset).
#ifndef RINGMASTER_COMMON_UNIQUE_FD_H_
#define RINGMASTER_COMMON_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace ringmaster {

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);  // Nothing to do about a failed close of a descriptor we own.
    fd_ = fd;
  }

 private:
  int fd_;
};

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_UNIQUE_FD_H_
