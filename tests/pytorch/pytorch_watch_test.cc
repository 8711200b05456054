// Issue 36's "done when", with real processes: a coordinator and two agents on loopback, and
// unmodified PyTorch DDP programs (tests/pytorch/ddp_train.py, gloo, 2 ranks on 2 nodes) run as
// command jobs under /usr/bin/python3 (or RINGMASTER_TEST_PYTHON), watched by the agents'
// zero-code Python watch. The test only sets the script's fault knobs in trainer.env
// (ddp_train.py's docstring).
//
// One cluster for the whole suite: SetUpTestSuite submits every job at once (the scheduler runs
// four at a time on the 2 x 4 slots and queues the rest), and each case checks its own jobs, so
// the jobs' idle waits (a stuck loader, a stalled save) overlap. Everything the suite started is
// killed in TearDownTestSuite, also after a failure.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/http_client.h"
#include "common/testing/series_value.h"
#include "common/testing/subprocess.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/promtool_check.h"
#include "tests/test_cluster.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The ranks' interpreter: RINGMASTER_TEST_PYTHON (tools/test's torch2 pass: tools/torch2_root's
// launcher, trixie's torch 2.x), else Debian's /usr/bin/python3 (bookworm's torch 1.13).
std::string Python() {
  const char* python = std::getenv("RINGMASTER_TEST_PYTHON");
  return python != nullptr && *python != '\0' ? python : "/usr/bin/python3";
}

// `text` as a YAML double-quoted scalar (a path with a quote or a backslash stays one string).
std::string Quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

constexpr int kCleanSteps = 1000;  // x 2 ranks: the 2,000 clean rank-steps
constexpr int kStuckStep = 30;

// A two-rank command job of ddp_train.py with `env` added to its environment. `steps` 0 leaves
// trainer.steps out; `extra` is more top-level YAML; `wrapper` goes before the interpreter in the
// command, `launcher` after it (YAML list items, each ending in ", ").
std::string Job(const std::string& name, const std::map<std::string, std::string>& env, int steps,
                const std::string& extra = "", const std::string& wrapper = "",
                const std::string& launcher = "") {
  std::string yaml =
      absl::StrCat("name: ", name, "\nnodes: 2\ndevices_per_node: 1\ntrainer:\n  command: [",
                   wrapper, Quoted(Python()), ", ", launcher,
                   Quoted(TestCluster::Runfile("tests/pytorch/ddp_train.py")), "]\n");
  if (steps > 0) absl::StrAppend(&yaml, "  steps: ", steps, "\n");
  absl::StrAppend(&yaml, "  env: {OMP_NUM_THREADS: \"1\"");
  for (const auto& [key, value] : env) absl::StrAppend(&yaml, ", ", key, ": \"", value, "\"");
  absl::StrAppend(&yaml, "}\nrestart: {max_restarts: 2}\n", extra);
  return yaml;
}

// The Unix seconds of the first event of `kind` in `json` (`ringctl get job -o json`), or 0.
double EventSeconds(const std::string& json, const std::string& kind) {
  std::smatch m;
  int64_t nanos = 0;
  if (std::regex_search(json, m,
                        std::regex("\"time_unix_nanos\": \"(\\d+)\",\\s*\"generation\": "
                                   "\"\\d+\",\\s*\"kind\": \"" +
                                   kind + "\""))) {
    (void)absl::SimpleAtoi(m[1].str(), &nanos);  // the regex guarantees digits
  }
  return nanos / 1e9;
}

// Prints the first "hang" event's message in `json`, for the log.
void PrintHangEvent(const std::string& json) {
  std::smatch event;
  if (std::regex_search(json, event,
                        std::regex("\"kind\": \"hang\",\\s*\"message\": \"([^\"]*)\""))) {
    std::printf("hang event: %s\n", event[1].str().c_str());
  }
}

// The job's progress step (the lowest step every rank reported) in `json`, or 0.
int ProgressStep(const std::string& json) {
  std::smatch m;
  int step = 0;
  if (std::regex_search(json, m, std::regex("\"progress\": \\{\\s*\"step\": \"(\\d+)\""))) {
    (void)absl::SimpleAtoi(m[1].str(), &step);  // the regex guarantees digits
  }
  return step;
}

// The digest a rank printed at its end ("params sha256 HEX"), or "".
std::string ParamsDigest(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("params sha256 ([0-9a-f]{64})")) ? m[1].str() : "";
}

class PyTorchWatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto probe =
        RunCommand({Python(), "-c",
                    "import torch, torch.distributed; print('probed torch', torch.__version__)"},
                   "");
    torch_ = probe.ok() && probe->exit_code == 0;
    if (!torch_) return;  // each case fails, saying why
    std::smatch m;
    torch_version_ = new std::string(
        std::regex_search(probe->output, m, std::regex("probed torch (\\S+)")) ? m[1].str() : "");
    TestClusterOptions options;
    options.slots = 4;
    auto c = TestCluster::Start(TestTempDir() + "/pytorch-cluster", options);
    if (!c.ok()) {
      start_error_ = new std::string(c.status().ToString());
      return;
    }
    cluster_ = c->release();
    jobs_ = new std::map<std::string, std::string>();
    auto submit = [](const std::string& name, const std::string& yaml) {
      (*jobs_)[name] = cluster_->Submit(name, yaml);
    };
    // The straggler first: its figures are the ones CPU contention could blur.
    submit(
        "slow",
        Job("slow",
            {{"COMPUTE_MS", "30"}, {"SLOW_RANK", "1"}, {"SLOW_FACTOR", "1.3"}, {"STEPS", "100000"}},
            100000));
    submit(
        "stuck",
        Job("stuck",
            {{"STUCK_RANK", "1"}, {"STUCK_STEP", absl::StrCat(kStuckStep)}, {"STEPS", "80"}}, 80));
    // Stuck before its first batch: a short init_timeout, so the suite does not wait 10 min.
    submit("early", Job("early", {{"STUCK_RANK", "1"}, {"STUCK_STEP", "1"}, {"STEPS", "20"}}, 20,
                        "watchdog: {init_timeout: 20}\n"));
    submit("ctor", Job("ctor", {{"STUCK_RANK", "1"}, {"STUCK_BEFORE_DDP", "1"}, {"STEPS", "20"}},
                       20, "watchdog: {init_timeout: 20}\n"));
    submit("init", Job("init", {{"STUCK_RANK", "1"}, {"STUCK_BEFORE_INIT", "1"}, {"STEPS", "20"}},
                       20, "watchdog: {init_timeout: 20}\n"));
    submit("save", Job("save",
                       {{"SAVE_STEP", "40"},
                        {"SAVE_SECONDS", "20"},
                        {"STEPS", "80"},
                        {"SAVE_PATH", cluster_->dir() + "/save.pt"}},
                       80));
    // After step 30, rank 0 evaluates 24 s alone, then both gather 12 s, with no optimizer
    // step (and no phase named).
    submit("eval", Job("eval",
                       {{"EVAL_STEP", "30"},
                        {"EVAL_SECONDS", "24"},
                        {"EVAL_RANK", "0"},
                        {"STEPS", "60"}},
                       60));
    submit("clean",
           Job("clean", {{"COMPUTE_MS", "5"}, {"STEPS", absl::StrCat(kCleanSteps)}}, kCleanSteps));
    // The same training three ways, for the checksums.
    submit("watched", Job("watched", {{"STEPS", "200"}}, 200));
    // A user's sitecustomize (the watch chains to it) makes torch look unexpected to the watch.
    submit("broken", Job("broken",
                         {{"STEPS", "200"},
                          {"PYTHONPATH", TestCluster::Runfile("tests/pytorch/unexpected_torch")}},
                         200));
    submit("unwatched",
           Job("unwatched", {{"STEPS", "200"}}, 200, "watchdog: {python_watch: false}\n"));
    // No trainer.steps: a command job succeeds when its ranks exit 0. Rank 0 uploads for 14 s
    // after destroy_process_group, then 14 s more at exit. Written as torchrun's command line.
    submit("nosteps",
           Job("nosteps", {{"STEPS", "20"}, {"AFTER_SECONDS", "14"}, {"EXIT_SECONDS", "14"}}, 0,
               "", "", "-m, torch.distributed.run, --nproc-per-node=1, --nnodes, 2, "));
    // The program run by a shell (its child, not exec'd), which then works 12 s more (an upload),
    // and through env and a wrapper (timeout's child, not exec'd either).
    submit("shell",
           Job("shell", {{"STUCK_RANK", "1"}, {"STUCK_STEP", "5"}, {"STEPS", "20"}}, 20, "",
               "/bin/sh, -c, '\"$0\" \"$1\"; s=$?; echo \"program exited $s\"; sleep 12; "
               "echo uploaded; exit $s', "));
    submit("env", Job("env", {{"STEPS", "20"}}, 20, "",
                      "/usr/bin/env, PYTHONUNBUFFERED=1, timeout, --signal=TERM, 1h, "));
    // torchrun started where the coordinator does not read (a shell string with a command
    // substitution): the watch refuses it as it runs; the shell goes on and exits 0.
    submit("hidden", Job("hidden", {{"STEPS", "20"}}, 20, "",
                         "/bin/sh, -c, 'v=$(echo 1); \"$0\" -m torch.distributed.run "
                         "--nproc-per-node=1 \"$1\"; echo went on', "));
    // Last (it holds its slots until its test, the last, cancels it): rank 1's DataLoader waits
    // 20 ms for each batch, its simulated kernels 30 ms as rank 0's.
    submit("input", Job("input",
                        {{"COMPUTE_MS", "30"},
                         {"INPUT_RANK", "1"},
                         {"INPUT_MS", "20"},
                         {"STEPS", "100000"}},
                        100000));
  }

  static void TearDownTestSuite() {
    delete cluster_;  // kills the agents (their workers with them) and the coordinator
    cluster_ = nullptr;
    delete jobs_;
    jobs_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
    delete torch_version_;
    torch_version_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(torch_)
        << Python() << " cannot import torch: install Debian's python3-torch (tools/setup does)";
    ASSERT_NE(cluster_, nullptr) << (start_error_ ? *start_error_ : "no cluster");
  }

  // The id of the job submitted as `name` (a test failure when its submission failed).
  static std::string Id(const std::string& name) {
    const std::string id = jobs_->count(name) ? (*jobs_)[name] : "";
    EXPECT_FALSE(id.empty()) << "job " << name << " was not submitted";
    return id;
  }
  static std::string JobJson(const std::string& id) {
    return cluster_->Ctl({"get", "job", id, "-o", "json"}).output;
  }
  // Waits up to `timeout` for a "hang" event of job `id`; `*json` gets its last JobJson.
  static bool WaitForHang(const std::string& id, absl::Duration timeout, std::string* json) {
    return WaitFor(
        [&] {
          *json = JobJson(id);
          return json->find("\"kind\": \"hang\"") != std::string::npos;
        },
        timeout);
  }
  // `ringctl describe job id` once it flags rank 1 a straggler (a test failure after 240 s), and
  // not rank 0 (its peer, which waits for it in every all-reduce).
  static std::string DescribedOnceRankOneStraggles(const std::string& id) {
    std::string described;
    EXPECT_TRUE(WaitFor(
        [&] {
          described = cluster_->Ctl({"describe", "job", id}).output;
          return std::regex_search(described, std::regex("rank 1 on agent-\\d computes"));
        },
        absl::Seconds(240)))
        << described << JobJson(id);
    EXPECT_FALSE(std::regex_search(described, std::regex("rank 0 on agent-\\d computes")))
        << described;
    return described;
  }
  // Every agent's /metrics page, concatenated.
  static std::string AgentMetrics() {
    std::string pages;
    for (int i = 0; i < cluster_->agent_count(); ++i) {
      auto page = HttpGet("127.0.0.1", cluster_->AgentMetricsPort(i), "/metrics");
      if (page.ok()) pages += page->body;
    }
    return pages;
  }

  // The "early", "ctor" and "init" cases: the hang names rank 1 with `blame`, and the stack event
  // after it says where rank 1's training thread is: `innermost`, the frames after main's.
  static void ExpectStuckBeforeTheFirstStepIsBlamed(const std::string& name,
                                                    const std::string& stuck_line,
                                                    const std::string& blame,
                                                    const std::string& innermost);

  static bool torch_;
  static std::string* torch_version_;  // torch.__version__ under Python()
  static std::string* start_error_;
  static TestCluster* cluster_;
  static std::map<std::string, std::string>* jobs_;  // name -> job id
};

