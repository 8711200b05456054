#include "ctl/job_file_keys.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace ringmaster::ctl {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr EnumName kPrecisionNames[] = {{"fp32", v1::PRECISION_FP32}, {"bf16", v1::PRECISION_BF16}};
constexpr EnumName kElasticBatchNames[] = {{"global", v1::ELASTIC_BATCH_GLOBAL},
                                           {"per_replica", v1::ELASTIC_BATCH_PER_REPLICA}};
constexpr EnumName kAttentionNames[] = {{"fused", v1::ATTENTION_FUSED},
                                        {"materialized", v1::ATTENTION_MATERIALIZED}};

// The job file. Range and consistency rules are the coordinator's (ValidateJobSpec); the docs
// say what a value means, proto/ringmaster/v1/job.proto says the rest.
constexpr JobFileKey kKeys[] = {
    {"name", KeyKind::kString, "name", "1-63 characters of [a-z0-9-], starting with a letter"},
    {"nodes", KeyKind::kInt32, "nodes", "nodes to run on"},
    {"min_nodes", KeyKind::kInt32, "min_nodes",
     "fewest nodes to run on, data-parallel degree shrunk; omitted: nodes"},
    {"devices_per_node", KeyKind::kInt32, "devices_per_node",
     "devices (GPUs, or CPU slots) used on each node"},
    {"spares", KeyKind::kInt32, "spares",
     "idle nodes held to replace a lost one at once; omitted: 0"},
    {"elastic_batch", KeyKind::kEnum, "elastic_batch",
     "kept below nodes; per_replica scales lr; omitted: global", kElasticBatchNames},
    {"elastic_warmup_steps", KeyKind::kInt32, "elastic_warmup_steps",
     "lr ramp steps after a DP change; omitted: warmup_steps"},
    {"elastic_wait", KeyKind::kNumber, "elastic_wait_seconds",
     "seconds to wait for a lost node's replacement; 0: shrink"},
    {"parallelism", KeyKind::kMapping, "parallelism",
     "the parallel layout; omitted: the planner's"},
    {"parallelism.tensor", KeyKind::kInt32, "parallelism.tensor", "tensor-parallel degree"},
    {"parallelism.pipeline", KeyKind::kInt32, "parallelism.pipeline", "pipeline stages"},
    {"parallelism.data", KeyKind::kInt32, "parallelism.data", "data-parallel replicas"},
    {"trainer", KeyKind::kMapping, "trainer", "what each rank runs"},
    {"trainer.builtin", KeyKind::kString, "trainer.builtin", "a built-in trainer (gpt)"},
    {"trainer.command", KeyKind::kArgv, "trainer.command.argv",
     "argv of a program run once per rank (no shell); or builtin"},
    {"trainer.model", KeyKind::kMapping, "trainer.model", "model dimensions (builtin)"},
    {"trainer.model.layers", KeyKind::kInt32, "trainer.model.layers", "transformer blocks"},
    {"trainer.model.d_model", KeyKind::kInt32, "trainer.model.d_model", "embedding width"},
    {"trainer.model.heads", KeyKind::kInt32, "trainer.model.heads", "attention heads"},
    {"trainer.model.seq_len", KeyKind::kInt32, "trainer.model.seq_len", "tokens per sequence"},
    {"trainer.model.vocab", KeyKind::kInt32, "trainer.model.vocab", "vocabulary size"},
    {"trainer.batch", KeyKind::kMapping, "trainer.batch", "batch sizes (builtin)"},
    {"trainer.batch.micro_batch", KeyKind::kInt32, "trainer.batch.micro_batch",
     "sequences per micro-batch"},
    {"trainer.batch.global_batch", KeyKind::kInt32, "trainer.batch.global_batch",
     "sequences per optimizer step"},
    {"trainer.steps", KeyKind::kInt64, "trainer.steps",
     "optimizer steps to run; optional for a command"},
    {"trainer.optimizer", KeyKind::kMapping, "trainer.optimizer",
     "AdamW settings (builtin); each has a default"},
    {"trainer.optimizer.lr", KeyKind::kNumber, "trainer.optimizer.lr",
     "peak learning rate; omitted: 3e-4"},
    {"trainer.optimizer.warmup_steps", KeyKind::kInt32, "trainer.optimizer.warmup_steps",
     "linear warm-up steps; omitted: 5% of steps, at most 1000"},
    {"trainer.optimizer.weight_decay", KeyKind::kNumber, "trainer.optimizer.weight_decay",
     "decoupled weight decay; omitted: 0.1"},
    {"trainer.optimizer.clip_grad_norm", KeyKind::kNumber, "trainer.optimizer.clip_grad_norm",
     "gradient norm clip; omitted: 1.0; 0: none"},
    {"trainer.optimizer.min_lr", KeyKind::kNumber, "trainer.optimizer.min_lr",
     "learning rate at the end of the decay; omitted: lr/10"},
    {"trainer.optimizer.beta1", KeyKind::kNumber, "trainer.optimizer.beta1",
     "Adam beta1; omitted: 0.9"},
    {"trainer.optimizer.beta2", KeyKind::kNumber, "trainer.optimizer.beta2",
     "Adam beta2; omitted: 0.95"},
    {"trainer.optimizer.epsilon", KeyKind::kNumber, "trainer.optimizer.epsilon",
     "Adam epsilon; omitted: 1e-8"},
    {"trainer.precision", KeyKind::kEnum, "trainer.precision",
     "(builtin) omitted: fp32 on CPU, bf16 on GPU", kPrecisionNames},
    {"trainer.attention", KeyKind::kEnum, "trainer.attention", "attention kernels (builtin)",
     kAttentionNames},
    {"trainer.zero_stage", KeyKind::kInt32, "trainer.zero_stage", "ZeRO stage, 0-3 (builtin)"},
    {"trainer.data", KeyKind::kMapping, "trainer.data", "training data (builtin)"},
    {"trainer.data.path", KeyKind::kString, "trainer.data.path",
     "token file; omitted: a built-in corpus"},
    {"trainer.data.seed", KeyKind::kUint64, "trainer.data.seed", "data order seed"},
    {"trainer.env", KeyKind::kStringMap, "trainer.env", "extra environment of every rank"},
    {"checkpoint", KeyKind::kMapping, "checkpoint", "checkpoint policy"},
    {"checkpoint.dir", KeyKind::kString, "checkpoint.dir",
     "absolute directory shared by every node"},
    {"checkpoint.every_steps", KeyKind::kInt32, "checkpoint.every_steps",
     "steps between checkpoints; 0: none"},
    {"checkpoint.keep", KeyKind::kInt32, "checkpoint.keep", "complete checkpoints kept"},
    {"checkpoint.max_consecutive_failures", KeyKind::kInt32, "checkpoint.max_consecutive_failures",
     "failed saves in a row that fail the job; 0: never"},
    {"restart", KeyKind::kMapping, "restart", "restart policy"},
    {"restart.max_restarts", KeyKind::kInt32, "restart.max_restarts",
     "restarts before FAILED; omitted: 3"},
    {"restart.window_minutes", KeyKind::kInt32, "restart.window_minutes",
     "count only this window's restarts; 0: all"},
    {"watchdog", KeyKind::kMapping, "watchdog", "hang, straggler and link detection"},
    {"watchdog.hang_timeout", KeyKind::kSecondsOrAuto, "watchdog.hang_timeout_seconds",
     "seconds without progress; auto: from step times"},
    {"watchdog.init_timeout", KeyKind::kSecondsOrAuto, "watchdog.init_timeout_seconds",
     "seconds to the first step; auto: the agent's (10 min)"},
    {"watchdog.checkpoint_timeout", KeyKind::kSecondsOrAuto, "watchdog.checkpoint_timeout_seconds",
     "seconds one save may take; auto: the agent's (30 min)"},
    {"watchdog.straggler_threshold", KeyKind::kNumber, "watchdog.straggler_threshold",
     "slowdown factor over peers that flags a straggler"},
    {"watchdog.link_check", KeyKind::kNegatedBool, "watchdog.link_check_disabled",
     "check each link as a generation starts"},
    {"watchdog.link_check_bytes", KeyKind::kInt64, "watchdog.link_check_bytes",
     "bytes per link-check exchange"},
    {"watchdog.slow_link_ratio", KeyKind::kNumber, "watchdog.slow_link_ratio",
     "slow below this fraction of its kind's median"},
    {"watchdog.min_link_bytes_per_second", KeyKind::kNumber, "watchdog.min_link_bytes_per_second",
     "slow below this bandwidth"},
    {"watchdog.auto_link_check", KeyKind::kNegatedBool, "watchdog.auto_link_check_disabled",
     "check the links when the step time rises unexplained"},
    {"watchdog.auto_link_check_interval", KeyKind::kNumber,
     "watchdog.auto_link_check_interval_seconds", "least seconds between automatic checks"},
    {"watchdog.python_watch", KeyKind::kNegatedBool, "watchdog.python_watch_disabled",
     "watch a Python command's PyTorch steps (docs/python.md)"},
};

