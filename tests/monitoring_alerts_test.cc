// Ringmaster's alert rules (deploy/prometheus/alert_rules.yml, as written) in a real Prometheus
// over a live cluster (tests/monitoring_stack.h): each alert becomes pending (its expression
// holds; the `for:` durations are minutes) in the fault it is meant for, naming the job, node or
// rank at fault, and is not pending for the same job before the fault. The straggler alert is
// checked by monitoring_panels_test.
#include <signal.h>

#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "agent/testing/memory_cgroup.h"
#include "common/testing/wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/monitoring_stack.h"

namespace ringmaster::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// "{a="x", b="y"} 1.5" per sample, for failure messages.
std::string Format(const std::vector<PromSample>& samples) {
  std::string out;
  for (const PromSample& s : samples) {
    std::vector<std::string> labels;
    for (const auto& [k, v] : s.labels) labels.push_back(absl::StrCat(k, "=\"", v, "\""));
    absl::StrAppend(&out, "{", absl::StrJoin(labels, ", "), "} ", s.value, "\n");
  }
  return out;
}

std::string Label(const std::vector<PromSample>& samples, const std::string& name) {
  return samples.empty() || !samples[0].labels.count(name) ? "" : samples[0].labels.at(name);
}

// Fault injection: a rank throttled like a CPU quota, stopped for `stopped` out of every
// `stopped + running` until destroyed (then continued). The timed waits are the duty cycle
// itself, not a wait for anything to happen.
class Throttle {
 public:
  Throttle(pid_t pid, absl::Duration stopped, absl::Duration running)
      : thread_([=] {
          while (!done_.HasBeenNotified()) {
            kill(pid, SIGSTOP);
            done_.WaitForNotificationWithTimeout(stopped);
            kill(pid, SIGCONT);
            done_.WaitForNotificationWithTimeout(running);
          }
        }) {}
  ~Throttle() {
    done_.Notify();
    thread_.join();
  }

 private:
  absl::Notification done_;
  std::thread thread_;
};

class MonitoringAlertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    TestClusterOptions options;
    // The paused-coordinator case pauses it for 6 s and more: well within this.
    options.agent_flags = {"--coordinator_timeout=60"};
    auto stack = MonitoringStack::Start(TestTempDir() + "/" + name, options);
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = std::move(*stack);
  }
  TestCluster& cluster() { return stack_->cluster(); }
  const PrometheusServer& prom() { return stack_->prometheus(); }
  std::string Describe(const std::string& id) {
    return cluster().Ctl({"describe", "job", id}).output;
  }
  void Cancel(const std::string& id) {
    EXPECT_EQ(cluster().Ctl({"cancel", id}).exit_code, 0);
    EXPECT_EQ(cluster().WaitForEnd(id, absl::Seconds(60)), "CANCELLED");
  }
  std::unique_ptr<MonitoringStack> stack_;
};

// A stopped worker with the watchdog's step allowance set long (the case the alert exists for:
// nothing restarts the job): every rank falls silent and RingmasterJobHung goes pending once the
// silence passes 30 s.
TEST_F(MonitoringAlertsTest, StoppedWorkerThatNothingRecoversRaisesJobHung) {
  auto id = stack_->SubmitAndWaitForSteps(
      "hung", FourRankJob("hung", "builtin: gpt", "watchdog: {hang_timeout: 600}\n"), 4,
      absl::Seconds(120));
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string job = absl::StrCat("job_id=\"", *id, "\"");
  // Healthy and recorded: the rules see the job, and the alert is not pending.
  ASSERT_TRUE(
      prom()
          .WaitForSamples(absl::StrCat("job_id:ringmaster_step_seconds:p99_rate5m{", job, "} > 0"),
                          absl::Seconds(60))
          .ok());
  EXPECT_THAT(stack_->Alerts("RingmasterJobHung", job), IsEmpty());

  const int victim = WorkerPid(cluster().RankLog(*id, 1, 2));
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  auto alert = stack_->WaitForAlert("RingmasterJobHung", job, absl::Seconds(120));
  ASSERT_TRUE(alert.ok()) << alert.status() << Describe(*id);
  EXPECT_EQ(Label(*alert, "severity"), "critical");
  auto silence =
      prom().Query(absl::StrCat("job_id:ringmaster_last_report_age_seconds:max{", job, "}"));
  ASSERT_TRUE(silence.ok() && !silence->empty());
  EXPECT_GT((*silence)[0].value, 30);
  // The alert judged it by the stopped rank's phase, joined from the agents' phase series.
  auto stepping = prom().Query(absl::StrCat("job_id_phase:ringmaster_last_report_age_seconds:max{",
                                            job, ",phase=\"step\"}"));
  ASSERT_TRUE(stepping.ok() && !stepping->empty());
  EXPECT_GT((*stepping)[0].value, 30);
  EXPECT_THAT(Describe(*id), Not(HasSubstr("RESTARTING")));  // nothing recovered it
  kill(victim, SIGCONT);
  Cancel(*id);
}