bool PyTorchWatchTest::torch_ = false;
std::string* PyTorchWatchTest::torch_version_ = nullptr;
std::string* PyTorchWatchTest::start_error_ = nullptr;
TestCluster* PyTorchWatchTest::cluster_ = nullptr;
std::map<std::string, std::string>* PyTorchWatchTest::jobs_ = nullptr;

// Rank 1's data loader blocks before step 30: its agent's watchdog, which knows the ranks step
// (the watch reports them), reports a hang after the step allowance, the coordinator blames
// rank 1 (it has not entered the all-reduce rank 0 waits in: the watch keeps reporting its
// sequence numbers), and the restarted job succeeds.
TEST_F(PyTorchWatchTest, StuckRankIsAHangNamingItAndTheJobRestartsAndSucceeds) {
  const std::string id = Id("stuck");
  ASSERT_FALSE(id.empty());
  // Until the hang is declared, the job's live ranks say who waits and who holds them up
  // (RankLiveState.activity: ringctl top's NOW column): in one answer, rank 0 in world #N and
  // rank 1 behind world #N (ranks are listed in order).
  std::string json, seen;
  const std::regex stall(
      "\"activity\": \"in world #(\\d+)\"[\\s\\S]*\"activity\": \"behind world #(\\d+) \\(at #");
  ASSERT_TRUE(WaitFor(
      [&] {
        json = JobJson(id);
        std::smatch m;
        if (seen.empty() && std::regex_search(json, m, stall) && m[1] == m[2]) seen = m[0];
        return json.find("\"kind\": \"hang\"") != std::string::npos;
      },
      absl::Seconds(150)))
      << json << cluster_->RankLog(id, 1, 1);
  EXPECT_FALSE(seen.empty()) << "no answer said rank 0 waits for rank 1: " << json;
  EXPECT_EQ(HangBlamedRank(json), 1) << json;
  // Named from the sequence numbers the watch keeps reporting while rank 1 is stuck outside any
  // collective, not as a silent process.
  EXPECT_THAT(json, HasSubstr("rank 1 has not entered")) << json;
  PrintHangEvent(json);
  // How long from the stuck loader to the hang event (the bound is bench/pytorch_hang_bench's;
  // here: well under the 10 minutes a rank that never reported a step would get).
  std::smatch m;
  const std::string log = cluster_->RankLog(id, 1, 1);
  ASSERT_TRUE(std::regex_search(log, m, std::regex("stuck before step \\d+ at unix ([0-9.]+)")))
      << log;
  double stuck = 0;
  ASSERT_TRUE(absl::SimpleAtod(m[1].str(), &stuck));
  const double detected = EventSeconds(json, "hang") - stuck;
  std::printf("stuck loader to hang event: %.1f s\n", detected);
  EXPECT_GT(detected, 0);
  EXPECT_LT(detected, 60) << json;

  const std::string described = cluster_->Ctl({"describe", "job", id}).output;
  EXPECT_THAT(described, HasSubstr("hang")) << described;
  EXPECT_THAT(described, HasSubstr("rank 1")) << described;
  // Where rank 1's training thread stalled (the watch's stack), in the event after the hang:
  // the script's loader, waiting on an Event that is never set.
  EXPECT_TRUE(std::regex_search(
      described, std::regex("stack  rank 1 on \\S+, where its Python training thread stalled "
                            "\\(innermost last\\): \\S*ddp_train\\.py:\\d+ in <module> > "
                            ".* in main > \\S*ddp_train\\.py:\\d+ in __iter__ > "
                            "threading\\.py:\\d+ in wait")))
      << described;
  auto coordinator = HttpGet("127.0.0.1", cluster_->coordinator().metrics_port, "/metrics");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_THAT(coordinator->body,
              HasSubstr(absl::StrCat("ringmaster_job_hangs_total{job_id=\"", id, "\"} 1")));

  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(150)), "SUCCEEDED") << JobJson(id);
  EXPECT_THAT(cluster_->RankLog(id, 2, 1), HasSubstr("rank 1 done 80 steps")) << JobJson(id);
}

