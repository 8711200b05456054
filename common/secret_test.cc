#include "common/secret.h"

#include <set>

#include "gtest/gtest.h"

namespace ringmaster {
namespace {

TEST(SecretTest, NewSecretsAre128BitsOfHexAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::string> s = NewSecret();
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->size(), 32u) << *s;
    EXPECT_EQ(s->find_first_not_of("0123456789abcdef"), std::string::npos) << *s;
    seen.insert(*s);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(SecretTest, SameSecretComparesWholeStrings) {
  EXPECT_TRUE(SameSecret("", ""));
  EXPECT_TRUE(SameSecret("0123abcd", "0123abcd"));
  EXPECT_FALSE(SameSecret("0123abcd", "0123abce"));  // last byte
  EXPECT_FALSE(SameSecret("1123abcd", "0123abcd"));  // first byte
  EXPECT_FALSE(SameSecret("0123abcd", "0123abc"));   // a prefix
  EXPECT_FALSE(SameSecret("", "0123abcd"));
}

}  // namespace
}  // namespace ringmaster
