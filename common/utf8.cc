#include "common/utf8.h"

namespace ringmaster {

size_t DecodeUtf8(absl::string_view s, size_t i, unsigned int* code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  if (b < 0x80) {
    *code_point = b;
    return 1;
  }
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
  *code_point = cp;
  return n;
}

bool IsUtf8(absl::string_view s) {
  unsigned int code_point = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = DecodeUtf8(s, i, &code_point);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace ringmaster
