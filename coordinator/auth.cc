#include "coordinator/auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_contents.h"
#include "common/status.h"

namespace ringmaster::coordinator {

absl::StatusOr<TokenAuthenticator> TokenAuthenticator::FromText(const std::string& text) {
  TokenAuthenticator auth;
  auth.enabled_ = true;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty()) continue;
    if (words.size() < 2 || words.size() > 3 ||
        (words.size() == 3 && words[2] != "admin" && words[2] != "agent")) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens:", line_number, ": expected \"TOKEN NAME [admin|agent]\""));
    }
    if (words[0].size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens:", line_number, ": a token must be at least 16 characters"));
    }
    Caller caller;
    caller.identity = words[1];
    caller.admin = words.size() == 3 && words[2] == "admin";
    caller.agent = words.size() == 3 && words[2] == "agent";
    auth.has_agent_tokens_ = auth.has_agent_tokens_ || caller.agent;
    if (!auth.tokens_.emplace(words[0], caller).second) {
      return absl::InvalidArgumentError(absl::StrCat("tokens:", line_number, ": duplicate token"));
    }
  }
  return auth;
}

absl::StatusOr<TokenAuthenticator> TokenAuthenticator::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileContents(path);
  if (!text.ok()) return FieldError("--tokens", text.status().message());
  return FromText(*text);
}

absl::StatusOr<Caller> TokenAuthenticator::Authenticate(const std::string& authorization) const {
  if (!enabled_) return Caller{};
  absl::string_view value = authorization;
  if (value.empty()) {
    return absl::UnauthenticatedError(
        "missing bearer token (ringctl: --token or RINGMASTER_TOKEN)");
  }
  if (!absl::ConsumePrefix(&value, "Bearer ")) {
    return absl::UnauthenticatedError("authorization must be \"Bearer TOKEN\"");
  }
  auto it = tokens_.find(std::string(value));
  if (it == tokens_.end()) return absl::UnauthenticatedError("unknown bearer token");
  return it->second;
}

}  // namespace ringmaster::coordinator
