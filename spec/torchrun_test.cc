#include "spec/torchrun.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmaster::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Kind = TorchrunCommand::Kind;

TorchrunCommand Read(const std::vector<std::string>& argv) {
  TorchrunCommand command;
  std::vector<Problem> problems;
  ReadTorchrun(argv, &command, &problems);
  EXPECT_THAT(problems, IsEmpty()) << argv[0];
  return command;
}

// The one problem `argv` has: "field: rule".
std::string ProblemOf(const std::vector<std::string>& argv) {
  TorchrunCommand command;
  std::vector<Problem> problems;
  ReadTorchrun(argv, &command, &problems);
  EXPECT_EQ(problems.size(), 1u);
  return problems.empty() ? "" : problems[0].first + ": " + problems[0].second;
}

TEST(TorchrunTest, TellsTorchrunFromOtherCommands) {
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"torchrun", "train.py"},
           {"/opt/conda/bin/torchrun", "--nproc_per_node=8", "train.py"},
           {"python3", "-m", "torch.distributed.run", "train.py"},
           {"/usr/bin/python3.11", "-u", "-X", "faulthandler", "-m", "torch.distributed.run",
            "t.py"},
           {"python", "-mtorch.distributed.run", "train.py"},
           {"python3", "-um", "torch.distributed.run", "t.py"},  // -u -m
           {"python3", "-uW", "ignore", "-m", "torch.distributed.run", "t.py"},
           {"python3", "-Wignore::DeprecationWarning", "-Xtracemalloc", "-m",
            "torch.distributed.run", "t.py"},
           {"python3", "--check-hash-based-pycs", "never", "-m", "torch.distributed.run", "t.py"},
           {"python3", "-m", "torch.distributed.launch", "train.py"},
       }) {
    EXPECT_TRUE(RunsTorchrun(argv)) << argv[0] << " " << argv[1];
  }
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {},
           {"python3", "train.py", "-m", "torch.distributed.run"},
           {"python3", "-c", "import x", "-m", "torch.distributed.run"},
           {"python3", "-uc", "import x", "-m", "torch.distributed.run"},
           {"python3", "--", "-m", "torch.distributed.run"},
           {"python3", "-m", "torch.distributed.elastic"},
           {"python3", "-m"},
           {"torchrun.sh"},
           {"/usr/bin/env", "torchrun", "train.py"},
       }) {
    EXPECT_FALSE(RunsTorchrun(argv)) << (argv.empty() ? "(empty)" : argv[0]);
  }
}

TEST(TorchrunTest, ReadsEitherSpellingValuesAttachedOrNotAndPrefixes) {
  const TorchrunCommand a =
      Read({"torchrun", "--nproc-per-node", "8", "--nnodes=2", "--rdzv_backend=c10d",
            "--rdzv-endpoint", "host:29400", "--standalone", "-r", "3", "-t3", "--max_restarts",
            "3", "train.py", "--lr", "3e-4", "--nnodes=9"});
  EXPECT_TRUE(a.interpreter.empty());
  EXPECT_EQ(a.kind, Kind::kScript);
  EXPECT_EQ(a.nproc_per_node, "8");
  EXPECT_EQ(a.nproc_per_node_index, 1);
  EXPECT_EQ(a.nnodes, "2");
  EXPECT_EQ(a.nnodes_index, 3);
  // The program's own arguments are its own, even one that looks like torchrun's.
  EXPECT_THAT(a.program, ElementsAre("train.py", "--lr", "3e-4", "--nnodes=9"));

  const TorchrunCommand b = Read({"torchrun", "--nproc=4", "--", "train.py"});
  EXPECT_EQ(b.nproc_per_node, "4");
  EXPECT_THAT(b.program, ElementsAre("train.py"));

  // As argparse: a "--" right after the program is dropped, a later one is the program's.
  EXPECT_THAT(Read({"torchrun", "train.py", "--", "--x"}).program, ElementsAre("train.py", "--x"));
  EXPECT_THAT(Read({"torchrun", "train.py", "--lr", "1", "--", "--x"}).program,
              ElementsAre("train.py", "--lr", "1", "--", "--x"));
  // A cluster of short options: -m, then -r's value.
  const TorchrunCommand c = Read({"torchrun", "-mr3", "pkg.train"});
  EXPECT_EQ(c.kind, Kind::kModule);
  EXPECT_THAT(c.program, ElementsAre("pkg.train"));
}

