// A worker's environment, argv and the agent's own refusal of a launch, as pure functions.
#include "agent/worker_env.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/proto_edge.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace ringmaster::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Ranks 4 and 5 of a job of 8 (tensor 2, pipeline 2, data 2) on this node's devices 0 and 1.
v1::LaunchWorkers TwoRankLaunch() {
  v1::LaunchWorkers launch;
  launch.mutable_job()->set_job_id("llm-7");
  launch.mutable_job()->set_generation(3);
  launch.mutable_spec()->mutable_trainer()->set_builtin("gpt");
  launch.mutable_spec()->mutable_checkpoint()->set_dir("/ckpt/llm-7");
  launch.mutable_spec()->mutable_restart()->set_max_restarts(3);
  launch.mutable_layout()->set_tensor(2);
  launch.mutable_layout()->set_pipeline(2);
  launch.mutable_layout()->set_data(2);
  launch.set_world_size(8);
  launch.set_master_addr("10.0.0.1");
  launch.set_master_port(29500);
  launch.set_restart_count(2);
  for (int i = 0; i < 2; ++i) {
    v1::RankAssignment* a = launch.add_assignments();
    a->set_rank(4 + i);
    a->set_local_rank(i);
    a->set_local_device(i);
    a->set_tp_rank(i);
    a->set_pp_rank(0);
    a->set_dp_rank(1);
  }
  return launch;
}

WorkerEnvOptions CpuNode() {
  WorkerEnvOptions node;
  node.node_name = "node-b";
  node.host_address = "10.0.0.2";
  node.socket_path = "/run/ringmaster/agent.sock";
  for (int i = 0; i < 2; ++i) {
    v1::Device& d = node.devices.emplace_back();
    d.set_index(i);
    d.set_kind("cpu");
  }
  return node;
}

WorkerEnvOptions GpuNode() {
  WorkerEnvOptions node = CpuNode();
  for (v1::Device& d : node.devices) d.set_kind("gpu");
  return node;
}

TEST(WorkerEnvTest, TorchrunVariablesOfTheRank) {
  const v1::LaunchWorkers launch = TwoRankLaunch();
  std::map<std::string, std::string> env =
      WorkerEnv(launch, launch.assignments(1), CpuNode(), "token-1");
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["GROUP_RANK"], "2");  // lowest rank here (4) / ranks here (2)
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["ROLE_NAME"], "default");
  EXPECT_EQ(env["ROLE_RANK"], "5");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "8");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "4");  // 8 ranks, 2 here: 4 nodes
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_FALSE(env.count("OMP_NUM_THREADS"));  // the builtin trainer sets its own threads
}

// torchrun's defaults for a program with several ranks on a node, which the job may change.
TEST(WorkerEnvTest, ACommandWithSeveralRanksHereGetsOneOpenMpThreadUnlessItSaysOtherwise) {
  v1::LaunchWorkers launch = TwoRankLaunch();
  v1::TrainerSpec* trainer = launch.mutable_spec()->mutable_trainer();
  trainer->mutable_command()->add_argv("./train");
  EXPECT_EQ(WorkerEnv(launch, launch.assignments(0), CpuNode(), "t")["OMP_NUM_THREADS"], "1");
  (*trainer->mutable_env())["OMP_NUM_THREADS"] = "4";
  (*trainer->mutable_env())["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "3";
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), CpuNode(), "t");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");
  launch.mutable_assignments()->RemoveLast();  // one rank here: the program's own choice
  trainer->mutable_env()->clear();
  EXPECT_FALSE(WorkerEnv(launch, launch.assignments(0), CpuNode(), "t").count("OMP_NUM_THREADS"));
}

