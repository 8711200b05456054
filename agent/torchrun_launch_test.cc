#include "agent/torchrun_launch.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A directory of its own under the test's temporary directory.
std::string NewDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

// Writes `text` to dir/name with `mode`; returns the path.
std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text,
                      mode_t mode = 0755) {
  const std::string path = absl::StrCat(dir, "/", name);
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

constexpr char kPipTorchrun[] =
    "# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom torch.distributed.run import main\n";

TEST(TorchrunLaunchTest, RunsTheProgramOnThePythonOfTorchrunsHashBangLine) {
  const std::string venv = NewDir("venv");
  WriteFile(venv, "torchrun", absl::StrCat("#!/venv/bin/python3.11\n", kPipTorchrun));
  const std::string env = NewDir("envline");
  WriteFile(env, "torchrun", absl::StrCat("#!  /usr/bin/env   python3  \n", kPipTorchrun));
  const std::string empty = NewDir("empty");

  // Found in the PATH's first directory that has it, as execvpe finds a program.
  EXPECT_THAT(*TorchrunLaunchArgv({"torchrun", "--nproc_per_node=2", "train.py", "--lr", "1"},
                                  absl::StrCat(empty, ":", venv, ":", env)),
              ElementsAre("/venv/bin/python3.11", "-u", "train.py", "--lr", "1"));
  EXPECT_THAT(*TorchrunLaunchArgv({"torchrun", "-m", "pkg.train"}, absl::StrCat(env, ":", venv)),
              ElementsAre("/usr/bin/env", "python3", "-u", "-m", "pkg.train"));
  // A path is taken as it is.
  EXPECT_THAT(*TorchrunLaunchArgv({absl::StrCat(venv, "/torchrun"), "t.py"}, ""),
              ElementsAre("/venv/bin/python3.11", "-u", "t.py"));
  // The interpreter form and --no_python need no torchrun file.
  EXPECT_THAT(*TorchrunLaunchArgv({"python3", "-m", "torch.distributed.run", "t.py"}, empty),
              ElementsAre("python3", "-u", "t.py"));
  EXPECT_THAT(*TorchrunLaunchArgv({"torchrun", "--no_python", "./trainer", "-x"}, empty),
              ElementsAre("./trainer", "-x"));
  // The #! line's Python, not its options (as torchrun's sys.executable starts the program).
  const std::string flags = NewDir("flags");
  WriteFile(flags, "torchrun", absl::StrCat("#!/usr/bin/python3 -sP\n", kPipTorchrun));
  EXPECT_THAT(*TorchrunLaunchArgv({"torchrun", "t.py"}, flags),
              ElementsAre("/usr/bin/python3", "-u", "t.py"));
  const std::string split = NewDir("split");
  WriteFile(split, "torchrun", absl::StrCat("#!/usr/bin/env -S A=1 python3 -E\n", kPipTorchrun));
  EXPECT_THAT(*TorchrunLaunchArgv({"torchrun", "t.py"}, split),
              ElementsAre("/usr/bin/env", "python3", "-u", "t.py"));
  // The job's PYTHON_EXEC, which torchrun honours: no torchrun file needed.
  EXPECT_THAT(*TorchrunLaunchArgv({"torchrun", "-m", "pkg"}, empty, "/opt/py/bin/python3"),
              ElementsAre("/opt/py/bin/python3", "-u", "-m", "pkg"));
}

TEST(TorchrunLaunchTest, SaysWhyItCannotRunOne) {
  const std::string dir = NewDir("bad");
  WriteFile(dir, "torchrun",
            absl::StrCat("#!/bin/sh\n'''exec' \"/long path/python\" \"$0\"\n", kPipTorchrun));
  const std::string plain = NewDir("plain");
  WriteFile(plain, "torchrun", kPipTorchrun);
  const auto message = [](const absl::StatusOr<std::vector<std::string>>& argv) {
    EXPECT_EQ(argv.status().code(), absl::StatusCode::kFailedPrecondition);
    return std::string(argv.status().message());
  };
  EXPECT_THAT(message(TorchrunLaunchArgv({"torchrun", "t.py"}, dir)),
              HasSubstr("is not a Python script run through its #! line (#!/bin/sh)"));
  EXPECT_THAT(message(TorchrunLaunchArgv({absl::StrCat(plain, "/torchrun"), "t.py"}, "")),
              HasSubstr("has no #! line"));
  // Not executable: execvpe would not run it either.
  const std::string missing = NewDir("missing");
  EXPECT_THAT(message(TorchrunLaunchArgv({"torchrun", "t.py"}, missing)),
              HasSubstr("trainer.command[0]: torchrun is not an executable file in the agent's "
                        "PATH"));
  WriteFile(missing, "torchrun", "#!/usr/bin/python3\n", 0644);
  EXPECT_THAT(message(TorchrunLaunchArgv({"torchrun", "t.py"}, missing)),
              HasSubstr("is not an executable file"));
  // A command the coordinator refuses (an older one may not have).
  EXPECT_THAT(message(TorchrunLaunchArgv({"torchrun", "--bogus", "t.py"}, dir)),
              HasSubstr("trainer.command[1]: \"--bogus\" is not a torchrun option"));
}

TEST(TorchrunLaunchTest, ReadsAHashBangLineAsLinuxDoes) {
  const std::string dir = NewDir("shebang");
  EXPECT_THAT(*ShebangOf(WriteFile(dir, "a", "#!/usr/bin/python3\nx")),
              ElementsAre("/usr/bin/python3"));
  EXPECT_THAT(*ShebangOf(WriteFile(dir, "b", "#!/usr/bin/env -S python3 -u\n")),
              ElementsAre("/usr/bin/env", "-S python3 -u"));  // one argument, as Linux passes it
  EXPECT_THAT(*ShebangOf(WriteFile(dir, "c", "#! /opt/conda/bin/python")),
              ElementsAre("/opt/conda/bin/python"));
  EXPECT_FALSE(ShebangOf(WriteFile(dir, "d", "#!\n")).ok());
  EXPECT_FALSE(ShebangOf(absl::StrCat(dir, "/none")).ok());
}

}  // namespace
}  // namespace ringmaster::agent