// Rank 1's data loader blocks before the first batch, while rank 0 waits in the first backward's
// all-reduce ("early"), or rank 1 blocks before constructing DDP while rank 0 waits in its
// constructor ("ctor"): neither has reported a step, but rank 0's watch says it is blocked in a
// collective whose numbers do not move, so after the job's init_timeout its agent reports it,
// and the coordinator blames rank 1 from the sequence numbers. The restarted job succeeds.
TEST_F(PyTorchWatchTest, RankStuckBeforeTheFirstStepIsAHangNamingIt) {
  ExpectStuckBeforeTheFirstStepIsBlamed("early", "stuck before step 1 ", "rank 1 has not entered",
                                        "\\S*ddp_train\\.py:\\d+ in __iter__ > "
                                        "threading\\.py:\\d+ in wait");
}

TEST_F(PyTorchWatchTest, RankStuckBeforeDdpIsAHangNamingIt) {
  ExpectStuckBeforeTheFirstStepIsBlamed("ctor", "stuck before DistributedDataParallel",
                                        "rank 1 has not entered", "threading\\.py:\\d+ in wait");
}

// Rank 1 blocks before init_process_group ("init"): it has no sequence numbers to report, and
// rank 0 waits in init_process_group's rendezvous (on torch 1.13 silently after its first report:
// the store's wait holds the GIL), so the coordinator names the rank that never reached it. Its
// watch's side thread, started as torch.distributed was imported, still says where it is stuck.
TEST_F(PyTorchWatchTest, RankStuckBeforeInitProcessGroupIsAHangNamingIt) {
  ExpectStuckBeforeTheFirstStepIsBlamed(
      "init", "stuck before init_process_group",
      "rank 1 has not reached init_process_group's rendezvous that rank 0 waits in",
      "threading\\.py:\\d+ in wait");
}