TEST(WorkerEnvTest, RingmasterVariablesOfTheRankAndNode) {
  const v1::LaunchWorkers launch = TwoRankLaunch();
  std::map<std::string, std::string> env =
      WorkerEnv(launch, launch.assignments(1), CpuNode(), "token-1");
  EXPECT_EQ(env["RINGMASTER_JOB"], "llm-7");
  EXPECT_EQ(env["RINGMASTER_GENERATION"], "3");
  EXPECT_EQ(env["RINGMASTER_AGENT_SOCKET"], "/run/ringmaster/agent.sock");
  EXPECT_EQ(env["RINGMASTER_NODE"], "node-b");
  EXPECT_EQ(env["RINGMASTER_HOST_ADDRESS"], "10.0.0.2");
  EXPECT_EQ(env["RINGMASTER_TP_RANK"], "1");
  EXPECT_EQ(env["RINGMASTER_PP_RANK"], "0");
  EXPECT_EQ(env["RINGMASTER_DP_RANK"], "1");
  EXPECT_EQ(env["RINGMASTER_TP_SIZE"], "2");
  EXPECT_EQ(env["RINGMASTER_PP_SIZE"], "2");
  EXPECT_EQ(env["RINGMASTER_DP_SIZE"], "2");
  EXPECT_EQ(env["RINGMASTER_DESIRED_DP_SIZE"], "2");  // not elastic
  EXPECT_EQ(env["RINGMASTER_ACCUMULATION"], "1");
  EXPECT_EQ(env["RINGMASTER_CHECKPOINT_DIR"], "/ckpt/llm-7");
  EXPECT_EQ(env["RINGMASTER_WORKER_TOKEN"], "token-1");
  v1::JobSpec parsed;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(env["RINGMASTER_JOB_SPEC_JSON"], &parsed).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, launch.spec()));
}

TEST(WorkerEnvTest, AShrunkElasticJobSeesItsDegreesAndAccumulation) {
  // 4 nodes x 2 devices, TP 2: DP 4 asked for; this generation runs on 2 nodes at DP 2.
  v1::LaunchWorkers launch = TwoRankLaunch();
  v1::JobSpec* spec = launch.mutable_spec();
  spec->set_nodes(4);
  spec->set_min_nodes(2);
  spec->set_devices_per_node(2);
  spec->mutable_trainer()->mutable_command()->add_argv("python3");
  launch.mutable_layout()->set_pipeline(1);
  launch.set_world_size(4);
  std::map<std::string, std::string> env =
      WorkerEnv(launch, launch.assignments(1), CpuNode(), "token-1");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["RINGMASTER_DP_SIZE"], "2");
  EXPECT_EQ(env["RINGMASTER_DESIRED_DP_SIZE"], "4");
  EXPECT_EQ(env["RINGMASTER_ACCUMULATION"], "2");  // 4 / 2 of its own per-replica batch
  EXPECT_EQ(env["RINGMASTER_LR_SCALE"], "1");       // the global batch is kept
  // Keeping the per-replica batch instead: no accumulation, the learning rate scaled by 2 / 4.
  spec->set_elastic_batch(v1::ELASTIC_BATCH_PER_REPLICA);
  env = WorkerEnv(launch, launch.assignments(1), CpuNode(), "token-1");
  EXPECT_EQ(env["RINGMASTER_ACCUMULATION"], "1");
  EXPECT_EQ(env["RINGMASTER_LR_SCALE"], "0.5");
  spec->set_elastic_batch(v1::ELASTIC_BATCH_GLOBAL);
  // The builtin trainer's keys: its micro-batches per step, global / (micro * dp).
  spec->mutable_trainer()->set_builtin("gpt");
  spec->mutable_trainer()->mutable_batch()->set_micro_batch(2);
  spec->mutable_trainer()->mutable_batch()->set_global_batch(16);
  env = WorkerEnv(launch, launch.assignments(1), CpuNode(), "token-1");
  EXPECT_EQ(env["RINGMASTER_ACCUMULATION"], "4");
  // Per replica: the full size's 16 / (2 * 4) = 2 micro-batches, and half the learning rate.
  spec->set_elastic_batch(v1::ELASTIC_BATCH_PER_REPLICA);
  env = WorkerEnv(launch, launch.assignments(1), CpuNode(), "token-1");
  EXPECT_EQ(env["RINGMASTER_ACCUMULATION"], "2");
  EXPECT_EQ(env["RINGMASTER_LR_SCALE"], "0.5");
}

