// The communication groups a link check may report (proto LinkStat.group): the builtin trainer's
// tensor-, pipeline- and data-parallel groups and its tied-embedding group, each a kind followed
// by its number ("tp0", "pp12", "dp3", "emb1"). The kind becomes a metric label, so the set is
// closed: the agent refuses other names and the coordinator ignores them.
#ifndef RINGMASTER_COMMON_LINK_GROUPS_H_
#define RINGMASTER_COMMON_LINK_GROUPS_H_

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace ringmaster {

inline constexpr const char* kLinkGroupKinds[] = {"tp", "pp", "dp", "emb"};

// The kind of a group name: "dp12" -> "dp" (the name without its trailing digits).
inline std::string GroupKind(absl::string_view group) {
  size_t end = group.size();
  while (end > 0 && absl::ascii_isdigit(static_cast<unsigned char>(group[end - 1]))) --end;
  return std::string(group.substr(0, end));
}

// A kind of kLinkGroupKinds followed by at least one digit.
inline bool IsLinkGroupName(absl::string_view group) {
  const std::string kind = GroupKind(group);
  if (kind.size() == group.size()) return false;
  for (const char* k : kLinkGroupKinds) {
    if (kind == k) return true;
  }
  return false;
}

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_LINK_GROUPS_H_