TEST(TorchrunTest, ModuleNoPythonAndTheInterpreterForm) {
  const TorchrunCommand module = Read({"torchrun", "-m", "pkg.train", "--steps", "5"});
  EXPECT_EQ(module.kind, Kind::kModule);
  EXPECT_THAT(module.program, ElementsAre("pkg.train", "--steps", "5"));
  EXPECT_THAT(TorchrunProgramArgv(module, {"/usr/bin/env", "python3"}),
              ElementsAre("/usr/bin/env", "python3", "-u", "-m", "pkg.train", "--steps", "5"));

  const TorchrunCommand binary = Read({"torchrun", "--no-python", "./train.sh", "x"});
  EXPECT_EQ(binary.kind, Kind::kNoPython);
  EXPECT_THAT(TorchrunProgramArgv(binary, {"/usr/bin/python3"}), ElementsAre("./train.sh", "x"));

  // --run_path: the script, in Python, whatever -m or --no_python say.
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"torchrun", "--run_path", "train.py"},
           {"torchrun", "--run_path", "--no_python", "train.py"},
           {"torchrun", "--run_path", "-m", "--no_python", "train.py"},
       }) {
    EXPECT_EQ(Read(argv).kind, Kind::kScript) << argv[1] << " " << argv[2];
  }

  const TorchrunCommand python = Read({"/venv/bin/python", "-u", "-m", "torch.distributed.run",
                                       "--nproc_per_node", "2", "train.py", "--lr", "1"});
  // torchrun starts its program with none of its interpreter's options (-I would drop the
  // PYTHONPATH the watch is on), and unbuffered.
  EXPECT_THAT(python.interpreter, ElementsAre("/venv/bin/python"));
  EXPECT_EQ(python.nproc_per_node_index, 4);
  EXPECT_THAT(TorchrunProgramArgv(python, {"/ignored"}),
              ElementsAre("/venv/bin/python", "-u", "train.py", "--lr", "1"));
  const TorchrunCommand isolated = Read({"python3", "-I", "-mtorch.distributed.run", "t.py"});
  EXPECT_THAT(TorchrunProgramArgv(isolated, {}), ElementsAre("python3", "-u", "t.py"));
  EXPECT_THAT(TorchrunProgramArgv(Read({"torchrun", "train.py"}), {"/usr/bin/python3.11"}),
              ElementsAre("/usr/bin/python3.11", "-u", "train.py"));
}

TEST(TorchrunTest, RefusesWhatItCannotRunNamingTheWord) {
  EXPECT_EQ(ProblemOf({"torchrun", "--nproc_per_node=2", "--bogus", "train.py"}),
            "trainer.command[2]: \"--bogus\" is not a torchrun option (torchrun's options come "
            "before the program)");
  EXPECT_THAT(ProblemOf({"torchrun", "--n=2", "train.py"}),
              HasSubstr("trainer.command[1]: \"--n\" is ambiguous: it may be --nnodes, "
                        "--nproc_per_node, --no_python, --node_rank"));
  EXPECT_EQ(ProblemOf({"torchrun", "-x", "train.py"}),
            "trainer.command[1]: \"-x\" is not a torchrun option (torchrun's options come "
            "before the program)");
  EXPECT_EQ(ProblemOf({"torchrun", "--nproc_per_node"}),
            "trainer.command[1]: --nproc_per_node needs a value");
  EXPECT_EQ(ProblemOf({"torchrun", "--standalone=1", "train.py"}),
            "trainer.command[1]: --standalone takes no value, got \"--standalone=1\"");
  EXPECT_EQ(ProblemOf({"torchrun", "--nproc_per_node=2"}),
            "trainer.command: names no program after torchrun's options (torchrun ... train.py)");
  EXPECT_EQ(ProblemOf({"torchrun", "-m", "--no_python", "x"}),
            "trainer.command[2]: torchrun's --module and --no_python exclude each other");
  // Values as argparse takes them: none empty, none that looks like an option.
  EXPECT_EQ(ProblemOf({"torchrun", "--nnodes=", "t.py"}),
            "trainer.command[1]: --nnodes needs a value");
  EXPECT_EQ(ProblemOf({"torchrun", "--role", "--", "t.py"}),
            "trainer.command[1]: --role needs a value");
  EXPECT_EQ(ProblemOf({"torchrun", "-r", "-m", "t.py"}),
            "trainer.command[1]: --redirects needs a value");
  EXPECT_EQ(ProblemOf({"torchrun", "--=x", "t.py"}),
            "trainer.command[1]: \"--\" is not a torchrun option (torchrun's options come "
            "before the program)");
  // A word quoted C-style: one line whatever it holds.
  EXPECT_EQ(ProblemOf({"torchrun", "--bad\nline\"q", "t.py"}),
            "trainer.command[1]: \"--bad\\nline\\\"q\" is not a torchrun option (torchrun's "
            "options come before the program)");
  EXPECT_THAT(ProblemOf({"python3", "-m", "torch.distributed.launch", "train.py"}),
              HasSubstr("trainer.command[2]: must not be torch.distributed.launch"));
}

