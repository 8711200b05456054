#include "common/testing/wire_bytes.h"

namespace ringmaster::testing {

std::string Varint(uint64_t v) {
  std::string s;
  for (; v >= 0x80; v >>= 7) s.push_back(static_cast<char>(v | 0x80));
  s.push_back(static_cast<char>(v));
  return s;
}

std::string LengthDelimited(int field, const std::string& bytes) {
  return Varint((static_cast<uint64_t>(field) << 3) | 2) + Varint(bytes.size()) + bytes;
}

std::string NestedUnknownGroups(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += Varint((1000 << 3) | 3);  // start group
  for (int i = 0; i < levels; ++i) s += Varint((1000 << 3) | 4);  // end group
  return s;
}

}  // namespace ringmaster::testing
