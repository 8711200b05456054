#include "coordinator/planner.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "coordinator/spec_validation.h"

namespace ringmaster::coordinator {
namespace {

constexpr int64_t kVocabMultiple = 128;
constexpr int kMinLayersPerStage = 4;          // Rule 2.
constexpr int kMicrobatchesPerExtraStage = 4;  // Rule 3: m >= 4 * (PP - 1).
constexpr int kTensorAllReducesPerLayer = 4;   // Two forward, two backward (Megatron-LM).

// Bytes per parameter of the training state, split the way ZeRO shards it.
struct StateBytes {
  int weights;
  int gradients;
  int optimizer;
};

bool IsFp32(const v1::TrainerSpec& trainer) { return trainer.precision() == v1::PRECISION_FP32; }

// Whether the builtin trainer fuses attention: when the job asks, or when it leaves attention
// unset and the fused kernels take it (bf16 and their head sizes: the CUDA device's
// ChooseAttention).
bool FusedAttention(const v1::TrainerSpec& trainer) {
  if (trainer.attention() != v1::ATTENTION_UNSPECIFIED) {
    return trainer.attention() == v1::ATTENTION_FUSED;
  }
  return !IsFp32(trainer) && FusedAttentionTakesHeads(trainer.model());
}

// bf16: bf16 weights and grads, fp32 master weights and two Adam moments (2 + 2 + 12).
// fp32: fp32 weights, grads and two Adam moments (4 + 4 + 8).
StateBytes StateBytesPerParameter(const v1::TrainerSpec& trainer) {
  return IsFp32(trainer) ? StateBytes{4, 4, 8} : StateBytes{2, 2, 12};
}

// Bytes per communicated element: activations and gradients travel in the compute precision.
int ElementBytes(const v1::TrainerSpec& trainer) { return IsFp32(trainer) ? 4 : 2; }

int64_t PaddedVocab(int64_t vocab) {
  return (vocab + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
}

// A double estimate as whole bytes, saturating instead of overflowing.
int64_t ToInt64(double value) {
  if (!(value > 0)) return 0;
  if (value >= static_cast<double>(std::numeric_limits<int64_t>::max())) {
    return std::numeric_limits<int64_t>::max();
  }
  return std::llround(value);
}

std::string HumanBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

// "1 node", "2 nodes".
std::string Count(int64_t count, absl::string_view one, absl::string_view many) {
  return absl::StrCat(count, " ", count == 1 ? one : many);
}

bool IsBuiltin(const v1::JobSpec& spec) {
  return spec.trainer().program_case() == v1::TrainerSpec::kBuiltin;
}

bool LayoutGiven(const v1::ParallelismSpec& p) {
  return p.tensor() != 0 || p.pipeline() != 0 || p.data() != 0;
}

// One candidate layout and everything the planner estimates for it.
struct Candidate {
  int tensor = 1;
  int pipeline = 1;
  int data = 1;
  int microbatches = 0;
  int64_t state_bytes = 0;       // Parameters, gradients, optimizer state per device.
  int64_t activation_bytes = 0;  // One microbatch on the first stage.
  int64_t total_bytes = 0;       // State plus the activations of the microbatches in flight.
  double bubble = 0;
  int64_t tp_bytes = 0;
  int64_t pp_bytes = 0;
  int64_t dp_bytes = 0;
  int broken_rule = 0;    // First of rules 1-3 the layout breaks; 0 if none.
  std::string violation;  // Why, in words.
};

std::string LayoutName(const Candidate& c) {
  return absl::StrCat("TP=", c.tensor, " PP=", c.pipeline, " DP=", c.data);
}

// Rule 4's order: the most data parallelism first; on a tie larger TP (in-node) before PP.
bool Preferred(const Candidate& a, const Candidate& b) {
  const int64_t a_model = int64_t{a.tensor} * a.pipeline;
  const int64_t b_model = int64_t{b.tensor} * b.pipeline;
  if (a_model != b_model) return a_model < b_model;
  return a.tensor > b.tensor;
}

// Defensive checks of what Plan() relies on; ValidateJobSpec has normally refused these already.
absl::Status CheckSpec(const v1::JobSpec& spec) {
  if (spec.nodes() < 1) {
    return FieldError("nodes", absl::StrCat("must be >= 1, got ", spec.nodes()));
  }
  if (spec.devices_per_node() < 1) {
    return FieldError("devices_per_node",
                      absl::StrCat("must be >= 1, got ", spec.devices_per_node()));
  }
  const v1::ParallelismSpec& p = spec.parallelism();
  if (LayoutGiven(p)) {
    if (p.tensor() < 1 || p.pipeline() < 1 || p.data() < 1) {
      return FieldError("parallelism", "set tensor, pipeline and data all >= 1, or none of them");
    }
    const int64_t product = int64_t{p.tensor()} * p.pipeline() * p.data();
    const int64_t world = int64_t{spec.nodes()} * spec.devices_per_node();
    if (product != world) {
      return FieldError("parallelism",
                        absl::StrCat("tensor*pipeline*data (", product,
                                     ") must equal nodes*devices_per_node (", world, ")"));
    }
  }
  if (!IsBuiltin(spec)) return absl::OkStatus();
  const v1::ModelSpec& m = spec.trainer().model();
  const std::pair<const char*, int> positive[] = {
      {"trainer.model.layers", m.layers()},
      {"trainer.model.d_model", m.d_model()},
      {"trainer.model.heads", m.heads()},
      {"trainer.model.seq_len", m.seq_len()},
      {"trainer.model.vocab", m.vocab()},
      {"trainer.batch.micro_batch", spec.trainer().batch().micro_batch()},
      {"trainer.batch.global_batch", spec.trainer().batch().global_batch()},
  };
  for (const auto& [field, value] : positive) {
    if (value < 1) return FieldError(field, absl::StrCat("must be >= 1, got ", value));
  }
  return absl::OkStatus();
}

// Rules 1-3 for one layout of a builtin trainer: the number of the first rule broken and why.
std::pair<int, std::string> FirstBrokenRule(const v1::JobSpec& spec, const Candidate& c) {
  const v1::ModelSpec& model = spec.trainer().model();
  const v1::BatchSpec& batch = spec.trainer().batch();
  if (spec.devices_per_node() % c.tensor != 0) {
    return {1, absl::StrCat("TP=", c.tensor, " does not divide devices_per_node (",
                            spec.devices_per_node(), ")")};
  }
  if (model.heads() % c.tensor != 0) {
    return {1, absl::StrCat("TP=", c.tensor, " does not divide the ", model.heads(), " heads")};
  }
  if (model.layers() % c.pipeline != 0) {
    return {2, absl::StrCat("PP=", c.pipeline, " does not divide the ", model.layers(),
                            model.layers() == 1 ? " layer" : " layers")};
  }
  if (c.pipeline > 1 && model.layers() / c.pipeline < kMinLayersPerStage) {
    return {2, absl::StrCat("PP=", c.pipeline, " leaves ", model.layers() / c.pipeline,
                            model.layers() / c.pipeline == 1 ? " layer" : " layers",
                            " per stage, fewer than ", kMinLayersPerStage)};
  }
  const int64_t per_step = int64_t{batch.micro_batch()} * c.data;
  if (batch.global_batch() % per_step != 0) {
    return {3, absl::StrCat("global_batch ", batch.global_batch(),
                            " is not divisible by micro_batch*DP = ", batch.micro_batch(), "*",
                            c.data)};
  }
  const int64_t needed = int64_t{kMicrobatchesPerExtraStage} * (c.pipeline - 1);
  if (c.microbatches < needed) {
    return {3,
            absl::StrCat(c.microbatches, " microbatches per step, fewer than 4*(PP-1) = ", needed)};
  }
  return {0, ""};
}

// Fills the estimates of `c` (whose tensor, pipeline and data are set) for a builtin trainer.
void Estimate(const v1::JobSpec& spec, int64_t parameters, Candidate* c) {
  const v1::TrainerSpec& trainer = spec.trainer();
  const v1::ModelSpec& model = trainer.model();
  const int64_t micro = trainer.batch().micro_batch();
  c->microbatches = static_cast<int>(trainer.batch().global_batch() / (micro * c->data));
  const double m = c->microbatches;
  const double p = c->pipeline;
  const double t = c->tensor;
  const double d = c->data;

  // Training state, with ZeRO sharding pieces of it over DP.
  const StateBytes per_param = StateBytesPerParameter(trainer);
  const int zero = trainer.zero_stage();
  const double bytes_per_param = per_param.weights / (zero >= 3 ? d : 1.0) +
                                 per_param.gradients / (zero >= 2 ? d : 1.0) +
                                 per_param.optimizer / (zero >= 1 ? d : 1.0);
  const double shard = static_cast<double>(parameters) / (t * p);
  c->state_bytes = ToInt64(shard * bytes_per_param);

  // Megatron-LM: s*b*d*(34 + 5*a*s/d) bytes per layer = s*b*(34*d + 5*a*s), split over TP.
  const double layers_per_stage = std::ceil(static_cast<double>(model.layers()) / p);
  const double s = model.seq_len();
  const double hidden = model.d_model();
  const double tokens_x_hidden = s * micro * hidden;  // s*b*d elements.
  // Fused attention keeps no s*s scores or probabilities: the 5*a*s term goes (Estimate is only
  // for the builtin trainer, whose setting it is).
  const double per_token_attention = FusedAttention(trainer) ? 0.0 : 5.0 * model.heads() * s;
  c->activation_bytes =
      ToInt64(layers_per_stage * s * micro * (34 * hidden + per_token_attention) / t);
  const double in_flight = std::min(m, p);
  c->total_bytes = ToInt64(static_cast<double>(c->state_bytes) + c->activation_bytes * in_flight);

  c->bubble = c->pipeline > 1 ? (p - 1) / (m + p - 1) : 0.0;

  const double element = ElementBytes(trainer);
  c->tp_bytes = ToInt64(kTensorAllReducesPerLayer * layers_per_stage * m * 2 * (t - 1) / t *
                        tokens_x_hidden * element);
  c->pp_bytes = c->pipeline > 1 ? ToInt64(2 * m * tokens_x_hidden * element) : 0;
  // Ring all-reduce of the gradients: 2(d-1)/d of them; ZeRO-3 gathers the weights once more.
  const double passes = zero >= 3 ? 3 : 2;
  c->dp_bytes = ToInt64(passes * (d - 1) / d * shard * element);
}

Candidate Evaluate(const v1::JobSpec& spec, int64_t parameters, int tensor, int pipeline,
                   int data) {
  Candidate c;
  c.tensor = tensor;
  c.pipeline = pipeline;
  c.data = data;
  if (!IsBuiltin(spec)) return c;
  Estimate(spec, parameters, &c);
  std::tie(c.broken_rule, c.violation) = FirstBrokenRule(spec, c);
  return c;
}

std::vector<int> Divisors(int n) {
  std::vector<int> out;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) out.push_back(i);
  }
  return out;
}

// Every layout with TP dividing devices_per_node, PP dividing the layers and TP*PP dividing the
// world, in rule 4's order of preference.
std::vector<Candidate> Candidates(const v1::JobSpec& spec, int64_t parameters) {
  const int64_t world = int64_t{spec.nodes()} * spec.devices_per_node();
  std::vector<Candidate> out;
  for (int tensor : Divisors(spec.devices_per_node())) {
    for (int pipeline : Divisors(spec.trainer().model().layers())) {
      const int64_t model_parallel = int64_t{tensor} * pipeline;
      if (world % model_parallel != 0) continue;
      out.push_back(
          Evaluate(spec, parameters, tensor, pipeline, static_cast<int>(world / model_parallel)));
    }
  }
  std::sort(out.begin(), out.end(), Preferred);
  return out;
}

std::string ModelReason(const v1::JobSpec& spec, int64_t parameters) {
  const v1::TrainerSpec& trainer = spec.trainer();
  const v1::ModelSpec& m = trainer.model();
  std::string precision = IsFp32(trainer) ? "fp32" : "bf16";
  if (trainer.precision() == v1::PRECISION_UNSPECIFIED) precision = "bf16 (precision unspecified)";
  std::string attention;
  if (FusedAttention(trainer)) {
    attention = trainer.attention() == v1::ATTENTION_FUSED
                    ? ", fused attention"
                    : ", fused attention (attention unspecified)";
  }
  return absl::StrCat("model: ", parameters, " parameters (", m.layers(),
                      m.layers() == 1 ? " layer" : " layers", ", d_model ",
                      m.d_model(), ", ", m.heads(), " heads, seq_len ", m.seq_len(), ", vocab ",
                      m.vocab(), " padded to ", PaddedVocab(m.vocab()), "); estimates for ",
                      precision, attention, ", ZeRO stage ", trainer.zero_stage());
}

std::string WorldReason(const v1::JobSpec& spec) {
  return absl::StrCat("world: ", int64_t{spec.nodes()} * spec.devices_per_node(), " ranks (",
                      Count(spec.nodes(), "node", "nodes"), " x ",
                      Count(spec.devices_per_node(), "device", "devices"), ")");
}

std::string MemoryOf(const Candidate& c) {
  return absl::StrCat(HumanBytes(c.total_bytes), " per device (", HumanBytes(c.state_bytes),
                      " state + ", HumanBytes(c.activation_bytes), " of activations x ",
                      Count(std::min(c.microbatches, c.pipeline), "microbatch", "microbatches"),
                      " in flight)");
}

bool Fits(const Candidate& c, const PlannerOptions& options) {
  return options.device_memory_bytes <= 0 || c.total_bytes <= options.device_memory_bytes;
}

std::string DeviceMemoryReason(const PlannerOptions& options) {
  if (options.device_memory_bytes <= 0) {
    return "device memory unknown: every layout counts as fitting";
  }
  return absl::StrCat("device memory: ", HumanBytes(options.device_memory_bytes), " per device",
                      options.device_memory_source.empty()
                          ? ""
                          : absl::StrCat(" (", options.device_memory_source, ")"));
}

// The lines every builtin explanation ends with: bubble and communication.
void AddEstimateReasons(const Candidate& c, v1::PlanExplanation* plan) {
  if (c.pipeline > 1) {
    plan->add_reasons(absl::StrFormat(
        "pipeline bubble: (p-1)/(m+p-1) = %d/%d = %.4f with p=%d stages, m=%d microbatches",
        c.pipeline - 1, c.microbatches + c.pipeline - 1, c.bubble, c.pipeline, c.microbatches));
  } else {
    plan->add_reasons(absl::StrCat("no pipeline bubble (PP=1); ", c.microbatches,
                                   " microbatches per step (gradient accumulation)"));
  }
  plan->add_reasons(absl::StrCat("sent per rank per step: TP ", HumanBytes(c.tp_bytes), ", PP ",
                                 HumanBytes(c.pp_bytes), ", DP ", HumanBytes(c.dp_bytes)));
}

void Fill(const Candidate& c, int64_t parameters, v1::PlanExplanation* plan) {
  plan->mutable_parallelism()->set_tensor(c.tensor);
  plan->mutable_parallelism()->set_pipeline(c.pipeline);
  plan->mutable_parallelism()->set_data(c.data);
  plan->set_memory_per_device_bytes(c.state_bytes);
  plan->set_activation_bytes_per_microbatch(c.activation_bytes);
  plan->set_bubble_fraction(c.bubble);
  plan->set_microbatches(c.microbatches);
  plan->set_tp_bytes_per_step(c.tp_bytes);
  plan->set_pp_bytes_per_step(c.pp_bytes);
  plan->set_dp_bytes_per_step(c.dp_bytes);
  plan->set_parameters(parameters);
}

v1::PlanExplanation PlanCommand(const v1::JobSpec& spec) {
  v1::PlanExplanation plan;
  Candidate c;
  const v1::ParallelismSpec& given = spec.parallelism();
  plan.add_reasons("command trainer: no model, so memory and communication estimates are zero");
  plan.add_reasons(WorldReason(spec));
  if (LayoutGiven(given)) {
    c.tensor = given.tensor();
    c.pipeline = given.pipeline();
    c.data = given.data();
    plan.add_reasons(absl::StrCat("layout fixed by the job spec: ", LayoutName(c)));
  } else {
    c.data = static_cast<int>(int64_t{spec.nodes()} * spec.devices_per_node());
    plan.add_reasons(absl::StrCat("pure data parallelism: ", LayoutName(c),
                                  " (every rank runs the command as one replica)"));
  }
  Fill(c, 0, &plan);
  return plan;
}

v1::PlanExplanation ExplainFixed(const v1::JobSpec& spec, int64_t parameters,
                                 const PlannerOptions& options) {
  const v1::ParallelismSpec& given = spec.parallelism();
  const Candidate c = Evaluate(spec, parameters, given.tensor(), given.pipeline(), given.data());
  v1::PlanExplanation plan;
  plan.add_reasons(ModelReason(spec, parameters));
  plan.add_reasons(WorldReason(spec));
  plan.add_reasons(
      absl::StrCat("layout fixed by the job spec: ", LayoutName(c), " (explained, not changed)"));
  if (c.broken_rule != 0) {
    plan.add_reasons(absl::StrCat("note: breaks planner rule ", c.broken_rule, ": ", c.violation,
                                  "; the planner would not choose this layout"));
  }
  plan.add_reasons(DeviceMemoryReason(options));
  plan.add_reasons(
      absl::StrCat(Fits(c, options) ? "memory: " : "note: does not fit in memory: ", MemoryOf(c)));
  AddEstimateReasons(c, &plan);
  Fill(c, parameters, &plan);
  return plan;
}

absl::StatusOr<v1::PlanExplanation> Choose(const v1::JobSpec& spec, int64_t parameters,
                                           const PlannerOptions& options) {
  const std::vector<Candidate> candidates = Candidates(spec, parameters);
  std::vector<const Candidate*> valid;
  for (const Candidate& c : candidates) {
    if (c.broken_rule == 0) valid.push_back(&c);
  }
  if (valid.empty()) {
    // The closest candidate breaks the latest rule; among those, the most preferred. TP=1 PP=1
    // is always a candidate, so `candidates` is not empty.
    const Candidate* closest = &candidates.front();
    for (const Candidate& c : candidates) {
      if (c.broken_rule > closest->broken_rule) closest = &c;
    }
    return FieldError("parallelism",
                      absl::StrCat("no layout satisfies rules 1-3 for ",
                                   int64_t{spec.nodes()} * spec.devices_per_node(),
                                   " ranks; closest: ", LayoutName(*closest), " breaks rule ",
                                   closest->broken_rule, ": ", closest->violation));
  }

  v1::PlanExplanation plan;
  plan.add_reasons(ModelReason(spec, parameters));
  plan.add_reasons(WorldReason(spec));
  for (const Candidate& c : candidates) {
    if (c.broken_rule == 0) continue;
    plan.add_reasons(
        absl::StrCat("excluded ", LayoutName(c), " by rule ", c.broken_rule, ": ", c.violation));
  }
  plan.add_reasons(DeviceMemoryReason(options));

  const Candidate* chosen = nullptr;
  for (const Candidate* c : valid) {
    if (Fits(*c, options)) {
      chosen = c;
      break;
    }
    plan.add_reasons(absl::StrCat("does not fit: ", LayoutName(*c), " needs ", MemoryOf(*c)));
  }
  if (chosen != nullptr) {
    const absl::string_view why =
        options.device_memory_bytes > 0
            ? "the most data parallelism that fits (TP before PP on a tie)"
            : "the most data parallelism rules 1-3 allow";
    plan.add_reasons(
        absl::StrCat("chose ", LayoutName(*chosen), ": ", why, "; ", MemoryOf(*chosen)));
  } else {
    chosen =
        *std::min_element(valid.begin(), valid.end(), [](const Candidate* a, const Candidate* b) {
          if (a->total_bytes != b->total_bytes) {
            return a->total_bytes < b->total_bytes;
          }
          return Preferred(*a, *b);
        });
    plan.add_reasons(absl::StrCat("no layout fits in memory; chose ", LayoutName(*chosen),
                                  ", the smallest estimate: ", MemoryOf(*chosen)));
  }
  AddEstimateReasons(*chosen, &plan);
  Fill(*chosen, parameters, &plan);
  return plan;
}

}  // namespace

int64_t CountParameters(const v1::ModelSpec& model) {
  const int64_t layers = model.layers();
  const int64_t d = model.d_model();
  return PaddedVocab(model.vocab()) * d + int64_t{model.seq_len()} * d +
         layers * (12 * d * d + 13 * d) + 2 * d;
}

absl::StatusOr<v1::PlanExplanation> Plan(const v1::JobSpec& spec, const PlannerOptions& options) {
  RETURN_IF_ERROR(CheckSpec(spec));
  if (!IsBuiltin(spec)) return PlanCommand(spec);
  const int64_t parameters = CountParameters(spec.trainer().model());
  if (LayoutGiven(spec.parallelism())) return ExplainFixed(spec, parameters, options);
  return Choose(spec, parameters, options);
}

}  // namespace ringmaster::coordinator
