// Reading a whole file into memory: its size first, then reads into a string of that size, and
// errors that give the system's reason (the `std::stringstream << ifstream.rdbuf()` idiom grows
// and copies its buffer as it goes, about 5 s for 1.5 GB on the development machine, and reads a
// directory as an empty file). For small files: configuration, keys, /proc; checkpoints stream
// into their state instead (trainer/checkpoint/checkpoint_files.h).
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
