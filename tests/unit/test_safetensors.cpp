// safetensors reader, sharded checkpoints and writers (src/io/safetensors.h).
//
// Bad-input cases build files byte by byte so each one breaks exactly one rule, and every case
// checks the error code and that the message names the file (and tensor) and what was expected.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "support/golden.h"

namespace h3::io {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "h3_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // A file made of raw bytes.
  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  // A file with a correct length prefix, `header` verbatim and `data_bytes` bytes of data.
  std::string write_file(const std::string& name, const std::string& header,
                         size_t data_bytes) const {
    return write_bytes(name,
                       length_prefix(header.size()) + header + std::string(data_bytes, '\x5a'));
  }
  static std::string length_prefix(uint64_t n) {
    std::string le(8, '\0');
    for (int i = 0; i < 8; ++i) le[i] = static_cast<char>(n >> (8 * i));
    return le;
  }
  std::vector<std::string> files_in_dir() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    return out;
  }

  std::string dir_;
};

// Runs fn, expects an h3::Error of `code` whose message holds every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error with code " << error_code_name(code);
  } catch (const Error& e) {
    std::printf("  error (%s): %s\n", error_code_name(e.code()), e.what());
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(e.message().find(part), std::string::npos)
          << "message lacks '" << part << "': " << e.message();
    }
  }
}

void expect_open_error(const std::string& file, ErrorCode code,
                       std::initializer_list<std::string> parts) {
  std::vector<std::string> all(parts);
  all.push_back(file);  // every message names the file
  try {
    SafetensorsFile::open(file);
    ADD_FAILURE() << "expected " << file << " to be rejected";
  } catch (const Error& e) {
    std::printf("  rejected (%s): %s\n", error_code_name(e.code()), e.what());
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& part : all) {
      EXPECT_NE(e.message().find(part), std::string::npos)
          << "message lacks '" << part << "': " << e.message();
    }
  }
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// A tensor of `dtype` whose bytes are all distinct-ish (values, not only zeros).
Tensor sample_tensor(DType dtype, const Shape& shape, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(i * 37 + seed * 11 + 1);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  }
  return t;
}

// ---- round trips -------------------------------------------------------------------------------

TEST_F(Safetensors, RoundTripEveryDtype) {
  const DType all[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kF8E4M3,
                       DType::kI32, DType::kI64,  DType::kU8,  DType::kBool};
  std::vector<NamedTensor> tensors;
  int seed = 0;
  for (DType t : all) {
    tensors.push_back({std::string("t_") + dtype_name(t), sample_tensor(t, {3, 5}, seed++)});
  }
  tensors.push_back({"scalar", sample_tensor(DType::kF32, {}, seed++)});
  tensors.push_back({"empty", sample_tensor(DType::kBF16, {4, 0, 2}, seed++)});
  // A strided view is written as its elements, not its storage.
  const Tensor base = sample_tensor(DType::kI32, {4, 6}, seed++);
  tensors.push_back({"transposed", base.transpose(0, 1)});

  const std::string file = path("all.safetensors");
  write_safetensors(file, tensors);
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"all.safetensors"}) << "temporary file left";

  const auto f = SafetensorsFile::open(file);
  EXPECT_EQ(f->data_start() % 8, 0u) << "data section must start 8-byte aligned";
  ASSERT_EQ(f->tensors().size(), tensors.size());
  uint64_t expect_begin = f->data_start();
  for (size_t i = 0; i < tensors.size(); ++i) {
    // Laid out in the given order, without gaps.
    const TensorInfo& info = f->tensors()[i];
    EXPECT_EQ(info.name, tensors[i].name);
    EXPECT_EQ(info.begin, expect_begin) << info.name;
    expect_begin += info.nbytes;
    const Tensor got = f->tensor(tensors[i].name);
    EXPECT_EQ(got.dtype(), tensors[i].tensor.dtype()) << info.name;
    EXPECT_EQ(got.shape(), tensors[i].tensor.shape()) << info.name;
    EXPECT_EQ(bytes_of(got), bytes_of(tensors[i].tensor)) << info.name;
  }
  EXPECT_EQ(expect_begin, f->file_size());
  std::printf("  %zu tensors, %llu bytes, data at %llu\n", f->tensors().size(),
              static_cast<unsigned long long>(f->file_size()),
              static_cast<unsigned long long>(f->data_start()));
}

