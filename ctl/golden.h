// Golden-file comparison for ringctl's tests. Test-only; not thread-safe (gtest assertions).
//
// ExpectGolden(actual, "help.txt") compares `actual` with ctl/testdata/golden/help.txt from the
// test's runfiles. To regenerate after a deliberate change, run the test with
// --test_env=RINGCTL_UPDATE_GOLDEN=$PWD/ctl/testdata/golden (it then writes the files and fails
// so that the change is reviewed).
#ifndef RINGMASTER_CTL_GOLDEN_H_
#define RINGMASTER_CTL_GOLDEN_H_

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace ringmaster::ctl {

inline void ExpectGolden(const std::string& actual, const std::string& name) {
  if (const char* update = std::getenv("RINGCTL_UPDATE_GOLDEN"); update != nullptr) {
    std::ofstream(std::string(update) + "/" + name) << actual;
    ADD_FAILURE() << "wrote " << update << "/" << name;
    return;
  }
  std::ifstream in("ctl/testdata/golden/" + name);
  ASSERT_TRUE(in.good()) << "no golden file ctl/testdata/golden/" << name;
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "golden file ctl/testdata/golden/" << name;
}

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_GOLDEN_H_