// The fields of each row's path from v1::JobSpec, by row index.
using FieldPath = std::vector<const FieldDescriptor*>;

// Whether `field` can hold a value of `kind`.
bool KindFits(KeyKind kind, const FieldDescriptor& field) {
  const bool single = !field.is_repeated();
  switch (kind) {
    case KeyKind::kMapping:
      return single && field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    case KeyKind::kString:
      return single && field.cpp_type() == FieldDescriptor::CPPTYPE_STRING;
    case KeyKind::kInt32:
      return single && field.cpp_type() == FieldDescriptor::CPPTYPE_INT32;
    case KeyKind::kInt64:
      return single && field.cpp_type() == FieldDescriptor::CPPTYPE_INT64;
    case KeyKind::kUint64:
      return single && field.cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
    case KeyKind::kNumber:
    case KeyKind::kSecondsOrAuto:
      return single && field.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE;
    case KeyKind::kNegatedBool:
      return single && field.cpp_type() == FieldDescriptor::CPPTYPE_BOOL;
    case KeyKind::kEnum:
      return single && field.cpp_type() == FieldDescriptor::CPPTYPE_ENUM;
    case KeyKind::kArgv:
      return field.is_repeated() && !field.is_map() &&
             field.cpp_type() == FieldDescriptor::CPPTYPE_STRING;
    case KeyKind::kStringMap:
      return field.is_map() &&
             field.message_type()->map_key()->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
             field.message_type()->map_value()->cpp_type() == FieldDescriptor::CPPTYPE_STRING;
  }
  return false;
}

