#include "common/one_line.h"

#include <string>

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

TEST(OneLineTest, KeepsPlainTextAndDropsSpacesAtTheEnds) {
  EXPECT_EQ(OneLine("UNAVAILABLE: all_reduce on tp0 failed", 100),
            "UNAVAILABLE: all_reduce on tp0 failed");
  EXPECT_EQ(OneLine("  \n\t padded \r\n", 100), "padded");
  EXPECT_EQ(OneLine("", 100), "");
  EXPECT_EQ(OneLine(" \n ", 100), "");
}

TEST(OneLineTest, LineBreaksAndTabsBecomeSpacesOtherControlBytesQuestionMarks) {
  EXPECT_EQ(OneLine("Traceback:\n  File x\tline 3", 100), "Traceback:   File x line 3");
  EXPECT_EQ(OneLine("\xc2\x85nel \xc2\x9b"
                    "1m",
                    100),
            "?nel ?1m");  // C1 controls
  EXPECT_EQ(OneLine("a\xe2\x80\xa8"
                    "b\xe2\x80\xa9"
                    "c",
                    100),
            "a b c");  // U+2028, U+2029
  EXPECT_EQ(OneLine(std::string("nul\0byte", 8), 100), "nul?byte");
  EXPECT_EQ(OneLine("del\x7f", 100), "del?");
}

TEST(OneLineTest, DropsAnsiEscapeSequences) {
  EXPECT_EQ(OneLine("\x1b[1;31mERROR\x1b[0m: disk full", 100), "ERROR: disk full");
  EXPECT_EQ(OneLine("\x1b[0m", 100), "");
  EXPECT_EQ(OneLine("a\x1b"
                    "7b",
                    100),
            "ab");  // ESC and one byte
  EXPECT_EQ(OneLine("cut short \x1b[31", 100), "cut short");
  EXPECT_EQ(OneLine("ends in \x1b", 100), "ends in");
}

TEST(OneLineTest, HasVisibleTextExactlyWhenOneLineIsNotEmpty) {
  for (const char* text : {"", " \n\t ", "\x1b[0m", " \x1b[31m \x1b[0m ", "\x1b", "x", " \x1b[1mx",
                           "\x01", "\xff", "\xe2\x80\xa8"}) {
    EXPECT_EQ(HasVisibleText(text), !OneLine(text, 100).empty()) << text;
  }
  EXPECT_FALSE(HasVisibleText("\x1b[31m  \x1b[0m"));
  EXPECT_TRUE(HasVisibleText("  \x1b[31mE"));
}

TEST(OneLineTest, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(OneLine("μ-batch ✓ 🚀", 100), "μ-batch ✓ 🚀");
  EXPECT_EQ(OneLine("bad \xff\xfe end", 100), "bad ?? end");
  EXPECT_EQ(OneLine("cut \xe2\x9c", 100), "cut ??");            // a sequence cut short
  EXPECT_EQ(OneLine("overlong \xc0\xaf", 100), "overlong ??");  // '/' in two bytes
  EXPECT_EQ(OneLine("surrogate \xed\xa0\x80", 100), "surrogate ???");
  EXPECT_EQ(OneLine("too high \xf4\x90\x80\x80", 100), "too high ????");
}

TEST(OneLineTest, LongTextIsCutAtACharacterBoundaryWithinTheLimit) {
  EXPECT_EQ(OneLine("abcdefghij", 10), "abcdefghij");
  EXPECT_EQ(OneLine("abcdefghijk", 10), "abcdefg...");
  // "é" is two bytes: cutting at 7 bytes would split the fourth one.
  EXPECT_EQ(OneLine("ééééééé", 10), "ééé...");
  EXPECT_EQ(OneLine("abc     defghijkl", 10), "abc...");     // no space before the dots
  EXPECT_EQ(OneLine("abcdefghij      ", 10), "abcdefghij");  // trailing spaces do not count
  EXPECT_EQ(OneLine("abcdef", 2), "ab");                     // no room for dots
  EXPECT_EQ(OneLine("abcdef", 0), "");
  EXPECT_EQ(OneLine("abcdef", 3), "...");
  const std::string huge(1 << 20, 'x');
  const std::string cut = OneLine(huge, 512);
  EXPECT_EQ(cut.size(), 512u);
  EXPECT_EQ(cut.substr(509), "...");
}

}  // namespace
}  // namespace ringmaster
