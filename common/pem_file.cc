#include "common/pem_file.h"

#include "absl/strings/str_cat.h"
#include "common/file_contents.h"
#include "common/status.h"

namespace ringmaster {

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileContents(path);
  if (!text.ok()) return FieldError(flag, text.status().message());
  return text;
}

}  // namespace ringmaster