const std::vector<FieldPath>& FullPaths() {
  static const std::vector<FieldPath>* const paths = [] {
    auto* result = new std::vector<FieldPath>;
    for (const JobFileKey& key : kKeys) {
      FieldPath path;
      const Descriptor* message = v1::JobSpec::descriptor();
      for (absl::string_view name : absl::StrSplit(key.field, '.')) {
        RM_CHECK(message != nullptr) << key.key << ": " << key.field << " goes through a scalar";
        const FieldDescriptor* field = message->FindFieldByName(std::string(name));
        RM_CHECK(field != nullptr) << key.key << ": " << message->full_name() << " has no " << name;
        path.push_back(field);
        message = field->is_map() ? nullptr : field->message_type();
      }
      RM_CHECK(KindFits(key.kind, *path.back()))
          << key.key << ": the kind does not fit " << key.field;
      if (key.kind == KeyKind::kEnum) {
        for (const EnumName& n : key.names) {
          RM_CHECK(path.back()->enum_type()->FindValueByNumber(n.number) != nullptr) << key.key;
        }
      }
      result->push_back(std::move(path));
    }
    return result;
  }();
  return *paths;
}

size_t IndexOf(const JobFileKey& key) {
  const size_t index = &key - kKeys;
  RM_CHECK(index < std::size(kKeys)) << "not a row of the job file's table";
  return index;
}

