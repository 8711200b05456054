#include "ctl/job_yaml.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/format_double.h"
#include "common/status.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace ringmaster::ctl {
namespace {

// Every key of a job file, by path (job_yaml.h). Reader below accepts exactly these; an unknown
// key is matched against them to suggest where it belongs.
constexpr absl::string_view kAllFields[] = {
    "name",
    "nodes",
    "devices_per_node",
    "parallelism",
    "parallelism.tensor",
    "parallelism.pipeline",
    "parallelism.data",
    "trainer",
    "trainer.builtin",
    "trainer.command",
    "trainer.model",
    "trainer.model.layers",
    "trainer.model.d_model",
    "trainer.model.heads",
    "trainer.model.seq_len",
    "trainer.model.vocab",
    "trainer.batch",
    "trainer.batch.micro_batch",
    "trainer.batch.global_batch",
    "trainer.steps",
    "trainer.optimizer",
    "trainer.optimizer.lr",
    "trainer.optimizer.warmup_steps",
    "trainer.optimizer.weight_decay",
    "trainer.optimizer.clip_grad_norm",
    "trainer.optimizer.min_lr",
    "trainer.optimizer.beta1",
    "trainer.optimizer.beta2",
    "trainer.optimizer.epsilon",
    "trainer.precision",
    "trainer.attention",
    "trainer.zero_stage",
    "trainer.data",
    "trainer.data.path",
    "trainer.data.seed",
    "trainer.env",
    "checkpoint",
    "checkpoint.dir",
    "checkpoint.every_steps",
    "checkpoint.keep",
    "checkpoint.max_consecutive_failures",
    "restart",
    "restart.max_restarts",
    "restart.window_minutes",
    "watchdog",
    "watchdog.hang_timeout",
    "watchdog.straggler_threshold",
    "watchdog.link_check",
    "watchdog.link_check_bytes",
    "watchdog.slow_link_ratio",
    "watchdog.min_link_bytes_per_second",
};

std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CHexEscape(s), "\""); }