TEST(WorkerEnvTest, InheritsOnlyPathHomeAndLangOnACpuDevice) {
  const v1::LaunchWorkers launch = TwoRankLaunch();
  WorkerEnvOptions node = CpuNode();
  node.inherited = {{"PATH", "/usr/bin"},
                    {"HOME", "/home/agent"},
                    {"LANG", "C.UTF-8"},
                    {"CUDA_VISIBLE_DEVICES", "3,4"},
                    {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                    {"SECRET", "agent-only"}};
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), node, "t");
  EXPECT_EQ(env["PATH"], "/usr/bin");
  EXPECT_EQ(env["HOME"], "/home/agent");
  EXPECT_EQ(env["LANG"], "C.UTF-8");
  EXPECT_FALSE(env.count("SECRET"));
  EXPECT_FALSE(env.count("CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(env.count("CUDA_DEVICE_ORDER"));
}

TEST(WorkerEnvTest, AnUnsetVariableStaysUnset) {
  const v1::LaunchWorkers launch = TwoRankLaunch();
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), CpuNode(), "t");
  EXPECT_FALSE(env.count("PATH"));
  EXPECT_FALSE(env.count("HOME"));
  EXPECT_FALSE(env.count("LANG"));
}

TEST(WorkerEnvTest, AGpuRankSeesItsDeviceInTheAgentsList) {
  const v1::LaunchWorkers launch = TwoRankLaunch();
  WorkerEnvOptions node = GpuNode();
  node.inherited = {{"CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb"},
                    {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}};
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(1), node, "t");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-bbbb");
  EXPECT_EQ(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
}

TEST(WorkerEnvTest, AGpuRankOfAnAgentWithoutAListSeesItsOrdinal) {
  const v1::LaunchWorkers launch = TwoRankLaunch();
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(1), GpuNode(), "t");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_FALSE(env.count("CUDA_DEVICE_ORDER"));
}

TEST(WorkerEnvTest, TheJobsOwnVariablesComeLastButTheToken) {
  v1::LaunchWorkers launch = TwoRankLaunch();
  auto& job_env = *launch.mutable_spec()->mutable_trainer()->mutable_env();
  job_env["MASTER_PORT"] = "1234";
  job_env["PATH"] = "/opt/job/bin";
  job_env["NCCL_DEBUG"] = "INFO";
  job_env["RINGMASTER_WORKER_TOKEN"] = "forged";  // the coordinator refuses it; the agent too
  WorkerEnvOptions node = CpuNode();
  node.inherited = {{"PATH", "/usr/bin"}};
  std::map<std::string, std::string> env =
      WorkerEnv(launch, launch.assignments(0), node, "real-token");
  EXPECT_EQ(env["MASTER_PORT"], "1234");
  EXPECT_EQ(env["PATH"], "/opt/job/bin");
  EXPECT_EQ(env["NCCL_DEBUG"], "INFO");
  EXPECT_EQ(env["RINGMASTER_WORKER_TOKEN"], "real-token");
}

// Which argv[0] is a Python interpreter the watch is put into.
TEST(WorkerEnvTest, PythonInterpretersByTheBasenameOfArgv0) {
  for (const char* argv0 : {"python", "python3", "python3.11", "python2.7", "/usr/bin/python3",
                            "/opt/conda/envs/x/bin/python", "./venv/bin/python3.12"}) {
    EXPECT_TRUE(IsPythonInterpreter(argv0)) << argv0;
  }
  for (const char* argv0 : {"", "py", "ipython", "python3-config", "pythonw", "python3.11m",
                            "/usr/bin/env", "torchrun", "/usr/bin/python3/", "mypython",
                            "/python3/train"}) {
    EXPECT_FALSE(IsPythonInterpreter(argv0)) << argv0;
  }
}