TEST_F(Safetensors, MetadataKept) {
  const std::map<std::string, std::string> meta = {{"what", "unit test"},
                                                   {"format", "pt"},
                                                   {"unicode", "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93"},
                                                   {"empty", ""}};
  const std::string file = path("meta.safetensors");
  write_safetensors(file, {{"x", Tensor::from_f32({1, 2, 3}, {3})}}, meta);
  const auto f = SafetensorsFile::open(file);
  EXPECT_EQ(f->metadata(), meta);
  EXPECT_FALSE(f->has("__metadata__"));
  EXPECT_EQ(f->tensors().size(), 1u);
}

TEST_F(Safetensors, BorrowedTensorKeepsMappingAlive) {
  const std::string file = path("borrow.safetensors");
  write_safetensors(file, {{"w", Tensor::from_f32({1.5f, -2.0f, 3.25f, 4.0f}, {2, 2})}});
  Tensor t;
  {
    auto f = SafetensorsFile::open(file);
    t = f->tensor("w");
    EXPECT_FALSE(t.storage()->owned()) << "aligned data should be borrowed, not copied";
    EXPECT_EQ(static_cast<const void*>(t.raw()), static_cast<const void*>(f->bytes(f->info("w"))));
  }                  // the file handle is gone; the tensor must still read the mapping
  fs::remove(file);  // even the directory entry
  EXPECT_EQ(t.to_f32_vector(), (std::vector<float>{1.5f, -2.0f, 3.25f, 4.0f}));
}

TEST_F(Safetensors, MisalignedDataIsCopied) {
  // u8 [1] at [0,1) then f32 [2] at [1,9): valid, but the f32 bytes sit on an odd address.
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  std::string padded = header + std::string((8 - (8 + header.size()) % 8) % 8, ' ');
  std::string data(9, '\0');
  data[0] = 7;
  const float vals[2] = {0.5f, -8.0f};
  std::memcpy(&data[1], vals, 8);
  const std::string file =
      write_bytes("odd.safetensors", length_prefix(padded.size()) + padded + data);
  const auto f = SafetensorsFile::open(file);
  const Tensor b = f->tensor("b");
  EXPECT_TRUE(b.storage()->owned()) << "misaligned f32 data must come back as an aligned copy";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 4, 0u);
  EXPECT_EQ(b.to_f32_vector(), (std::vector<float>{0.5f, -8.0f}));
  EXPECT_EQ(f->tensor("a").to_f32_vector(), (std::vector<float>{7.0f}));
}

TEST_F(Safetensors, GapsAreAcceptedAndTensorsComeInDataOrder) {
  // Declared out of order, with 4 unused bytes between the spans and 3 after them.
  const std::string file = write_file("gap.safetensors",
                                      R"({"z":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                                      R"("a":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},)"
                                      R"("e":{"dtype":"F32","shape":[0],"data_offsets":[12,12]}})",
                                      15);
  const auto f = SafetensorsFile::open(file);
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "z");
  EXPECT_EQ(f->tensors()[1].name, "a");
  EXPECT_EQ(f->tensors()[2].name, "e");
  EXPECT_EQ(f->tensor("e").numel(), 0);
}

// ---- rejected files
// ------------------------------------------------------------------------------

TEST_F(Safetensors, RejectsTruncatedFile) {
  expect_open_error(write_bytes("short.safetensors", std::string("\x10\x00\x00", 3)),
                    ErrorCode::kInvalidFile, {"3 bytes", "8-byte header length"});
  expect_open_error(write_bytes("empty.safetensors", ""), ErrorCode::kInvalidFile, {"0 bytes"});
}

