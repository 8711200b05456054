// Checking a /metrics page with Prometheus' own linter, for integration tests.
#ifndef RINGMASTER_TESTS_PROMTOOL_CHECK_H_
#define RINGMASTER_TESTS_PROMTOOL_CHECK_H_

#include <string>

#include "common/testing/subprocess.h"
#include "gtest/gtest.h"

namespace ringmaster::testing {

// Expects `promtool check metrics` to accept `page` with exit code 0 and no lint output.
inline void ExpectPromtoolClean(const std::string& page) {
  auto result = RunCommand({"promtool", "check", "metrics"}, page);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0) << result->output << "\npage:\n" << page;
  EXPECT_EQ(result->output, "") << "promtool lint output for page:\n" << page;
}

}  // namespace ringmaster::testing

#endif  // RINGMASTER_TESTS_PROMTOOL_CHECK_H_
