#include "text/byte_level.h"

#include "text/utf8.h"

namespace h3::text {
namespace {

bool stands_for_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8;
  std::array<int, 0x144> to_byte{};  // every alphabet code point is below U+0144
  Tables() {
    to_byte.fill(-1);
    unsigned next = 0;
    for (unsigned b = 0; b < 256; ++b) {
      const char32_t cp = stands_for_itself(b) ? b : 0x100 + next++;
      to_char[b] = cp;
      utf8_append(&to_utf8[b], cp);
      to_byte[cp] = static_cast<int>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return tables().to_char[b]; }

const std::array<std::string, 256>& byte_level_alphabet() { return tables().to_utf8; }

int char_to_byte(char32_t cp) {
  const auto& t = tables().to_byte;
  return cp < t.size() ? t[cp] : -1;
}

std::string to_byte_level(std::string_view bytes) {
  const auto& alphabet = tables().to_utf8;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += alphabet[static_cast<unsigned char>(c)];
  return out;
}

bool from_byte_level(std::string_view token, std::string* out) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    if (utf8_sequence_length(token, i) == 0) return false;
    char32_t cp = 0;
    i += utf8_decode(token, i, &cp);
    const int b = char_to_byte(cp);
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
  }
  out->append(bytes);
  return true;
}

}  // namespace h3::text