TEST(TorchrunTest, FindsTorchrunStartedInsideEnvOrAShell) {
  EXPECT_EQ(HiddenTorchrun({"env", "NCCL_DEBUG=INFO", "torchrun", "t.py"}), 2);
  EXPECT_EQ(HiddenTorchrun({"/usr/bin/env", "/opt/conda/bin/torchrun", "t.py"}), 1);
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "cd /data && torchrun --nproc_per_node=8 t.py"}), 2);
  EXPECT_EQ(HiddenTorchrun({"sh", "-c", "exec python3 -m torch.distributed.run t.py"}), 2);
  EXPECT_EQ(HiddenTorchrun({"torchrun", "t.py"}), -1);  // torchrun itself: run as its program
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "python3 train.py --name=torchrun_like"}), -1);
  // Only as a command's program: not an argument that happens to end in "torchrun".
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "python3 train.py --out /runs/torchrun"}), -1);
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "echo torchrun; python3 t.py"}), -1);
  EXPECT_EQ(HiddenTorchrun({"bash", "-lc", "A=1 nohup '/opt/bin/torchrun' t.py &"}), 2);
  EXPECT_EQ(HiddenTorchrun({"sh", "-c",
                            "set -e\ncd /d\nexec env -u X python3 -u -m "
                            "torch.distributed.launch t.py"}),
            2);  // env -u's NAME is its argument, not the program
  EXPECT_EQ(HiddenTorchrun({"env", "-u", "X", "-C", "/d", "--", "torchrun", "t.py"}), 6);
  EXPECT_EQ(HiddenTorchrun({"/usr/bin/env", "-S A=1 torchrun --standalone", "t.py"}), 0);
  EXPECT_EQ(HiddenTorchrun({"env", "A=1", "nohup", "time", "-o", "t.txt", "torchrun", "t.py"}), 6);
  EXPECT_EQ(HiddenTorchrun({"nohup", "torchrun", "t.py"}), 1);
  EXPECT_EQ(HiddenTorchrun({"time", "-f", "%e", "python3", "-m", "torch.distributed.run", "t"}),
            3);
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "exec -a trainer torchrun t.py"}), 2);
  EXPECT_EQ(HiddenTorchrun({"env", "--frobnicate", "torchrun", "t.py"}), -1);  // env refuses it
  EXPECT_EQ(HiddenTorchrun({"nohup", "python3", "t.py"}), -1);
  EXPECT_EQ(HiddenTorchrun({"time", "-ao", "t.log", "torchrun", "t.py"}), 3);  // -o's FILE
  EXPECT_EQ(HiddenTorchrun({"timeout", "-s", "KILL", "2h", "torchrun", "t.py"}), 4);
  EXPECT_EQ(HiddenTorchrun({"numactl", "--cpunodebind", "0", "nice", "-n", "5", "torchrun"}), 6);
  EXPECT_EQ(HiddenTorchrun({"env", "-S", "'torchrun' --standalone", "t.py"}), 0);
  EXPECT_EQ(HiddenTorchrun({"bash", "run.sh", "--mode", "torchrun"}), -1);
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "pkill -f 'train.py|torchrun' || true; python3 t"}),
            -1);
  EXPECT_EQ(HiddenTorchrun({"env", "FOO=1", "bash", "-c", "torchrun t.py"}), 4);
  EXPECT_EQ(HiddenTorchrun({"nohup", "bash", "-c", "torchrun t.py"}), 3);
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "bash -c 'torchrun t.py'"}), 2);
  EXPECT_EQ(HiddenTorchrun({"bash", "-euo", "pipefail", "-c", "if true; then torchrun t; fi"}),
            4);
  EXPECT_EQ(HiddenTorchrun({"numactl", "-c", "0", "torchrun", "t.py"}), 3);
  // Comments, case patterns, heredoc bodies, tests, arrays, substitutions, functions, and "$@"
  // as arguments mention it: no refusal (what the lexer cannot read as bash does is not read).
  for (const char* line : {
           "# the script itself (not `torchrun`), don't wrap it\npython3 t.py",
           "case \"$M\" in\n ddp) python3 t.py;;\n torchrun|x) python3 t.py --y;;\nesac",
           "cat > notes <<'EOF'\ntorchrun is not used; (see x)\nEOF\npython3 t.py",
           "cat>run.sh<<EOF\ntorchrun t.py\nEOF\npython3 t.py",
           "python3 - <<-END\n\t# (torchrun)\n\tprint(1)\n\tEND\npython3 t.py",
           "python3 t.py >| /logs/torchrun",
           "if [[ $L =~ ^(torchrun|deepspeed)$ ]]; then python3 t.py; fi",
           "ARGS=(--name \"bs (zero3)\" --bf16)\necho \"use:\n torchrun t.py\"",
           "N=\"$(grep -cE \"(torchrun|deepspeed)\" log)\"; python3 t.py",
           "torchrun() { python3 \"$@\"; }",
           "printf $'it\\'s\\n'; echo 'x\ntorchrun y'",
       }) {
    EXPECT_EQ(HiddenTorchrun({"bash", "-c", line}), -1) << line;
  }
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "python3 t.py \"$@\"", "_", "torchrun"}), -1);
  // And where it runs.
  for (const char* line : {
           "(cd /d && torchrun t.py)",
           "if [ -n \"$X\" ]; then\n  torchrun t.py\nfi",
           "echo \"a \\\"b\" | torchrun t.py # (not python)",
           "python3 prep.py 2>&1 >/dev/null && torchrun t.py",
       }) {
    EXPECT_EQ(HiddenTorchrun({"bash", "-c", line}), 2) << line;
  }
  EXPECT_EQ(HiddenTorchrun({"env", "-S", "bash -c 'torchrun t.py'"}), 0);
  // command -v prints where torchrun is; it runs nothing.
  EXPECT_EQ(HiddenTorchrun({"bash", "-c", "command -v torchrun >/dev/null || exit 1; python3 t"}),
            -1);
  EXPECT_EQ(HiddenTorchrun({"env", "-i", "A=1", "torchrun", "t.py"}), 3);
  EXPECT_EQ(HiddenTorchrun({"env", "A=1", "python3", "t.py", "torchrun"}), -1);
  EXPECT_EQ(HiddenTorchrun({"bash", "run.sh"}), -1);  // a script's contents are not read
  EXPECT_EQ(HiddenTorchrun({"python3", "torchrun"}), -1);
  EXPECT_EQ(HiddenTorchrun({}), -1);
}