void PyTorchWatchTest::ExpectStuckBeforeTheFirstStepIsBlamed(const std::string& name,
                                                             const std::string& stuck_line,
                                                             const std::string& blame,
                                                             const std::string& innermost) {
  const std::string id = Id(name);
  ASSERT_FALSE(id.empty());
  std::string json;
  ASSERT_TRUE(WaitForHang(id, absl::Seconds(180), &json))
      << json << cluster_->RankLog(id, 1, 0) << cluster_->RankLog(id, 1, 1);
  PrintHangEvent(json);
  EXPECT_EQ(HangBlamedRank(json), 1) << json;
  EXPECT_THAT(json, HasSubstr("before its first step, in a collective that did not move")) << json;
  EXPECT_THAT(json, HasSubstr(blame)) << json;
  EXPECT_THAT(cluster_->RankLog(id, 1, 1), HasSubstr(stuck_line));
  const std::string described = cluster_->Ctl({"describe", "job", id}).output;
  EXPECT_TRUE(std::regex_search(
      described, std::regex("stack  rank 1 on \\S+, where its Python training thread stalled "
                            "\\(innermost last\\): \\S*ddp_train\\.py:\\d+ in <module> > "
                            "\\S*ddp_train\\.py:\\d+ in main > " + innermost)))
      << described;
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(180)), "SUCCEEDED") << JobJson(id);
  EXPECT_THAT(cluster_->RankLog(id, 2, 1), HasSubstr("rank 1 done 20 steps")) << JobJson(id);
}

// The same script under `sh -c` (its child) and `env`: watched all the same. Under the shell,
// rank 1's stuck loader is a hang naming it and the restarted job succeeds, the shell's 12 s of
// work after the program no hang (the program's watch said it ended); through env, the steps are
// heard.
TEST_F(PyTorchWatchTest, ProgramsRunByAShellOrEnvAreWatched) {
  const std::string shell = Id("shell");
  ASSERT_FALSE(shell.empty());
  std::string json;
  ASSERT_TRUE(WaitForHang(shell, absl::Seconds(150), &json))
      << json << cluster_->RankLog(shell, 1, 1);
  PrintHangEvent(json);
  EXPECT_EQ(HangBlamedRank(json), 1) << json;
  EXPECT_THAT(json, HasSubstr("rank 1 has not entered")) << json;
  EXPECT_EQ(cluster_->WaitForEnd(shell, absl::Seconds(150)), "SUCCEEDED") << JobJson(shell);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(cluster_->RankLog(shell, 2, rank), HasSubstr("program exited 0\nuploaded"));
  }
  json = JobJson(shell);
  const std::string hang = "\"kind\": \"hang\"";
  EXPECT_EQ(json.find(hang), json.rfind(hang)) << "a second hang: " << json;

  const std::string env = Id("env");
  ASSERT_FALSE(env.empty());
  EXPECT_EQ(cluster_->WaitForEnd(env, absl::Seconds(150)), "SUCCEEDED") << JobJson(env);
  json = JobJson(env);
  EXPECT_EQ(ProgressStep(json), 20) << json;  // watched: its steps were heard
}

