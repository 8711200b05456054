#include "spec/launchers.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::spec {
namespace {

using ::testing::HasSubstr;

TEST(LaunchersTest, TellsTheLaunchers) {
  EXPECT_TRUE(RunsAccelerateLaunch({"accelerate", "launch", "--multi_gpu", "train.py"}));
  EXPECT_TRUE(RunsAccelerateLaunch({"/opt/conda/bin/accelerate-launch", "train.py"}));
  EXPECT_TRUE(RunsAccelerateLaunch({"python3", "-u", "-m", "accelerate.commands.launch", "t.py"}));
  EXPECT_FALSE(RunsAccelerateLaunch({"accelerate", "config"}));
  EXPECT_FALSE(RunsAccelerateLaunch({"accelerate"}));
  EXPECT_FALSE(RunsAccelerateLaunch({"python3", "accelerate_train.py", "launch"}));
  EXPECT_TRUE(RunsDeepspeedLauncher({"deepspeed", "--num_gpus=8", "train.py"}));
  EXPECT_TRUE(RunsDeepspeedLauncher({"/usr/local/bin/deepspeed.pt", "train.py"}));
  EXPECT_FALSE(RunsDeepspeedLauncher({"./ds", "train.py"}));
  EXPECT_TRUE(RunsDeepspeedLauncher({"python", "-m", "deepspeed.launcher.runner", "t.py"}));
  EXPECT_TRUE(RunsDeepspeedLauncher({"python3.11", "-m", "deepspeed.launcher.launch", "t.py"}));
  EXPECT_FALSE(RunsDeepspeedLauncher({"python3", "train.py", "--deepspeed", "ds.json"}));
  EXPECT_FALSE(RunsDeepspeedLauncher({}));
}

TEST(LaunchersTest, FoundAsTheProgramOrInsideOneAndSaysWhatToRun) {
  LauncherProblem p = ForeignLauncher({"accelerate", "launch", "train.py"});
  EXPECT_EQ(p.index, 0);
  EXPECT_THAT(p.rule, HasSubstr("must not run `accelerate launch`, which starts its own "
                                "processes and world on each node"));
  EXPECT_THAT(p.rule, HasSubstr("run the script itself (python3 train.py ...;"));
  p = ForeignLauncher({"env", "A=1", "nohup", "deepspeed", "train.py"});
  EXPECT_EQ(p.index, 3);
  EXPECT_THAT(p.rule, HasSubstr("must not run the deepspeed launcher"));
  EXPECT_EQ(ForeignLauncher({"bash", "-lc", "cd /d && accelerate launch t.py"}).index, 2);
  EXPECT_EQ(ForeignLauncher({"python3", "train.py", "--deepspeed", "ds.json"}).index, -1);
  EXPECT_EQ(ForeignLauncher({"torchrun", "train.py"}).index, -1);
  EXPECT_EQ(ForeignLauncher({"bash", "-c", "pip show accelerate deepspeed; python3 t.py"}).index,
            -1);
  EXPECT_TRUE(ForeignLauncher({"python3", "t.py"}).rule.empty());
}

}  // namespace
}  // namespace ringmaster::spec