// A rank throttled after the job set its bandwidth baseline: stopped 38 ms of every 40 ms (a CPU
// quota far below its need), so every collective of its communicator waits for it and the
// job's bus bandwidth falls under half of its own baseline: RingmasterBusBandwidthDropped goes
// pending. A milder throttle (8 ms of 10) sometimes left four ranks sharing two cores through
// shared-memory collectives at 3/4 of their baseline: their healthy collectives already wait
// for descheduled peers. A throttle with long stops between steps would not do either: the
// trainer's collective times do not include the time peers spend waiting outside a collective.
TEST_F(MonitoringAlertsTest, ThrottledRankAfterAHealthyBaselineRaisesBusBandwidthDropped) {
  auto id = stack_->SubmitAndWaitForSteps("busbw", FourRankJob("busbw", "builtin: gpt"), 4,
                                          absl::Seconds(120));
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string job = absl::StrCat("job_id=\"", *id, "\"");
  const std::string current = absl::StrCat(
      "job_id_op_group:ringmaster_collective_busbw_bytes_per_second:median2m{", job, "}");
  const std::string baseline = absl::StrCat(
      "job_id_op_group:ringmaster_collective_busbw_bytes_per_second:median2m_q90_1h{", job, "}");
  // A baseline of 30 s of healthy training (60 rule evaluations) for every op and group.
  ASSERT_TRUE(prom()
                  .WaitForSamples(absl::StrCat("min(count_over_time(", current, "[5m])) >= 60"),
                                  absl::Seconds(120))
                  .ok());
  EXPECT_THAT(stack_->Alerts("RingmasterBusBandwidthDropped", job), IsEmpty());
  auto healthy = prom().Query(absl::StrCat(current, " / ", baseline));

  const int victim = WorkerPid(cluster().RankLog(*id, 1, 1));
  ASSERT_GT(victim, 0);
  std::vector<PromSample> fired;
  {
    Throttle throttle(victim, absl::Milliseconds(38), absl::Milliseconds(2));
    auto alert = stack_->WaitForAlert("RingmasterBusBandwidthDropped", job, absl::Seconds(240));
    auto ratio = prom().Query(absl::StrCat(current, " / ", baseline));
    ASSERT_TRUE(alert.ok()) << alert.status() << "\ncurrent / baseline when healthy:\n"
                            << (healthy.ok() ? Format(*healthy) : "") << "now:\n"
                            << (ratio.ok() ? Format(*ratio) : "");
    fired = *alert;
  }
  EXPECT_EQ(Label(fired, "severity"), "warning");
  EXPECT_FALSE(Label(fired, "op").empty());
  EXPECT_EQ(Label(fired, "group"), "dp0");
  Cancel(*id);
}

