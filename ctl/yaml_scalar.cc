#include "ctl/yaml_scalar.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace ringmaster::ctl {
namespace {

// Whether a YAML reader would take `s`, written plain, for something other than this string
// (null, a boolean, a number, a document marker).
bool LooksTyped(absl::string_view s) {
  const std::string lower = absl::AsciiStrToLower(s);
  for (absl::string_view word :
       {"", "~", "null", "true", "false", "yes", "no", "on", "off", "y", "n"}) {
    if (lower == word) return true;
  }
  bool overflow = false;
  return ParseYamlNumber(s, &overflow).has_value() || absl::StartsWith(lower, "0x") ||
         absl::StartsWith(lower, "0o") || absl::StartsWith(s, "---") || absl::StartsWith(s, "...");
}

// Whether `s` holds a control character (a carriage return, say) that the emitter could leave
// raw in a plain scalar, where a reader drops or folds it: double quotes escape every one.
bool HasControl(absl::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const unsigned char u = c;
    return u < 0x20 || u == 0x7F;
  });
}

}  // namespace

std::optional<double> ParseYamlNumber(absl::string_view text, bool* overflow) {
  *overflow = false;
  const std::string lower = absl::AsciiStrToLower(text);
  absl::string_view body = lower;
  if (body == ".nan") return std::numeric_limits<double>::quiet_NaN();
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf") {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  size_t i = 0;
  int mantissa_digits = 0;
  auto digits = [&]() {
    int n = 0;
    for (; i < body.size() && absl::ascii_isdigit(body[i]); ++i) ++n;
    return n;
  };
  mantissa_digits += digits();
  if (i < body.size() && body[i] == '.') {
    ++i;
    mantissa_digits += digits();
  }
  if (mantissa_digits == 0) return std::nullopt;
  if (i < body.size() && body[i] == 'e') {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    if (digits() == 0) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  double value = 0;
  if (!absl::SimpleAtod(body, &value)) return std::nullopt;
  if (negative) value = -value;
  *overflow = !std::isfinite(value);
  return value;
}

void EmitYamlString(YAML::Emitter& out, const std::string& s) {
  if (LooksTyped(s) || HasControl(s)) out << YAML::DoubleQuoted;
  out << s;
}

}  // namespace ringmaster::ctl
