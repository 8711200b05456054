#include "spec/elastic.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spec/trainer_keys.h"

namespace ringmaster::spec {

int MinNodes(const v1::JobSpec& spec) {
  return spec.min_nodes() > 0 ? spec.min_nodes() : spec.nodes();
}

bool KeepsPerReplicaBatch(const v1::JobSpec& spec) {
  return spec.elastic_batch() == v1::ELASTIC_BATCH_PER_REPLICA;
}

const char* ElasticBatchName(const v1::JobSpec& spec) {
  return KeepsPerReplicaBatch(spec) ? "per_replica" : "global";
}

double LrScale(const v1::JobSpec& spec, int full_data, int data) {
  if (!KeepsPerReplicaBatch(spec) || full_data < 1 || data < 1) return 1.0;
  return static_cast<double>(data) / static_cast<double>(full_data);
}

int64_t ElasticWarmupSteps(const v1::JobSpec& spec) {
  if (spec.has_elastic_warmup_steps()) return std::max(0, spec.elastic_warmup_steps());
  if (ReadsBuiltinKeys(spec.trainer())) return std::max(0, spec.trainer().optimizer().warmup_steps());
  return 0;
}

std::vector<std::pair<std::string, std::string>> ElasticKeyProblems(const v1::JobSpec& spec) {
  std::vector<std::pair<std::string, std::string>> problems;
  if (!v1::ElasticBatch_IsValid(spec.elastic_batch())) {
    problems.emplace_back("elastic_batch", absl::StrCat("must be global or per_replica, got ",
                                                        static_cast<int>(spec.elastic_batch())));
  }
  constexpr int32_t kMaxWarmup = 1000000000;
  if (spec.has_elastic_warmup_steps() &&
      (spec.elastic_warmup_steps() < 0 || spec.elastic_warmup_steps() > kMaxWarmup)) {
    problems.emplace_back("elastic_warmup_steps", absl::StrCat("must be in [0, ", kMaxWarmup,
                                                               "], got ",
                                                               spec.elastic_warmup_steps()));
  }
  const double wait = spec.elastic_wait_seconds();
  if (!std::isfinite(wait) || wait < 0 || wait > kMaxElasticWaitSeconds) {
    problems.emplace_back("elastic_wait_seconds",
                          absl::StrCat("must be a number of seconds in [0, ",
                                       kMaxElasticWaitSeconds, "], got ", wait));
  }
  return problems;
}

int Accumulation(const v1::JobSpec& spec, int full_data, int data) {
  if (full_data < 1 || data < 1) return 0;
  // Each replica keeps its full-size batch: the degree that decides it is the full one.
  if (KeepsPerReplicaBatch(spec)) {
    if (!ReadsBuiltinKeys(spec.trainer())) return 1;
    data = full_data;
  }
  if (ReadsBuiltinKeys(spec.trainer())) {
    const int64_t per_step = int64_t{spec.trainer().batch().micro_batch()} * data;
    const int64_t global = spec.trainer().batch().global_batch();
    if (per_step < 1 || global < 1 || global % per_step != 0) return 0;
    return static_cast<int>(global / per_step);
  }
  return full_data % data == 0 ? full_data / data : 0;
}

std::vector<ElasticSize> ReachableSizes(const v1::JobSpec& spec, int full_data) {
  std::vector<ElasticSize> sizes;
  const int nodes = spec.nodes();
  if (nodes < 1 || full_data < 1) return sizes;
  const int lowest = std::max(1, std::min(MinNodes(spec), nodes));
  for (int n = nodes; n >= lowest; --n) {
    const int64_t scaled = int64_t{full_data} * n;
    if (scaled % nodes != 0) continue;
    const int data = static_cast<int>(scaled / nodes);
    const int accumulation = Accumulation(spec, full_data, data);
    // The full size is the job's own: its rules are ValidateJobSpec's, not these.
    if (n != nodes && accumulation == 0) continue;
    sizes.push_back({n, data, accumulation == 0 ? 1 : accumulation});
  }
  return sizes;
}

std::string DescribeSizes(const std::vector<ElasticSize>& sizes) {
  std::string out;
  for (const ElasticSize& s : sizes) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", s.nodes, " node", s.nodes == 1 ? "" : "s",
                    " (DP ", s.data, ", accumulation ", s.accumulation, ")");
  }
  return out;
}

std::string UnreachableRule(const v1::JobSpec& spec, int full_data) {
  if (MinNodes(spec) >= spec.nodes() || full_data < 1) return "";
  if (ReachableSizes(spec, full_data).size() > 1) return "";
  const std::string divides =
      KeepsPerReplicaBatch(spec)
          ? absl::StrCat("trainer.batch.global_batch (", spec.trainer().batch().global_batch(),
                         ") with micro_batch (", spec.trainer().batch().micro_batch(),
                         ") at the full degree")
      : ReadsBuiltinKeys(spec.trainer())
          ? absl::StrCat("trainer.batch.global_batch (", spec.trainer().batch().global_batch(),
                         ") with micro_batch (", spec.trainer().batch().micro_batch(), ")")
          : absl::StrCat(
                "the full degree (each replica must take a whole multiple of its "
                "batch)");
  return absl::StrCat("must leave a size below nodes reachable: only the data-parallel degree (",
                      full_data, " at ", spec.nodes(), " nodes) shrinks with the nodes, and at ",
                      "no size in [", spec.min_nodes(), ", ", spec.nodes() - 1,
                      "] nodes is it a whole number dividing ", divides, ", got ",
                      spec.min_nodes());
}

absl::Status CheckReachable(const v1::JobSpec& spec, int full_data) {
  const std::string rule = UnreachableRule(spec, full_data);
  return rule.empty() ? absl::OkStatus() : FieldError("min_nodes", rule);
}

}  // namespace ringmaster::spec
