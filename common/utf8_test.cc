#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

TEST(Utf8Test, AcceptsWellFormedText) {
  for (const std::string& s :
       {std::string(""), std::string("plain ascii"), std::string("caf\xC3\xA9"),
        std::string("\xE2\x98\x83"), std::string("\xF0\x9F\x98\x80"),
        std::string("\xF4\x8F\xBF\xBF"), std::string("nul \0 inside", 12)}) {
    EXPECT_TRUE(IsUtf8(s)) << s;
  }
}

TEST(Utf8Test, RefusesWhatProtobufRefuses) {
  for (const std::string& s : {
           std::string("\x80"),              // a lone continuation byte
           std::string("\xC0\xAF"),          // overlong '/'
           std::string("\xE0\x80\xAF"),      // overlong, three bytes
           std::string("\xED\xA0\x80"),      // a surrogate (U+D800)
           std::string("\xF4\x90\x80\x80"),  // past U+10FFFF
           std::string("\xF8\x88\x80\x80\x80"),
           std::string("cut \xE2\x98"),  // cut short
           std::string("\xC3("),         // a bad continuation
       }) {
    EXPECT_FALSE(IsUtf8(s)) << testing::PrintToString(s);
  }
}

TEST(Utf8Test, DecodesOneCharacter) {
  unsigned int cp = 0;
  const std::string s = "a\xE2\x98\x83";
  EXPECT_EQ(DecodeUtf8(s, 0, &cp), 1u);
  EXPECT_EQ(cp, 'a');
  EXPECT_EQ(DecodeUtf8(s, 1, &cp), 3u);
  EXPECT_EQ(cp, 0x2603u);
  EXPECT_EQ(DecodeUtf8(s, 2, &cp), 0u);  // a continuation byte starts nothing
}

}  // namespace
}  // namespace ringmaster
