#include "common/testing/prometheus_server.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/http_client.h"
#include "common/testing/json_struct.h"
#include "common/testing/wait.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace ringmaster::testing {
using google::protobuf::Struct;
using google::protobuf::Value;

absl::StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::Start(
    const std::vector<std::string>& targets, absl::Duration scrape_interval,
    const std::vector<std::string>& rule_files) {
  static int instance = 0;
  std::string dir = absl::StrCat(TestTempDir(), "/prometheus", instance++);
  std::string config_path = dir + ".yml";
  {
    std::ofstream config(config_path);
    std::string interval = absl::StrCat(absl::ToInt64Milliseconds(scrape_interval), "ms");
    config << "global:\n  scrape_interval: " << interval << "\n  evaluation_interval: " << interval
           << "\n";
    if (!rule_files.empty()) {
      config << "rule_files:\n";
      for (const auto& f : rule_files) config << "  - " << f << "\n";
    }
    config << "scrape_configs:\n  - job_name: ringmaster\n    static_configs:\n      - targets: ["
           << absl::StrJoin(
                  targets, ", ",
                  [](std::string* out, const std::string& t) { absl::StrAppend(out, "'", t, "'"); })
           << "]\n";
  }
  return StartWithConfigFile(config_path);
}

absl::StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::StartWithConfigFile(
    const std::string& config_path) {
  static int instance = 0;
  const std::string dir = absl::StrCat(config_path, ".server", instance++);
  // Prometheus cannot report the port it bound, so pick one and retry if another process took it.
  absl::Status last = absl::UnavailableError("not started");
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto port = PickUnusedPort();
    if (!port.ok()) return port.status();
    auto process = Subprocess::Start(
        {"prometheus", "--config.file=" + config_path,
         absl::StrCat("--storage.tsdb.path=", dir, "-data-", attempt),
         absl::StrCat("--web.listen-address=127.0.0.1:", *port), "--log.level=warn"},
        absl::StrCat(dir, ".log"));
    if (!process.ok()) return process.status();
    bool ready = WaitFor(
        [&] {
          if (!process->Running()) return true;  // Exited: stop waiting, handled below.
          auto got = HttpGet("127.0.0.1", *port, "/-/ready", absl::Seconds(2));
          return got.ok() && got->status == 200;
        },
        absl::Seconds(60));
    if (ready && process->Running()) {
      return std::unique_ptr<PrometheusServer>(new PrometheusServer(std::move(*process), *port));
    }
    last = absl::UnavailableError(
        absl::StrCat("prometheus did not become ready on port ", *port, ":\n", process->Log()));
  }
  return last;
}

absl::StatusOr<std::vector<PromSample>> PrometheusServer::Query(const std::string& promql) const {
  auto got = HttpGet("127.0.0.1", port_, "/api/v1/query?query=" + UrlEncode(promql));
  if (!got.ok()) return got.status();
  Struct reply;
  if (!google::protobuf::util::JsonStringToMessage(got->body, &reply).ok()) {
    return absl::InternalError(absl::StrCat("unparseable reply: ", got->body));
  }
  const Value* status = Field(reply, "status");
  if (status == nullptr || status->string_value() != "success") {
    const Value* error = Field(reply, "error");
    return absl::InvalidArgumentError(absl::StrCat(
        "query \"", promql, "\" failed: ", error == nullptr ? got->body : error->string_value()));
  }
  std::vector<PromSample> out;
  const Value* data = Field(reply, "data");
  const Value* result = data == nullptr ? nullptr : Field(data->struct_value(), "result");
  if (result == nullptr) return out;
  const Value* type = Field(data->struct_value(), "resultType");
  if (type != nullptr && type->string_value() == "scalar") {
    PromSample s;
    const auto& pair = result->list_value().values();
    if (pair.size() == 2) absl::SimpleAtod(pair[1].string_value(), &s.value);
    out.push_back(s);
    return out;
  }
  for (const Value& item : result->list_value().values()) {
    PromSample s;
    const Value* metric = Field(item.struct_value(), "metric");
    if (metric != nullptr) {
      for (const auto& [k, v] : metric->struct_value().fields()) s.labels[k] = v.string_value();
    }
    const Value* value = Field(item.struct_value(), "value");
    if (value != nullptr && value->list_value().values_size() == 2) {
      absl::SimpleAtod(value->list_value().values(1).string_value(), &s.value);
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::vector<PromSample>> PrometheusServer::WaitForSamples(
    const std::string& promql, absl::Duration timeout) const {
  absl::StatusOr<std::vector<PromSample>> last = absl::DeadlineExceededError("no samples yet");
  bool found = WaitFor(
      [&] {
        last = Query(promql);
        // A rejected expression will not become valid: stop waiting.
        if (!last.ok()) return last.status().code() == absl::StatusCode::kInvalidArgument;
        return !last->empty();
      },
      timeout);
  if (!found) {
    return absl::DeadlineExceededError(
        absl::StrCat("no samples for \"", promql, "\" within ", absl::FormatDuration(timeout)));
  }
  return last;
}

}  // namespace ringmaster::testing
