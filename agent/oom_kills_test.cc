#include "agent/oom_kills.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/testing/memory_cgroup.h"
#include "agent/testing/touch_memory.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::ringmaster::testing::FreshTestCaseDir;
using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string OomControl(int64_t kills) {
  return absl::StrCat("oom_kill_disable 0\nunder_oom 0\noom_kill ", kills, "\n");
}
std::string MemoryEvents(int64_t kills) {
  return absl::StrCat("low 0\nhigh 0\nmax 3\noom 1\noom_kill ", kills, "\noom_group_kill 0\n");
}
std::string VmStat(int64_t kills) {
  return absl::StrCat("nr_free_pages 1234\noom_kill ", kills, "\nnr_tlb_local_flush_all 9\n");
}

TEST(OomKillCounterFileTest, TheV1MemoryControllersCgroupFirst) {
  const std::string root = FreshTestCaseDir();
  Write(root + "/proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/pod/abc:1\n0::/unified\n");
  const std::string v1 = root + "/sys/fs/cgroup/memory/pod/abc:1/memory.oom_control";
  EXPECT_EQ(OomKillCounterFile(root, "self"), "");  // the file is not there
  Write(v1, OomControl(0));
  Write(root + "/sys/fs/cgroup/unified/memory.events", MemoryEvents(0));
  EXPECT_EQ(OomKillCounterFile(root, "self"), v1);
  EXPECT_EQ(OomKillCounterFile(root + "/", "self"), v1);
}

