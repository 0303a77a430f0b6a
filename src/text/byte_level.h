// The byte-level alphabet of GPT-2 style BPE (tokenizer.json "ByteLevel" pre-tokenizer/decoder).
//
// Every byte 0..255 is shown as one printable code point so that BPE works on text without
// control characters or spaces: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves,
// the remaining 68 bytes map in increasing order to U+0100, U+0101, ... (so ' ' becomes 'Ġ' U+0120
// and '\n' becomes 'Ċ' U+010A).
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace h3::text {

// Code point that stands for byte b.
char32_t byte_to_char(unsigned char b);
// UTF-8 of byte_to_char(b), precomputed.
const std::array<std::string, 256>& byte_level_alphabet();
// The byte a code point stands for, or -1 when it is not part of the alphabet.
int char_to_byte(char32_t cp);

// Maps every byte of `bytes` to its alphabet character (UTF-8 result).
std::string to_byte_level(std::string_view bytes);
// Inverse of to_byte_level for one token: the bytes its characters stand for. Returns false (and
// leaves `out` untouched) when `token` holds a character outside the alphabet or is not UTF-8.
bool from_byte_level(std::string_view token, std::string* out);

}  // namespace h3::text
