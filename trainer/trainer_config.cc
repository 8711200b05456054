#include "trainer/trainer_config.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_contents.h"
#include "common/status.h"
#include "coordinator/spec_validation.h"
#include "ctl/job_yaml.h"
#include "google/protobuf/util/json_util.h"
#include "spec/elastic.h"
#include "trainer/model/pipeline_partition.h"

namespace ringmaster::trainer {
namespace {

absl::StatusOr<v1::JobSpec> ReadSpec(const EnvLookup& env, const TrainerFlags& flags) {
  v1::JobSpec spec;
  if (std::optional<std::string> json = env("RINGMASTER_JOB_SPEC_JSON"); json.has_value()) {
    auto status = google::protobuf::util::JsonStringToMessage(*json, &spec);
    if (!status.ok()) {
      return FieldError("RINGMASTER_JOB_SPEC_JSON",
                        absl::StrCat("is not a JobSpec: ", status.ToString()));
    }
    return spec;
  }
  if (flags.spec_file.empty()) {
    return FieldError("--spec", "is required when RINGMASTER_JOB_SPEC_JSON is not set (run under "
                                "an agent, or pass a job file)");
  }
  absl::StatusOr<std::string> text = ReadFileContents(flags.spec_file);
  if (!text.ok()) return FieldError("--spec", text.status().message());
  return ctl::ParseJobYaml(*text, flags.spec_file);
}

absl::StatusOr<int> IntEnv(const EnvLookup& env, const char* name, int fallback) {
  std::optional<std::string> value = env(name);
  if (!value.has_value()) return fallback;
  int n = 0;
  if (!absl::SimpleAtoi(*value, &n)) {
    return FieldError(name, absl::StrCat("must be an integer, got \"", *value, "\""));
  }
  return n;
}

absl::StatusOr<RankPlace> ReadPlace(const EnvLookup& env) {
  RankPlace p;
  ASSIGN_OR_RETURN(p.rank, IntEnv(env, "RANK", 0));
  ASSIGN_OR_RETURN(p.world, IntEnv(env, "WORLD_SIZE", 1));
  ASSIGN_OR_RETURN(p.tp_rank, IntEnv(env, "RINGMASTER_TP_RANK", 0));
  ASSIGN_OR_RETURN(p.tp, IntEnv(env, "RINGMASTER_TP_SIZE", 1));
  ASSIGN_OR_RETURN(p.pp_rank, IntEnv(env, "RINGMASTER_PP_RANK", 0));
  ASSIGN_OR_RETURN(p.pp, IntEnv(env, "RINGMASTER_PP_SIZE", 1));
  ASSIGN_OR_RETURN(p.dp_rank, IntEnv(env, "RINGMASTER_DP_RANK", p.rank));
  ASSIGN_OR_RETURN(p.dp, IntEnv(env, "RINGMASTER_DP_SIZE", p.world));
  if (p.world < 1 || p.rank < 0 || p.rank >= p.world) {
    return FieldError("RANK", absl::StrCat("must be in [0, WORLD_SIZE = ", p.world, "), got ",
                                           p.rank));
  }
  if (int64_t{p.tp} * p.pp * p.dp != p.world) {
    return FieldError("WORLD_SIZE", absl::StrCat("must equal tp*pp*dp = ", p.tp, "*", p.pp, "*",
                                                 p.dp, ", got ", p.world));
  }
  if ((p.dp_rank * p.pp + p.pp_rank) * p.tp + p.tp_rank != p.rank) {
    return FieldError("RANK", absl::StrCat("must be (dp*PP + pp)*TP + tp for tp=", p.tp_rank,
                                           " pp=", p.pp_rank, " dp=", p.dp_rank, ", got ",
                                           p.rank));
  }
  return p;
}

// Every rank checks the fault injection's rank, so a bad one fails them all at once.
absl::Status CheckNanGradientsRank(const TrainerFlags& flags, const RankPlace& place) {
  const int rank = flags.nan_gradients_rank;
  if (flags.nan_gradients_at_step <= 0 || rank == -1) return absl::OkStatus();
  if (rank < -1 || rank >= place.world) {
    return FieldError("--nan_gradients_rank",
                      absl::StrCat("must be -1 (every last-stage rank) or a rank < WORLD_SIZE = ",
                                   place.world, ", got ", rank));
  }
  const RankPlace chosen = RankPlace::Of(rank, place.tp, place.pp, place.dp);
  if (!chosen.last_stage()) {
    return FieldError("--nan_gradients_rank",
                      absl::StrCat("rank ", rank, " is on pipeline stage ", chosen.pp_rank, " of ",
                                   place.pp, "; only the last stage has a loss gradient"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainerConfig> LoadTrainerConfig(const EnvLookup& env, const TrainerFlags& flags) {
  TrainerConfig c;
  c.flags = flags;
  ASSIGN_OR_RETURN(c.spec, ReadSpec(env, flags));
  const bool standalone = !env("RINGMASTER_AGENT_SOCKET").has_value();
  if (standalone) {
    // One rank runs the whole job's global batch; the spec's nodes and layout do not apply.
    c.spec.set_nodes(1);
    c.spec.set_devices_per_node(1);
    c.spec.mutable_parallelism()->set_tensor(1);
    c.spec.mutable_parallelism()->set_pipeline(1);
    c.spec.mutable_parallelism()->set_data(1);
  } else {
    ASSIGN_OR_RETURN(c.place, ReadPlace(env));
  }
  // The trainer also runs as a command job (command: [".../trainer", "--flag", ...]); the model,
  // batch and optimizer fields are then checked as for a builtin "gpt" job.
  if (c.spec.trainer().has_command()) c.spec.mutable_trainer()->set_builtin("gpt");
  coordinator::ApplyDefaults(&c.spec);
  RETURN_IF_ERROR(coordinator::ValidateJobSpec(c.spec));
  const v1::TrainerSpec& t = c.spec.trainer();
  if (t.zero_stage() < 0 || t.zero_stage() > 3) {
    return FieldError("trainer.zero_stage",
                      absl::StrCat("must be 0, 1, 2 or 3, got ", t.zero_stage()));
  }
  const v1::ModelSpec& m = t.model();
  ASSIGN_OR_RETURN(c.model,
                   GptConfig::Create(m.layers(), m.d_model(), m.heads(), m.seq_len(), m.vocab()));
  // The layout must split this model: every rank's shard (the partition is the same on all).
  RETURN_IF_ERROR(
      MakeModelShard(c.model, c.place.tp_rank, c.place.tp, c.place.pp_rank, c.place.pp).status());
  RETURN_IF_ERROR(CheckNanGradientsRank(flags, c.place));
  ASSIGN_OR_RETURN(c.desired_dp, IntEnv(env, "RINGMASTER_DESIRED_DP_SIZE", c.place.dp));
  if (c.desired_dp < c.place.dp) {
    return FieldError("RINGMASTER_DESIRED_DP_SIZE",
                      absl::StrCat("must be at least RINGMASTER_DP_SIZE (", c.place.dp, "), got ",
                                   c.desired_dp));
  }
  c.micro_batch = t.batch().micro_batch();
  // Keeping the per-replica batch, each replica takes the full size's micro-batches.
  const bool per_replica = spec::KeepsPerReplicaBatch(c.spec);
  const int64_t per_step = int64_t{c.micro_batch} * (per_replica ? c.desired_dp : c.place.dp);
  if (t.batch().global_batch() % per_step != 0) {
    return FieldError("trainer.batch.global_batch",
                      absl::StrCat("must be divisible by micro_batch * data (", per_step,
                                   per_replica ? ", the full degree's with elastic_batch "
                                                 "per_replica"
                                               : "",
                                   "), got ", t.batch().global_batch()));
  }
  c.micro_steps = static_cast<int>(t.batch().global_batch() / per_step);
  c.lr_scale = spec::LrScale(c.spec, c.desired_dp, c.place.dp);
  c.lr_scale_warmup = per_replica ? spec::ElasticWarmupSteps(c.spec) : 0;
  c.steps = t.steps();
  const v1::OptimizerSpec& o = t.optimizer();
  c.schedule = LrSchedule{o.lr(), o.min_lr(), o.warmup_steps(), c.steps};
  c.adamw = AdamWConfig{o.beta1(), o.beta2(), o.epsilon(), o.weight_decay()};
  c.clip_grad_norm = o.clip_grad_norm();
  c.zero_stage = t.zero_stage();
  c.data_path = t.data().path();
  c.data_seed = t.data().seed();
  c.checkpoint.dir = env("RINGMASTER_CHECKPOINT_DIR").value_or(c.spec.checkpoint().dir());
  c.checkpoint.every_steps = c.spec.checkpoint().every_steps();
  c.checkpoint.keep = c.spec.checkpoint().keep();
  c.checkpoint.max_consecutive_failures = c.spec.checkpoint().max_consecutive_failures();
  c.host_address = env("RINGMASTER_HOST_ADDRESS").value_or("127.0.0.1");
  c.node = env("RINGMASTER_NODE").value_or("");
  ASSIGN_OR_RETURN(c.local_world, IntEnv(env, "LOCAL_WORLD_SIZE", 1));
  ASSIGN_OR_RETURN(int generation, IntEnv(env, "RINGMASTER_GENERATION", 0));
  c.generation = generation;
  c.checkpoint.job = env("RINGMASTER_JOB").value_or("");
  c.checkpoint.generation = generation;
  return c;
}

}  // namespace ringmaster::trainer
