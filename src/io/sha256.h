// SHA-256 (FIPS 180-4) of bytes and of files: the digest that ties derived files (prompt
// features) to the weights they were computed from, comparable with Python's hashlib.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace h3::io {

// Lowercase hex digest of `n` bytes at `data`.
std::string sha256_hex(const void* data, size_t n);

// Lowercase hex digest of the file at `path` (read through a mapping). Throws h3::Error naming
// the path when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace h3::io
