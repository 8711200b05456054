// Reading JSON parsed into google.protobuf.Struct (google/protobuf/util/json_util.h), for tests
// that check JSON documents and API replies. Pure functions; thread-safe.
#ifndef RINGMASTER_COMMON_TESTING_JSON_STRUCT_H_
#define RINGMASTER_COMMON_TESTING_JSON_STRUCT_H_

#include <string>

#include "google/protobuf/struct.pb.h"

namespace ringmaster::testing {

// The value of `s`'s field `name`, or nullptr if it has none. Points into `s`.
const google::protobuf::Value* Field(const google::protobuf::Struct& s, const std::string& name);

}  // namespace ringmaster::testing

#endif  // RINGMASTER_COMMON_TESTING_JSON_STRUCT_H_
