#include "ctl/job_yaml.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/format_double.h"
#include "common/status.h"
#include "common/utf8.h"
#include "ctl/job_file_keys.h"
#include "ctl/yaml_scalar.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "spec/trainer_keys.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace ringmaster::ctl {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CHexEscape(s), "\""); }

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

// A value in the document: the node, where to point at it, and its field path.
struct Field {
  YAML::Node node;
  YAML::Mark mark;
  std::string path;
};

// Walks a parsed document into a JobSpec by the table of keys (job_file_keys.h), collecting every
// problem. Checks each node's type before reading it, so yaml-cpp's accessors do not throw.
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

  // Reads each key of the mapping `f`, the table's mapping `parent` ("" at the top level), into
  // `message`; reports unknown and duplicate keys.
  void ReadMapping(const Field& f, absl::string_view parent, Message* message) {
    const std::vector<const JobFileKey*> keys = ChildKeys(parent);
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
      auto known = std::find_if(keys.begin(), keys.end(),
                                [&](const JobFileKey* k) { return k->name() == name; });
      if (known == keys.end()) {
        Problem(key.Mark(), path, UnknownKeyMessage(name, parent));
        continue;
      }
      ReadKey(**known, Field{entry.second, key.Mark(), path}, message);
    }
    if (parent == "trainer") RefuseBuiltinOnlyKeys(f, seen, *message);
  }

  // Once the whole trainer mapping is read: the keys only the builtin trainer reads, set in a
  // command job of another program (spec/trainer_keys.h), each pointed at by its key.
  void RefuseBuiltinOnlyKeys(const Field& f, const std::map<std::string, YAML::Mark>& seen,
                             const Message& message) {
    const auto* trainer = dynamic_cast<const v1::TrainerSpec*>(&message);
    if (trainer == nullptr) return;  // Not reached: "trainer" is a TrainerSpec (the table).
    for (absl::string_view key : spec::RefusedBuiltinOnlyKeys(*trainer)) {
      const absl::string_view name = key.substr(key.rfind('.') + 1);
      auto it = seen.find(std::string(name));
      Problem(it == seen.end() ? f.mark : it->second, Join(f.path, name), spec::kBuiltinOnlyRule);
    }
  }

  // Reads the value `f` of `key` into its field under `parent` (the message of key.parent()).
  void ReadKey(const JobFileKey& key, const Field& f, Message* parent);
  void ReadArgv(const JobFileKey& key, const Field& f, Message* parent);
  void ReadStringMap(const JobFileKey& key, const Field& f, Message* parent);

  // True, with a problem, when the oneof of `key`'s field holds another key's value already
  // ("set builtin or command, not both").
  bool OneofTaken(const JobFileKey& key, const Field& f, const Message& parent) {
    const FieldDescriptor* own = RelativeFieldPath(key).front();
    const google::protobuf::OneofDescriptor* oneof = own->real_containing_oneof();
    if (oneof == nullptr) return false;
    const FieldDescriptor* held = parent.GetReflection()->GetOneofFieldDescriptor(parent, oneof);
    if (held == nullptr || held == own) return false;
    Problem(f.mark, f.path, absl::StrCat("set ", OneofKeyNames(key), ", not both"));
    return true;
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
    std::optional<double> value = ParseYamlNumber(text, &overflow);
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

  // A scalar naming one of the key's enum values (any case).
  std::optional<int> EnumNumber(const JobFileKey& key, const Field& f) {
    const std::string expected = EnumNameList(key);
    std::optional<std::string> text = ScalarText(f, expected);
    if (!text.has_value()) return std::nullopt;
    const std::string lower = absl::AsciiStrToLower(*text);
    for (const EnumName& n : key.names) {
      if (lower == n.name) return n.number;
    }
    Problem(f.mark, f.path, absl::StrCat("expected ", expected, ", got ", Quote(*text)));
    return std::nullopt;
  }

  // "auto" (any case) for 0, or a number of seconds.
  std::optional<double> SecondsOrAuto(const Field& f) {
    std::optional<std::string> text = ScalarText(f, "auto or a number of seconds");
    if (!text.has_value()) return std::nullopt;
    if (absl::AsciiStrToLower(*text) == "auto") return 0.0;
    return NumberFromText(f, *text, "expected auto or a number of seconds");
  }

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
  ReadMapping(Field{root, root.Mark(), ""}, "", spec);
}