// Whether protobuf takes `s` for a string field (proto3 strings are UTF-8): raw bytes that are
// not would make the spec fail to serialize, and the coordinator refuse it with a parse error.
// RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF.
bool IsUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    size_t n = 0;                        // continuation bytes
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the first continuation byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char b = s[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

// Where each document of a stream starts; the rest of the events are ignored.
class DocumentStarts : public YAML::EventHandler {
 public:
  const std::vector<YAML::Mark>& starts() const { return starts_; }
  void OnDocumentStart(const YAML::Mark& mark) override { starts_.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  std::vector<YAML::Mark> starts_;
};

// The mark of a document that starts where the one before it did, if one does. yaml-cpp 0.7
// (Debian 12) parses some malformed input ("," alone) as an endless series of empty documents,
// all at the same place, and YAML::LoadAll allocates a node for each until memory runs out
// (yaml-cpp issue 1040, fixed in 0.8). Walking the documents first, stopping at the first that
// does not advance, bounds it. Throws what the parser throws.
std::optional<YAML::Mark> DocumentThatDoesNotAdvance(const std::string& text) {
  std::stringstream stream(text);
  YAML::Parser parser(stream);
  DocumentStarts starts;
  while (parser.HandleNextDocument(starts)) {
    const std::vector<YAML::Mark>& s = starts.starts();
    if (s.size() >= 2 && s.back().pos <= s[s.size() - 2].pos) return s.back();
  }
  return std::nullopt;
}

std::string Join(absl::string_view parent, absl::string_view key) {
  return parent.empty() ? std::string(key) : absl::StrCat(parent, ".", key);
}

// "file:line:col: " with yaml-cpp's 0-based mark shown 1-based; "file: " without a mark.
std::string Where(absl::string_view filename, const YAML::Mark& mark) {
  if (mark.is_null()) return absl::StrCat(filename, ": ");
  return absl::StrCat(filename, ":", mark.line + 1, ":", mark.column + 1, ": ");
}

// What a node is, for "expected X, got Y".
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

bool IsIntegerText(absl::string_view text) {
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
}

// YAML's number forms: [+-] digits [. digits] [e [+-] digits] (integers included), .inf, -.inf,
// .nan (any case). nullopt when `text` is not a number; `*overflow` when a finite literal is too
// large for a double.
std::optional<double> ParseNumber(absl::string_view text, bool* overflow) {
  *overflow = false;
  const std::string lower = absl::AsciiStrToLower(text);
  absl::string_view body = lower;
  if (body == ".nan") return std::numeric_limits<double>::quiet_NaN();
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf") {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  size_t i = 0;
  int mantissa_digits = 0;
  auto digits = [&]() {
    int n = 0;
    for (; i < body.size() && absl::ascii_isdigit(body[i]); ++i) ++n;
    return n;
  };
  mantissa_digits += digits();
  if (i < body.size() && body[i] == '.') {
    ++i;
    mantissa_digits += digits();
  }
  if (mantissa_digits == 0) return std::nullopt;
  if (i < body.size() && body[i] == 'e') {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    if (digits() == 0) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  double value = 0;
  if (!absl::SimpleAtod(body, &value)) return std::nullopt;
  if (negative) value = -value;
  *overflow = !std::isfinite(value);
  return value;
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

// A value in the document: the node, where to point at it, and its field path.
struct Field {
  YAML::Node node;
  YAML::Mark mark;
  std::string path;
};

// Walks a parsed document into a JobSpec, collecting every problem. Checks each node's type
// before reading it, so yaml-cpp's accessors do not throw.
// The YAML names of an enumeration's values, read case-insensitively and written back; the
// unspecified value (0) has none and is left out.
template <typename E>
struct EnumName {
  const char* name;
  E value;
};
constexpr EnumName<v1::Precision> kPrecisionNames[] = {{"fp32", v1::PRECISION_FP32},
                                                       {"bf16", v1::PRECISION_BF16}};
constexpr EnumName<v1::Attention> kAttentionNames[] = {
    {"fused", v1::ATTENTION_FUSED}, {"materialized", v1::ATTENTION_MATERIALIZED}};

// "fp32 or bf16".
template <typename E, size_t N>
std::string NameList(const EnumName<E> (&names)[N]) {
  std::string list;
  for (const EnumName<E>& n : names) absl::StrAppend(&list, list.empty() ? "" : " or ", n.name);
  return list;
}

class Reader {
 public:
  explicit Reader(absl::string_view filename) : filename_(filename) {}

  void ReadJob(const YAML::Node& root, v1::JobSpec* spec);

  // OK, or INVALID_ARGUMENT with one line per problem.
  absl::Status status() const {
    if (problems_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(problems_, "\n"));
  }

 private:
  using Handler = std::function<void(const Field&)>;
  struct Key {
    absl::string_view name;
    Handler read;
  };

  void Problem(const YAML::Mark& mark, absl::string_view path, absl::string_view what) {
    problems_.push_back(absl::StrCat(Where(filename_, mark), path, path.empty() ? "" : ": ", what));
  }

  // True for a mapping; false, silently, for null (the key is left unset) and, with a problem,
  // for anything else.
  bool IsMapping(const Field& f) {
    if (f.node.IsNull()) return false;
    if (f.node.IsMap()) return true;
    Problem(f.mark, f.path, absl::StrCat("expected a mapping, got ", Describe(f.node)));
    return false;
  }

  // Reads each key of the mapping `f` with its handler in `keys`; reports unknown and duplicate
  // keys.
  void ReadMapping(const Field& f, const std::vector<Key>& keys) {
    std::map<std::string, YAML::Mark> seen;
    for (const auto& entry : f.node) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar()) {
        Problem(key.Mark(), f.path, absl::StrCat("expected a key name, got ", Describe(key)));
        continue;
      }
      const std::string& name = key.Scalar();
      const std::string path = Join(f.path, name);
      auto [first, inserted] = seen.emplace(name, key.Mark());
      if (!inserted) {
        Problem(key.Mark(), path,
                absl::StrCat("duplicate key (first at line ", first->second.line + 1, ")"));
        continue;
      }
      auto known =
          std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.name == name; });
      if (known == keys.end()) {
        Problem(key.Mark(), path, UnknownKey(name, f.path, keys));
        continue;
      }
      known->read(Field{entry.second, key.Mark(), path});
    }
  }

  static std::string UnknownKey(absl::string_view name, absl::string_view parent,
                                const std::vector<Key>& keys) {
    // The same key elsewhere in the layout: "steps" at the top level belongs under trainer.
    std::vector<std::string> elsewhere;
    std::vector<std::string> near_elsewhere;
    for (absl::string_view field : kAllFields) {
      const size_t dot = field.rfind('.');
      const absl::string_view last = dot == absl::string_view::npos ? field : field.substr(dot + 1);
      const absl::string_view owner = dot == absl::string_view::npos ? "" : field.substr(0, dot);
      if (owner == parent) continue;
      if (last == name) elsewhere.push_back(std::string(field));
      if (NearMiss(name, last)) near_elsewhere.push_back(std::string(field));
    }
    if (!elsewhere.empty()) {
      return absl::StrCat("unknown key here, did you mean ", absl::StrJoin(elsewhere, " or "), "?");
    }
    const Key* best = nullptr;
    int best_distance = 0;
    for (const Key& k : keys) {
      if (!NearMiss(name, k.name)) continue;
      const int distance = EditDistance(absl::AsciiStrToLower(name), k.name);
      if (best == nullptr || distance < best_distance) {
        best = &k;
        best_distance = distance;
      }
    }
    if (best != nullptr) return absl::StrCat("unknown key, did you mean \"", best->name, "\"?");
    if (!near_elsewhere.empty()) {
      return absl::StrCat("unknown key here, did you mean ", absl::StrJoin(near_elsewhere, " or "),
                          "?");
    }
    std::vector<absl::string_view> names;
    for (const Key& k : keys) names.push_back(k.name);
    return absl::StrCat("unknown key (expected one of: ", absl::StrJoin(names, ", "), ")");
  }

  // The scalar's text; nullopt, silently, for null and, with a problem, for a list or mapping.
  std::optional<std::string> ScalarText(const Field& f, absl::string_view expected) {
    if (f.node.IsNull()) return std::nullopt;
    if (f.node.IsScalar()) return f.node.Scalar();
    Problem(f.mark, f.path, absl::StrCat("expected ", expected, ", got ", Describe(f.node)));
    return std::nullopt;
  }

  std::optional<std::string> String(const Field& f) {
    std::optional<std::string> text = ScalarText(f, "a string");
    if (text.has_value() && !IsUtf8(*text)) {
      Problem(f.mark, f.path, absl::StrCat("expected UTF-8 text, got ", Quote(*text)));
      return std::nullopt;
    }
    return text;
  }

  std::optional<int64_t> Integer(const Field& f, int64_t lo, int64_t hi) {
    std::optional<std::string> text = ScalarText(f, "an integer");
    if (!text.has_value()) return std::nullopt;
    if (!IsIntegerText(*text)) {
      Problem(f.mark, f.path, absl::StrCat("expected an integer, got ", Quote(*text)));
      return std::nullopt;
    }
    int64_t value = 0;
    if (!absl::SimpleAtoi(*text, &value) || value < lo || value > hi) {
      Problem(f.mark, f.path, absl::StrCat("out of range [", lo, ", ", hi, "], got ", *text));
      return std::nullopt;
    }
    return value;
  }

  std::optional<uint64_t> Unsigned(const Field& f) {
    std::optional<std::string> text = ScalarText(f, "an integer");
    if (!text.has_value()) return std::nullopt;
    if (!IsIntegerText(*text)) {
      Problem(f.mark, f.path, absl::StrCat("expected an integer, got ", Quote(*text)));
      return std::nullopt;
    }
    absl::string_view digits = *text;
    const bool negative = absl::ConsumePrefix(&digits, "-");
    uint64_t value = 0;
    if (!absl::SimpleAtoi(digits, &value) || (negative && value != 0)) {
      Problem(f.mark, f.path,
              absl::StrCat("out of range [0, ", std::numeric_limits<uint64_t>::max(), "], got ",
                           *text));
      return std::nullopt;
    }
    return value;
  }

  // YAML 1.2's booleans: true or false (also True, TRUE, False, FALSE).
  std::optional<bool> Boolean(const Field& f) {
    std::optional<std::string> text = ScalarText(f, "true or false");
    if (!text.has_value()) return std::nullopt;
    if (*text == "true" || *text == "True" || *text == "TRUE") return true;
    if (*text == "false" || *text == "False" || *text == "FALSE") return false;
    Problem(f.mark, f.path, absl::StrCat("expected true or false, got ", Quote(*text)));
    return std::nullopt;
  }

  std::optional<double> Number(const Field& f) {
    std::optional<std::string> text = ScalarText(f, "a number");
    if (!text.has_value()) return std::nullopt;
    return NumberFromText(f, *text, "expected a number");
  }

  std::optional<double> NumberFromText(const Field& f, const std::string& text,
                                       absl::string_view expected) {
    bool overflow = false;
    std::optional<double> value = ParseNumber(text, &overflow);
    if (!value.has_value()) {
      Problem(f.mark, f.path, absl::StrCat(expected, ", got ", Quote(text)));
      return std::nullopt;
    }
    if (overflow) {
      Problem(f.mark, f.path, absl::StrCat("out of range for a double, got ", text));
      return std::nullopt;
    }
    return value;
  }

  template <typename M>
  Handler Int32(M* message, void (M::*set)(int32_t)) {
    return [this, message, set](const Field& f) {
      std::optional<int64_t> v =
          Integer(f, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      if (v.has_value()) (message->*set)(static_cast<int32_t>(*v));
    };
  }

  template <typename M>
  Handler Int64(M* message, void (M::*set)(int64_t)) {
    return [this, message, set](const Field& f) {
      std::optional<int64_t> v =
          Integer(f, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
      if (v.has_value()) (message->*set)(*v);
    };
  }

  template <typename M>
  Handler Double(M* message, void (M::*set)(double)) {
    return [this, message, set](const Field& f) {
      std::optional<double> v = Number(f);
      if (v.has_value()) (message->*set)(*v);
    };
  }

  // A scalar naming one of `names`.
  template <typename M, typename E, size_t N>
  Handler Named(M* message, void (M::*set)(E), const EnumName<E> (&names)[N]) {
    return [this, message, set, &names](const Field& f) {
      const std::string expected = NameList(names);
      std::optional<std::string> text = ScalarText(f, expected);
      if (!text.has_value()) return;
      const std::string lower = absl::AsciiStrToLower(*text);
      for (const EnumName<E>& n : names) {
        if (lower == n.name) {
          (message->*set)(n.value);
          return;
        }
      }
      Problem(f.mark, f.path, absl::StrCat("expected ", expected, ", got ", Quote(*text)));
    };
  }

  void ReadTrainer(const Field& f, v1::TrainerSpec* trainer);
  void ReadCommand(const Field& f, v1::TrainerSpec* trainer);
  void ReadEnv(const Field& f, v1::TrainerSpec* trainer);

  std::string filename_;
  std::vector<std::string> problems_;
};

void Reader::ReadJob(const YAML::Node& root, v1::JobSpec* spec) {
  if (!root.IsMap()) {
    Problem(root.Mark(), "",
            absl::StrCat("expected a mapping of job keys (name, nodes, trainer, ...), got ",
                         Describe(root)));
    return;
  }
  ReadMapping(
      Field{root, root.Mark(), ""},
      {
          {"name",
           [&](const Field& f) {
             if (auto s = String(f)) spec->set_name(*s);
           }},
          {"nodes", Int32(spec, &v1::JobSpec::set_nodes)},
          {"devices_per_node", Int32(spec, &v1::JobSpec::set_devices_per_node)},
          {"parallelism",
           [&](const Field& f) {
             if (!IsMapping(f)) return;
             v1::ParallelismSpec* p = spec->mutable_parallelism();
             ReadMapping(f, {
                                {"tensor", Int32(p, &v1::ParallelismSpec::set_tensor)},
                                {"pipeline", Int32(p, &v1::ParallelismSpec::set_pipeline)},
                                {"data", Int32(p, &v1::ParallelismSpec::set_data)},
                            });
           }},
          {"trainer",
           [&](const Field& f) {
             if (IsMapping(f)) ReadTrainer(f, spec->mutable_trainer());
           }},
          {"checkpoint",
           [&](const Field& f) {
             if (!IsMapping(f)) return;
             v1::CheckpointSpec* c = spec->mutable_checkpoint();
             ReadMapping(f, {
                                {"dir",
                                 [&](const Field& v) {
                                   if (auto s = String(v)) c->set_dir(*s);
                                 }},
                                {"every_steps", Int32(c, &v1::CheckpointSpec::set_every_steps)},
                                {"keep", Int32(c, &v1::CheckpointSpec::set_keep)},
                                {"max_consecutive_failures",
                                 Int32(c, &v1::CheckpointSpec::set_max_consecutive_failures)},
                            });
           }},
          {"restart",
           [&](const Field& f) {
             if (!IsMapping(f)) return;
             v1::RestartSpec* r = spec->mutable_restart();
             ReadMapping(f, {{"max_restarts", Int32(r, &v1::RestartSpec::set_max_restarts)},
                             {"window_minutes", Int32(r, &v1::RestartSpec::set_window_minutes)}});
           }},
          {"watchdog",
           [&](const Field& f) {
             if (!IsMapping(f)) return;
             v1::WatchdogSpec* w = spec->mutable_watchdog();
             ReadMapping(
                 f,
                 {
                     {"hang_timeout",
                      [&](const Field& v) {
                        std::optional<std::string> text =
                            ScalarText(v, "auto or a number of seconds");
                        if (!text.has_value()) return;
                        if (absl::AsciiStrToLower(*text) == "auto") {
                          w->set_hang_timeout_seconds(0);
                        } else if (auto seconds = NumberFromText(
                                       v, *text, "expected auto or a number of seconds")) {
                          w->set_hang_timeout_seconds(*seconds);
                        }
                      }},
                     {"straggler_threshold", Double(w, &v1::WatchdogSpec::set_straggler_threshold)},
                     {"link_check",
                      [&](const Field& v) {
                        if (auto on = Boolean(v)) w->set_link_check_disabled(!*on);
                      }},
                     {"link_check_bytes", Int64(w, &v1::WatchdogSpec::set_link_check_bytes)},
                     {"slow_link_ratio", Double(w, &v1::WatchdogSpec::set_slow_link_ratio)},
                     {"min_link_bytes_per_second",
                      Double(w, &v1::WatchdogSpec::set_min_link_bytes_per_second)},
                 });
           }},
      });
}

void Reader::ReadTrainer(const Field& f, v1::TrainerSpec* t) {
  ReadMapping(
      f, {
             {"builtin",
              [&](const Field& v) {
                std::optional<std::string> name = String(v);
                if (!name.has_value()) return;
                if (t->has_command()) {
                  Problem(v.mark, v.path, "set builtin or command, not both");
                  return;
                }
                t->set_builtin(*name);
              }},
             {"command", [&](const Field& v) { ReadCommand(v, t); }},
             {"model",
              [&](const Field& v) {
                if (!IsMapping(v)) return;
                v1::ModelSpec* m = t->mutable_model();
                ReadMapping(v, {
                                   {"layers", Int32(m, &v1::ModelSpec::set_layers)},
                                   {"d_model", Int32(m, &v1::ModelSpec::set_d_model)},
                                   {"heads", Int32(m, &v1::ModelSpec::set_heads)},
                                   {"seq_len", Int32(m, &v1::ModelSpec::set_seq_len)},
                                   {"vocab", Int32(m, &v1::ModelSpec::set_vocab)},
                               });
              }},
             {"batch",
              [&](const Field& v) {
                if (!IsMapping(v)) return;
                v1::BatchSpec* b = t->mutable_batch();
                ReadMapping(v, {
                                   {"micro_batch", Int32(b, &v1::BatchSpec::set_micro_batch)},
                                   {"global_batch", Int32(b, &v1::BatchSpec::set_global_batch)},
                               });
              }},
             {"steps", Int64(t, &v1::TrainerSpec::set_steps)},
             {"optimizer",
              [&](const Field& v) {
                if (!IsMapping(v)) return;
                v1::OptimizerSpec* o = t->mutable_optimizer();
                ReadMapping(
                    v, {
                           {"lr", Double(o, &v1::OptimizerSpec::set_lr)},
                           {"warmup_steps", Int32(o, &v1::OptimizerSpec::set_warmup_steps)},
                           {"weight_decay", Double(o, &v1::OptimizerSpec::set_weight_decay)},
                           {"clip_grad_norm", Double(o, &v1::OptimizerSpec::set_clip_grad_norm)},
                           {"min_lr", Double(o, &v1::OptimizerSpec::set_min_lr)},
                           {"beta1", Double(o, &v1::OptimizerSpec::set_beta1)},
                           {"beta2", Double(o, &v1::OptimizerSpec::set_beta2)},
                           {"epsilon", Double(o, &v1::OptimizerSpec::set_epsilon)},
                       });
              }},
             {"precision", Named(t, &v1::TrainerSpec::set_precision, kPrecisionNames)},
             {"attention", Named(t, &v1::TrainerSpec::set_attention, kAttentionNames)},
             {"zero_stage", Int32(t, &v1::TrainerSpec::set_zero_stage)},
             {"data",
              [&](const Field& v) {
                if (!IsMapping(v)) return;
                v1::DataSpec* d = t->mutable_data();
                ReadMapping(v, {
                                   {"path",
                                    [&](const Field& p) {
                                      if (auto s = String(p)) d->set_path(*s);
                                    }},
                                   {"seed",
                                    [&](const Field& s) {
                                      if (auto seed = Unsigned(s)) d->set_seed(*seed);
                                    }},
                               });
              }},
             {"env", [&](const Field& v) { ReadEnv(v, t); }},
         });
}

void Reader::ReadCommand(const Field& f, v1::TrainerSpec* t) {
  if (f.node.IsNull()) return;
  if (!f.node.IsSequence()) {
    std::string hint;
    if (f.node.IsScalar()) {
      std::vector<absl::string_view> words =
          absl::StrSplit(f.node.Scalar(), absl::ByAnyChar(" \t"), absl::SkipEmpty());
      hint = absl::StrCat(" (write it as [", absl::StrJoin(words, ", "), "])");
    }
    Problem(f.mark, f.path,
            absl::StrCat("expected a list of strings (argv), got ", Describe(f.node), hint));
    return;
  }
  if (t->has_builtin()) {
    Problem(f.mark, f.path, "set builtin or command, not both");
    return;
  }
  auto* argv = t->mutable_command()->mutable_argv();
  int index = 0;
  for (const YAML::Node& element : f.node) {
    const std::string path = absl::StrCat(f.path, "[", index++, "]");
    if (element.IsNull()) {
      argv->Add("");
      continue;
    }
    std::optional<std::string> arg = String(Field{element, element.Mark(), path});
    if (arg.has_value()) argv->Add(std::move(*arg));
  }
}

void Reader::ReadEnv(const Field& f, v1::TrainerSpec* t) {
  if (!IsMapping(f)) return;
  auto* env = t->mutable_env();
  std::map<std::string, YAML::Mark> seen;
  for (const auto& entry : f.node) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      Problem(key.Mark(), f.path, absl::StrCat("expected a variable name, got ", Describe(key)));
      continue;
    }
    const std::string& name = key.Scalar();
    if (!IsUtf8(name)) {
      Problem(key.Mark(), f.path,
              absl::StrCat("expected a UTF-8 variable name, got ", Quote(name)));
      continue;
    }
    const std::string path = Join(f.path, name);
    auto [first, inserted] = seen.emplace(name, key.Mark());
    if (!inserted) {
      Problem(key.Mark(), path,
              absl::StrCat("duplicate key (first at line ", first->second.line + 1, ")"));
      continue;
    }
    if (entry.second.IsNull()) {
      (*env)[name] = "";
      continue;
    }
    std::optional<std::string> value = String(Field{entry.second, key.Mark(), path});
    if (value.has_value()) (*env)[name] = std::move(*value);
  }
}