// A launcher the coordinator could not see is ended by the watch before it starts anything
// (exit 78): the job fails for good, in its first generation, saying why, though the shell that
// ran it went on and exited 0.
TEST_F(PyTorchWatchTest, ALauncherTheCoordinatorCannotSeeIsRefusedAsItRuns) {
  const std::string id = Id("hidden");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(150)), "FAILED") << JobJson(id);
  const std::string json = JobJson(id);
  EXPECT_THAT(json, HasSubstr("torchrun started inside rank")) << json;
  EXPECT_THAT(json, HasSubstr("'s command: each rank's torchrun would start its own processes"))
      << json;
  EXPECT_THAT(json, Not(HasSubstr("\"generation\": \"2\""))) << json;
  // The first rank refused fails the job, whose other rank may be stopped before it says so.
  std::string logs;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = cluster_->RankLog(id, 1, rank);
    EXPECT_THAT(log, Not(HasSubstr("rank " + std::to_string(rank) + " done"))) << log;
    logs += log;
  }
  EXPECT_THAT(logs, HasSubstr("ringmaster watch: refused: torchrun started inside rank")) << logs;
}

// The agents' /metrics carry the watched ranks' step-time histogram and collective waits, and
// the pages pass promtool's lint.
TEST_F(PyTorchWatchTest, AgentMetricsHaveStepTimesAndCollectiveWaits) {
  const std::string id = Id("slow");  // runs until the next case cancels it
  ASSERT_FALSE(id.empty());
  std::string pages;
  const std::string histogram = absl::StrCat("ringmaster_step_seconds_bucket{job_id=\"", id, "\"");
  EXPECT_TRUE(WaitFor(
      [&] {
        pages = AgentMetrics();
        return pages.find(absl::StrCat("ringmaster_step_seconds_count{job_id=\"", id,
                                       "\",rank=\"1\"}")) != std::string::npos &&
               pages.find(absl::StrCat("ringmaster_communication_seconds{job_id=\"", id,
                                       "\",rank=\"0\"}")) != std::string::npos;
      },
      absl::Seconds(120)))
      << pages;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string labels = absl::StrCat("{job_id=\"", id, "\",rank=\"", rank, "\"");
    EXPECT_THAT(pages, HasSubstr("ringmaster_step_seconds_bucket" + labels)) << pages;
    EXPECT_THAT(pages, HasSubstr("ringmaster_communication_seconds" + labels)) << pages;
    EXPECT_THAT(pages, HasSubstr("ringmaster_collective_sequence" + labels)) << pages;
    EXPECT_THAT(pages, HasSubstr("ringmaster_collective_seconds_total" + labels +
                                 ",op=\"all_reduce\",group=\"world\"}"))
        << pages;
  }
  for (int i = 0; i < cluster_->agent_count(); ++i) {
    auto page = HttpGet("127.0.0.1", cluster_->AgentMetricsPort(i), "/metrics");
    ASSERT_TRUE(page.ok()) << page.status();
    ExpectPromtoolClean(page->body);
  }
}

// Rank 1's simulated kernels take 1.3 times as long: flagged, and rank 0 (which waits for it in
// every all-reduce, a wait the watch does not count as compute) is not.
TEST_F(PyTorchWatchTest, RankSlowedInItsComputeIsTheOnlyStraggler) {
  const std::string id = Id("slow");
  ASSERT_FALSE(id.empty());
  const std::string described = DescribedOnceRankOneStraggles(id);
  std::smatch m;
  if (std::regex_search(described, m, std::regex("[^\n]*rank 1 on agent-\\d computes[^\n]*"))) {
    std::printf("%s\n", m[0].str().c_str());
  }
  const std::string json = JobJson(id);
  EXPECT_THAT(json, Not(HasSubstr("\"kind\": \"hang\""))) << json;
  EXPECT_EQ(cluster_->Ctl({"cancel", id}).exit_code, 0);
}

// 2 ranks x 1,000 steps with nothing wrong: no straggler flag, no hang; the job succeeds.
TEST_F(PyTorchWatchTest, CleanRunRaisesNoFlag) {
  const std::string id = Id("clean");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(240)), "SUCCEEDED") << JobJson(id);
  const std::string json = JobJson(id);
  EXPECT_THAT(json, Not(HasSubstr("\"kind\": \"straggler\""))) << json;
  EXPECT_THAT(json, Not(HasSubstr("\"kind\": \"hang\""))) << json;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(cluster_->RankLog(id, 1, rank),
                HasSubstr(absl::StrCat("rank ", rank, " done ", kCleanSteps, " steps")));
  }
}

