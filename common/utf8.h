// UTF-8 as protobuf's string fields require it (RFC 3629): no overlong forms, no surrogates,
// nothing past U+10FFFF. Used where untrusted text meets a proto string: the job file
// (ctl/job_yaml), the agent's report datagrams (agent/report_socket) and one-line texts
// (common/one_line).
// Threading: pure functions. Ownership: none kept. Errors: none (0 or false for invalid input).
#ifndef RINGMASTER_COMMON_UTF8_H_
#define RINGMASTER_COMMON_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace ringmaster {

// The length of the valid UTF-8 sequence at `s[i]` (i < s.size()) and its code point, or 0 if
// none starts there.
size_t DecodeUtf8(absl::string_view s, size_t i, unsigned int* code_point);

// Whether all of `s` is valid UTF-8.
bool IsUtf8(absl::string_view s);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_UTF8_H_
