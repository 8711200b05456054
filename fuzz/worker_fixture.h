// What the worker-side fuzz targets (worker_api_fuzz, report_datagram_fuzz) share: a real
// WorkerService over a real NodeAgent, RankMetrics and LocalWatchdog, with one worker running
// (launched at start-up through fuzz/fake_launcher.h: no process), and that worker's identity,
// token included, as the agent put it into its environment; and RenderOutputs, what both render
// after each input.
//
// Ownership: MakeWorkerFixture builds one per process and never frees it (libFuzzer runs until
// exit; the agent's threads use it). Not thread-safe while being built. A setup failure (the
// agent launches nothing within 20 s) is a FUZZ_CHECK abort: a broken harness, not a finding.
#ifndef RINGMASTER_FUZZ_WORKER_FIXTURE_H_
#define RINGMASTER_FUZZ_WORKER_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/node_agent.h"
#include "agent/worker_service.h"
#include "common/clock.h"
#include "fuzz/fake_launcher.h"
#include "fuzz/fuzz_agent.h"
#include "fuzz/fuzz_check.h"
#include "proto/ringmaster/v1/worker.pb.h"

namespace ringmaster::fuzz {

// The running worker's job, generation and rank.
inline constexpr char kWorkerJob[] = "fuzz-job";
inline constexpr int64_t kWorkerGeneration = 3;
inline constexpr int kWorkerRank = 1;

struct WorkerFixture {
  AgentParts parts;  // what the node is built from
  std::unique_ptr<agent::NodeAgent> node;
  std::unique_ptr<agent::WorkerService> service;
  FakeLauncher* launcher = nullptr;
  v1::WorkerIdentity worker;  // the running worker's identity, token included
};

// `name` names the work directory (fuzz_agent.h). The agent is never connected, so what it
// forwards goes nowhere.
inline WorkerFixture* MakeWorkerFixture(const std::string& name) {
  auto* f = new WorkerFixture;
  InitAgentParts(name, "cpu:2", &f->parts);
  f->node = std::make_unique<agent::NodeAgent>(f->parts.options, f->parts.metrics.get(),
                                               f->parts.watchdog.get(), Clock::Real(),
                                               FakeLauncher::Factory(&f->launcher));
  f->service = std::make_unique<agent::WorkerService>(f->node.get(), f->parts.metrics.get(),
                                                      f->parts.watchdog.get());

  v1::CoordinatorMessage launch;
  v1::LaunchWorkers* l = launch.mutable_launch();
  l->mutable_job()->set_job_id(kWorkerJob);
  l->mutable_job()->set_generation(kWorkerGeneration);
  l->mutable_spec()->set_name("fuzz");
  l->mutable_spec()->mutable_trainer()->mutable_command()->add_argv("/nonexistent/worker");
  v1::RankAssignment* a = l->add_assignments();
  a->set_rank(kWorkerRank);
  a->set_local_device(1);
  l->set_world_size(2);
  l->set_master_addr("127.0.0.1");
  f->node->OnCommand(launch);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::string token;
  while (token.empty()) {
    for (const auto& [pid, spec] : f->launcher->Specs()) {
      auto it = spec.env.find("RINGMASTER_WORKER_TOKEN");
      if (it != spec.env.end()) token = it->second;
    }
    FUZZ_CHECK(!token.empty() || absl::Now() < deadline, "the agent did not launch the worker");
    if (token.empty()) absl::SleepFor(absl::Milliseconds(1));
  }
  f->worker.set_job_id(kWorkerJob);
  f->worker.set_generation(kWorkerGeneration);
  f->worker.set_rank(kWorkerRank);
  f->worker.set_token(token);
  return f;
}

// Renders what the calls so far changed: what Prometheus would scrape (the agent's /metrics),
// and what the agent would send the coordinator (its step summaries).
inline void RenderOutputs(WorkerFixture* f) {
  (void)f->parts.registry.RenderText();
  f->parts.metrics->Refresh();
  (void)f->parts.metrics->TakeSummaries();
}

}  // namespace ringmaster::fuzz

#endif  // RINGMASTER_FUZZ_WORKER_FIXTURE_H_
