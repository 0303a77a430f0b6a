// UTF-8 helpers for the tokenizer: strict validation of prompts, code point iteration, and the
// lossy conversion that decoding needs.
//
// Prompts must be valid UTF-8 (a Python `str` cannot even hold invalid bytes, so the reference
// never sees them); an invalid prompt is refused with an error naming the offset, never repaired
// silently. Decoded token bytes, on the other hand, may legitimately stop inside a character (a
// single byte-level token), so decode() replaces invalid sequences with U+FFFD exactly as the
// reference's `String::from_utf8_lossy` does (one U+FFFD per maximal invalid subpart).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace h3::text {

inline constexpr size_t kUtf8Valid = static_cast<size_t>(-1);

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when the bytes there do not
// form one (bad lead byte, missing or bad continuation, overlong form, surrogate, > U+10FFFF).
size_t utf8_sequence_length(std::string_view s, size_t i);

// Byte offset of the first invalid sequence, or kUtf8Valid when the whole string is valid.
size_t find_invalid_utf8(std::string_view s);

// Throws h3::Error(kInvalidArgument) when `s` is not valid UTF-8; the message names `what`, the
// byte offset and the offending byte.
void check_utf8(std::string_view s, std::string_view what);

// Decodes the code point of the valid sequence at s[i]; returns its length in bytes.
// Precondition: utf8_sequence_length(s, i) > 0.
size_t utf8_decode(std::string_view s, size_t i, char32_t* cp);

// Appends the UTF-8 encoding of `cp` (must be a Unicode scalar value).
void utf8_append(std::string* out, char32_t cp);

// Copies `bytes`, replacing each maximal invalid subpart with U+FFFD (Unicode §3.9, "U+FFFD
// substitution of maximal subparts", the policy of Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);

}  // namespace h3::text
