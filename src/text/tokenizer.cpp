#include "text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/added_vocabulary.h"
#include "text/bpe.h"
#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace h3::text {
namespace {

constexpr uintmax_t kMaxFileBytes = uintmax_t{1} << 30;
constexpr int kMaxJsonDepth = 64;

// Deepest nesting of objects/arrays, scanning outside string literals; stops early past `limit`
// so that a hostile file cannot exhaust the stack of a recursive JSON destructor.
int json_depth(std::string_view s, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > limit) break;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

enum class DecoderKind { kNone, kByteLevel };

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  AddedVocabulary added;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::shared_ptr<const BpeModel> model;
  DecoderKind decoder = DecoderKind::kNone;
  int32_t id_limit = 0;

  void encode_plain(std::string_view text, std::vector<std::string>* words, std::vector<int32_t>* ids) const {
    words->clear();
    pre_tokenizer.split(text, words);
    for (const auto& w : *words) model->encode_word(w, ids);
  }
};

const Tokenizer::Impl& Tokenizer::impl() const {
  H3_CHECK(impl_ != nullptr, ErrorCode::kInvalidArgument,
           "tokenizer used before one was loaded (Tokenizer::from_file / from_json_text)");
  return *impl_;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "tokenizer.json").string();
  H3_CHECK(fs::exists(file, ec), ErrorCode::kNotFound, "tokenizer file not found: ", file);
  H3_CHECK(fs::is_regular_file(file, ec), ErrorCode::kInvalidFile, "tokenizer path ", file,
           " is not a regular file");
  const uintmax_t size = fs::file_size(file, ec);
  H3_CHECK(!ec, ErrorCode::kIo, "cannot read the size of ", file, ": ", ec.message());
  H3_CHECK(size <= kMaxFileBytes, ErrorCode::kInvalidFile, file, " is ", size,
           " bytes; a tokenizer.json above 1 GiB is not plausible");
  std::ifstream in(file, std::ios::binary);
  H3_CHECK(in.good(), ErrorCode::kIo, "cannot open ", file);
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  H3_CHECK(in.gcount() == static_cast<std::streamsize>(size), ErrorCode::kIo, "short read of ", file);
  return from_json_text(text, file);
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, const std::string& label) {
  H3_CHECK(json_depth(json_text, kMaxJsonDepth) <= kMaxJsonDepth, ErrorCode::kInvalidFile, label,
           ": JSON nests deeper than ", kMaxJsonDepth, " levels");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidFile, label, ": not valid JSON: ", e.what());
  }
  H3_CHECK(j.is_object(), ErrorCode::kInvalidFile, label, ": the top level must be a JSON object");
  H3_CHECK(j.contains("model"), ErrorCode::kInvalidFile, label, ": \"model\" is missing");

  auto impl = std::make_shared<Impl>();
  impl->source = label;
  impl->model = BpeModel::from_json(j["model"], label);
  impl->added = AddedVocabulary::from_json(j.contains("added_tokens") ? j["added_tokens"] : nlohmann::json(),
                                           label);
  impl->normalizer = Normalizer::from_json(j.contains("normalizer") ? j["normalizer"] : nlohmann::json(), label);
  impl->pre_tokenizer =
      PreTokenizer::from_json(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json(), label);

  if (j.contains("decoder") && !j["decoder"].is_null()) {
    const auto& d = j["decoder"];
    H3_CHECK(d.is_object() && d.contains("type") && d["type"].is_string(), ErrorCode::kInvalidFile, label,
             ": decoder must be an object with a string \"type\"");
    const std::string type = d["type"].get<std::string>();
    H3_CHECK(type == "ByteLevel", ErrorCode::kUnsupported, label, ": decoder has type \"", type,
             "\"; only ByteLevel (or no decoder) is supported");
    impl->decoder = DecoderKind::kByteLevel;
  }

  impl->id_limit = impl->model->id_limit();
  for (const auto& t : impl->added.tokens()) {
    // An added token may reuse a vocabulary id only for the same string (the reference keeps one
    // string per id, so anything else would make decode ambiguous).
    if (const std::string* existing = impl->model->id_to_token(t.id)) {
      H3_CHECK(*existing == t.content, ErrorCode::kInvalidFile, label, ": added token \"", t.content,
               "\" has id ", t.id, ", which model.vocab gives to \"", *existing, "\"");
    }
    impl->id_limit = std::max(impl->id_limit, t.id + 1);
  }
  Tokenizer tok;
  tok.impl_ = std::move(impl);
  return tok;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  check_utf8(text, "text to tokenize");
  const Impl& im = impl();
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<std::string> words;
  for (const auto& piece : im.added.split(text, /*normalized=*/false)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    const std::string_view raw = text.substr(piece.begin, piece.end - piece.begin);
    const std::string norm = im.normalizer.is_identity() ? std::string(raw) : im.normalizer.apply(raw);
    if (!im.added.has_normalized_tokens()) {
      im.encode_plain(norm, &words, &ids);
      continue;
    }
    for (const auto& inner : im.added.split(norm, /*normalized=*/true)) {
      if (inner.id >= 0) {
        ids.push_back(inner.id);
      } else {
        im.encode_plain(std::string_view(norm).substr(inner.begin, inner.end - inner.begin), &words, &ids);
      }
    }
  }
  return ids;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = impl().added.find_id(id)) return t->content;
  if (const std::string* s = impl().model->id_to_token(id)) return *s;
  fail(ErrorCode::kInvalidArgument, "token id ", id, " is not in the vocabulary of ", impl().source,
       " (ids run below ", impl().id_limit, ")");
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* t = impl().added.find_id(id);
  return t != nullptr && t->special;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& im = impl();
  std::string bytes;
  bool first = true;
  for (const int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    const std::string token = id_to_token(id);
    if (im.decoder == DecoderKind::kByteLevel) {
      // A token with a character outside the byte-level alphabet (an added token such as one
      // with a space) contributes its own UTF-8 bytes, as the reference's decoder does.
      if (!from_byte_level(token, &bytes)) bytes += token;
    } else {
      if (!first) bytes += ' ';  // the reference joins tokens with spaces when there is no decoder
      bytes += token;
    }
    first = false;
  }
  return utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl().added.find_content(token)) return id;
  return impl().model->token_to_id(token);
}

int32_t Tokenizer::require_token_id(std::string_view token) const {
  auto id = token_to_id(token);
  H3_CHECK(id.has_value(), ErrorCode::kNotFound, "token \"", token, "\" is not in the vocabulary of ",
           impl().source);
  return *id;
}

int32_t Tokenizer::id_limit() const { return impl().id_limit; }

const std::string& Tokenizer::source() const { return impl().source; }

}  // namespace h3::text