// How many fields of the key's path lie above its parent message.
size_t ParentDepth(const JobFileKey& key) {
  if (key.parent().empty()) return 0;
  const JobFileKey* parent = FindJobFileKey(key.parent());
  RM_CHECK(parent != nullptr && parent->kind == KeyKind::kMapping)
      << key.key << ": no mapping above";
  const FieldPath& above = FullPaths()[IndexOf(*parent)];
  const FieldPath& own = FullPaths()[IndexOf(key)];
  RM_CHECK(own.size() > above.size() && std::equal(above.begin(), above.end(), own.begin()))
      << key.key << ": its field " << key.field << " is not in its mapping's " << parent->field;
  return above.size();
}

// Edit distance counting a swap of neighbours as one edit (optimal string alignment).
int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// Whether `typed` is close enough to `known` to suggest it (case does not count).
bool NearMiss(absl::string_view typed, absl::string_view known) {
  const size_t limit = known.size() <= 3 ? 1 : known.size() <= 6 ? 2 : 3;
  // The distance is at least the difference in length: a long key costs nothing to refuse.
  if (typed.size() > known.size() + limit || known.size() > typed.size() + limit) return false;
  return EditDistance(absl::AsciiStrToLower(typed), known) <= static_cast<int>(limit);
}

// What a value of `key` looks like, for the outline.
std::string KindText(const JobFileKey& key) {
  switch (key.kind) {
    case KeyKind::kMapping:
      return "mapping";
    case KeyKind::kString:
      return "string";
    case KeyKind::kInt32:
    case KeyKind::kInt64:
      return "integer";
    case KeyKind::kUint64:
      return "integer >= 0";
    case KeyKind::kNumber:
      return "number";
    case KeyKind::kSecondsOrAuto:
      return "auto | seconds";
    case KeyKind::kNegatedBool:
      return "true | false";
    case KeyKind::kEnum: {
      std::vector<absl::string_view> names;
      for (const EnumName& n : key.names) names.push_back(n.name);
      return absl::StrJoin(names, " | ");
    }
    case KeyKind::kArgv:
      return "[argv...]";
    case KeyKind::kStringMap:
      return "{NAME: value}";
  }
  return "";
}

}  // namespace

absl::string_view JobFileKey::parent() const {
  const size_t dot = key.rfind('.');
  return dot == absl::string_view::npos ? absl::string_view() : key.substr(0, dot);
}

absl::string_view JobFileKey::name() const {
  const size_t dot = key.rfind('.');
  return dot == absl::string_view::npos ? key : key.substr(dot + 1);
}

absl::Span<const JobFileKey> JobFileKeys() { return kKeys; }

