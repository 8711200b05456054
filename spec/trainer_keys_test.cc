#include "spec/trainer_keys.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::TrainerSpec Command(std::initializer_list<const char*> argv) {
  v1::TrainerSpec t;
  for (const char* a : argv) t.mutable_command()->add_argv(a);
  return t;
}

TEST(TrainerKeysTest, TheBuiltinTrainersProgramIsKnownByItsBasename) {
  for (const char* yes : {"trainer", "/opt/bazel-bin/trainer/trainer", "ringmaster-trainer",
                          "/usr/local/bin/ringmaster-trainer", "./trainer"}) {
    EXPECT_TRUE(IsBuiltinTrainerProgram(yes)) << yes;
  }
  for (const char* no : {"python3", "/usr/bin/python3", "trainer.py", "my-trainer", "trainer/",
                         "/trainer/x", "", "Trainer"}) {
    EXPECT_FALSE(IsBuiltinTrainerProgram(no)) << no;
  }
}

TEST(TrainerKeysTest, EveryBuiltinOnlyKeyIsRefusedForAUsersCommand) {
  v1::TrainerSpec t = Command({"python3", "train.py"});
  EXPECT_THAT(RefusedBuiltinOnlyKeys(t), IsEmpty());
  t.set_steps(10);
  t.mutable_env()->insert({"A", "1"});
  EXPECT_THAT(RefusedBuiltinOnlyKeys(t), IsEmpty());  // steps and env are the command's too

  t.mutable_model();  // present, even empty
  t.mutable_batch()->set_micro_batch(1);
  t.mutable_optimizer()->set_lr(1e-3);
  t.set_precision(v1::PRECISION_BF16);
  t.set_attention(v1::ATTENTION_FUSED);
  t.set_zero_stage(1);
  t.mutable_data()->set_seed(0);
  EXPECT_THAT(RefusedBuiltinOnlyKeys(t),
              ElementsAre("trainer.model", "trainer.batch", "trainer.optimizer",
                          "trainer.precision", "trainer.attention", "trainer.zero_stage",
                          "trainer.data"));
  EXPECT_EQ(BuiltinOnlyKeysSet(t).size(), BuiltinOnlyKeys().size());
}

TEST(TrainerKeysTest, TheBuiltinTrainerAndItsProgramReadThem) {
  v1::TrainerSpec builtin;
  builtin.set_builtin("gpt");
  builtin.mutable_model()->set_layers(2);
  EXPECT_TRUE(ReadsBuiltinKeys(builtin));
  EXPECT_THAT(RefusedBuiltinOnlyKeys(builtin), IsEmpty());

  v1::TrainerSpec program = Command({"/usr/local/bin/ringmaster-trainer", "--exit_after_step=3"});
  program.mutable_model()->set_layers(2);
  program.set_zero_stage(2);
  EXPECT_TRUE(ReadsBuiltinKeys(program));
  EXPECT_THAT(RefusedBuiltinOnlyKeys(program), IsEmpty());
  EXPECT_THAT(BuiltinOnlyKeysSet(program), ElementsAre("trainer.model", "trainer.zero_stage"));

  v1::TrainerSpec neither;
  neither.set_zero_stage(1);
  EXPECT_FALSE(ReadsBuiltinKeys(neither));
  EXPECT_THAT(RefusedBuiltinOnlyKeys(neither), IsEmpty());  // "set builtin or command" says it
  EXPECT_FALSE(ReadsBuiltinKeys(Command({})));
}

}  // namespace
}  // namespace ringmaster::spec
