// Block-style YAML of any protobuf message, as `ringctl ... -o yaml` prints it. Pure function
// (thread-safe; no errors); it only reads `message` (the caller's) and returns the text by value.
//
// The same fields as `-o json` (protobuf's JSON with always_print_primitive_fields and the proto
// field names): every scalar field without presence is printed, zero included (rank: 0); fields
// with presence (oneof members, proto3 `optional`) and sub-messages only when set; repeated and
// map fields always ([] and {} when empty). Enums print as their names, int64s as numbers, bytes
// as base64; a string that YAML would read as something else ("123", "true", "") is quoted.
#ifndef RINGMASTER_CTL_PROTO_YAML_H_
#define RINGMASTER_CTL_PROTO_YAML_H_

#include <string>

#include "google/protobuf/message.h"

namespace ringmaster::ctl {

std::string ProtoToYaml(const google::protobuf::Message& message);

}  // namespace ringmaster::ctl

#endif  // RINGMASTER_CTL_PROTO_YAML_H_
