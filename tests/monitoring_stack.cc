#include "tests/monitoring_stack.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/wait.h"

namespace ringmaster::testing {
namespace {

constexpr char kConfigDir[] = "deploy/prometheus";

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Replaces the one occurrence of `from` in `text`; FAILED_PRECONDITION unless there is exactly
// one (the configuration changed shape: update this derivation).
absl::Status ReplaceOnce(std::string* text, const std::string& from, const std::string& to) {
  const size_t at = text->find(from);
  if (at == std::string::npos || text->find(from, at + 1) != std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat("expected exactly one \"", from, "\" in ", kConfigDir, "/prometheus.yml"));
  }
  text->replace(at, from.size(), to);
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MonitoringStack>> MonitoringStack::Start(
    const std::string& dir, const TestClusterOptions& options) {
  std::unique_ptr<MonitoringStack> stack(new MonitoringStack());
  auto cluster = TestCluster::Start(dir, options);
  if (!cluster.ok()) return cluster.status();
  stack->cluster_ = std::move(*cluster);
  TestCluster& c = *stack->cluster_;

  const std::string prom_dir = dir + "/prometheus";
  std::filesystem::create_directories(prom_dir + "/targets");
  auto config = ReadFile(absl::StrCat(kConfigDir, "/prometheus.yml"));
  if (!config.ok()) return config.status();
  if (auto s = ReplaceOnce(&*config, "scrape_interval: 15s",
                           absl::StrCat("scrape_interval: ", kScrapeInterval));
      !s.ok()) {
    return s;
  }
  if (auto s = ReplaceOnce(&*config, "evaluation_interval: 15s",
                           absl::StrCat("evaluation_interval: ", kEvaluationInterval));
      !s.ok()) {
    return s;
  }
  stack->config_ = *config;
  if (auto s = WriteFile(prom_dir + "/prometheus.yml", *config); !s.ok()) return s;
  for (const char* rules : {"recording_rules.yml", "alert_rules.yml"}) {
    std::error_code ec;
    std::filesystem::copy_file(absl::StrCat(kConfigDir, "/", rules), prom_dir + "/" + rules,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat("copying ", rules, ": ", ec.message()));
  }
  if (auto s = WriteFile(
          prom_dir + "/targets/coordinator.json",
          absl::StrCat("[{\"targets\": [\"127.0.0.1:", c.coordinator().metrics_port, "\"]}]\n"));
      !s.ok()) {
    return s;
  }
  std::vector<std::string> agents;
  for (int i = 0; i < c.agent_count(); ++i) {
    const int port = c.AgentMetricsPort(i);
    if (port == 0) return absl::InternalError(absl::StrCat("agent ", i, " logged no metrics port"));
    agents.push_back(absl::StrCat("{\"targets\": [\"127.0.0.1:", port,
                                  "\"], \"labels\": {\"node\": \"agent-", i, "\"}}"));
  }
  if (auto s = WriteFile(prom_dir + "/targets/agents.json",
                         absl::StrCat("[", absl::StrJoin(agents, ",\n "), "]\n"));
      !s.ok()) {
    return s;
  }

  auto prometheus = PrometheusServer::StartWithConfigFile(prom_dir + "/prometheus.yml");
  if (!prometheus.ok()) return prometheus.status();
  stack->prometheus_ = std::move(*prometheus);
  const std::string all_up =
      absl::StrCat("count(up{job=\"ringmaster-agent\"} == 1) == ", c.agent_count(),
                   " and on() count(up{job=\"ringmaster-coordinator\"} == 1) == 1");
  auto up = stack->prometheus_->WaitForSamples(all_up, absl::Seconds(60));
  if (!up.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("Prometheus did not scrape every target: ", up.status().ToString(), "\n",
                     stack->prometheus_->Log()));
  }
  return stack;
}

std::vector<PromSample> MonitoringStack::Alerts(const std::string& alertname,
                                                const std::string& matchers) const {
  auto got = prometheus_->Query(absl::StrCat("ALERTS{alertname=\"", alertname, "\"",
                                             matchers.empty() ? "" : ",", matchers, "}"));
  return got.ok() ? *got : std::vector<PromSample>{};
}

absl::StatusOr<std::vector<PromSample>> MonitoringStack::WaitForAlert(
    const std::string& alertname, const std::string& matchers, absl::Duration timeout) const {
  return prometheus_->WaitForSamples(absl::StrCat("ALERTS{alertname=\"", alertname, "\"",
                                                  matchers.empty() ? "" : ",", matchers, "}"),
                                     timeout);
}

absl::StatusOr<std::string> MonitoringStack::SubmitAndWaitForSteps(const std::string& name,
                                                                   const std::string& yaml,
                                                                   int ranks,
                                                                   absl::Duration timeout) {
  const std::string id = cluster_->Submit(name, yaml);
  if (id.empty()) return absl::InternalError(absl::StrCat("submitting ", name, " failed"));
  auto steps = prometheus_->WaitForSamples(
      absl::StrCat("count(ringmaster_step{job_id=\"", id, "\"}) == ", ranks), timeout);
  if (!steps.ok()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "job ", id, " did not report steps from ", ranks, " ranks: ", steps.status().ToString(),
        "\n", cluster_->Ctl({"describe", "job", id}).output));
  }
  return id;
}

std::string FourRankJob(const std::string& name, const std::string& program,
                        const std::string& extra) {
  return absl::StrCat(
      "name: ", name, "\nnodes: 2\ndevices_per_node: 2\n",
      "parallelism: {tensor: 1, pipeline: 1, data: 4}\ntrainer:\n  ", program, "\n",
      "  model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 128}\n",
      "  batch: {micro_batch: 2, global_batch: 8}\n",
      "  optimizer: {lr: 2.0e-3, warmup_steps: 10, weight_decay: 0.1, clip_grad_norm: 1.0}\n",
      "  zero_stage: 1\n  steps: 1000000\n", extra);
}

std::string TrainerCommand(const std::vector<std::string>& flags) {
  std::string out = absl::StrCat("command: [\"", TestCluster::Runfile("trainer/trainer"), "\"");
  for (const std::string& f : flags) absl::StrAppend(&out, ", \"", f, "\"");
  return out + "]";
}

int WorkerPid(const std::string& rank_log) {
  std::smatch m;
  int pid = 0;
  if (std::regex_search(rank_log, m, std::regex("rank \\d+/\\d+ pid (\\d+)"))) {
    (void)absl::SimpleAtoi(m[1].str(), &pid);  // the regex guarantees digits
  }
  return pid;
}

}  // namespace ringmaster::testing
