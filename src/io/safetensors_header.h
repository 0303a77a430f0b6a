// The steps of parse_safetensors_header (io/safetensors.h), exposed so that the differential test,
// the fuzz target and `h3 bench safetensors-open` can run and time them one by one.
//
// `data`/`size` is the header text; `data_start` (8 + size) and `data_len` (the bytes after the
// header) place the spans. Both parsers leave tensors in an unspecified order; sort_and_check_spans
// puts them in data order and refuses overlaps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace h3::io {

// Through nlohmann::json and parse_strict_json: the reference for what a header may hold, and the
// source of every error message. Throws kInvalidFile (kUnsupported for a dtype the engine lacks).
void parse_header_json(const uint8_t* data, size_t size, uint64_t data_start, uint64_t data_len,
                       const std::string& label, std::vector<TensorInfo>* infos,
                       std::map<std::string, std::string>* metadata);

// The hand-written single-pass parser that parse_safetensors_header tries first. Returns false,
// leaving the outputs untouched, for anything it does not cover: every invalid header, and valid
// ones outside the common grammar (extra fields in an entry, "-0", a byte order mark). When it
// returns true, parse_header_json would have succeeded with the same tensors and metadata.
bool parse_header_fast(const uint8_t* data, size_t size, uint64_t data_start, uint64_t data_len,
                       const std::string& label, std::vector<TensorInfo>* infos,
                       std::map<std::string, std::string>* metadata);

void sort_and_check_spans(std::vector<TensorInfo>* infos, uint64_t data_start,
                          const std::string& label);

}  // namespace h3::io
