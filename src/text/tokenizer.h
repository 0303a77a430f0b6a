// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json (components spec §1.3: the
// Qwen2 tokenizer of the Qwen3-VL conditioner).
//
// encode() is `tokenizer(text, add_special_tokens=False)` of the reference: added tokens are
// matched first in the raw text (leftmost, then longest), the text between them is normalized
// (NFC), pre-tokenized (Qwen2 regex split, byte-level mapping) and BPE-merged by rank. No BOS/EOS,
// no chat template, no truncation. The post_processor only matters with add_special_tokens=True,
// which the pipeline never uses, so it is read past.
//
// Input text must be valid UTF-8; anything else is refused with kInvalidArgument (the reference
// takes Python strings, which cannot hold invalid bytes). Loading refuses malformed or unsupported
// files with kInvalidFile / kUnsupported naming the file and the field. A Tokenizer is cheap to
// copy (shared immutable state) and safe to use from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace h3::text {

class Tokenizer {
 public:
  // An empty tokenizer; every call on it throws kInvalidArgument until one is assigned.
  Tokenizer() = default;
  // `path` is a tokenizer.json file or a folder holding one (the checkpoint's tokenizer/ folder).
  static Tokenizer from_file(const std::string& path);
  // Parses tokenizer.json text; `label` names it in error messages.
  static Tokenizer from_json_text(std::string_view json_text, const std::string& label);

  // Token ids of `text`, without special tokens added.
  std::vector<int32_t> encode(std::string_view text) const;
  // Text of `ids`: token strings joined through the decoder (ByteLevel: back to bytes, invalid
  // UTF-8 replaced by U+FFFD). Ids outside the vocabulary are an error (kInvalidArgument).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // Added tokens first, then the model vocabulary, as the reference looks tokens up.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Same, but throws kNotFound naming the token and the file when it is absent.
  int32_t require_token_id(std::string_view token) const;
  // Token string of an id (the added token's content, or the vocabulary entry in its byte-level
  // spelling); throws kInvalidArgument for an unknown id.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // One past the largest id, over the model vocabulary and the added tokens.
  int32_t id_limit() const;
  // The file (or label) the tokenizer came from.
  const std::string& source() const;

 private:
  struct Impl;
  const Impl& impl() const;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace h3::text
