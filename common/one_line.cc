#include "common/one_line.h"

#include <vector>

namespace ringmaster {
namespace {

// The length of the valid UTF-8 sequence at `s[i]`, or 0 if none starts there (overlong forms,
// surrogates and code points above U+10FFFF are not valid).
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  if (b < 0x80) return 1;
  size_t n = 0;
  unsigned int min = 0, cp = 0;
  if ((b & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = b & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string OneLine(absl::string_view text, size_t max_bytes) {
  std::string out;           // the first characters, up to a little over max_bytes
  std::vector<size_t> ends;  // where each character of `out` ends
  bool more = false;         // a character other than a space did not fit in `out`
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    absl::string_view piece;
    size_t n = 1;
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      piece = " ";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      piece = "?";
    } else if (n = Utf8Length(text, i); n > 0) {
      piece = text.substr(i, n);
    } else {
      piece = "?";
      n = 1;
    }
    i += n;
    if (piece == " " && out.empty()) continue;  // leading spaces
    if (out.size() > max_bytes) {
      more = more || piece != " ";
      continue;
    }
    out.append(piece.data(), piece.size());
    ends.push_back(out.size());
  }
  while (!out.empty() && out.back() == ' ') {
    out.pop_back();
    ends.pop_back();
  }
  if (!more && out.size() <= max_bytes) return out;
  size_t cut = 0;
  for (size_t end : ends) {
    if (end > max_bytes - 3) break;
    cut = end;
  }
  out.resize(cut);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out + "...";
}

}  // namespace ringmaster
