// Reading PEM files named by flags, with errors that name the flag.
#ifndef RINGMASTER_COMMON_PEM_FILE_H_
#define RINGMASTER_COMMON_PEM_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace ringmaster {

// Contents of `path`; INVALID_ARGUMENT "<flag>: cannot read "<path>"" if it cannot be read.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_PEM_FILE_H_
