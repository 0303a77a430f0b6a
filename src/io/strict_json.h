// JSON parsing for files we must not trust (safetensors headers, shard indexes).
//
// nlohmann::json alone accepts duplicate keys (keeping the last) and invalid UTF-8 only reports a
// lexer position; a checkpoint with two tensors of one name must be an error, and the message
// should point at the byte. This wraps the parser with those checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace h3::io {

// Returns the offset of the first byte that is not part of well-formed UTF-8 (no overlong forms,
// no surrogates, nothing above U+10FFFF), or `size` when all of it is well formed.
size_t find_invalid_utf8(const uint8_t* data, size_t size);
// The length (1 to 4) of the well-formed UTF-8 sequence at the start of `data` (`left` >= 1 bytes
// available), or 0 when the bytes there do not start one.
size_t utf8_sequence_length(const uint8_t* data, size_t left);

// Parses `size` bytes as one JSON value. Throws kInvalidFile, prefixed by "<label>: <what>", when
// the bytes are not UTF-8, not JSON, hold a duplicate key in any object, or nest deeper than
// `max_depth` objects/arrays.
nlohmann::json parse_strict_json(const uint8_t* data, size_t size, const std::string& label,
                                 const std::string& what, int max_depth);

// "object", "array", "string", "number", ... for messages.
const char* json_type_name(const nlohmann::json& j);

}  // namespace h3::io