TEST_F(Safetensors, RejectsHeaderLengthPastEnd) {
  expect_open_error(write_bytes("past.safetensors", length_prefix(100) + "{}"),
                    ErrorCode::kInvalidFile, {"header length 100", "past the end", "10 bytes"});
  // Above the cap: rejected before anything is read, whatever the file size.
  expect_open_error(write_bytes("huge.safetensors", length_prefix(uint64_t{1} << 40) + "{}"),
                    ErrorCode::kInvalidFile, {"exceeds the limit"});
  expect_open_error(write_bytes("max.safetensors", length_prefix(~uint64_t{0}) + "{}"),
                    ErrorCode::kInvalidFile, {"exceeds the limit"});
}

TEST_F(Safetensors, RejectsTinyHeaderLength) {
  expect_open_error(write_bytes("zero.safetensors", length_prefix(0) + "{}"),
                    ErrorCode::kInvalidFile, {"header length 0", "at least 2"});
  expect_open_error(write_bytes("one.safetensors", length_prefix(1) + "{}"),
                    ErrorCode::kInvalidFile, {"header length 1", "at least 2"});
}

TEST_F(Safetensors, AcceptsEmptyHeader) {
  const auto f = SafetensorsFile::open(write_file("none.safetensors", "{}", 0));
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_TRUE(f->metadata().empty());
}

TEST_F(Safetensors, RejectsInvalidJson) {
  expect_open_error(write_file("bad.safetensors", R"({"a":{"dtype":"F32",)", 0),
                    ErrorCode::kInvalidFile, {"not valid JSON"});
  expect_open_error(write_file("trail.safetensors", R"({} {})", 0), ErrorCode::kInvalidFile,
                    {"not valid JSON"});
  expect_open_error(write_file("nul.safetensors", std::string("{}\0\0", 4), 0),
                    ErrorCode::kInvalidFile, {"not valid JSON", "NUL byte at offset 2"});
  // Text after a NUL must not slip past the parser unchecked.
  expect_open_error(write_file("nul2.safetensors", std::string("{}\0{\"x\"", 7), 0),
                    ErrorCode::kInvalidFile, {"NUL byte"});
}