// What runs Python, directly or through a shell, as far as the argv shows.
TEST(WorkerEnvTest, PythonLaunchesByTheArgv) {
  using Argv = std::vector<std::string>;
  const std::vector<std::pair<Argv, PythonLaunch>> cases = {
      {{"python3", "train.py"}, PythonLaunch::kDirect},
      {{"./train.py", "--lr", "3"}, PythonLaunch::kDirect},  // its #! line runs Python
      {{"/usr/bin/env", "python3", "train.py"}, PythonLaunch::kDirect},
      {{"env", "-u", "PYTHONHOME", "--", "OMP_NUM_THREADS=1", "python3.11", "t.py"},
       PythonLaunch::kDirect},
      {{"env", "A=1", "--", "python3", "t.py"}, PythonLaunch::kNone},  // runs "--", as env does
      {{"/usr/bin/env", "-S", "python3 -u", "t.py"}, PythonLaunch::kDirect},
      {{"/usr/bin/env", "-S A=1 python3 -u", "t.py"}, PythonLaunch::kDirect},  // a #! line's
      {{"env", "--split-string=bash -c", "cd /d && python t.py"}, PythonLaunch::kShell},
      {{"/usr/bin/env", "-S bash -c", "cd /d && python t.py"}, PythonLaunch::kShell},
      {{"env", "-vu", "HOME", "--chdir", "/d", "python3", "t.py"}, PythonLaunch::kDirect},
      {{"env", "A=1", "-u", "t.py"}, PythonLaunch::kNone},  // after an assignment: a command
      {{"env", "-i", "python3", "t.py"}, PythonLaunch::kNone},  // no environment: no watch
      {{"env", "-", "python3", "t.py"}, PythonLaunch::kNone},
      {{"env", "-u", "PYTHONPATH", "python3", "t.py"}, PythonLaunch::kNone},
      {{"env", "PYTHONPATH=/code", "python3", "t.py"}, PythonLaunch::kNone},
      {{"/bin/sh", "-c", "cd /data && python3 train.py"}, PythonLaunch::kShell},
      {{"bash", "run.sh"}, PythonLaunch::kShell},
      {{"/opt/job/run.sh"}, PythonLaunch::kShell},
      {{"env", "A=1", "bash", "-lc", "python train.py"}, PythonLaunch::kShell},
      {{}, PythonLaunch::kNone},
      {{""}, PythonLaunch::kNone},
      // torchrun: the program it would start (spec/torchrun.h, agent/torchrun_launch.h).
      {{"torchrun", "--nproc_per_node=8", "train.py"}, PythonLaunch::kDirect},
      {{"python3", "-m", "torch.distributed.run", "-m", "pkg.train"}, PythonLaunch::kDirect},
      {{"torchrun", "--no_python", "./run.sh"}, PythonLaunch::kShell},
      {{"torchrun", "--no_python", "/opt/job/trainer"}, PythonLaunch::kNone},
      {{"torchrun", "--no_python", "env", "A=1", "python3", "t.py"}, PythonLaunch::kDirect},
      {{"torchrun", "--bogus", "train.py"}, PythonLaunch::kNone},  // the coordinator refuses it
      {{"python3", "-m", "torch.distributed.launch", "train.py"}, PythonLaunch::kNone},
      {{"/opt/job/trainer"}, PythonLaunch::kNone},
      {{"/usr/bin/env"}, PythonLaunch::kNone},
      {{"env", "-u"}, PythonLaunch::kNone},
      {{"env", "-S"}, PythonLaunch::kNone},
      {{"env", "-C", "/data", "./trainer"}, PythonLaunch::kNone},
      // Long options by a unique prefix, as env takes them; one env refuses runs nothing.
      {{"env", "--ch", "/data", "python3", "t.py"}, PythonLaunch::kDirect},
      {{"env", "--ignore-env", "python3", "t.py"}, PythonLaunch::kNone},
      {{"env", "--uns=PYTHONPATH", "python3", "t.py"}, PythonLaunch::kNone},
      {{"env", "--i", "python3", "t.py"}, PythonLaunch::kNone},  // ambiguous
      {{"env", "-x", "python3", "t.py"}, PythonLaunch::kNone},   // no such option
      // Wrappers run the program: it is watched as if it were argv[0].
      {{"timeout", "23h", "python3", "t.py"}, PythonLaunch::kDirect},
      {{"numactl", "--cpunodebind=0", "--membind", "0", "python3", "t.py"}, PythonLaunch::kDirect},
      {{"nohup", "nice", "-n", "5", "bash", "run.sh"}, PythonLaunch::kShell},
      {{"env", "A=1", "stdbuf", "-oL", "env", "-u", "PYTHONPATH", "python3"}, PythonLaunch::kNone},
      {{"taskset", "-p", "3", "python3"}, PythonLaunch::kNone},  // runs nothing
      {{"nohup", "./trainer"}, PythonLaunch::kNone},
      {{".py"}, PythonLaunch::kNone},
      {{"sh.py.bak"}, PythonLaunch::kNone},
      {{"fish", "-c", "python3 t.py"}, PythonLaunch::kNone},
  };
  for (const auto& [argv, want] : cases) {
    EXPECT_EQ(PythonLaunchOf(argv), want) << absl::StrJoin(argv, " ");
  }
}

