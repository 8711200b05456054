// The emulated NCCL across processes (fake_nccl_process.cc): ranks in three processes (this test
// and two children, each child seeing one GPU through CUDA_VISIBLE_DEVICES, as an agent's
// workers) reduce, exchange messages and broadcast as ranks in one process do; two processes on
// one GPU of the machine are refused; a collective the processes issue differently is refused on
// both sides, the refused rank's buffer untouched; a rank SIGKILLed mid-run is a remote error for
// its peer, and so is the death (SIGKILL) of the process hosting the communicator; a host that
// exits right after its finalize has sent a remote rank's last output first. The children are
// this binary, run again with RINGMASTER_FAKE_NCCL_ROLE set: they play their part before main and
// exit.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::ringmaster::testing::Subprocess;
using ::testing::HasSubstr;

constexpr size_t kCount = 8;
// Floats of the all-reduce a host finishes with (64 MiB: its output takes a while to send).
constexpr size_t kLastCount = size_t{16} << 20;
constexpr absl::Duration kDeadline = absl::Seconds(60);

// The communicator's state once `done` says so (whatever it is after the deadline).
ncclResult_t AwaitState(ncclComm_t comm, bool (*done)(ncclResult_t)) {
  ncclResult_t state = ncclInProgress;
  ::ringmaster::testing::WaitFor(
      [&] {
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
        return done(state);
      },
      kDeadline);
  return state;
}
// Once it is no longer in progress.
ncclResult_t Await(ncclComm_t comm) {
  return AwaitState(comm, [](ncclResult_t s) { return s != ncclInProgress; });
}
// Once a failure has reached it.
ncclResult_t AwaitFailure(ncclComm_t comm) {
  return AwaitState(comm, [](ncclResult_t s) { return s != ncclInProgress && s != ncclSuccess; });
}

std::string IdText(const ncclUniqueId& id) {
  return std::string(id.internal, strnlen(id.internal, sizeof(id.internal)));
}

ncclUniqueId IdFrom(const std::string& text) {
  ncclUniqueId id{};
  text.copy(id.internal, sizeof(id.internal) - 1);
  return id;
}

// One rank: its communicator, stream and kCount floats of device memory on the current GPU.
struct Member {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* buffer = nullptr;
  int rank = 0, size = 0;
  std::string error;  // the first failure

  bool Check(bool ok, const std::string& what) {
    if (!ok && error.empty()) error = what + ": " + ncclGetLastError(comm);
    return ok;
  }
  bool Join(const ncclUniqueId& id, int r, int n) {
    rank = r;
    size = n;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t init = ncclCommInitRankConfig(&comm, n, id, r, &config);
    if (!Check(init == ncclSuccess || init == ncclInProgress, "init")) return false;
    return Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess,
                 "stream") &&
           Check(cudaMalloc(&buffer, kCount * sizeof(float)) == cudaSuccess, "malloc") &&
           Check(Await(comm) == ncclSuccess, "joining");
  }
  void Fill(float value) {
    std::vector<float> v(kCount, value);
    Check(
        cudaMemcpy(buffer, v.data(), sizeof(float) * kCount, cudaMemcpyHostToDevice) == cudaSuccess,
        "fill");
  }
  float Read() {
    float v = 0;
    Check(cudaStreamSynchronize(stream) == cudaSuccess, "synchronize");
    Check(cudaMemcpy(&v, buffer + kCount - 1, sizeof(v), cudaMemcpyDeviceToHost) == cudaSuccess,
          "read");
    return v;
  }
  // Queues an operation and waits until it has been enqueued; its state then.
  ncclResult_t Issue(ncclResult_t issued) {
    if (issued != ncclSuccess && issued != ncclInProgress) return issued;
    return issued == ncclInProgress ? Await(comm) : ncclSuccess;
  }
  ncclResult_t AllReduce() {
    return Issue(ncclAllReduce(buffer, buffer, kCount, ncclFloat32, ncclSum, comm, stream));
  }
  // An all-reduce, a ring of messages and a broadcast; the values they must give.
  void Exchange() {
    Fill(static_cast<float>(rank + 1));
    Check(AllReduce() == ncclSuccess, "all-reduce");
    Check(Read() == size * (size + 1) / 2.0f, "all-reduce's sum");
    Fill(static_cast<float>(100 + rank));
    float* in = buffer + kCount / 2;
    Check(ncclGroupStart() == ncclSuccess, "group");
    Check(ncclSend(buffer, kCount / 2, ncclFloat32, (rank + 1) % size, comm, stream) == ncclSuccess,
          "send");
    Check(ncclRecv(in, kCount / 2, ncclFloat32, (rank + size - 1) % size, comm, stream) ==
              ncclSuccess,
          "receive");
    Check(Issue(ncclGroupEnd()) == ncclSuccess, "group end");
    Check(Read() == 100 + (rank + size - 1) % size, "the message from the previous rank");
    Fill(static_cast<float>(rank));
    Check(Issue(ncclBroadcast(buffer, buffer, kCount, ncclFloat32, size - 1, comm, stream)) ==
              ncclSuccess,
          "broadcast");
    Check(Read() == size - 1, "the broadcast's value");
  }
  void Finish() {
    Check(ncclCommFinalize(comm) == ncclInProgress, "finalize");
    Check(Await(comm) == ncclSuccess, "finalized");
    Check(ncclCommDestroy(comm) == ncclSuccess, "destroy");
  }
};