// A container without a cgroup namespace: /proc/self/cgroup names the host's path, and its
// cgroup file systems are mounted with that path as their root.
TEST(OomKillCounterFileTest, ThePathUnderItsMountsRoot) {
  const std::string root = FreshTestCaseDir();
  Write(root + "/proc/self/cgroup", "11:cpu:/docker/abc\n4:memory:/docker/abc\n");
  Write(root + "/proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755\n"
        "31 30 0:27 /docker/abc /sys/fs/cgroup/cpu ro,nosuid master:9 - cgroup cgroup rw,cpu\n"
        "32 30 0:28 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n");
  Write(root + "/sys/fs/cgroup/memory/memory.oom_control", OomControl(0));
  EXPECT_EQ(OomKillCounterFile(root, "self"), root + "/sys/fs/cgroup/memory/memory.oom_control");
  // A process in a child of the container's cgroup.
  Write(root + "/proc/9/cgroup", "4:memory:/docker/abc/job7\n");
  Write(root + "/proc/9/mountinfo",
        "32 30 0:28 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
  Write(root + "/sys/fs/cgroup/memory/job7/memory.oom_control", OomControl(0));
  EXPECT_EQ(OomKillCounterFile(root, "9"), root + "/sys/fs/cgroup/memory/job7/memory.oom_control");
  // v2, mounted elsewhere, the namespace's root.
  Write(root + "/proc/10/cgroup", "0::/kubepods/pod1\n");
  Write(root + "/proc/10/mountinfo",
        "40 30 0:40 /kubepods/pod1 /run/cg2 rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  Write(root + "/run/cg2/memory.events", MemoryEvents(0));
  EXPECT_EQ(OomKillCounterFile(root, "10"), root + "/run/cg2/memory.events");
  // A path outside every mount's root (and not at the usual place either) has no counter.
  Write(root + "/proc/11/cgroup", "4:memory:/elsewhere\n");
  Write(root + "/proc/11/mountinfo",
        "32 30 0:28 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
  EXPECT_EQ(OomKillCounterFile(root, "11"), "");
}

TEST(OomKillCounterFileTest, TheV2CgroupWithoutAV1MemoryController) {
  const std::string root = FreshTestCaseDir();
  Write(root + "/proc/42/cgroup", "0::/kubepods/pod7/worker\n");
  const std::string v2 = root + "/sys/fs/cgroup/kubepods/pod7/worker/memory.events";
  Write(v2, MemoryEvents(0));
  EXPECT_EQ(OomKillCounterFile(root, "42"), v2);
  // A cgroup namespace's root.
  Write(root + "/proc/43/cgroup", "0::/\n");
  Write(root + "/sys/fs/cgroup/memory.events", MemoryEvents(0));
  EXPECT_EQ(OomKillCounterFile(root, "43"), root + "/sys/fs/cgroup/memory.events");
  // No such process, or nothing readable.
  EXPECT_EQ(OomKillCounterFile(root, "44"), "");
  Write(root + "/proc/45/cgroup", "garbage\n1:name=systemd\n");
  EXPECT_EQ(OomKillCounterFile(root, "45"), "");
}

TEST(ReadOomKillCountsTest, ReadsBothCountsAndLeavesOutWhatIsMissing) {
  const std::string root = FreshTestCaseDir();
  Write(root + "/cg/memory.events", MemoryEvents(3));
  Write(root + "/proc/vmstat", VmStat(11));
  OomKillCounts counts = ReadOomKillCounts(root, root + "/cg/memory.events");
  EXPECT_EQ(counts.cgroup, 3);
  EXPECT_EQ(counts.node, 11);
  counts = ReadOomKillCounts(root, "");
  EXPECT_EQ(counts.cgroup, std::nullopt);
  EXPECT_EQ(counts.node, 11);
  // A kernel older than 4.13 has no oom_kill line.
  Write(root + "/proc/vmstat", "nr_free_pages 1234\n");
  Write(root + "/old/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n");
  counts = ReadOomKillCounts(root, root + "/old/memory.oom_control");
  EXPECT_EQ(counts.cgroup, std::nullopt);
  EXPECT_EQ(counts.node, std::nullopt);
}

class OomKillWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = FreshTestCaseDir();
    Write(root_ + "/proc/self/cgroup", "4:memory:/agent\n");
    SetCounts(0, 0);
  }
  void SetCounts(int64_t cgroup, int64_t node) {
    Write(root_ + "/sys/fs/cgroup/memory/agent/memory.oom_control", OomControl(cgroup));
    Write(root_ + "/proc/vmstat", VmStat(node));
  }
  // Samples every 250 ms (the agent's tick) for `d`.
  void Run(OomKillWatch& watch, absl::Duration d) {
    for (absl::Duration t; t < d; t += absl::Milliseconds(250)) {
      clock_.Advance(absl::Milliseconds(250));
      watch.Sample();
    }
  }

  std::string root_;
  FakeClock clock_;
};

TEST_F(OomKillWatchTest, AKillInTheCgroupJustBeforeAnExitIsToldToThatExitOnly) {
  OomKillWatch watch(root_, &clock_);
  Run(watch, absl::Seconds(30));
  EXPECT_EQ(watch.RecentKills(), "");
  SetCounts(1, 1);
  clock_.Advance(absl::Milliseconds(5));  // the reap comes before the next tick
  EXPECT_EQ(watch.RecentKills(),
            "likely out of memory (the kernel's OOM killer killed 1 process in the workers' "
            "memory cgroup in the 10.0 s before)");
  // The victim's peers, failing after it, are not told of the same kill.
  Run(watch, absl::Milliseconds(250));
  EXPECT_EQ(watch.RecentKills(), "");
  // A second kill is told to the next exit.
  SetCounts(2, 2);
  EXPECT_THAT(watch.RecentKills(), HasSubstr("killed 1 process in the workers' memory cgroup"));
  EXPECT_EQ(watch.RecentKills(), "");
  // Two kills before an exit (two victims): the first exit is told of both, and claims one; the
  // next of the other; the third of none.
  SetCounts(4, 4);
  EXPECT_THAT(watch.RecentKills(), HasSubstr("killed 2 processes in the workers' memory cgroup"));
  EXPECT_THAT(watch.RecentKills(), HasSubstr("killed 1 process in the workers' memory cgroup"));
  EXPECT_EQ(watch.RecentKills(), "");
}

TEST_F(OomKillWatchTest, AKillOlderThanTheWindowIsOldNews) {
  OomKillWatch watch(root_, &clock_);
  Run(watch, absl::Seconds(1));
  SetCounts(1, 1);
  Run(watch, absl::Seconds(11));
  EXPECT_EQ(watch.RecentKills(), "");
}

// The kernel counts a node-wide OOM kill in the victim's cgroup too: with the cgroup's count flat,
// a rise of the node's killed something else.
TEST_F(OomKillWatchTest, ANodeWideRiseWithTheCgroupsCountFlatIsNotTheWorkers) {
  OomKillWatch watch(root_, &clock_);
  Run(watch, absl::Seconds(2));
  SetCounts(0, 2);
  EXPECT_EQ(watch.RecentKills(), "");
}

TEST_F(OomKillWatchTest, TheNodesCountWithoutACgroupCounter) {
  std::filesystem::remove_all(root_ + "/sys");
  OomKillWatch watch(root_, &clock_);
  Run(watch, absl::Seconds(2));
  Write(root_ + "/proc/vmstat", VmStat(2));
  EXPECT_EQ(watch.RecentKills(),
            "likely out of memory (the kernel's OOM killer killed 2 processes on this node in "
            "the 2.0 s before)");
  EXPECT_THAT(watch.RecentKills(), HasSubstr("killed 1 process on this node"));
  EXPECT_EQ(watch.RecentKills(), "");
}

TEST_F(OomKillWatchTest, CountsOfAnotherCgroupAreNotCompared) {
  OomKillWatch watch(root_, &clock_);
  Run(watch, absl::Seconds(1));
  // The agent was moved to a cgroup that has seen kills before.
  Write(root_ + "/proc/self/cgroup", "4:memory:/moved\n");
  Write(root_ + "/sys/fs/cgroup/memory/moved/memory.oom_control", OomControl(7));
  EXPECT_EQ(watch.RecentKills(), "");
  // From its first sample there on: the next tick's, 1.75 s before the kill.
  Run(watch, absl::Seconds(2));
  Write(root_ + "/sys/fs/cgroup/memory/moved/memory.oom_control", OomControl(8));
  EXPECT_EQ(watch.RecentKills(),
            "likely out of memory (the kernel's OOM killer killed 1 process in the workers' "
            "memory cgroup in the 1.8 s before)");
}

TEST_F(OomKillWatchTest, NothingIsClaimedWithoutCounters) {
  std::filesystem::remove_all(root_ + "/sys");
  std::filesystem::remove(root_ + "/proc/vmstat");
  OomKillWatch watch(root_, &clock_);
  Run(watch, absl::Seconds(1));
  EXPECT_EQ(watch.RecentKills(), "");
}

// The real kernel: a child in a memory cgroup of its own, limited to 64 MiB, touches memory until
// the OOM killer ends it; its cgroup's count and the node's rise. Skipped where this process cannot
// make a memory cgroup (not root, cgroup v2 without the memory controller delegated, ...).
TEST(OomKillsOnThisKernelTest, AnOomKillIsCounted) {
  auto cgroup = MemoryCgroup::Make("ringmaster-oom-test", 64 << 20);
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.status();
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(go[1]);
    char byte;
    if (read(go[0], &byte, 1) != 1) _exit(3);
    if (!TouchMemory(2048)) _exit(4);
    _exit(0);  // 2 GiB in 64 MiB: not reached
  }
  close(go[0]);
  const absl::Status joined = (*cgroup)->Join(child);
  // Outside the cgroup it would eat 2 GiB unconstrained: then it is killed instead.
  if (!joined.ok()) kill(child, SIGKILL);
  const std::string file = OomKillCounterFile("/", std::to_string(child));
  const OomKillCounts before = ReadOomKillCounts("/", file);
  (void)!write(go[1], "x", 1);
  close(go[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(joined.ok()) << joined;
  EXPECT_EQ(file, (*cgroup)->counter_file());
  const OomKillCounts after = ReadOomKillCounts("/", file);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_TRUE(before.cgroup.has_value());
  EXPECT_EQ(after.cgroup, *before.cgroup + 1);
  if (before.node.has_value()) EXPECT_GT(after.node, *before.node);
}

}  // namespace
}  // namespace ringmaster::agent
