#include "common/testing/subprocess.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "gtest/gtest.h"

namespace ringmaster::testing {
namespace {

std::vector<char*> CArgv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const std::string& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv,
                                             const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("argv must not be empty");
  int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return ErrnoError(errno, absl::StrCat("open ", log_path));
  std::vector<char*> args = CArgv(argv);
  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return ErrnoError(errno, "fork");
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    int null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, STDIN_FILENO);
    execvp(args[0], args.data());
    dprintf(STDERR_FILENO, "exec %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // Also from the parent, so Signal() works even before the child runs.
  close(log_fd);
  return Subprocess(pid, log_path);
}

Subprocess::Subprocess(Subprocess&& other) noexcept { *this = std::move(other); }

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  pid_ = other.pid_;
  wait_status_ = other.wait_status_;
  reaped_ = other.reaped_;
  log_path_ = std::move(other.log_path_);
  other.pid_ = -1;
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, &wait_status_, 0);
  }
}

bool Subprocess::Running() {
  if (reaped_ || pid_ <= 0) return false;
  pid_t r = waitpid(pid_, &wait_status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

void Subprocess::Signal(int signal) {
  if (pid_ > 0 && !reaped_) kill(-pid_, signal);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Milliseconds(1);
  while (Running()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " still running"));
    }
    absl::SleepFor(backoff);  // Polling waitpid with a deadline; backoff caps at 50 ms.
    backoff = std::min(backoff * 2, absl::Milliseconds(50));
  }
  return wait_status_;
}

int Subprocess::Stop(absl::Duration grace) {
  Signal(SIGTERM);
  if (Wait(grace).ok()) return wait_status_;
  Signal(SIGKILL);
  if (!reaped_ && pid_ > 0) {
    waitpid(pid_, &wait_status_, 0);
    reaped_ = true;
  }
  return wait_status_;
}

std::string Subprocess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::string& stdin_data) {
  std::string dir = TestTempDir();
  std::string in_path = absl::StrCat(dir, "/stdin.", getpid(), ".", rand());
  std::string out_path = in_path + ".out";
  {
    std::ofstream in(in_path);
    in << stdin_data;
  }
  int in_fd = open(in_path.c_str(), O_RDONLY | O_CLOEXEC);
  int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (in_fd < 0 || out_fd < 0) return ErrnoError(errno, "open command files");
  std::vector<char*> args = CArgv(argv);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_fd, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    execvp(args[0], args.data());
    dprintf(STDERR_FILENO, "exec %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  close(in_fd);
  close(out_fd);
  if (pid < 0) return ErrnoError(errno, "fork");
  int status = 0;
  waitpid(pid, &status, 0);
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream out(out_path);
  std::stringstream ss;
  ss << out.rdbuf();
  result.output = ss.str();
  unlink(in_path.c_str());
  unlink(out_path.c_str());
  return result;
}

std::string TestTempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  if (dir != nullptr && *dir != '\0') return dir;
  static std::string made = [] {
    char tmpl[] = "/tmp/ringmaster-test-XXXXXX";
    const char* d = mkdtemp(tmpl);
    return std::string(d == nullptr ? "/tmp" : d);
  }();
  return made;
}

std::string FreshTestCaseDir(const std::string& prefix) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir =
      absl::StrCat(TestTempDir(), "/", prefix, test != nullptr ? test->name() : "no-test");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

absl::StatusOr<int> PickUnusedPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(errno, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError(err, "bind 127.0.0.1:0");
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace ringmaster::testing