TEST_F(Safetensors, RejectsInvalidUtf8) {
  // A lone continuation byte, an overlong '/', and a UTF-16 surrogate encoded as UTF-8.
  for (const std::string& bad :
       {std::string("\x80"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80")}) {
    const std::string header =
        "{\"a" + bad + "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}";
    expect_open_error(write_file("utf8.safetensors", header, 0), ErrorCode::kInvalidFile,
                      {"not valid UTF-8", "offset 3"});
  }
}

TEST_F(Safetensors, RejectsNonObjectHeader) {
  expect_open_error(write_file("array.safetensors", "[1,2]", 0), ErrorCode::kInvalidFile,
                    {"JSON object", "found array"});
  expect_open_error(write_file("string.safetensors", "\"abc\"", 0), ErrorCode::kInvalidFile,
                    {"JSON object", "found string"});
  expect_open_error(write_file("entry.safetensors", R"({"t":[1,2]})", 0), ErrorCode::kInvalidFile,
                    {"tensor 't'", "expected an object"});
  expect_open_error(write_file("deep.safetensors", std::string(40, '[') + std::string(40, ']'), 0),
                    ErrorCode::kInvalidFile, {"nests deeper"});
}

TEST_F(Safetensors, RejectsUnknownDtype) {
  expect_open_error(
      write_file("dt.safetensors", R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
      ErrorCode::kInvalidFile, {"tensor 'w'", "unknown dtype 'F33'", "expected one of", "BF16"});
  expect_open_error(
      write_file("dt2.safetensors", R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
      ErrorCode::kInvalidFile, {"tensor 'w'", "\"dtype\" must be a string"});
  // A dtype the format defines but the engine does not handle is a different complaint.
  expect_open_error(
      write_file("dt3.safetensors", R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4),
      ErrorCode::kUnsupported, {"tensor 'w'", "I8 is not supported"});
}

TEST_F(Safetensors, RejectsBadShape) {
  expect_open_error(write_file("neg.safetensors",
                               R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,4]}})", 4),
                    ErrorCode::kInvalidFile,
                    {"tensor 'w'", "shape[1] is -3", "non-negative integer"});
  expect_open_error(write_file("flt.safetensors",
                               R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                    ErrorCode::kInvalidFile,
                    {"tensor 'w'", "shape[0] is 1.5", "non-negative integer"});
  expect_open_error(write_file("str.safetensors",
                               R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4),
                    ErrorCode::kInvalidFile, {"tensor 'w'", "shape[0]", "non-negative integer"});
  expect_open_error(
      write_file("obj.safetensors", R"({"w":{"dtype":"F32","shape":3,"data_offsets":[0,4]}})", 4),
      ErrorCode::kInvalidFile, {"tensor 'w'", "\"shape\" must be an array"});
  expect_open_error(
      write_file("big.safetensors",
                 R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                 4),
      ErrorCode::kInvalidFile, {"tensor 'w'", "more elements than any file can hold"});
  // Even with a zero extent (no bytes), the other extents must keep element counts in int64.
  expect_open_error(
      write_file("zbig.safetensors",
                 R"({"w":{"dtype":"U8","shape":[4294967296,0,4294967296],"data_offsets":[0,0]}})",
                 4),
      ErrorCode::kInvalidFile, {"tensor 'w'", "more elements than any file can hold"});
  expect_open_error(
      write_file("noshape.safetensors", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4),
      ErrorCode::kInvalidFile, {"tensor 'w'", "missing \"shape\""});
}

TEST_F(Safetensors, RejectsShapeNotMatchingSpan) {
  expect_open_error(write_file("span.safetensors",
                               R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8),
                    ErrorCode::kInvalidFile,
                    {"tensor 'w'", "[2, 3]", "needs 12 bytes", "span 8 bytes"});
}

TEST_F(Safetensors, RejectsSpanPastEnd) {
  expect_open_error(write_file("end.safetensors",
                               R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
                    ErrorCode::kInvalidFile, {"tensor 'w'", "past the data section", "12 bytes"});
  // Offsets so large that begin + size would wrap around.
  expect_open_error(
      write_file(
          "wrap.safetensors",
          R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})",
          4),
      ErrorCode::kInvalidFile, {"tensor 'w'", "data_offsets"});
}

TEST_F(Safetensors, RejectsOverlappingSpans) {
  expect_open_error(write_file("ovl.safetensors",
                               R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                               16),
                    ErrorCode::kInvalidFile, {"'a' [0, 16)", "'b' [8, 16)", "overlap"});
  // Overlap with a span that is not the immediate predecessor.
  expect_open_error(write_file("ovl2.safetensors",
                               R"({"big":{"dtype":"U8","shape":[32],"data_offsets":[0,32]},)"
                               R"("s1":{"dtype":"U8","shape":[4],"data_offsets":[32,36]},)"
                               R"("s0":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                               36),
                    ErrorCode::kInvalidFile, {"'big'", "'s0'", "overlap"});
  // The same span twice is an overlap too.
  expect_open_error(write_file("same.safetensors",
                               R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                               4),
                    ErrorCode::kInvalidFile, {"'a'", "'b'", "overlap"});
}

TEST_F(Safetensors, RejectsDuplicateNames) {
  expect_open_error(write_file("dup.safetensors",
                               R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                               R"("w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                               8),
                    ErrorCode::kInvalidFile, {"duplicate key 'w'"});
  expect_open_error(
      write_file("dupkey.safetensors",
                 R"({"w":{"dtype":"U8","dtype":"F32","shape":[4],"data_offsets":[0,4]}})", 4),
      ErrorCode::kInvalidFile, {"duplicate key 'dtype'", "inside 'w'"});
}

TEST_F(Safetensors, RejectsMalformedDataOffsets) {
  const char* cases[] = {
      R"("data_offsets":[0])",    R"("data_offsets":[0,4,8])", R"("data_offsets":"0,4")",
      R"("data_offsets":[-1,3])", R"("data_offsets":[0,4.0])", R"("data_offsets":null)",
  };
  int i = 0;
  for (const char* c : cases) {
    const std::string header = std::string(R"({"w":{"dtype":"U8","shape":[4],)") + c + "}}";
    expect_open_error(write_file("off" + std::to_string(i++) + ".safetensors", header, 8),
                      ErrorCode::kInvalidFile, {"tensor 'w'", "expected [begin, end]"});
  }
  expect_open_error(
      write_file("rev.safetensors", R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 8),
      ErrorCode::kInvalidFile, {"tensor 'w'", "begin after end"});
  expect_open_error(write_file("nooff.safetensors", R"({"w":{"dtype":"U8","shape":[4]}})", 8),
                    ErrorCode::kInvalidFile, {"tensor 'w'", "missing \"data_offsets\""});
}

TEST_F(Safetensors, RejectsNonStringMetadata) {
  expect_open_error(write_file("m1.safetensors", R"({"__metadata__":{"n":3}})", 0),
                    ErrorCode::kInvalidFile, {"__metadata__ entry 'n'", "expected a string"});
  expect_open_error(write_file("m2.safetensors", R"({"__metadata__":"x"})", 0),
                    ErrorCode::kInvalidFile, {"__metadata__ must be an object"});
}

TEST_F(Safetensors, MissingFileAndFolder) {
  expect_open_error(path("nope.safetensors"), ErrorCode::kNotFound, {"not found"});
  expect_open_error(dir_, ErrorCode::kInvalidFile, {"not a regular file", "directory"});
}

TEST_F(Safetensors, UnknownTensorNamesFileAndTensor) {
  const std::string file = path("one.safetensors");
  write_safetensors(file, {{"x", Tensor::from_f32({1}, {1})}});
  const auto f = SafetensorsFile::open(file);
  expect_error([&] { f->tensor("y"); }, ErrorCode::kNotFound, {file, "'y'"});
}

// ---- sharded checkpoints
// -------------------------------------------------------------------------

class ShardedCheckpoint : public Safetensors {
 protected:
  void SetUp() override {
    Safetensors::SetUp();
    write_safetensors(path("model-00001-of-00002.safetensors"),
                      {{"a", Tensor::from_f32({1, 2}, {2})}, {"b", Tensor::from_f32({3}, {1})}});
    write_safetensors(path("model-00002-of-00002.safetensors"),
                      {{"c", Tensor::from_f32({4, 5, 6}, {3}, DType::kBF16)}});
  }
  std::string write_index(const std::string& weight_map) const {
    return write_bytes("model.safetensors.index.json",
                       R"({"metadata":{"total_size":18},"weight_map":)" + weight_map + "}");
  }
  static constexpr const char* kGoodMap =
      R"({"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
      R"("c":"model-00002-of-00002.safetensors"})";
};

TEST_F(ShardedCheckpoint, OpensIndexAndFolder) {
  const std::string index = write_index(kGoodMap);
  for (const std::string& source : {index, dir_}) {
    const Checkpoint ck = Checkpoint::open(source);
    EXPECT_EQ(ck.source(), index);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(ck.files().size(), 2u);
    EXPECT_EQ(ck.total_bytes(), 8u + 4u + 6u);
    EXPECT_EQ(ck.tensor("c").dtype(), DType::kBF16);
    EXPECT_EQ(ck.tensor("c").to_f32_vector(), (std::vector<float>{4, 5, 6}));
    EXPECT_EQ(ck.tensor("a").to_f32_vector(), (std::vector<float>{1, 2}));
    EXPECT_NE(ck.file_of("c").path().find("model-00002-of-00002"), std::string::npos);
    EXPECT_EQ(ck.info("b").shape, (Shape{1}));
    EXPECT_FALSE(ck.has("d"));
    expect_error([&] { ck.tensor("d"); }, ErrorCode::kNotFound, {index, "'d'"});
  }
}

TEST_F(ShardedCheckpoint, SingleFileCheckpoint) {
  const std::string file = path("model-00001-of-00002.safetensors");
  const Checkpoint ck = Checkpoint::open(file);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ck.source(), file);
  // The folder without an index holds two files: ambiguous.
  expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kInvalidFile,
               {dir_, "2 .safetensors files", "model-00001-of-00002.safetensors"});
}

