#include "common/one_line.h"

#include <vector>

#include "common/utf8.h"

namespace ringmaster {
namespace {

// The length of the ANSI escape sequence at `s[i]` (an ESC): a CSI sequence ("ESC [", parameter
// and intermediate bytes, one final byte in 0x40-0x7E) or ESC and one more byte; at most the
// rest of `s`.
size_t EscapeLength(absl::string_view s, size_t i) {
  if (i + 1 >= s.size()) return 1;
  if (s[i + 1] != '[') return 2;
  size_t k = i + 2;
  while (k < s.size() && (s[k] < 0x40 || s[k] > 0x7E) && s[k] >= 0x20) ++k;
  return (k < s.size() && s[k] >= 0x40 ? k + 1 : k) - i;
}

// What the text at `text[i]` becomes (its first character, or an escape sequence: ""), and how
// many bytes of `text` that takes.
size_t NextPiece(absl::string_view text, size_t i, absl::string_view* piece) {
  if (text[i] == '\x1b') {  // colours and cursor movement: dropped
    *piece = "";
    return EscapeLength(text, i);
  }
  unsigned int cp = 0;
  const size_t n = DecodeUtf8(text, i, &cp);
  if (n == 0) {
    *piece = "?";  // not UTF-8
    return 1;
  }
  if (cp == '\n' || cp == '\r' || cp == '\t' || cp == ' ' || cp == 0x2028 || cp == 0x2029) {
    *piece = " ";  // line and paragraph separators too
  } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) {
    *piece = "?";  // C0 and C1 controls
  } else {
    *piece = text.substr(i, n);
  }
  return n;
}

}  // namespace

bool HasVisibleText(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    absl::string_view piece;
    i += NextPiece(text, i, &piece);
    if (!piece.empty() && piece != " ") return true;
  }
  return false;
}

std::string OneLine(absl::string_view text, size_t max_bytes) {
  std::string out;           // the first characters, up to a little over max_bytes
  std::vector<size_t> ends;  // where each character of `out` ends
  bool more = false;         // a character other than a space did not fit in `out`
  for (size_t i = 0; i < text.size();) {
    absl::string_view piece;
    i += NextPiece(text, i, &piece);
    if (piece.empty()) continue;
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
  // Cut at a character boundary, leaving room for "..." when there is any.
  const bool dots = max_bytes >= 3;
  const size_t room = dots ? max_bytes - 3 : max_bytes;
  size_t cut = 0;
  for (size_t end : ends) {
    if (end > room) break;
    cut = end;
  }
  out.resize(cut);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return dots ? out + "..." : out;
}

}  // namespace ringmaster