// A command job on Python, in the order the watch's PYTHONPATH promises.
v1::LaunchWorkers PythonCommandLaunch(const std::string& argv0) {
  v1::LaunchWorkers launch = TwoRankLaunch();
  v1::TrainerSpec* trainer = launch.mutable_spec()->mutable_trainer();
  trainer->mutable_command()->add_argv(argv0);
  trainer->mutable_command()->add_argv("train.py");
  return launch;
}

WorkerEnvOptions WatchingNode() {
  WorkerEnvOptions node = CpuNode();
  node.report_socket_path = "/run/ringmaster/agent-report.sock";
  node.python_watch_dir = "/var/lib/ringmaster/python-watch-0123";
  return node;
}

TEST(WorkerEnvTest, EveryWorkerGetsTheReportSocket) {
  const v1::LaunchWorkers launch = TwoRankLaunch();  // the builtin trainer
  std::map<std::string, std::string> env =
      WorkerEnv(launch, launch.assignments(0), WatchingNode(), "t");
  EXPECT_EQ(env["RINGMASTER_REPORT_SOCKET"], "/run/ringmaster/agent-report.sock");
  EXPECT_FALSE(env.count("RINGMASTER_PYTHON_WATCH"));  // not a Python command
  EXPECT_FALSE(env.count("PYTHONPATH"));
  env = WorkerEnv(launch, launch.assignments(0), CpuNode(), "t");
  EXPECT_FALSE(env.count("RINGMASTER_REPORT_SOCKET"));  // an agent without one
}

