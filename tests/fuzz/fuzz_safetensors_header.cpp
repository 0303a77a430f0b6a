// libFuzzer target for the safetensors header parser (src/io/safetensors.h).
//
// Each input is tried two ways: as a whole file (length prefix, header, data), which is exactly
// what SafetensorsFile::open validates, and as bare header text in front of a 256-byte data
// section, so mutations of the JSON need not keep a length prefix in step. The parser may reject
// anything with h3::Error; any other exception, a sanitizer report, or an accepted header that
// breaks the promised invariants (spans inside the data, sizes matching shapes, no overlap) is a
// finding. The bare header also goes through both parsers of io/safetensors_header.h alone: a
// header the hand-written parser accepts must be accepted by the JSON parser with the same
// tensors and metadata.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "io/safetensors_header.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken on an accepted header: %s\n", what);
    std::abort();
  }
}

void check_invariants(const std::vector<h3::io::TensorInfo>& infos, uint64_t data_start,
                      uint64_t file_size) {
  uint64_t reach = data_start;  // end of the furthest non-empty span so far
  const h3::io::TensorInfo* prev = nullptr;
  for (const auto& t : infos) {
    check(t.begin >= data_start, "span starts before the data section");
    check(t.begin <= file_size && t.nbytes <= file_size - t.begin, "span ends past the file");
    check(t.name != "__metadata__", "__metadata__ listed as a tensor");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      check(d >= 0, "negative extent");
      numel *= static_cast<uint64_t>(d);
    }
    check(numel * h3::dtype_size(t.dtype) == t.nbytes, "byte count differs from shape x dtype");
    check(!prev || prev->begin <= t.begin, "tensors not in data order");
    if (t.nbytes > 0) {
      check(t.begin >= reach, "spans overlap");
      reach = t.begin + t.nbytes;
    }
    prev = &t;
  }
}

void compare_parsers(const uint8_t* data, size_t size, uint64_t data_len) {
  const uint64_t data_start = 8 + static_cast<uint64_t>(size);
  std::vector<h3::io::TensorInfo> fast, json;
  std::map<std::string, std::string> fast_meta, json_meta;
  bool fast_ok = false;
  try {
    fast_ok =
        h3::io::parse_header_fast(data, size, data_start, data_len, "fuzz", &fast, &fast_meta);
  } catch (const h3::Error&) {
    check(false, "the fast parser threw instead of declining");
  }
  if (!fast_ok) return;
  try {
    h3::io::parse_header_json(data, size, data_start, data_len, "fuzz", &json, &json_meta);
  } catch (const h3::Error&) {
    check(false, "the fast parser accepted a header the JSON parser refuses");
  }
  bool fast_sorted = true, json_sorted = true;
  try {
    h3::io::sort_and_check_spans(&fast, data_start, "fuzz");
  } catch (const h3::Error&) {
    fast_sorted = false;
  }
  try {
    h3::io::sort_and_check_spans(&json, data_start, "fuzz");
  } catch (const h3::Error&) {
    json_sorted = false;
  }
  check(fast_sorted == json_sorted, "the parsers' tensors differ in overlaps");
  check(fast == json && fast_meta == json_meta, "the parsers give different results");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<h3::io::TensorInfo> infos;
  std::map<std::string, std::string> metadata;
  try {
    const uint64_t n = h3::io::parse_safetensors_bytes(data, size, "fuzz", &infos, &metadata);
    check(n >= 2 && 8 + n <= size, "header length outside the file");
    check_invariants(infos, 8 + n, size);
  } catch (const h3::Error&) {
  }
  try {
    const uint64_t file_size = 8 + static_cast<uint64_t>(size) + 256;
    h3::io::parse_safetensors_header(data, size, file_size, "fuzz", &infos, &metadata);
    check_invariants(infos, 8 + size, file_size);
  } catch (const h3::Error&) {
  }
  compare_parsers(data, size, 256);
  return 0;
}