TEST_F(ShardedCheckpoint, MissingShard) {
  const std::string index = write_index(
      R"({"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
      R"("c":"model-00002-of-00002.safetensors","d":"model-00003-of-00003.safetensors"})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::kNotFound,
               {index, "shard 'model-00003-of-00003.safetensors'", "not found", "'d'"});
}

TEST_F(ShardedCheckpoint, NameInMapButNotInShard) {
  const std::string index = write_index(
      R"({"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",)"
      R"("c":"model-00002-of-00002.safetensors","e":"model-00002-of-00002.safetensors"})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::kInvalidFile,
               {index, "tensor 'e'", "does not hold it", "model-00002-of-00002.safetensors"});
}

TEST_F(ShardedCheckpoint, TensorInShardNotInMap) {
  const std::string index = write_index(
      R"({"a":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"})");
  expect_error(
      [&] { Checkpoint::open(index); }, ErrorCode::kInvalidFile,
      {index, "tensor 'b'", "not listed in weight_map", "model-00001-of-00002.safetensors"});
}

TEST_F(ShardedCheckpoint, TensorInTwoShards) {
  write_safetensors(path("model-00002-of-00002.safetensors"),
                    {{"c", Tensor::from_f32({4, 5, 6}, {3})}, {"a", Tensor::from_f32({9}, {1})}});
  const std::string index = write_index(kGoodMap);
  expect_error(
      [&] { Checkpoint::open(index); }, ErrorCode::kInvalidFile,
      {index, "tensor 'a'", "weight_map assigns it to 'model-00001-of-00002.safetensors'"});
}

