#include "common/pem_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ringmaster {

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return FieldError(flag, absl::StrCat("cannot read \"", path, "\""));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ringmaster
