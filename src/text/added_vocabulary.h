// The "added_tokens" of a tokenizer.json: tokens matched verbatim in the text before any
// normalization or pre-tokenization (components spec §1.3: <|vision_start|>, <|image_pad|>, ...).
//
// Matching follows the reference: at each position the leftmost match wins, and among matches
// starting there the longest; tokens with "normalized": false are searched in the raw text, those
// with "normalized": true in the normalized text between the former. lstrip / rstrip widen a match
// over the whitespace beside it, single_word rejects a match touching a word character.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace h3::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

class AddedVocabulary {
 public:
  // `spec` is the "added_tokens" array (null means none); `label` names the file in errors.
  static AddedVocabulary from_json(const nlohmann::json& spec, const std::string& label);

  // A piece of text: either plain text [begin, end) or a matched added token.
  struct Piece {
    size_t begin = 0;
    size_t end = 0;
    int32_t id = -1;  // -1: plain text
  };
  // Splits `text` (valid UTF-8) on the tokens whose `normalized` flag equals `normalized`.
  std::vector<Piece> split(std::string_view text, bool normalized) const;
  bool has_normalized_tokens() const { return !by_first_byte_[1].empty(); }

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(int32_t id) const;
  std::optional<int32_t> find_content(std::string_view content) const;

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  // [normalized?][first byte] -> token indices, longest content first.
  std::unordered_map<unsigned char, std::vector<size_t>> by_first_byte_[2];
};

}  // namespace h3::text
