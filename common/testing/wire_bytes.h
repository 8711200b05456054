// Hand-built protobuf wire bytes for tests that send what no well-formed message serializes to:
// unknown fields nested deeper than a parser accepts (common/proto_edge.h), spliced into a real
// message. Pure functions of their arguments; thread-safe.
#ifndef RINGMASTER_COMMON_TESTING_WIRE_BYTES_H_
#define RINGMASTER_COMMON_TESTING_WIRE_BYTES_H_

#include <cstdint>
#include <string>

namespace ringmaster::testing {

// `v` as a base-128 varint.
std::string Varint(uint64_t v);

// Field `field` with wire type 2 (length-delimited) holding `bytes`: appended to a message's
// serialization, it sets or merges that field.
std::string LengthDelimited(int field, const std::string& bytes);

// `levels` unknown groups (field 1000), each inside the one before. Appended to a message's
// serialization, the message parses iff its nesting stays within the parser's limit (protobuf
// parses at most 100 levels).
std::string NestedUnknownGroups(int levels);

}  // namespace ringmaster::testing

#endif  // RINGMASTER_COMMON_TESTING_WIRE_BYTES_H_