TEST_F(ShardedCheckpoint, MalformedIndex) {
  std::string index = write_index(
      R"({"a":"model-00001-of-00002.safetensors","a":"model-00001-of-00002.safetensors"})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::kInvalidFile,
               {index, "duplicate key 'a'"});
  index = write_index(R"({"a":"../model-00001-of-00002.safetensors"})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::kInvalidFile, {index, "'..'"});
  index = write_index(R"({"a":3})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::kInvalidFile,
               {index, "entry 'a'", "expected a shard file name"});
  index = write_bytes("model.safetensors.index.json", R"({"metadata":{}})");
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::kInvalidFile, {index, "weight_map"});
  // A bad shard is reported with its own path.
  write_bytes("model-00002-of-00002.safetensors", length_prefix(4) + "{}");
  index = write_index(kGoodMap);
  expect_error([&] { Checkpoint::open(index); }, ErrorCode::kInvalidFile,
               {"model-00002-of-00002.safetensors", "past the end"});
}

TEST_F(Safetensors, CheckpointNotFound) {
  expect_error([&] { Checkpoint::open(path("missing")); }, ErrorCode::kNotFound,
               {path("missing"), "not found"});
  expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kNotFound, {dir_, "no *.safetensors"});
}

// ---- writers
// -------------------------------------------------------------------------------------

TEST_F(Safetensors, SparseWriterTakesLittleDisk) {
  // 3 GiB described, nothing written: the data section is a hole.
  const std::vector<TensorInfo> infos = {
      {"blocks.0.weight", DType::kBF16, {32768, 32768}, 0, 0},
      {"blocks.0.bias", DType::kF32, {32768}, 0, 0},
      {"blocks.1.weight", DType::kF8E4M3, {32768, 32768}, 0, 0},
  };
  const std::string file = path("sparse.safetensors");
  write_safetensors_sparse(file, infos, {{"format", "pt"}});
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"sparse.safetensors"});
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  const uint64_t data = 32768ull * 32768 * 2 + 32768 * 4 + 32768ull * 32768;
  const auto f = SafetensorsFile::open(file);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), f->data_start() + data);
  const uint64_t on_disk = static_cast<uint64_t>(st.st_blocks) * 512;
  std::printf("  sparse file: %llu bytes long, %llu bytes on disk\n",
              static_cast<unsigned long long>(st.st_size),
              static_cast<unsigned long long>(on_disk));
  EXPECT_LT(on_disk, 1u << 20) << "the data section should be a hole";
  ASSERT_EQ(f->tensors().size(), 3u);
  for (size_t i = 0; i < infos.size(); ++i) {
    EXPECT_EQ(f->tensors()[i].name, infos[i].name);
    EXPECT_EQ(f->tensors()[i].shape, infos[i].shape);
    EXPECT_EQ(f->tensors()[i].dtype, infos[i].dtype);
  }
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->info("blocks.0.bias").begin, f->data_start() + 32768ull * 32768 * 2);
}

