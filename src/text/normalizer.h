// The tokenizer.json "normalizer": Unicode normalization applied to the text between added tokens
// before pre-tokenization (components spec §1.3; the Qwen tokenizer uses NFC).
//
// Supported: null (none), NFC, NFD, NFKC, NFKD and a Sequence of these. Anything else is refused
// when the tokenizer is loaded, since silently skipping a normalizer would change token ids.
// Normalization is done by utf8proc; its Unicode tables may be a few versions newer than the
// reference's, which only matters for characters assigned in between.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace h3::text {

class Normalizer {
 public:
  Normalizer() = default;
  // `spec` is the value of the "normalizer" field; `label` names the file in errors.
  static Normalizer from_json(const nlohmann::json& spec, const std::string& label);

  bool is_identity() const { return forms_.empty(); }
  // `text` must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  enum class Form { kNFC, kNFD, kNFKC, kNFKD };
  static void collect(const nlohmann::json& spec, const std::string& label, const std::string& field,
                      int depth, std::vector<Form>* forms);
  std::vector<Form> forms_;
};

}  // namespace h3::text