// --- Writing ---

// The shortest decimal form that reads back as `v`, without an exponent for whole numbers below
// 1e17; YAML's .nan, .inf and -.inf for the rest.
std::string FormatDouble(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  return FormatFiniteDouble(v);
}

// Whether a YAML reader would take `s`, written plain, for something other than this string
// (null, a boolean, a number, a document marker).
bool LooksTyped(absl::string_view s) {
  const std::string lower = absl::AsciiStrToLower(s);
  for (absl::string_view word :
       {"", "~", "null", "true", "false", "yes", "no", "on", "off", "y", "n"}) {
    if (lower == word) return true;
  }
  bool overflow = false;
  return ParseNumber(s, &overflow).has_value() || absl::StartsWith(lower, "0x") ||
         absl::StartsWith(lower, "0o") || absl::StartsWith(s, "---") || absl::StartsWith(s, "...");
}

void EmitString(YAML::Emitter& out, const std::string& s) {
  if (LooksTyped(s)) out << YAML::DoubleQuoted;
  out << s;
}

// Each Emit* writes `key: value` unless the value is zero (unset).
void EmitInt(YAML::Emitter& out, const char* key, int64_t value) {
  if (value != 0) out << YAML::Key << key << YAML::Value << value;
}

void EmitDouble(YAML::Emitter& out, const char* key, double value) {
  // -0.0 is not zero to proto3 (its bits are set), so it is written.
  if (value != 0 || std::signbit(value)) {
    out << YAML::Key << key << YAML::Value << FormatDouble(value);
  }
}