// Rank 0 spends 20 s in torch.save (rank 1 waits in the next all-reduce meanwhile): a checkpoint,
// not a hang.
TEST_F(PyTorchWatchTest, TwentySecondTorchSaveIsNotAHang) {
  const std::string id = Id("save");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(240)), "SUCCEEDED") << JobJson(id);
  const std::string json = JobJson(id);
  EXPECT_THAT(json, Not(HasSubstr("\"kind\": \"hang\""))) << json;
  std::smatch m;
  const std::string log = cluster_->RankLog(id, 1, 0);
  ASSERT_TRUE(std::regex_search(log, m, std::regex("rank 0 saved step 40 in ([0-9.]+) s"))) << log;
  double seconds = 0;
  ASSERT_TRUE(absl::SimpleAtod(m[1].str(), &seconds));
  EXPECT_GE(seconds, 20);
  // Watched (else no step allowance applies and no save could be a hang): its steps were heard.
  EXPECT_EQ(ProgressStep(json), 80) << json;
  EXPECT_EQ(cluster_->RankLog(id, 2, 0), "") << "restarted: " << json;
}

// After step 30, rank 0 evaluates alone for 24 s outside any collective (its thread busy 4/5
// of the time) while rank 1 waits for it in the first all-reduce of the gathering; then both
// all-reduce each batch's loss for 12 s; no optimizer step meanwhile, though the step allowance
// is max(9 s, 5 x p99 step). Rank 0 is busy, not hung; rank 1's agent reports it hung, and the coordinator sets
// the report aside (rank 0 works: its thread runs); nothing restarts.
TEST_F(PyTorchWatchTest, AnEvaluationBetweenStepsIsNotAHang) {
  const std::string id = Id("eval");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(240)), "SUCCEEDED") << JobJson(id);
  const std::string json = JobJson(id);
  EXPECT_THAT(json, Not(HasSubstr("\"kind\": \"hang\""))) << json;
  // Rank 1's wait was reported and judged: the rule, not a long allowance, kept the job going.
  const std::string coordinator_log = cluster_->coordinator().process.Log();
  EXPECT_TRUE(std::regex_search(
      coordinator_log,
      std::regex(absl::StrCat("job ", id, ": rank 1 on \\S+, silent for [0-9.]+ s in phase step, "
                              "waits for rank\\(s\\) 0 writing a checkpoint, evaluating or "
                              "working outside any collective: not a hang"))))
      << coordinator_log;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = cluster_->RankLog(id, 1, rank);
    EXPECT_TRUE(std::regex_search(
        log, std::regex(absl::StrCat("rank ", rank, " evaluated \\d+ batches in \\d+\\.\\d s"))))
        << log;
  }
  EXPECT_EQ(ProgressStep(json), 60) << json;  // watched: its steps were heard
  EXPECT_EQ(cluster_->RankLog(id, 2, 0), "") << "restarted: " << json;
}

// The same training watched, with the watch failing on itself, and unwatched
// (watchdog.python_watch: false, and no trainer.steps): the final parameters are bit for bit the
// same, and each job succeeds.
TEST_F(PyTorchWatchTest, TheWatchNeverChangesResultsEvenWhenItFails) {
  std::map<std::string, std::string> digests;
  for (const char* name : {"watched", "broken", "unwatched"}) {
    const std::string id = Id(name);
    ASSERT_FALSE(id.empty());
    EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(240)), "SUCCEEDED") << name << JobJson(id);
    for (int rank = 0; rank < 2; ++rank) {
      const std::string digest = ParamsDigest(cluster_->RankLog(id, 1, rank));
      EXPECT_FALSE(digest.empty()) << name << " rank " << rank << cluster_->RankLog(id, 1, rank);
      if (rank == 0) digests[name] = digest;
      EXPECT_EQ(digest, digests[name]) << name << ": the replicas differ";
    }
  }
  EXPECT_EQ(digests["broken"], digests["watched"]);
  // Only the working watch reported steps: the broken one stopped before the first, and
  // python_watch: false kept the unwatched job's ranks unwatched.
  EXPECT_EQ(ProgressStep(JobJson(Id("watched"))), 200);
  EXPECT_EQ(ProgressStep(JobJson(Id("broken"))), 0);
  EXPECT_EQ(ProgressStep(JobJson(Id("unwatched"))), 0);
  EXPECT_EQ(digests["unwatched"], digests["watched"]);
  // The broken watch said so once per rank, on stderr; the unwatched job never heard of it.
  for (int rank = 0; rank < 2; ++rank) {
    const std::string broken = cluster_->RankLog(Id("broken"), 1, rank);
    EXPECT_THAT(broken, HasSubstr("unexpected_torch: GradBucket.is_last removed")) << broken;
    EXPECT_THAT(broken, HasSubstr("ringmaster watch: disabled: instrumenting torch: RuntimeError: "
                                  "torch.distributed.GradBucket.is_last is missing"))
        << broken;
    EXPECT_EQ(broken.find("ringmaster watch"), broken.rfind("ringmaster watch")) << broken;
    EXPECT_THAT(cluster_->RankLog(Id("unwatched"), 1, rank), Not(HasSubstr("ringmaster watch")));
  }
}

