// Names of enumerators from a table of {enumerator, name} pairs, for the small "what is this
// value called" functions (log letters, metric types, store writes, kernel epilogues...) that
// would otherwise each be a switch of the same shape.
// Pure constexpr functions over caller-owned constant tables: thread-safe, no allocation.
// A value the table does not list gets the caller's fallback; nothing fails.
#ifndef RINGMASTER_COMMON_ENUM_NAME_H_
#define RINGMASTER_COMMON_ENUM_NAME_H_

#include <cstddef>
#include <type_traits>
#include <utility>

namespace ringmaster {

// The name `table` gives `value`, or `fallback` where it gives none (the first match wins).
// The table alone decides Name; `fallback` converts to it ("?" for an absl::string_view).
template <typename Enum, typename Name, size_t N>
constexpr Name EnumName(const std::pair<Enum, Name> (&table)[N], Enum value,
                        std::common_type_t<Name> fallback) {
  for (const std::pair<Enum, Name>& entry : table) {
    if (entry.first == value) return entry.second;
  }
  return fallback;
}

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_ENUM_NAME_H_
