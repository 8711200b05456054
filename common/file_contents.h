// Reading a whole file into memory: its size first, then one read into a string of that size.
// (The `std::stringstream << ifstream.rdbuf()` idiom grows and copies its buffer as it goes:
// about 5 s for a 1.5 GB checkpoint file on the development machine, against under 1 s this way.)
#ifndef RINGMASTER_COMMON_FILE_CONTENTS_H_
#define RINGMASTER_COMMON_FILE_CONTENTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace ringmaster {

// The bytes of the file at `path`. Errors name the path and the system's reason: NOT_FOUND when
// it does not exist, else the errno's code (PERMISSION_DENIED, FAILED_PRECONDITION for a
// directory, ...). A file that changes size while it is read yields what was read up to its end.
absl::StatusOr<std::string> ReadFileContents(const std::string& path);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_FILE_CONTENTS_H_