// A command job without trainer.steps (issue 36: it uses only what it needs) succeeds once
// every rank exits 0. Rank 0's 14 s of work after destroy_process_group, then 14 s more in an
// atexit handler registered before init_process_group (run after the watch's side thread's
// own), each longer than its step allowance, are no hang: its watch reports through both
// (busy outside any collective). Its command is torchrun's (`PYTHON -m torch.distributed.run
// --nproc-per-node=1 --nnodes 2 ddp_train.py`): the agent runs ddp_train.py itself, one rank of
// a world of 2, watched. Its rank log also names the torch the ranks ran: Python()'s.
TEST_F(PyTorchWatchTest, CommandJobWithoutStepsSucceedsWhenItsRanksExitZero) {
  const std::string id = Id("nosteps");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->WaitForEnd(id, absl::Seconds(240)), "SUCCEEDED") << JobJson(id);
  const std::string json = JobJson(id);
  EXPECT_THAT(json, Not(HasSubstr("\"kind\": \"hang\""))) << json;
  const std::string rank0 = cluster_->RankLog(id, 1, 0);
  EXPECT_THAT(rank0, HasSubstr("rank 0 uploaded its results in 14 s"));
  EXPECT_THAT(rank0, HasSubstr("rank 0 finished its exit work in 14 s"));
  EXPECT_EQ(ProgressStep(json), 20) << json;  // watched: its steps were heard
  EXPECT_EQ(cluster_->RankLog(id, 2, 0), "") << "restarted: " << json;
  const std::string log = cluster_->RankLog(id, 1, 1);
  EXPECT_THAT(log, HasSubstr("rank 1 done 20 steps"));
  EXPECT_THAT(log, HasSubstr("rank 1/2 pid"));  // one world: not torchrun's own of one rank
  // The ranks ran the torch this suite means to test (tools/test's torch2 pass: 2.x).
  ASSERT_NE(torch_version_, nullptr);
  EXPECT_THAT(log, HasSubstr(absl::StrCat(" torch ", *torch_version_, " on cpu"))) << log;
}

// Rank 1 waits 20 ms for each batch from its DataLoader: it is the straggler (its step's compute,
// the wait included, is 50 ms to rank 0's 30), and the event says its input is the cause, with
// the wait per step against its peer's (medians); the agent has the gauge for both, rank 1's with
// the wait.
TEST_F(PyTorchWatchTest, AnInputBoundRankIsAStragglerWaitingForItsDataLoader) {
  const std::string id = Id("input");
  ASSERT_FALSE(id.empty());
  const std::string described = DescribedOnceRankOneStraggles(id);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(described, m,
                                std::regex("rank 1 on agent-\\d computes[^\n]*; mostly waiting for "
                                           "input: (\\d+) ms per step for its next batch "
                                           "\\(DataLoader\\), its peers (\\d+) ms")))
      << described;
  std::printf("%s\n", m[0].str().c_str());
  int waits = 0, peers = 0;
  ASSERT_TRUE(absl::SimpleAtoi(m[1].str(), &waits) && absl::SimpleAtoi(m[2].str(), &peers));
  EXPECT_GE(waits, 15);  // each batch sleeps 20 ms (the first step's wait is not counted)
  EXPECT_LT(peers, 10);
  const std::string pages = AgentMetrics();
  auto input = [&](int rank) {  // NaN where the agent has no such series
    return SeriesValue(pages, absl::StrCat("ringmaster_input_seconds{job_id=\"", id,
                                           "\",rank=\"", rank, "\"}"));
  };
  ASSERT_FALSE(std::isnan(input(0))) << pages;
  EXPECT_GE(input(1), 0.015) << pages;  // its last step's wait: the sleep at least
  // (Rank 0's is one step's too: a scheduling delay may show there; its median is `peers`.)
  EXPECT_EQ(cluster_->Ctl({"cancel", id}).exit_code, 0);
}

}  // namespace
}  // namespace ringmaster::testing