// An all-reduce of kLastCount floats (rank + 1 each) into `*sum`, then finalize without
// synchronizing first (NCCL's finalize flushes what was issued) and destroy: the communicator's
// state after the finalize.
ncclResult_t LastAllReduce(Member& m, std::vector<float>* sum = nullptr) {
  float* data = nullptr;
  if (!m.Check(cudaMalloc(&data, kLastCount * sizeof(float)) == cudaSuccess, "malloc")) {
    return ncclInternalError;
  }
  std::vector<float> host(kLastCount, static_cast<float>(m.rank + 1));
  m.Check(cudaMemcpy(data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) ==
              cudaSuccess,
          "fill");
  m.Check(m.Issue(ncclAllReduce(data, data, kLastCount, ncclFloat32, ncclSum, m.comm, m.stream)) ==
              ncclSuccess,
          "the last all-reduce");
  m.Check(ncclCommFinalize(m.comm) == ncclInProgress, "finalize");
  const ncclResult_t finalized = Await(m.comm);
  if (sum != nullptr && finalized == ncclSuccess) {
    sum->resize(kLastCount);
    m.Check(cudaMemcpy(sum->data(), data, kLastCount * sizeof(float), cudaMemcpyDeviceToHost) ==
                cudaSuccess,
            "read");
  }
  m.Check(ncclCommDestroy(m.comm) == ncclSuccess, "destroy");
  m.Check(cudaFree(data) == cudaSuccess, "free");
  return finalized;
}

// A child's part (RINGMASTER_FAKE_NCCL_ROLE, with the unique id in RINGMASTER_FAKE_NCCL_ID): its
// exit status says how it went.
//   member RANK SIZE: Exchange and Finish (exit 0), or exit 3 when it cannot join;
//   mismatches RANK SIZE: an all-reduce of half the count: refused, its buffer untouched
//   (exit 0);
//   idles RANK SIZE: one all-reduce, then waits to be killed;
//   hosts SIZE: makes the id and prints it, joins as rank 0, one all-reduce, then waits to be
//   killed;
//   hosts-and-exits SIZE: makes the id and prints it, joins as rank 0, then LastAllReduce and
//   exits at once.
int PlayRole(const std::string& role, std::istringstream& args, const char* id_text) {
  Member m;
  ncclUniqueId id;
  int rank = 0, size = 0;
  if (role == "hosts" || role == "hosts-and-exits") {
    args >> size;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
    std::printf("id=%s\n", IdText(id).c_str());
    std::fflush(stdout);
  } else {
    args >> rank >> size;
    id = IdFrom(id_text != nullptr ? id_text : "");
  }
  if (!m.Join(id, rank, size)) {
    std::printf("cannot join: %s\n", m.error.c_str());
    return 3;
  }
  if (role == "member") {
    m.Exchange();
    m.Finish();
  } else if (role == "mismatches") {
    m.Fill(5.0f);
    const ncclResult_t issued =
        ncclAllReduce(m.buffer, m.buffer, kCount / 2, ncclFloat32, ncclSum, m.comm, m.stream);
    m.Check(issued == ncclSuccess || issued == ncclInProgress, "the mismatched all-reduce");
    m.Check(AwaitFailure(m.comm) == ncclInvalidUsage, "the mismatch reported");
    // Not synchronized: the rank that issued collective #0 first keeps it pending, as a
    // mismatch hangs on GPUs.
    float v = 0;
    m.Check(cudaMemcpy(&v, m.buffer, sizeof(v), cudaMemcpyDeviceToHost) == cudaSuccess, "read");
    m.Check(v == 5.0f, "the refused all-reduce's buffer untouched");
  } else if (role == "hosts-and-exits") {
    m.Check(LastAllReduce(m) == ncclSuccess, "the last all-reduce");
  } else {
    m.Fill(1.0f);
    m.Check(m.AllReduce() == ncclSuccess, "all-reduce");
    m.Check(m.Read() == size, "all-reduce's sum");
    if (m.error.empty()) pause();  // until the test's SIGKILL
  }
  std::printf("%s\n", m.error.empty() ? "ok" : m.error.c_str());
  return m.error.empty() ? 0 : 1;
}