TEST(WorkerEnvTest, APythonCommandGetsTheWatchFirstOnItsPath) {
  for (const char* argv0 : {"python", "/usr/bin/python3", "python3.11", "torchrun"}) {
    const v1::LaunchWorkers launch = PythonCommandLaunch(argv0);
    WorkerEnvOptions node = WatchingNode();
    std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), node, "t");
    EXPECT_EQ(env["PYTHONPATH"], "/var/lib/ringmaster/python-watch-0123") << argv0;
    EXPECT_EQ(env["RINGMASTER_PYTHON_WATCH"], "1") << argv0;
  }
  // Not Python, or no watch on this agent: nothing.
  for (const char* argv0 : {"./train", "/usr/bin/python3-config"}) {
    const v1::LaunchWorkers launch = PythonCommandLaunch(argv0);
    std::map<std::string, std::string> env =
        WorkerEnv(launch, launch.assignments(0), WatchingNode(), "t");
    EXPECT_FALSE(env.count("PYTHONPATH")) << argv0;
    EXPECT_FALSE(env.count("RINGMASTER_PYTHON_WATCH")) << argv0;
  }
  const v1::LaunchWorkers launch = PythonCommandLaunch("python3");
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), CpuNode(), "t");
  EXPECT_FALSE(env.count("RINGMASTER_PYTHON_WATCH"));
}

// Under a shell the watch is on the path too, in "shell" mode; the agent's own PYTHONPATH is a
// directly run Python program's only, as before.
TEST(WorkerEnvTest, AShellsPythonIsWatchedInShellMode) {
  for (const char* argv0 : {"/bin/sh", "bash", "./run.sh"}) {
    v1::LaunchWorkers launch = PythonCommandLaunch(argv0);
    WorkerEnvOptions node = WatchingNode();
    node.inherited = {{"PYTHONPATH", "/agent/lib"}};
    std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), node, "t");
    EXPECT_EQ(env["PYTHONPATH"], "/var/lib/ringmaster/python-watch-0123") << argv0;
    EXPECT_EQ(env["RINGMASTER_PYTHON_WATCH"], "shell") << argv0;
    (*launch.mutable_spec()->mutable_trainer()->mutable_env())["PYTHONPATH"] = "/job/src";
    env = WorkerEnv(launch, launch.assignments(0), node, "t");
    EXPECT_EQ(env["PYTHONPATH"], "/var/lib/ringmaster/python-watch-0123:/job/src") << argv0;
    launch.mutable_spec()->mutable_watchdog()->set_python_watch_disabled(true);
    env = WorkerEnv(launch, launch.assignments(0), node, "t");
    EXPECT_EQ(env["PYTHONPATH"], "/job/src") << argv0;
    EXPECT_FALSE(env.count("RINGMASTER_PYTHON_WATCH")) << argv0;
  }
  // `env python3 train.py` runs Python directly: the plain mode, and the agent's PYTHONPATH.
  v1::LaunchWorkers launch = PythonCommandLaunch("/usr/bin/env");
  launch.mutable_spec()->mutable_trainer()->mutable_command()->mutable_argv()->Add("train.py");
  *launch.mutable_spec()->mutable_trainer()->mutable_command()->mutable_argv(1) = "python3";
  WorkerEnvOptions node = WatchingNode();
  node.inherited = {{"PYTHONPATH", "/agent/lib"}};
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), node, "t");
  EXPECT_EQ(env["PYTHONPATH"], "/var/lib/ringmaster/python-watch-0123:/agent/lib");
  EXPECT_EQ(env["RINGMASTER_PYTHON_WATCH"], "1");
}

TEST(WorkerEnvTest, TheWatchKeepsTheJobsOrElseTheAgentsPythonPathAfterIt) {
  v1::LaunchWorkers launch = PythonCommandLaunch("python3");
  WorkerEnvOptions node = WatchingNode();
  node.inherited = {{"PYTHONPATH", "/agent/lib"}};
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), node, "t");
  EXPECT_EQ(env["PYTHONPATH"], "/var/lib/ringmaster/python-watch-0123:/agent/lib");
  (*launch.mutable_spec()->mutable_trainer()->mutable_env())["PYTHONPATH"] = "/job/src:/job/lib";
  env = WorkerEnv(launch, launch.assignments(0), node, "t");
  EXPECT_EQ(env["PYTHONPATH"], "/var/lib/ringmaster/python-watch-0123:/job/src:/job/lib");
  // A job that empties it gets only the watch.
  (*launch.mutable_spec()->mutable_trainer()->mutable_env())["PYTHONPATH"] = "";
  env = WorkerEnv(launch, launch.assignments(0), node, "t");
  EXPECT_EQ(env["PYTHONPATH"], "/var/lib/ringmaster/python-watch-0123");
  // Without the watch, the agent's PYTHONPATH is not a worker's: only PATH, HOME, LANG are.
  launch = TwoRankLaunch();
  env = WorkerEnv(launch, launch.assignments(0), node, "t");
  EXPECT_FALSE(env.count("PYTHONPATH"));
}