TEST(TorchrunTest, TheWorldMustBeTheJobs) {
  const auto problems = [](const std::vector<std::string>& argv, int nodes, int min_nodes,
                           int devices) {
    std::vector<std::string> out;
    for (const Problem& p : TorchrunWorldProblems(Read(argv), nodes, min_nodes, devices)) {
      out.push_back(p.first + ": " + p.second);
    }
    return out;
  };
  EXPECT_THAT(problems({"torchrun", "train.py"}, 2, 0, 8), IsEmpty());
  EXPECT_THAT(problems({"torchrun", "--nproc_per_node=8", "--nnodes=2", "t.py"}, 2, 0, 8),
              IsEmpty());
  for (const char* automatic : {"gpu", "cpu", "auto"}) {
    EXPECT_THAT(problems({"torchrun", "--nproc_per_node", automatic, "t.py"}, 2, 0, 8), IsEmpty());
  }
  EXPECT_THAT(problems({"torchrun", "--nnodes=1:4", "t.py"}, 4, 1, 8), IsEmpty());
  EXPECT_THAT(problems({"torchrun", "--nnodes=4", "t.py"}, 4, 1, 8), IsEmpty());
  EXPECT_THAT(problems({"torchrun", "--nproc_per_node=4", "t.py"}, 2, 0, 8),
              ElementsAre("trainer.command[1]: torchrun's --nproc_per_node must equal "
                          "devices_per_node (8: Ringmaster starts one rank per device), got 4"));
  EXPECT_THAT(problems({"torchrun", "--nproc_per_node", "many", "t.py"}, 2, 0, 8),
              ElementsAre("trainer.command[1]: torchrun's --nproc_per_node must be a positive "
                          "integer, gpu, cpu or auto, got \"many\""));
  EXPECT_THAT(problems({"torchrun", "--nnodes=3", "t.py"}, 2, 0, 8),
              ElementsAre("trainer.command[1]: torchrun's --nnodes must agree with nodes and "
                          "min_nodes (2), got \"3\""));
  EXPECT_THAT(problems({"torchrun", "--nnodes=2:4", "t.py"}, 4, 1, 8),
              ElementsAre("trainer.command[1]: torchrun's --nnodes must agree with nodes and "
                          "min_nodes (1:4), got \"2:4\""));
  EXPECT_THAT(problems({"torchrun", "--nnodes=4:2", "t.py"}, 4, 0, 8),
              ElementsAre("trainer.command[1]: torchrun's --nnodes must be N or MIN:MAX, got "
                          "\"4:2\""));
}

}  // namespace
}  // namespace ringmaster::spec