void EmitStringField(YAML::Emitter& out, const char* key, const std::string& value) {
  if (value.empty()) return;
  out << YAML::Key << key << YAML::Value;
  EmitString(out, value);
}

// `value` by its name in `names`; nothing for the unspecified 0. An undefined enum value has no
// YAML name: it is written as its number, which ParseJobYaml refuses just as ValidateJobSpec
// would.
template <typename E, size_t N>
void EmitNamed(YAML::Emitter& out, const char* key, E value, const EnumName<E> (&names)[N]) {
  if (static_cast<int>(value) == 0) return;
  for (const EnumName<E>& n : names) {
    if (n.value == value) {
      out << YAML::Key << key << YAML::Value << n.name;
      return;
    }
  }
  out << YAML::Key << key << YAML::Value << static_cast<int>(value);
}

void EmitTrainer(YAML::Emitter& out, const v1::TrainerSpec& t) {
  out << YAML::Key << "trainer" << YAML::Value << YAML::BeginMap;
  switch (t.program_case()) {
    case v1::TrainerSpec::kBuiltin:
      out << YAML::Key << "builtin" << YAML::Value;
      EmitString(out, t.builtin());
      break;
    case v1::TrainerSpec::kCommand:
      out << YAML::Key << "command" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const std::string& arg : t.command().argv()) EmitString(out, arg);
      out << YAML::EndSeq;
      break;
    case v1::TrainerSpec::PROGRAM_NOT_SET:
      break;
  }
  if (t.has_model()) {
    const v1::ModelSpec& m = t.model();
    out << YAML::Key << "model" << YAML::Value << YAML::Flow << YAML::BeginMap;
    EmitInt(out, "layers", m.layers());
    EmitInt(out, "d_model", m.d_model());
    EmitInt(out, "heads", m.heads());
    EmitInt(out, "seq_len", m.seq_len());
    EmitInt(out, "vocab", m.vocab());
    out << YAML::EndMap;
  }
  if (t.has_batch()) {
    out << YAML::Key << "batch" << YAML::Value << YAML::Flow << YAML::BeginMap;
    EmitInt(out, "micro_batch", t.batch().micro_batch());
    EmitInt(out, "global_batch", t.batch().global_batch());
    out << YAML::EndMap;
  }
  EmitInt(out, "steps", t.steps());
  if (t.has_optimizer()) {
    const v1::OptimizerSpec& o = t.optimizer();
    out << YAML::Key << "optimizer" << YAML::Value << YAML::Flow << YAML::BeginMap;
    EmitDouble(out, "lr", o.lr());
    EmitInt(out, "warmup_steps", o.warmup_steps());
    EmitDouble(out, "weight_decay", o.weight_decay());
    EmitDouble(out, "clip_grad_norm", o.clip_grad_norm());
    // Fields with presence: written when set, 0 included.
    if (o.has_min_lr()) out << YAML::Key << "min_lr" << YAML::Value << FormatDouble(o.min_lr());
    if (o.has_beta1()) out << YAML::Key << "beta1" << YAML::Value << FormatDouble(o.beta1());
    if (o.has_beta2()) out << YAML::Key << "beta2" << YAML::Value << FormatDouble(o.beta2());
    EmitDouble(out, "epsilon", o.epsilon());
    out << YAML::EndMap;
  }
  EmitNamed(out, "precision", t.precision(), kPrecisionNames);
  EmitNamed(out, "attention", t.attention(), kAttentionNames);
  EmitInt(out, "zero_stage", t.zero_stage());
  if (t.has_data()) {
    out << YAML::Key << "data" << YAML::Value << YAML::Flow << YAML::BeginMap;
    EmitStringField(out, "path", t.data().path());
    if (t.data().has_seed()) out << YAML::Key << "seed" << YAML::Value << t.data().seed();
    out << YAML::EndMap;
  }
  if (!t.env().empty()) {
    // Sorted: protobuf map order is unspecified and the output should be stable.
    std::map<std::string, std::string> env(t.env().begin(), t.env().end());
    out << YAML::Key << "env" << YAML::Value << YAML::BeginMap;
    for (const auto& [name, value] : env) {
      out << YAML::Key;
      EmitString(out, name);
      out << YAML::Value;
      EmitString(out, value);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobYaml(const std::string& text, const std::string& filename) {
  std::vector<YAML::Node> documents;
  try {
    if (std::optional<YAML::Mark> stuck = DocumentThatDoesNotAdvance(text); stuck.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(filename, *stuck), "invalid YAML: nothing can be read from here"));
    }
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(filename, e.mark), "invalid YAML: ", e.msg));
  }
  if (documents.empty() || (documents.size() == 1 && documents[0].IsNull())) {
    return absl::InvalidArgumentError(
        absl::StrCat(filename, ": empty job file (expected keys such as name, nodes, trainer)"));
  }
  if (documents.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(Where(filename, documents[1].Mark()),
                                                   "a job file holds one YAML document, found ",
                                                   documents.size()));
  }
  v1::JobSpec spec;
  Reader reader(filename);
  try {
    reader.ReadJob(documents[0], &spec);
  } catch (const YAML::Exception& e) {
    // Not expected: the reader checks every node's type before reading it.
    return absl::InvalidArgumentError(absl::StrCat(Where(filename, e.mark), e.msg));
  }
  RETURN_IF_ERROR(reader.status());
  return spec;
}