TEST(WorkerEnvTest, AJobThatOptsOutRunsAsWritten) {
  v1::LaunchWorkers launch = PythonCommandLaunch("python3");
  launch.mutable_spec()->mutable_watchdog()->set_python_watch_disabled(true);
  (*launch.mutable_spec()->mutable_trainer()->mutable_env())["PYTHONPATH"] = "/job/src";
  WorkerEnvOptions node = WatchingNode();
  node.inherited = {{"PYTHONPATH", "/agent/lib"}};
  std::map<std::string, std::string> env = WorkerEnv(launch, launch.assignments(0), node, "t");
  EXPECT_EQ(env["PYTHONPATH"], "/job/src");
  EXPECT_FALSE(env.count("RINGMASTER_PYTHON_WATCH"));
  EXPECT_EQ(env["RINGMASTER_REPORT_SOCKET"], "/run/ringmaster/agent-report.sock");
  EXPECT_FALSE(WatchesPython(launch.spec()));
}

// The agent's PYTHONPATH reaches a Python command whether the watch is on, opted out of, or off
// on the node; the watch only puts its directory first.
TEST(WorkerEnvTest, TheAgentsPythonPathDoesNotDependOnTheWatch) {
  v1::LaunchWorkers launch = PythonCommandLaunch("python3");
  WorkerEnvOptions watching = WatchingNode();
  watching.inherited = {{"PYTHONPATH", "/agent/lib"}};
  EXPECT_EQ(WorkerEnv(launch, launch.assignments(0), watching, "t")["PYTHONPATH"],
            "/var/lib/ringmaster/python-watch-0123:/agent/lib");
  WorkerEnvOptions unwatched = CpuNode();
  unwatched.inherited = watching.inherited;
  EXPECT_EQ(WorkerEnv(launch, launch.assignments(0), unwatched, "t")["PYTHONPATH"], "/agent/lib");
  launch.mutable_spec()->mutable_watchdog()->set_python_watch_disabled(true);
  EXPECT_EQ(WorkerEnv(launch, launch.assignments(0), watching, "t")["PYTHONPATH"], "/agent/lib");
  // Not Python: not inherited.
  launch = PythonCommandLaunch("./train");
  EXPECT_FALSE(WorkerEnv(launch, launch.assignments(0), watching, "t").count("PYTHONPATH"));
}

TEST(WorkerEnvTest, ArgvOfACommandOrTheBuiltinTrainer) {
  v1::JobSpec command;
  command.mutable_trainer()->mutable_command()->add_argv("python3");
  command.mutable_trainer()->mutable_command()->add_argv("train.py");
  EXPECT_THAT(*WorkerArgv(command, "/bin/trainer"), ElementsAre("python3", "train.py"));
  // A torchrun command line: the program torchrun would start (agent/torchrun_launch.h).
  v1::JobSpec torchrun;
  for (const char* word :
       {"python3", "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py", "--lr", "1"}) {
    torchrun.mutable_trainer()->mutable_command()->add_argv(word);
  }
  EXPECT_THAT(*WorkerArgv(torchrun, "/bin/trainer"),
              ElementsAre("python3", "-u", "train.py", "--lr", "1"));

  v1::JobSpec gpt;
  gpt.mutable_trainer()->set_builtin("gpt");
  EXPECT_THAT(*WorkerArgv(gpt, "/bin/trainer"), ElementsAre("/bin/trainer"));
  absl::StatusOr<std::vector<std::string>> none = WorkerArgv(gpt, "");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("no --trainer_binary"));

  v1::JobSpec other;
  other.mutable_trainer()->set_builtin("bert");
  absl::StatusOr<std::vector<std::string>> bert = WorkerArgv(other, "/bin/trainer");
  EXPECT_EQ(bert.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bert.status().message(), HasSubstr("\"bert\""));
}

