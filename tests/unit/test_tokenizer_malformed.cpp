// Malformed tokenizer.json files beyond those of test_tokenizer.cpp (components spec §1.3; issue:
// "bad tokenizer.json ... refused with clear errors"): wrong JSON types for the top-level
// sections, vocabulary entries and added-token flags, empty or binary files. Each must be refused
// with kInvalidFile or kUnsupported naming the file, never crash or load.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/tokenizer.h"

namespace h3::text {
namespace {

using nlohmann::json;

const std::string kLabel = "malformed/tokenizer.json";

// A minimal Qwen2-shaped tokenizer.json: 256 byte tokens, one merge, one special token.
json minimal_tokenizer_json() {
  json vocab = json::object();
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) vocab[alphabet[static_cast<size_t>(b)]] = b;
  vocab["ab"] = 256;
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({json{{"id", 300},
                                        {"content", "<|image_pad|>"},
                                        {"single_word", false},
                                        {"lstrip", false},
                                        {"rstrip", false},
                                        {"normalized", false},
                                        {"special", true}}});
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", json::array({"a b"})}};
  return j;
}

void expect_refused(const std::string& text, const std::string& what) {
  try {
    const Tokenizer t = Tokenizer::from_json_text(text, kLabel);
    ADD_FAILURE() << what << ": loaded (" << t.encode("ab").size() << " ids for \"ab\")";
  } catch (const Error& e) {
    std::printf("  %s -> [%s] %s\n", what.c_str(), error_code_name(e.code()), e.what());
    EXPECT_TRUE(e.code() == ErrorCode::kInvalidFile || e.code() == ErrorCode::kUnsupported)
        << what << ": " << e.what();
    EXPECT_NE(e.message().find(kLabel), std::string::npos)
        << what << ": message does not name the file: " << e.what();
  }
}

template <typename Edit>
std::string edited(Edit&& edit) {
  json j = minimal_tokenizer_json();
  edit(j);
  return j.dump();
}

TEST(TokenizerMalformed, MinimalFileLoads) {
  // The base of every case below is valid: "ab" is one merged token, the pad one added token.
  const Tokenizer t = Tokenizer::from_json_text(minimal_tokenizer_json().dump(), kLabel);
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{256}));
  EXPECT_EQ(t.encode("<|image_pad|>"), (std::vector<int32_t>{300}));
}

TEST(TokenizerMalformed, RefusesWrongTypes) {
  expect_refused(edited([](json& j) { j["model"] = "BPE"; }), "model as a string");
  // (A model without "type" is read as BPE: tokenizers also accepts files without the tag.)
  expect_refused(edited([](json& j) { j["model"]["type"] = 3; }), "model.type as a number");
  expect_refused(edited([](json& j) { j["model"]["vocab"]["zz"] = "7"; }), "vocab id as a string");
  expect_refused(edited([](json& j) { j["model"]["vocab"]["zz"] = 2.5; }), "fractional vocab id");
  expect_refused(edited([](json& j) { j["model"]["merges"] = "a b"; }), "merges as a string");
  expect_refused(edited([](json& j) { j["model"]["merges"] = json::array({json::array({"a"})}); }),
                 "merge pair of one element");
  expect_refused(edited([](json& j) { j["added_tokens"] = json::object(); }),
                 "added_tokens as an object");
  expect_refused(edited([](json& j) { j["added_tokens"][0]["id"] = "300"; }),
                 "added token id as a string");
  expect_refused(edited([](json& j) { j["added_tokens"][0]["content"] = 5; }),
                 "added token content as a number");
  expect_refused(edited([](json& j) { j["added_tokens"][0]["content"] = ""; }),
                 "empty added token");
  expect_refused(edited([](json& j) { j["added_tokens"][0]["special"] = "yes"; }),
                 "special flag as a string");
  expect_refused(edited([](json& j) { j["pre_tokenizer"] = json::array(); }),
                 "pre_tokenizer as an array");
  expect_refused(edited([](json& j) { j["normalizer"] = 1; }), "normalizer as a number");
}

TEST(TokenizerMalformed, RefusesBrokenFiles) {
  expect_refused("", "empty file");
  expect_refused("null", "JSON null");
  expect_refused("\"tokenizer\"", "JSON string");
  expect_refused(std::string("\x89PNG\r\n\x1a\n\0\0\0", 11), "binary file");
  std::string truncated = minimal_tokenizer_json().dump();
  truncated.resize(truncated.size() / 2);
  expect_refused(truncated, "file cut in half");
  expect_refused(edited([](json& j) { j.erase("model"); j.erase("added_tokens"); }),
                 "no model and no added tokens");
}

}  // namespace
}  // namespace h3::text
