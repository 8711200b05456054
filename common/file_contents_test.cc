#include "common/file_contents.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(getenv("TEST_TMPDIR")) + "/" + name;
}

void Write(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

TEST(FileContentsTest, ReadsEveryByte) {
  // Empty, small, with NULs, and larger than the first guess for unsized files.
  std::string big(3 * 1024 * 1024 + 7, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + i / 7);
  for (const std::string& contents :
       {std::string(), std::string("one line\n"), std::string("a\0b", 3), big}) {
    const std::string path = TempPath("file");
    Write(path, contents);
    absl::StatusOr<std::string> read = ReadFileContents(path);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, contents);
  }
}

TEST(FileContentsTest, ReadsFilesOfUnknownSize) {
  // /proc files report size 0: they are read to their end all the same, a small one and one
  // beyond the first 4096-byte guess (smaps: a few hundred bytes per mapping).
  absl::StatusOr<std::string> status = ReadFileContents("/proc/self/status");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->find("Name:"), std::string::npos);
  absl::StatusOr<std::string> smaps = ReadFileContents("/proc/self/smaps");
  ASSERT_TRUE(smaps.ok()) << smaps.status();
  ASSERT_GT(smaps->size(), 4096u);
  // Whole: it ends with a complete line, after the last mapping's last field.
  EXPECT_EQ(smaps->back(), '\n');
  EXPECT_NE(smaps->rfind("VmFlags:"), std::string::npos);
  EXPECT_GT(smaps->rfind("VmFlags:"), smaps->size() - 200);
}

TEST(FileContentsTest, ErrorsNameThePathAndTheReason) {
  const std::string missing = TempPath("missing");
  absl::StatusOr<std::string> read = ReadFileContents(missing);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find("cannot open " + missing), std::string::npos);

  const std::string dir = TempPath("dir");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  read = ReadFileContents(dir);
  EXPECT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("cannot read " + dir), std::string::npos);
  EXPECT_NE(read.status().message().find("directory"), std::string::npos) << read.status();
}

}  // namespace
}  // namespace ringmaster