TEST_F(Safetensors, WriterRejectsBadNamesAndKeepsOldFile) {
  const std::string file = path("keep.safetensors");
  write_safetensors(file, {{"old", Tensor::from_f32({1}, {1})}});
  const Tensor t = Tensor::from_f32({1}, {1});
  expect_error(
      [&] {
        write_safetensors(file, {{"x", t}, {"x", t}});
      },
      ErrorCode::kInvalidArgument, {file, "'x' given twice"});
  expect_error(
      [&] {
        write_safetensors(file, {{"__metadata__", t}});
      },
      ErrorCode::kInvalidArgument, {file, "reserved"});
  expect_error(
      [&] {
        write_safetensors(file, {{"", t}});
      },
      ErrorCode::kInvalidArgument, {file, "empty name"});
  expect_error(
      [&] {
        write_safetensors(file, {{"u", Tensor()}});
      },
      ErrorCode::kInvalidArgument, {file, "'u' is undefined"});
  expect_error(
      [&] {
        write_safetensors(file, {{"bad\xff", t}});
      },
      ErrorCode::kInvalidArgument, {file, "not valid UTF-8"});
  expect_error(
      [&] {
        write_safetensors(file, {{"x", t}}, {{"k", "\xc0\xaf"}});
      },
      ErrorCode::kInvalidArgument, {file, "metadata entry 'k'", "not valid UTF-8"});
  const std::string nowhere = path("no/such/dir/x.safetensors");
  expect_error(
      [&] {
        write_safetensors(nowhere, {{"x", t}});
      },
      ErrorCode::kNotFound, {nowhere, "folder does not exist"});
  // Nothing half-written, and the earlier file is untouched.
  EXPECT_EQ(files_in_dir(), std::vector<std::string>{"keep.safetensors"});
  EXPECT_TRUE(SafetensorsFile::open(file)->has("old"));
  // A successful write replaces it.
  write_safetensors(file, {{"new", t}});
  EXPECT_TRUE(SafetensorsFile::open(file)->has("new"));
  EXPECT_FALSE(SafetensorsFile::open(file)->has("old"));
}

// ---- real files
// ----------------------------------------------------------------------------------

// Every .safetensors under the golden folder must be accepted: the strict rules must not reject
// what the reference writer produces. (Folder from $H3_GOLDEN_DIR, else the compiled default; the
// whole tree, not only the manifest's cases, so every checkpoint shard is covered too.)
TEST(SafetensorsGolden, ReaderAcceptsEveryGoldenFile) {
  const std::string root = test::golden_dir();
  if (!fs::is_directory(root)) {
    if (test::golden_required())
      FAIL() << "golden folder missing: " << root << " (H3_REQUIRE_GOLDEN=1)";
    GTEST_SKIP() << "golden folder not found at " << root << " (set H3_GOLDEN_DIR)";
  }
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file() && e.path().extension() == ".safetensors")
      files.push_back(e.path().string());
  }
  if (files.empty()) GTEST_SKIP() << "no .safetensors file under " << root;
  size_t tensors = 0;
  uint64_t bytes = 0;
  for (const std::string& file : files) {
    try {
      const auto f = SafetensorsFile::open(file);
      for (const TensorInfo& info : f->tensors()) {
        const Tensor t = f->tensor(info.name);
        EXPECT_EQ(t.nbytes(), info.nbytes) << file << " " << info.name;
        bytes += info.nbytes;
        ++tensors;
      }
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
  std::printf("  read %zu files, %zu tensors, %llu bytes under %s\n", files.size(), tensors,
              static_cast<unsigned long long>(bytes), root.c_str());
  EXPECT_GT(tensors, 0u);
}

}  // namespace
}  // namespace h3::io
