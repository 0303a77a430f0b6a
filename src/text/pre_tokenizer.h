// The tokenizer.json "pre_tokenizer": splits normalized text into the words that BPE encodes one
// by one (components spec §1.3; Qwen2: Split by the Qwen2 regex, "Isolated", then ByteLevel with
// add_prefix_space false and use_regex false).
//
// Supported: null (the whole text is one word), Sequence, Split (pattern {"Regex": ...} or
// {"String": ...}; behaviors Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous;
// invert) and ByteLevel (add_prefix_space, use_regex with the GPT-2 regex). Steps run in file order
// on every piece the previous steps produced, as in the reference, so a Split after ByteLevel sees
// the byte-level alphabet. Other pre-tokenizers are refused at load time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/regex.h"

namespace h3::text {

class PreTokenizer {
 public:
  PreTokenizer() = default;
  // `spec` is the value of the "pre_tokenizer" field; `label` names the file in errors.
  static PreTokenizer from_json(const nlohmann::json& spec, const std::string& label);

  // Splits `text` (valid UTF-8) into non-empty words, appended to `words`.
  void split(std::string_view text, std::vector<std::string>* words) const;

  // True when a ByteLevel step maps the words to the byte-level alphabet.
  bool byte_level() const { return byte_level_; }

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
    std::shared_ptr<const Regex> regex;  // Split with a regex, ByteLevel with use_regex
    std::string literal;                 // Split with a {"String": ...} pattern
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
  };
  static void collect(const nlohmann::json& spec, const std::string& label, const std::string& field,
                      int depth, PreTokenizer* out);
  static void apply_split(const Step& step, const std::string& piece, std::vector<std::string>* out);
  static void apply_byte_level(const Step& step, const std::string& piece,
                               std::vector<std::string>* out);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace h3::text
