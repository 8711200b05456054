#include "common/testing/json_struct.h"

namespace ringmaster::testing {

const google::protobuf::Value* Field(const google::protobuf::Struct& s, const std::string& name) {
  auto it = s.fields().find(name);
  return it == s.fields().end() ? nullptr : &it->second;
}

}  // namespace ringmaster::testing
