#include "common/enum_name.h"

#include <utility>

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

enum class Color { kRed, kGreen, kBlue };

constexpr std::pair<Color, const char*> kColorNames[] = {{Color::kRed, "red"},
                                                         {Color::kGreen, "green"}};

TEST(EnumNameTest, ListedValuesGetTheirNames) {
  EXPECT_STREQ(EnumName(kColorNames, Color::kRed, "?"), "red");
  EXPECT_STREQ(EnumName(kColorNames, Color::kGreen, "?"), "green");
}

TEST(EnumNameTest, UnlistedValueGetsTheFallback) {
  EXPECT_STREQ(EnumName(kColorNames, Color::kBlue, "?"), "?");
  EXPECT_STREQ(EnumName(kColorNames, static_cast<Color>(7), "none"), "none");
}

TEST(EnumNameTest, WorksAtCompileTimeAndForOtherNameTypes) {
  static constexpr std::pair<Color, char> kLetters[] = {{Color::kRed, 'R'}, {Color::kBlue, 'B'}};
  static_assert(EnumName(kLetters, Color::kBlue, '?') == 'B');
  static_assert(EnumName(kLetters, Color::kGreen, '?') == '?');
}

}  // namespace
}  // namespace ringmaster
