// The Python watch's files as the agent embeds and writes them: the same bytes as python/watch,
// read-only, in a directory that appears whole and is reused while the files are the same.
#include "agent/python_watch_files.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/file_contents.h"
#include "common/testing/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

int Mode(const fs::path& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return -1;
  return st.st_mode & 07777;
}

TEST(PythonWatchFilesTest, TheSameBytesAsTheSourcesReadOnly) {
  const std::string parent = ringmaster::testing::FreshTestCaseDir() + "/agent";
  absl::StatusOr<std::string> dir = WritePythonWatch(parent);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_THAT(*dir, StartsWith(parent + "/python-watch-"));
  EXPECT_EQ(Mode(*dir), 0755);
  std::vector<std::string> names;
  for (const EmbeddedFile& f : PythonWatchFiles()) {
    names.push_back(f.path);
    // The test runs in the workspace's runfiles: the sources are at their repository paths.
    absl::StatusOr<std::string> source = ReadFileContents(std::string("python/watch/") + f.path);
    ASSERT_TRUE(source.ok()) << source.status();
    absl::StatusOr<std::string> written = ReadFileContents(*dir + "/" + f.path);
    ASSERT_TRUE(written.ok()) << written.status();
    // Not EXPECT_EQ: a mismatch would print whole files.
    EXPECT_TRUE(*written == *source) << f.path;
    EXPECT_TRUE(std::string(f.data, f.size) == *source) << f.path;
    EXPECT_EQ(Mode(*dir + "/" + f.path), 0444) << f.path;
  }
  EXPECT_THAT(names, ::testing::IsSupersetOf({"sitecustomize.py", "_ringmaster_watch/__init__.py"}));
  EXPECT_EQ(Mode(*dir + "/_ringmaster_watch"), 0755);
}

TEST(PythonWatchFilesTest, ReusedWhileTheSameAndReplacedWhenNot) {
  const std::string parent = ringmaster::testing::FreshTestCaseDir();
  const std::string nul_and_all(std::string("a\0b\377\n", 5));
  std::vector<EmbeddedFile> v1 = {{"sitecustomize.py", "print(1)\n", 9},
                                  {"pkg/data.bin", nul_and_all.data(), nul_and_all.size()}};
  absl::StatusOr<std::string> first = WriteEmbeddedDir(parent, "watch", v1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*ReadFileContents(*first + "/pkg/data.bin"), nul_and_all);
  // A write interrupted earlier (left alone) and another version's files (removed).
  fs::create_directories(parent + "/watch-tmp.abcdef");
  fs::create_directories(parent + "/watch-0000000000000000/pkg");
  std::ofstream(parent + "/watch-0000000000000000/pkg/old.py") << "old\n";
  fs::permissions(parent + "/watch-0000000000000000/pkg/old.py", fs::perms(0444));
  absl::StatusOr<std::string> again = WriteEmbeddedDir(parent, "watch", v1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
  EXPECT_FALSE(fs::exists(parent + "/watch-0000000000000000"));
  EXPECT_TRUE(fs::exists(parent + "/watch-tmp.abcdef"));

  std::vector<EmbeddedFile> v2 = {{"sitecustomize.py", "print(2)\n", 9}};
  absl::StatusOr<std::string> second = WriteEmbeddedDir(parent, "watch", v2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(*second, *first);
  EXPECT_EQ(*ReadFileContents(*second + "/sitecustomize.py"), "print(2)\n");
  EXPECT_FALSE(fs::exists(*first));
  EXPECT_FALSE(fs::exists(*second + "/pkg"));
}

TEST(PythonWatchFilesTest, AParentThatCannotBeADirectoryIsUnavailable) {
  const std::string file = ringmaster::testing::FreshTestCaseDir() + "/a-file";
  std::ofstream(file) << "x";
  absl::StatusOr<std::string> dir = WriteEmbeddedDir(file + "/sub", "watch", {});
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(dir.status().message(), HasSubstr(file));
}

}  // namespace
}  // namespace ringmaster::agent
