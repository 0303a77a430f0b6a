#include "text/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "core/status.h"
#include "text/utf8.h"

namespace h3::text {
namespace {

bool field_bool(const nlohmann::json& t, const char* key, bool fallback, const std::string& where) {
  if (!t.contains(key) || t[key].is_null()) return fallback;
  H3_CHECK(t[key].is_boolean(), ErrorCode::kInvalidFile, where, ".", key, " must be true or false");
  return t[key].get<bool>();
}

// Code point before byte offset `end` (valid UTF-8 assumed), or -1 at the start.
int64_t code_point_before(std::string_view s, size_t end) {
  if (end == 0) return -1;
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  char32_t cp = 0;
  utf8_decode(s, b, &cp);
  return cp;
}

int64_t code_point_at(std::string_view s, size_t begin) {
  if (begin >= s.size()) return -1;
  char32_t cp = 0;
  utf8_decode(s, begin, &cp);
  return cp;
}

bool is_whitespace(int64_t cp) {
  if (cp < 0) return false;
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// A "word" character for single_word tokens: alphanumeric or '_'.
bool is_word_char(int64_t cp) {
  if (cp < 0) return false;
  if (cp == '_') return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

}  // namespace

AddedVocabulary AddedVocabulary::from_json(const nlohmann::json& spec, const std::string& label) {
  AddedVocabulary v;
  if (spec.is_null()) return v;
  H3_CHECK(spec.is_array(), ErrorCode::kInvalidFile, label, ": added_tokens must be an array");
  for (size_t i = 0; i < spec.size(); ++i) {
    const std::string where = str_cat(label, ": added_tokens[", i, "]");
    const auto& t = spec[i];
    H3_CHECK(t.is_object(), ErrorCode::kInvalidFile, where, " must be an object");
    H3_CHECK(t.contains("id") && t["id"].is_number_integer(), ErrorCode::kInvalidFile, where,
             " needs an integer \"id\"");
    H3_CHECK(t.contains("content") && t["content"].is_string(), ErrorCode::kInvalidFile, where,
             " needs a string \"content\"");
    AddedToken tok;
    const int64_t id = t["id"].get<int64_t>();
    H3_CHECK(id >= 0 && id < (int64_t{1} << 24), ErrorCode::kInvalidFile, where, ".id = ", id,
             " is outside [0, 2^24)");
    tok.id = static_cast<int32_t>(id);
    tok.content = t["content"].get<std::string>();
    H3_CHECK(!tok.content.empty(), ErrorCode::kInvalidFile, where, ".content is empty");
    check_utf8(tok.content, where + ".content");
    tok.special = field_bool(t, "special", false, where);
    tok.single_word = field_bool(t, "single_word", false, where);
    tok.lstrip = field_bool(t, "lstrip", false, where);
    tok.rstrip = field_bool(t, "rstrip", false, where);
    // The reference's default: special tokens are matched in the raw text.
    tok.normalized = field_bool(t, "normalized", !tok.special, where);
    H3_CHECK(!v.by_id_.count(tok.id), ErrorCode::kInvalidFile, where, ": id ", tok.id,
             " is used by an earlier added token");
    H3_CHECK(!v.by_content_.count(tok.content), ErrorCode::kInvalidFile, where, ": content \"",
             tok.content, "\" repeats an earlier added token");
    v.by_id_[tok.id] = v.tokens_.size();
    v.by_content_[tok.content] = v.tokens_.size();
    v.by_first_byte_[tok.normalized ? 1 : 0][static_cast<unsigned char>(tok.content[0])].push_back(
        v.tokens_.size());
    v.tokens_.push_back(std::move(tok));
  }
  for (auto& table : v.by_first_byte_) {
    for (auto& [first, list] : table) {
      std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return v.tokens_[a].content.size() > v.tokens_[b].content.size();
      });
    }
  }
  return v;
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::find_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

std::vector<AddedVocabulary::Piece> AddedVocabulary::split(std::string_view text, bool normalized) const {
  std::vector<Piece> out;
  const auto& table = by_first_byte_[normalized ? 1 : 0];
  size_t plain_begin = 0;  // start of the pending plain-text run
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const AddedToken* hit = nullptr;
    if (auto it = table.find(c); it != table.end()) {
      for (const size_t k : it->second) {  // longest first
        const AddedToken& t = tokens_[k];
        if (text.compare(i, t.content.size(), t.content) != 0) continue;
        hit = &t;
        break;
      }
    }
    if (hit != nullptr && hit->single_word &&
        (is_word_char(code_point_before(text, i)) ||
         is_word_char(code_point_at(text, i + hit->content.size())))) {
      // The reference drops such a match and searches on after it, so its text stays plain.
      i += hit->content.size();
      continue;
    }
    if (hit == nullptr) {
      // Advance by one character so a match never starts inside a multi-byte sequence.
      const size_t len = utf8_sequence_length(text, i);
      i += len == 0 ? 1 : len;
      continue;
    }
    size_t begin = i;
    size_t end = i + hit->content.size();
    if (hit->lstrip) {
      while (begin > plain_begin) {
        size_t b = begin - 1;
        while (b > plain_begin && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        if (utf8_sequence_length(text, b) == 0 || !is_whitespace(code_point_at(text, b))) break;
        begin = b;
      }
    }
    if (hit->rstrip) {
      while (end < text.size() && utf8_sequence_length(text, end) > 0 &&
             is_whitespace(code_point_at(text, end))) {
        end += utf8_sequence_length(text, end);
      }
    }
    if (begin > plain_begin) out.push_back({plain_begin, begin, -1});
    out.push_back({begin, end, hit->id});
    plain_begin = end;
    i = end;
  }
  if (plain_begin < text.size()) out.push_back({plain_begin, text.size(), -1});
  return out;
}

}  // namespace h3::text