void Reader::ReadKey(const JobFileKey& key, const Field& f, Message* parent) {
  const FieldDescriptor* field = KeyField(key);
  // Stores a value read: `assign(reflection, holder)`, unless the key's oneof is taken.
  auto set = [&](const auto& assign) {
    if (OneofTaken(key, f, *parent)) return;
    Message* holder = MutableHolder(key, parent);
    assign(*holder->GetReflection(), holder);
  };
  switch (key.kind) {
    case KeyKind::kMapping:
      if (!IsMapping(f)) return;
      set([&](const Reflection& r, Message* m) {
        ReadMapping(f, key.key, r.MutableMessage(m, field));
      });
      return;
    case KeyKind::kString:
      if (std::optional<std::string> s = String(f)) {
        set([&](const Reflection& r, Message* m) { r.SetString(m, field, *s); });
      }
      return;
    case KeyKind::kInt32:
      if (std::optional<int64_t> v = Integer(f, std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int32_t>::max())) {
        set([&](const Reflection& r, Message* m) {
          r.SetInt32(m, field, static_cast<int32_t>(*v));
        });
      }
      return;
    case KeyKind::kInt64:
      if (std::optional<int64_t> v = Integer(f, std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max())) {
        set([&](const Reflection& r, Message* m) { r.SetInt64(m, field, *v); });
      }
      return;
    case KeyKind::kUint64:
      if (std::optional<uint64_t> v = Unsigned(f)) {
        set([&](const Reflection& r, Message* m) { r.SetUInt64(m, field, *v); });
      }
      return;
    case KeyKind::kNumber:
      if (std::optional<double> v = Number(f)) {
        set([&](const Reflection& r, Message* m) { r.SetDouble(m, field, *v); });
      }
      return;
    case KeyKind::kSecondsOrAuto:
      if (std::optional<double> v = SecondsOrAuto(f)) {
        set([&](const Reflection& r, Message* m) { r.SetDouble(m, field, *v); });
      }
      return;
    case KeyKind::kNegatedBool:
      if (std::optional<bool> on = Boolean(f)) {
        set([&](const Reflection& r, Message* m) { r.SetBool(m, field, !*on); });
      }
      return;
    case KeyKind::kEnum:
      if (std::optional<int> number = EnumNumber(key, f)) {
        set([&](const Reflection& r, Message* m) { r.SetEnumValue(m, field, *number); });
      }
      return;
    case KeyKind::kArgv:
      ReadArgv(key, f, parent);
      return;
    case KeyKind::kStringMap:
      ReadStringMap(key, f, parent);
      return;
  }
}

void Reader::ReadArgv(const JobFileKey& key, const Field& f, Message* parent) {
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
  if (OneofTaken(key, f, *parent)) return;
  Message* holder = MutableHolder(key, parent);
  const Reflection& r = *holder->GetReflection();
  const FieldDescriptor* field = KeyField(key);
  int index = 0;
  for (const YAML::Node& element : f.node) {
    const std::string path = absl::StrCat(f.path, "[", index++, "]");
    if (element.IsNull()) {
      r.AddString(holder, field, "");
      continue;
    }
    std::optional<std::string> arg = String(Field{element, element.Mark(), path});
    if (arg.has_value()) r.AddString(holder, field, std::move(*arg));
  }
}

