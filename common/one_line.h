// Text from a process's output or a report, made fit for one line of an event, a job's reason or
// a protobuf string (which must be valid UTF-8): ANSI escape sequences (colours) are dropped; '\n',
// '\r', '\t' and the Unicode line and paragraph separators (U+2028, U+2029) become spaces; other
// control characters (C0, DEL, C1) and bytes that are not valid UTF-8 become '?'; spaces at either
// end are dropped; and text longer than `max_bytes` is cut at a character boundary and ends in
// "..." (no dots below 3 bytes).
#ifndef RINGMASTER_COMMON_ONE_LINE_H_
#define RINGMASTER_COMMON_ONE_LINE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ringmaster {

// The result is at most `max_bytes` bytes.
std::string OneLine(absl::string_view text, size_t max_bytes);

// Whether OneLine(text, n) is not empty (for any n >= 3): `text` holds a character that is
// neither a space nor part of an escape sequence. Stops at the first one, allocates nothing.
bool HasVisibleText(absl::string_view text);

// The bound of a worker's exit reason as its trainer sends it (ReportExitRequest.reason), its
// agent reports it (WorkerState.exit_reason) and the coordinator quotes it.
inline constexpr size_t kExitReasonBytes = 512;

// The bounds of a stalled rank's Python stack (ReportCollectivesRequest.stack, a frame per line)
// as its agent forwards it (agent/report_validation.h's ReportedStack) and the coordinator keeps
// it (StepSummary.stack; a longer one is not kept), and of one frame in it.
inline constexpr size_t kStackBytes = 4096;
inline constexpr size_t kStackFrameBytes = 512;

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_ONE_LINE_H_