const JobFileKey* FindJobFileKey(absl::string_view key) {
  for (const JobFileKey& k : kKeys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

std::vector<const JobFileKey*> ChildKeys(absl::string_view parent) {
  std::vector<const JobFileKey*> children;
  for (const JobFileKey& k : kKeys) {
    if (k.parent() == parent) children.push_back(&k);
  }
  return children;
}

bool WrittenAsBlock(const JobFileKey& mapping) {
  for (const JobFileKey* child : ChildKeys(mapping.key)) {
    if (child->kind == KeyKind::kMapping || child->kind == KeyKind::kStringMap) return true;
  }
  return false;
}

std::string UnknownKeyMessage(absl::string_view name, absl::string_view parent) {
  // The same key elsewhere in the layout: "steps" at the top level belongs under trainer.
  std::vector<absl::string_view> elsewhere;
  std::vector<absl::string_view> near_elsewhere;
  for (const JobFileKey& k : kKeys) {
    if (k.parent() == parent) continue;
    if (k.name() == name) elsewhere.push_back(k.key);
    if (NearMiss(name, k.name())) near_elsewhere.push_back(k.key);
  }
  if (!elsewhere.empty()) {
    return absl::StrCat("unknown key here, did you mean ", absl::StrJoin(elsewhere, " or "), "?");
  }
  const std::vector<const JobFileKey*> keys = ChildKeys(parent);
  const JobFileKey* best = nullptr;
  int best_distance = 0;
  for (const JobFileKey* k : keys) {
    if (!NearMiss(name, k->name())) continue;
    const int distance = EditDistance(absl::AsciiStrToLower(name), k->name());
    if (best == nullptr || distance < best_distance) {
      best = k;
      best_distance = distance;
    }
  }
  if (best != nullptr) return absl::StrCat("unknown key, did you mean \"", best->name(), "\"?");
  if (!near_elsewhere.empty()) {
    return absl::StrCat("unknown key here, did you mean ", absl::StrJoin(near_elsewhere, " or "),
                        "?");
  }
  std::vector<absl::string_view> names;
  for (const JobFileKey* k : keys) names.push_back(k->name());
  return absl::StrCat("unknown key (expected one of: ", absl::StrJoin(names, ", "), ")");
}

std::string EnumNameList(const JobFileKey& key) {
  std::vector<absl::string_view> names;
  for (const EnumName& n : key.names) names.push_back(n.name);
  return absl::StrJoin(names, " or ");
}

std::string OneofKeyNames(const JobFileKey& key) {
  const google::protobuf::OneofDescriptor* oneof =
      RelativeFieldPath(key).front()->real_containing_oneof();
  if (oneof == nullptr) return "";
  std::vector<absl::string_view> names;
  for (const JobFileKey* sibling : ChildKeys(key.parent())) {
    if (RelativeFieldPath(*sibling).front()->real_containing_oneof() == oneof) {
      names.push_back(sibling->name());
    }
  }
  return absl::StrJoin(names, " or ");
}

std::string JobFileKeyOutline() {
  std::vector<std::string> lines;
  for (const JobFileKey& k : kKeys) {
    const size_t depth = std::count(k.key.begin(), k.key.end(), '.');
    lines.push_back(
        absl::StrCat(std::string(2 * (depth + 1), ' '), k.name(), " (", KindText(k), "): ", k.doc));
  }
  return absl::StrJoin(lines, "\n");
}

const FieldDescriptor* KeyField(const JobFileKey& key) { return FullPaths()[IndexOf(key)].back(); }

absl::Span<const FieldDescriptor* const> RelativeFieldPath(const JobFileKey& key) {
  absl::Span<const FieldDescriptor* const> full = FullPaths()[IndexOf(key)];
  return full.subspan(ParentDepth(key));
}

Message* MutableHolder(const JobFileKey& key, Message* parent) {
  absl::Span<const FieldDescriptor* const> path = RelativeFieldPath(key);
  Message* message = parent;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    message = message->GetReflection()->MutableMessage(message, path[i]);
  }
  return message;
}

const Message* Holder(const JobFileKey& key, const Message& parent) {
  absl::Span<const FieldDescriptor* const> path = RelativeFieldPath(key);
  const Message* message = &parent;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!message->GetReflection()->HasField(*message, path[i])) return nullptr;
    message = &message->GetReflection()->GetMessage(*message, path[i]);
  }
  return message;
}

bool KeyIsSet(const JobFileKey& key, const Message& parent) {
  const Message* holder = Holder(key, parent);
  if (holder == nullptr) return false;
  const Reflection* r = holder->GetReflection();
  const FieldDescriptor* field = KeyField(key);
  if (key.kind == KeyKind::kArgv) return true;  // Its message is present.
  if (field->is_repeated()) return r->FieldSize(*holder, field) > 0;
  if (field->has_presence()) return r->HasField(*holder, field);
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      const double v = r->GetDouble(*holder, field);
      return v != 0 || std::signbit(v);
    }
    case FieldDescriptor::CPPTYPE_INT32:
      return r->GetInt32(*holder, field) != 0;
    case FieldDescriptor::CPPTYPE_INT64:
      return r->GetInt64(*holder, field) != 0;
    case FieldDescriptor::CPPTYPE_UINT64:
      return r->GetUInt64(*holder, field) != 0;
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(*holder, field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return r->GetEnumValue(*holder, field) != 0;
    case FieldDescriptor::CPPTYPE_STRING:
      return !r->GetString(*holder, field).empty();
    default:
      break;
  }
  RM_LOG(FATAL) << key.key << ": no rule for the type of " << key.field;
  return false;
}

absl::Span<const absl::string_view> FieldsNotInJobFile() { return {}; }

}  // namespace ringmaster::ctl
