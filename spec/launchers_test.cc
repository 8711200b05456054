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
  EXPECT_EQ(ForeignLauncher({"timeout", "1d", "bash", "-lc", "accelerate launch t.py"}).index, 4);
}

// Working commands that only mention a launcher are not refused.
TEST(LaunchersTest, AMentionIsNoLaunch) {
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"bash", "train.sh", "--launcher", "deepspeed"},
           {"bash", "scripts/run.sh", "--cfg", "configs/deepspeed"},
           {"bash", "-c", "source /env.sh && exec \"$@\"", "bash", "python", "train.py",
            "--launcher", "deepspeed"},
           {"bash", "-c", "pip list | grep -E 'torch|deepspeed'; python train.py"},
           {"bash", "-c", "python -c \"print('deepspeed')\" && python train.py"},
           {"bash", "-c", "python train.py &>/runs/deepspeed"},
           {"bash", "-c", "python train.py > /runs/accelerate 2>&1"},
           {"bash", "-o", "pipefail", "-c", "python t.py | tee deepspeed.log"},
           {"python3", "train.py", "--launcher", "accelerate", "launch"},
           {"accelerate", "config"},
       }) {
    EXPECT_EQ(ForeignLauncher(argv).index, -1) << argv[1] << " " << argv.back();
  }
}

}  // namespace
}  // namespace ringmaster::spec