// Before main: a child plays its part and exits.
[[maybe_unused]] const bool kParent = [] {
  const char* role = std::getenv("RINGMASTER_FAKE_NCCL_ROLE");
  if (role == nullptr) return true;
  std::istringstream args(std::getenv("RINGMASTER_FAKE_NCCL_ARGS"));
  const int code = PlayRole(role, args, std::getenv("RINGMASTER_FAKE_NCCL_ID"));
  std::fflush(stdout);
  std::_Exit(code);
}();

class FakeNcclProcessTest : public ::testing::Test {
 protected:
  // This binary as a child seeing only the machine's GPU `gpu`, playing `role`.
  absl::StatusOr<Subprocess> Child(int gpu, const std::string& role, const std::string& args,
                                   const ncclUniqueId* id = nullptr) {
    char self[4096] = {};
    EXPECT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
    const std::string log = absl::StrCat(
        ::ringmaster::testing::TestTempDir(), "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-", children_++, ".log");
    std::remove(log.c_str());
    return Subprocess::Start(
        {"env", absl::StrCat("CUDA_VISIBLE_DEVICES=", gpu), "RINGMASTER_FAKE_NCCL_ROLE=" + role,
         "RINGMASTER_FAKE_NCCL_ARGS=" + args,
         "RINGMASTER_FAKE_NCCL_ID=" + (id != nullptr ? IdText(*id) : ""), self},
        log);
  }
  static int ExitCode(Subprocess& p) {
    absl::StatusOr<int> status = p.Wait(absl::Seconds(60));
    EXPECT_TRUE(status.ok()) << p.Log();
    return status.ok() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  }
  static bool Killed(Subprocess& p) {
    absl::StatusOr<int> status = p.Wait(absl::Seconds(60));
    return status.ok() && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL;
  }
  // One all-reduce of `m` (one of two ranks) with `peer`'s process, then SIGKILL `peer`: the
  // next all-reduce can never complete, and `m`'s communicator reports ncclRemoteError, its
  // detail saying `why`.
  static void KillAndExpectRemoteError(Member& m, Subprocess& peer, const std::string& why) {
    m.Fill(1.0f);
    ASSERT_EQ(m.AllReduce(), ncclSuccess);
    EXPECT_EQ(m.Read(), 2.0f);
    peer.Signal(SIGKILL);
    ASSERT_TRUE(Killed(peer)) << peer.Log();
    m.Fill(1.0f);
    (void)m.AllReduce();  // queued; its failure comes through ncclCommGetAsyncError
    EXPECT_EQ(AwaitFailure(m.comm), ncclRemoteError);
    EXPECT_THAT(ncclGetLastError(m.comm), HasSubstr(why));
    EXPECT_EQ(ncclCommAbort(m.comm), ncclSuccess);
  }
  // This process as rank `rank` of `size` on its GPU `gpu`.
  void Join(Member& m, const ncclUniqueId& id, int gpu, int rank, int size) {
    ASSERT_EQ(cudaSetDevice(gpu), cudaSuccess);
    ASSERT_TRUE(m.Join(id, rank, size)) << m.error;
  }
  // Join, to the communicator of the id `host` (a hosting child) prints first.
  void JoinHostedBy(Member& m, Subprocess& host, int gpu, int rank, int size) {
    std::string id_line;
    ::ringmaster::testing::WaitFor(
        [&] {
          std::istringstream log(host.Log());
          for (std::string line; std::getline(log, line);) {
            if (line.rfind("id=", 0) == 0) id_line = line.substr(3);
          }
          return !id_line.empty() || !host.Running();
        },
        kDeadline);
    ASSERT_FALSE(id_line.empty()) << host.Log();
    Join(m, IdFrom(id_line), gpu, rank, size);
  }
  int children_ = 0;
};