void Reader::ReadStringMap(const JobFileKey& key, const Field& f, Message* parent) {
  if (!IsMapping(f)) return;
  Message* holder = MutableHolder(key, parent);
  const FieldDescriptor* field = KeyField(key);
  // Adds name: value as an entry of the map field.
  auto add = [&](const std::string& name, std::string value) {
    Message* entry = holder->GetReflection()->AddMessage(holder, field);
    const Reflection& r = *entry->GetReflection();
    r.SetString(entry, field->message_type()->map_key(), name);
    r.SetString(entry, field->message_type()->map_value(), std::move(value));
  };
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
      add(name, "");
      continue;
    }
    std::optional<std::string> value = String(Field{entry.second, key.Mark(), path});
    if (value.has_value()) add(name, std::move(*value));
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

void EmitKeys(YAML::Emitter& out, absl::string_view parent, const Message& message);

// Writes `name: value` for `key` when it is set (KeyIsSet) in `parent`, the message of
// key.parent().
void EmitKey(YAML::Emitter& out, const JobFileKey& key, const Message& parent) {
  if (!KeyIsSet(key, parent)) return;
  const Message& holder = *Holder(key, parent);
  const Reflection& r = *holder.GetReflection();
  const FieldDescriptor* field = KeyField(key);
  out << YAML::Key << std::string(key.name()) << YAML::Value;
  switch (key.kind) {
    case KeyKind::kMapping:
      if (!WrittenAsBlock(key)) out << YAML::Flow;
      out << YAML::BeginMap;
      EmitKeys(out, key.key, r.GetMessage(holder, field));
      out << YAML::EndMap;
      return;
    case KeyKind::kString:
      EmitYamlString(out, r.GetString(holder, field));
      return;
    case KeyKind::kInt32:
      out << r.GetInt32(holder, field);
      return;
    case KeyKind::kInt64:
      out << r.GetInt64(holder, field);
      return;
    case KeyKind::kUint64:
      out << r.GetUInt64(holder, field);
      return;
    case KeyKind::kNumber:
    case KeyKind::kSecondsOrAuto:  // 0 ("auto") is not set, so never written
      out << FormatDouble(r.GetDouble(holder, field));
      return;
    case KeyKind::kNegatedBool:
      out << !r.GetBool(holder, field);
      return;
    case KeyKind::kEnum: {
      // An undefined enum value has no YAML name: it is written as its number, which
      // ParseJobYaml refuses just as ValidateJobSpec would.
      const int number = r.GetEnumValue(holder, field);
      for (const EnumName& n : key.names) {
        if (n.number == number) {
          out << std::string(n.name);
          return;
        }
      }
      out << number;
      return;
    }
    case KeyKind::kArgv:
      out << YAML::Flow << YAML::BeginSeq;
      for (int i = 0; i < r.FieldSize(holder, field); ++i) {
        EmitYamlString(out, r.GetRepeatedString(holder, field, i));
      }
      out << YAML::EndSeq;
      return;
    case KeyKind::kStringMap: {
      // Sorted: protobuf map order is unspecified and the output should be stable.
      std::map<std::string, std::string> entries;
      for (int i = 0; i < r.FieldSize(holder, field); ++i) {
        const Message& entry = r.GetRepeatedMessage(holder, field, i);
        const Reflection& e = *entry.GetReflection();
        entries[e.GetString(entry, field->message_type()->map_key())] =
            e.GetString(entry, field->message_type()->map_value());
      }
      out << YAML::BeginMap;
      for (const auto& [name, value] : entries) {
        out << YAML::Key;
        EmitYamlString(out, name);
        out << YAML::Value;
        EmitYamlString(out, value);
      }
      out << YAML::EndMap;
      return;
    }
  }
}

// The keys of the table's mapping `parent` ("" at the top level), in table order.
void EmitKeys(YAML::Emitter& out, absl::string_view parent, const Message& message) {
  for (const JobFileKey* key : ChildKeys(parent)) EmitKey(out, *key, message);
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
  EmitKeys(out, "", spec);
  out << YAML::EndMap;
  return absl::StrCat(out.c_str(), "\n");
}

}  // namespace ringmaster::ctl
