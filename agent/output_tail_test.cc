#include "agent/output_tail.h"

#include <string>

#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

std::string LastLineOf(std::initializer_list<absl::string_view> chunks) {
  OutputTail tail;
  for (absl::string_view chunk : chunks) tail.Add(chunk);
  return tail.LastLine();
}

TEST(OutputTailTest, TheLastLineThatIsNotBlank) {
  EXPECT_EQ(LastLineOf({}), "");
  EXPECT_EQ(LastLineOf({"step 1\nstep 2\n"}), "step 2");
  EXPECT_EQ(LastLineOf({"step 1\nRuntimeError: NCCL error\n\n   \n"}), "RuntimeError: NCCL error");
  EXPECT_EQ(LastLineOf({"\n\n"}), "");
}

TEST(OutputTailTest, AnUnfinishedLastLineCounts) {
  EXPECT_EQ(LastLineOf({"step 1\nSegmentation fault"}), "Segmentation fault");
  EXPECT_EQ(LastLineOf({"step 1\n  "}), "step 1");
}

TEST(OutputTailTest, ChunksSplitLinesAnywhere) {
  EXPECT_EQ(LastLineOf({"trainer fa", "iled (exit 75", ", retryable): lost\n", "\n"}),
            "trainer failed (exit 75, retryable): lost");
  EXPECT_EQ(LastLineOf({"a\r", "\nb\r", "\n"}), "b");  // CRLF split between chunks
}

TEST(OutputTailTest, ACarriageReturnRedrawsItsLine) {
  EXPECT_EQ(LastLineOf({"loading 10%\rloading 50%\rloading 100%"}), "loading 100%");
  EXPECT_EQ(LastLineOf({"error: disk full\r\n"}), "error: disk full");
  EXPECT_EQ(LastLineOf({"done\n50%\r\r"}), "done");  // a line redrawn as nothing is blank
}

TEST(OutputTailTest, KeepsTheStartOfALongLineAndAnswersOneLineOfValidUtf8) {
  const std::string long_line = "cudaErrorMemoryAllocation: " + std::string(10000, 'x') + "\n";
  const std::string got = LastLineOf({long_line});
  EXPECT_EQ(got.size(), OutputTail::kMaxBytes);
  EXPECT_EQ(got.rfind("cudaErrorMemoryAllocation: xxx", 0), 0u) << got;
  EXPECT_EQ(LastLineOf({"bad \xff byte\tand tab\n"}), "bad ? byte and tab");
  // Colour codes are dropped; a line of them alone is blank.
  EXPECT_EQ(LastLineOf({"\x1b[31mFATAL\x1b[0m: out of memory\n\x1b[0m\n"}), "FATAL: out of memory");
}

}  // namespace
}  // namespace ringmaster::agent
