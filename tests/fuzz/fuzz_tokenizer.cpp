// libFuzzer target: arbitrary bytes as a prompt to the tokenizer and the t2va presentation.
//
// The tokenizer is the golden tiny-h3 one (byte-level BPE, Qwen2 regex, NFC, Qwen's added tokens)
// when $H3_FUZZ_TOKENIZER names a tokenizer.json or folder, or when the golden folder beside the
// source tree exists; otherwise a small Qwen2-shaped tokenizer.json built here.
//
// Checked on every input:
//  - encode() refuses exactly the inputs that are not valid UTF-8, with kInvalidArgument;
//  - every id is inside the vocabulary, and decode() returns valid UTF-8;
//  - decoding is a fixed point after one round: y = decode(encode(x)) re-encodes to ids that decode
//    to y again (x itself may change once, through NFC);
//  - the t2va presentation has one tag and one token type per id.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/presentation.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace {

using h3::text::Tokenizer;

std::string embedded_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  const auto& alphabet = h3::text::byte_level_alphabet();
  for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  json merges = json::array();
  int id = 256;
  const char* pairs[][2] = {{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"},
                            {"e", "r"}, {"o", "n"}, {"Ġ", "s"}, {"e", "s"}, {"Ã", "©"}};
  for (const auto& p : pairs) {
    vocab[std::string(p[0]) + p[1]] = id++;
    merges.push_back(std::string(p[0]) + " " + p[1]);
  }
  json added = json::array();
  int added_id = 300;
  for (const char* content : {"<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
                              "<|im_start|>", "<|im_end|>", "<x>", "<x>y"}) {
    added.push_back({{"id", added_id++}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  json j;
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({json{{"type", "Split"},
                         {"pattern",
                          {{"Regex",
                            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                         {"behavior", "Isolated"},
                         {"invert", false}},
                    json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  return j.dump();
}

const Tokenizer& fuzz_tokenizer() {
  static const Tokenizer tok = [] {
    if (const char* env = std::getenv("H3_FUZZ_TOKENIZER")) return Tokenizer::from_file(env);
#ifdef H3_DEFAULT_GOLDEN_DIR
    const std::filesystem::path golden = std::filesystem::path(H3_DEFAULT_GOLDEN_DIR) / "tiny-h3" / "tokenizer";
    std::error_code ec;
    if (std::filesystem::exists(golden / "tokenizer.json", ec)) return Tokenizer::from_file(golden.string());
#endif
    return Tokenizer::from_json_text(embedded_tokenizer_json(), "embedded fuzz tokenizer.json");
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz_tokenizer();
  static const h3::text::PromptPresenter presenter(tok);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = h3::text::find_invalid_utf8(text) == h3::text::kUtf8Valid;

  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text);
  } catch (const h3::Error& e) {
    if (valid || e.code() != h3::ErrorCode::kInvalidArgument) std::abort();  // only invalid UTF-8 may fail
    return 0;
  }
  if (!valid) std::abort();  // invalid UTF-8 must be refused

  for (const int32_t id : ids) {
    if (id < 0 || id >= tok.id_limit()) std::abort();
  }
  const std::string once = tok.decode(ids);
  if (h3::text::find_invalid_utf8(once) != h3::text::kUtf8Valid) std::abort();
  if (tok.decode(tok.encode(once)) != once) std::abort();

  const h3::text::Presentation p = presenter.present(h3::text::Workflow::kT2VA, text, {});
  if (p.input_ids.size() != ids.size() || p.text_token_tags.size() != ids.size() ||
      p.mm_token_type_ids.size() != ids.size()) {
    std::abort();
  }
  return 0;
}
