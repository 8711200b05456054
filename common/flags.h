// Command-line conventions shared by all Ringmaster binaries.
//
// Flags are Abseil flags (`--name=value`), declared in the file that uses them. Every binary calls
// InitBinary() first thing in main(): it sets the usage text, parses flags (`--help` lists them),
// and applies the shared flags below. Binaries take no configuration from global state otherwise:
// main() reads flags and passes values down through constructors.
//
// Shared flags:
//   --log_level=debug|info|warning|error   minimum severity written to stderr (default info)
#ifndef RINGMASTER_COMMON_FLAGS_H_
#define RINGMASTER_COMMON_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ringmaster {

// Parses flags and returns the positional arguments (argv[0] first). Returns INVALID_ARGUMENT
// naming the flag for an invalid shared flag value. Unknown flags make Abseil print an error and
// exit with status 1, before main() does anything else.
absl::Status InitBinary(int argc, char** argv, absl::string_view usage,
                        std::vector<std::string>* positional);

// Splits "host:port" (or "[v6]:port"). INVALID_ARGUMENT naming `flag` if malformed.
absl::Status ParseHostPort(absl::string_view flag, absl::string_view address, std::string* host,
                           int* port);

}  // namespace ringmaster

#endif  // RINGMASTER_COMMON_FLAGS_H_