std::string JobSpecToYaml(const v1::JobSpec& spec) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  EmitStringField(out, "name", spec.name());
  EmitInt(out, "nodes", spec.nodes());
  EmitInt(out, "devices_per_node", spec.devices_per_node());
  if (spec.has_parallelism()) {
    const v1::ParallelismSpec& p = spec.parallelism();
    out << YAML::Key << "parallelism" << YAML::Value << YAML::Flow << YAML::BeginMap;
    EmitInt(out, "tensor", p.tensor());
    EmitInt(out, "pipeline", p.pipeline());
    EmitInt(out, "data", p.data());
    out << YAML::EndMap;
  }
  if (spec.has_trainer()) EmitTrainer(out, spec.trainer());
  if (spec.has_checkpoint()) {
    const v1::CheckpointSpec& c = spec.checkpoint();
    out << YAML::Key << "checkpoint" << YAML::Value << YAML::Flow << YAML::BeginMap;
    EmitStringField(out, "dir", c.dir());
    EmitInt(out, "every_steps", c.every_steps());
    EmitInt(out, "keep", c.keep());
    EmitInt(out, "max_consecutive_failures", c.max_consecutive_failures());
    out << YAML::EndMap;
  }
  if (spec.has_restart()) {
    out << YAML::Key << "restart" << YAML::Value << YAML::Flow << YAML::BeginMap;
    if (spec.restart().has_max_restarts()) {  // a 0 that is set means no restart
      out << YAML::Key << "max_restarts" << YAML::Value << spec.restart().max_restarts();
    }
    EmitInt(out, "window_minutes", spec.restart().window_minutes());
    out << YAML::EndMap;
  }
  if (spec.has_watchdog()) {
    const v1::WatchdogSpec& w = spec.watchdog();
    out << YAML::Key << "watchdog" << YAML::Value << YAML::Flow << YAML::BeginMap;
    EmitDouble(out, "hang_timeout", w.hang_timeout_seconds());
    EmitDouble(out, "straggler_threshold", w.straggler_threshold());
    if (w.link_check_disabled()) out << YAML::Key << "link_check" << YAML::Value << false;
    EmitInt(out, "link_check_bytes", w.link_check_bytes());
    EmitDouble(out, "slow_link_ratio", w.slow_link_ratio());
    EmitDouble(out, "min_link_bytes_per_second", w.min_link_bytes_per_second());
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

}  // namespace ringmaster::ctl
