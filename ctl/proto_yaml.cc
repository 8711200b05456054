#include "ctl/proto_yaml.h"

#include "absl/strings/escaping.h"
#include "ctl/yaml_scalar.h"
#include "yaml-cpp/yaml.h"

namespace ringmaster::ctl {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void EmitMessage(YAML::Emitter& e, const Message& m);

// Element `index` of a repeated field, or the singular field when index < 0.
void EmitValue(YAML::Emitter& e, const Message& m, const FieldDescriptor* f, int index) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      e << (rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      e << (rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      e << (rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      e << (rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      e << (rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      e << (rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      e << (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      e << (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name();
      break;
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string s = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
      if (f->type() == FieldDescriptor::TYPE_BYTES) {
        e << YAML::DoubleQuoted << absl::Base64Escape(s);
      } else {
        EmitYamlString(e, s);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      EmitMessage(e, rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
      break;
  }
}

void EmitMessage(YAML::Emitter& e, const Message& m) {
  const Reflection* r = m.GetReflection();
  const auto* d = m.GetDescriptor();
  e << YAML::BeginMap;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_map()) {
      e << YAML::Key << f->name() << YAML::Value;
      if (r->FieldSize(m, f) == 0) {
        e << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        continue;
      }
      e << YAML::BeginMap;
      const FieldDescriptor* key = f->message_type()->map_key();
      const FieldDescriptor* value = f->message_type()->map_value();
      for (int j = 0; j < r->FieldSize(m, f); ++j) {
        const Message& entry = r->GetRepeatedMessage(m, f, j);
        e << YAML::Key;
        EmitValue(e, entry, key, -1);
        e << YAML::Value;
        EmitValue(e, entry, value, -1);
      }
      e << YAML::EndMap;
    } else if (f->is_repeated()) {
      e << YAML::Key << f->name() << YAML::Value;
      if (r->FieldSize(m, f) == 0) {
        e << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        continue;
      }
      e << YAML::BeginSeq;
      for (int j = 0; j < r->FieldSize(m, f); ++j) EmitValue(e, m, f, j);
      e << YAML::EndSeq;
    } else if (!f->has_presence() || r->HasField(m, f)) {
      e << YAML::Key << f->name() << YAML::Value;
      EmitValue(e, m, f, -1);
    }
  }
  e << YAML::EndMap;
}

}  // namespace

std::string ProtoToYaml(const Message& message) {
  YAML::Emitter e;
  e.SetMapFormat(YAML::Block);
  e.SetSeqFormat(YAML::Block);
  e.SetIndent(2);
  EmitMessage(e, message);
  return std::string(e.c_str()) + "\n";
}

}  // namespace ringmaster::ctl