TEST(CheckLaunchableTest, AcceptsAnOrdinaryLaunch) {
  EXPECT_TRUE(CheckLaunchable(TwoRankLaunch()).ok());
}

TEST(CheckLaunchableTest, RefusesAJobIdThatIsNoDirectoryName) {
  for (const std::string& id :
       {std::string(""), std::string("."), std::string(".."), std::string("a/b"),
        std::string("../etc"), std::string("job 1"), std::string(129, 'x')}) {
    v1::LaunchWorkers launch = TwoRankLaunch();
    launch.mutable_job()->set_job_id(id);
    const absl::Status s = CheckLaunchable(launch);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_THAT(s.message(), HasSubstr("job.job_id: ")) << id;
  }
  v1::LaunchWorkers longest = TwoRankLaunch();
  longest.mutable_job()->set_job_id(std::string(128, 'x'));
  EXPECT_TRUE(CheckLaunchable(longest).ok());
}

TEST(CheckLaunchableTest, RefusesWhatCannotGoIntoAnEnvironmentOrArgv) {
  const std::map<std::string, std::string> bad_env[] = {
      {{"", "v"}}, {{"A=B", "v"}}, {{std::string("A\0B", 3), "v"}}, {{"A", std::string("v\0", 2)}}};
  for (const auto& env : bad_env) {
    v1::LaunchWorkers launch = TwoRankLaunch();
    for (const auto& [k, v] : env)
      (*launch.mutable_spec()->mutable_trainer()->mutable_env())[k] = v;
    EXPECT_THAT(CheckLaunchable(launch).message(), HasSubstr("spec.trainer.env: "));
  }
  v1::LaunchWorkers launch = TwoRankLaunch();
  launch.mutable_spec()->mutable_trainer()->mutable_command()->add_argv(std::string("a\0b", 3));
  EXPECT_THAT(CheckLaunchable(launch).message(), HasSubstr("spec.trainer.command.argv: "));
}

TEST(CheckLaunchableTest, RefusesACommandWithoutAProgram) {
  // The coordinator never sends one, but the agent must not launch "" (found by
  // agent_command_fuzz).
  v1::LaunchWorkers empty = TwoRankLaunch();
  empty.mutable_spec()->mutable_trainer()->mutable_command()->clear_argv();
  EXPECT_THAT(CheckLaunchable(empty).message(), HasSubstr("spec.trainer.command.argv: "));
  v1::LaunchWorkers blank = TwoRankLaunch();
  blank.mutable_spec()->mutable_trainer()->mutable_command()->clear_argv();
  blank.mutable_spec()->mutable_trainer()->mutable_command()->add_argv("");
  blank.mutable_spec()->mutable_trainer()->mutable_command()->add_argv("x");
  EXPECT_THAT(CheckLaunchable(blank).message(), HasSubstr("spec.trainer.command.argv: "));
}

TEST(CheckLaunchableTest, RefusesASpecTooLargeForItsVariable) {
  v1::LaunchWorkers launch = TwoRankLaunch();
  (*launch.mutable_spec()->mutable_trainer()->mutable_env())["BIG"] =
      std::string(kMaxJobSpecJsonBytes, 'x');
  const absl::Status s = CheckLaunchable(launch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("spec: "));
  EXPECT_THAT(s.message(), Not(HasSubstr("spec.trainer")));
}

}  // namespace
}  // namespace ringmaster::agent