// A killed agent: Prometheus cannot scrape it, and RingmasterAgentLost goes pending for its node
// (and only for it).
TEST_F(MonitoringAlertsTest, KilledAgentRaisesAgentLostForItsNode) {
  EXPECT_THAT(stack_->Alerts("RingmasterAgentLost", ""), IsEmpty());
  cluster().agent(1).Signal(SIGKILL);
  ASSERT_TRUE(cluster().agent(1).Wait(absl::Seconds(30)).ok());
  auto alert = stack_->WaitForAlert("RingmasterAgentLost", "node=\"agent-1\"", absl::Seconds(60));
  ASSERT_TRUE(alert.ok()) << alert.status();
  EXPECT_EQ(Label(*alert, "severity"), "critical");
  EXPECT_THAT(stack_->Alerts("RingmasterAgentLost", "node=\"agent-0\""), IsEmpty());
  // The coordinator's view: it declared the node lost too, and names it (which matters where a
  // dead agent's scrape target disappears instead of going down).
  EXPECT_TRUE(stack_
                  ->WaitForAlert("RingmasterAgentLost",
                                 "job=\"ringmaster-coordinator\",node=\"agent-1\"",
                                 absl::Seconds(60))
                  .ok());
}

// The coordinator paused (SIGSTOP) for 6 s, past --lost_after (2.5 s) and the alert's 5 s:
// RingmasterCoordinatorDown goes pending while it is paused (its scrapes fail), and
// RingmasterCoordinatorStalling once it resumed; RingmasterAgentLost for no node (the agents
// heartbeated through the pause).
TEST_F(MonitoringAlertsTest, PausedCoordinatorRaisesCoordinatorDownThenStallingAndLosesNoNode) {
  EXPECT_THAT(stack_->Alerts("RingmasterCoordinatorStalling", ""), IsEmpty());
  // Pending at Prometheus's first evaluations, before its first scrape (absent() holds), until
  // the evaluation after it.
  EXPECT_TRUE(WaitFor([&] { return stack_->Alerts("RingmasterCoordinatorDown", "").empty(); },
                      absl::Seconds(30)));
  const absl::Time paused = absl::Now();
  cluster().coordinator().process.Signal(SIGSTOP);
  auto down = stack_->WaitForAlert("RingmasterCoordinatorDown", "job=\"ringmaster-coordinator\"",
                                   absl::Seconds(30));
  EXPECT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(Label(down.ok() ? *down : std::vector<PromSample>{}, "severity"), "critical");
  // The length of the pause is the fault itself, not a wait for something to happen.
  absl::SleepFor(paused + absl::Seconds(6) - absl::Now());
  cluster().coordinator().process.Signal(SIGCONT);
  auto alert = stack_->WaitForAlert("RingmasterCoordinatorStalling",
                                    "job=\"ringmaster-coordinator\"", absl::Seconds(60));
  ASSERT_TRUE(alert.ok()) << alert.status();
  EXPECT_EQ(Label(*alert, "severity"), "warning");
  // The stall and any loss it caused would be in the same scrape, and so in the same evaluation.
  const std::vector<PromSample> lost = stack_->Alerts("RingmasterAgentLost", "");
  EXPECT_THAT(lost, IsEmpty()) << Format(lost) << cluster().coordinator().process.Log();
}

// A worker the kernel's OOM killer ends (the test worker touching 4 GiB in a 256 MiB memory cgroup
// the agents are moved into): RingmasterWorkerOutOfMemory goes pending for its node, and not for
// the other. Skipped where this process cannot make a memory cgroup.
TEST_F(MonitoringAlertsTest, OomKilledWorkerRaisesWorkerOutOfMemoryForItsNode) {
  auto cgroup = agent::MemoryCgroup::Make("ringmaster-monitoring", 256 << 20);
  if (!cgroup.ok()) GTEST_SKIP() << cgroup.status();
  EXPECT_THAT(stack_->Alerts("RingmasterWorkerOutOfMemory", ""), IsEmpty());
  for (int i = 0; i < cluster().agent_count(); ++i) {
    ASSERT_TRUE((*cgroup)->Join(cluster().agent(i).pid()).ok());
  }
  const std::string id = cluster().Submit(
      "oom",
      absl::StrCat("name: oom\nnodes: 1\ndevices_per_node: 1\ntrainer:\n  command: [\"",
                   TestCluster::Runfile("agent/testing/test_worker"),
                   "\", \"--eat_memory_mb=4096\"]\n  steps: 1\n", "restart: {max_restarts: 0}\n"));
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(cluster().WaitForEnd(id, absl::Seconds(60)), "FAILED") << Describe(id);
  const std::string described = Describe(id);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      described, m,
      std::regex("rank 0 on (agent-\\d) was killed by signal 9: likely out of memory")))
      << described;
  const std::string node = m[1].str();
  auto alert = stack_->WaitForAlert("RingmasterWorkerOutOfMemory",
                                    absl::StrCat("node=\"", node, "\""), absl::Seconds(60));
  ASSERT_TRUE(alert.ok()) << alert.status() << described;
  EXPECT_EQ(Label(*alert, "severity"), "warning");
  const std::string other = node == "agent-0" ? "agent-1" : "agent-0";
  EXPECT_THAT(stack_->Alerts("RingmasterWorkerOutOfMemory", absl::StrCat("node=\"", other, "\"")),
              IsEmpty());
}