TEST_F(FakeNcclProcessTest, RanksInThreeProcessesExchangeAsRanksInOneDo) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  absl::StatusOr<Subprocess> one = Child(1, "member", "1 3", &id);
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<Subprocess> two = Child(2, "member", "2 3", &id);
  ASSERT_TRUE(two.ok()) << two.status();
  Member m;
  ASSERT_NO_FATAL_FAILURE(Join(m, id, 0, 0, 3));
  m.Exchange();
  m.Finish();
  EXPECT_EQ(m.error, "");
  EXPECT_EQ(ExitCode(*one), 0) << one->Log();
  EXPECT_EQ(ExitCode(*two), 0) << two->Log();
}

TEST_F(FakeNcclProcessTest, TwoProcessesOnOneGpuOfTheMachineAreRefused) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  Member m;
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ASSERT_EQ(ncclCommInitRankConfig(&m.comm, 2, id, 0, &config), ncclInProgress);
  // The child's device 0 is the machine's GPU 2.
  absl::StatusOr<Subprocess> child = Child(2, "member", "1 2", &id);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(ExitCode(*child), 3) << child->Log();
  EXPECT_THAT(child->Log(), HasSubstr("Duplicate GPU detected: rank 1 and rank 0 both on the "
                                      "machine's GPU 2"));
  ncclResult_t state = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(m.comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress) << "rank 1 never joined";
  EXPECT_EQ(ncclCommAbort(m.comm), ncclSuccess);
}

TEST_F(FakeNcclProcessTest, ACollectiveMismatchedAcrossProcessesIsRefusedOnBothSides) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  absl::StatusOr<Subprocess> child = Child(1, "mismatches", "1 2", &id);
  ASSERT_TRUE(child.ok()) << child.status();
  Member m;
  ASSERT_NO_FATAL_FAILURE(Join(m, id, 0, 0, 2));
  m.Fill(3.0f);
  const ncclResult_t issued =
      ncclAllReduce(m.buffer, m.buffer, kCount, ncclFloat32, ncclSum, m.comm, m.stream);
  EXPECT_TRUE(issued == ncclSuccess || issued == ncclInProgress || issued == ncclInvalidUsage);
  EXPECT_EQ(AwaitFailure(m.comm), ncclInvalidUsage);
  EXPECT_THAT(ncclGetLastError(m.comm), HasSubstr("collective #0"));
  EXPECT_EQ(ExitCode(*child), 0) << child->Log();
  EXPECT_EQ(ncclCommAbort(m.comm), ncclSuccess);
}

TEST_F(FakeNcclProcessTest, ARankKilledMidRunIsARemoteErrorForItsPeer) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  absl::StatusOr<Subprocess> child = Child(1, "idles", "1 2", &id);
  ASSERT_TRUE(child.ok()) << child.status();
  Member m;
  ASSERT_NO_FATAL_FAILURE(Join(m, id, 0, 0, 2));
  KillAndExpectRemoteError(m, *child, "rank 1 aborted or destroyed");
}

TEST_F(FakeNcclProcessTest, TheDeathOfTheProcessHostingTheCommunicatorIsARemoteError) {
  absl::StatusOr<Subprocess> host = Child(0, "hosts", "2");
  ASSERT_TRUE(host.ok()) << host.status();
  Member m;
  ASSERT_NO_FATAL_FAILURE(JoinHostedBy(m, *host, 1, 1, 2));
  KillAndExpectRemoteError(m, *host, "lost its connection");
}

TEST_F(FakeNcclProcessTest, AHostExitingRightAfterItsFinalizeHasSentTheLastOutputs) {
  absl::StatusOr<Subprocess> host = Child(0, "hosts-and-exits", "2");
  ASSERT_TRUE(host.ok()) << host.status();
  Member m;
  ASSERT_NO_FATAL_FAILURE(JoinHostedBy(m, *host, 1, 1, 2));
  std::vector<float> sum;
  EXPECT_EQ(LastAllReduce(m, &sum), ncclSuccess) << ncclGetLastError(m.comm);
  EXPECT_EQ(m.error, "");
  ASSERT_EQ(sum.size(), kLastCount);
  EXPECT_EQ(sum.front(), 3.0f);
  EXPECT_EQ(sum.back(), 3.0f);
  EXPECT_EQ(ExitCode(*host), 0) << host->Log();
}

}  // namespace
