// Version reported by every binary (--version, ringmaster_build_info, agent Register).
#ifndef RINGMASTER_COMMON_BUILD_INFO_H_
#define RINGMASTER_COMMON_BUILD_INFO_H_

namespace ringmaster {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_BUILD_INFO_H_