// A job whose step 5 has NaN gradients fails for good (exit 78, no restart despite its
// max_restarts): RingmasterJobFailed fires for it at once (no `for:`), naming it.
TEST_F(MonitoringAlertsTest, NonFiniteStepRaisesJobFailed) {
  const std::string id =
      cluster().Submit("nan", FourRankJob("nan", TrainerCommand({"--nan_gradients_at_step=5"}),
                                          "restart: {max_restarts: 3}\n"));
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(cluster().WaitForEnd(id, absl::Seconds(120)), "FAILED") << Describe(id);
  EXPECT_THAT(Describe(id), HasSubstr("step 5: the gradient norm is nan"));
  EXPECT_THAT(Describe(id), HasSubstr("(fatal: no restart)"));
  auto alert = stack_->WaitForAlert("RingmasterJobFailed", absl::StrCat("job_id=\"", id, "\""),
                                    absl::Seconds(60));
  ASSERT_TRUE(alert.ok()) << alert.status() << Describe(id);
  EXPECT_EQ(Label(*alert, "severity"), "critical");
  EXPECT_EQ(Label(*alert, "alertstate"), "firing");  // no `for:`
}

// A job that crashes after its second checkpoint in every generation: it restarts again and
// again from the same checkpoint, so RingmasterRestartLoop goes pending, and its newest
// checkpoint ages past three of its intervals, so RingmasterCheckpointStale does too. (Rank 0
// is slowed 100x so that its checkpoints, 100 steps apart, are seconds apart on any machine
// (about 4 s here): Prometheus must see both timestamps for the interval, and each passes
// through the agent's summary, the coordinator's once-a-second gauge refresh and the scrape; at
// 40x, about 1.6 s apart, a scrape sometimes saw only the second.)
TEST_F(MonitoringAlertsTest, CrashLoopRaisesRestartLoopAndCheckpointStale) {
  const std::string yaml = FourRankJob(
      "loop", TrainerCommand({"--exit_after_step=250", "--slow_rank=0", "--slow_factor=100"}),
      absl::StrCat("checkpoint: {dir: ", cluster().dir(), "/ckpt, every_steps: 100, keep: 3}\n",
                   "restart: {max_restarts: 100}\n"));
  const std::string id = cluster().Submit("loop", yaml);
  ASSERT_FALSE(id.empty());
  const std::string job = absl::StrCat("job_id=\"", id, "\"");
  auto loop = stack_->WaitForAlert("RingmasterRestartLoop", job, absl::Seconds(240));
  ASSERT_TRUE(loop.ok()) << loop.status() << Describe(id);
  EXPECT_EQ(Label(*loop, "severity"), "critical");
  auto stale = stack_->WaitForAlert("RingmasterCheckpointStale", job, absl::Seconds(240));
  ASSERT_TRUE(stale.ok()) << stale.status() << Describe(id);
  EXPECT_EQ(Label(*stale, "severity"), "warning");
  // The checkpoint it keeps resuming from is step 200, 100 steps after the one before.
  auto step = prom().Query(absl::StrCat("ringmaster_job_checkpoint_step{", job, "}"));
  ASSERT_TRUE(step.ok() && !step->empty());
  EXPECT_EQ((*step)[0].value, 200);
  Cancel(id);
}

}  // namespace
}  // namespace ringmaster::testing
