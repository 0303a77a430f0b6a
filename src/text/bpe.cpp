#include "text/bpe.h"

#include <cstdio>
#include <mutex>
#include <queue>

#include "core/status.h"
#include "text/utf8.h"

namespace h3::text {
namespace {

// Ids above this are refused: real vocabularies hold a few hundred thousand entries, and the
// reverse table is sized by the largest id.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheMaxEntries = 1 << 16;

std::string optional_string(const nlohmann::json& model, const char* key, const std::string& label) {
  if (!model.contains(key) || model[key].is_null()) return {};
  H3_CHECK(model[key].is_string(), ErrorCode::kInvalidFile, label, ": model.", key, " must be a string or null");
  return model[key].get<std::string>();
}

bool optional_bool(const nlohmann::json& model, const char* key, const std::string& label) {
  if (!model.contains(key) || model[key].is_null()) return false;
  H3_CHECK(model[key].is_boolean(), ErrorCode::kInvalidFile, label, ": model.", key, " must be true or false");
  return model[key].get<bool>();
}

}  // namespace

struct BpeModel::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> words;
};

std::shared_ptr<const BpeModel> BpeModel::from_json(const nlohmann::json& model, const std::string& label) {
  H3_CHECK(model.is_object(), ErrorCode::kInvalidFile, label, ": \"model\" must be an object");
  if (model.contains("type")) {
    H3_CHECK(model["type"].is_string(), ErrorCode::kInvalidFile, label, ": model.type must be a string");
    const std::string type = model["type"].get<std::string>();
    H3_CHECK(type == "BPE", ErrorCode::kUnsupported, label, ": model.type is \"", type,
             "\"; only BPE models are supported");
  }
  H3_CHECK(model.contains("vocab"), ErrorCode::kInvalidFile, label, ": model.vocab is missing");
  H3_CHECK(model["vocab"].is_object(), ErrorCode::kInvalidFile, label,
           ": model.vocab must be an object mapping tokens to ids");
  H3_CHECK(model.contains("merges"), ErrorCode::kInvalidFile, label, ": model.merges is missing");
  H3_CHECK(model["merges"].is_array(), ErrorCode::kInvalidFile, label, ": model.merges must be an array");

  if (model.contains("dropout") && !model["dropout"].is_null()) {
    H3_CHECK(model["dropout"].is_number(), ErrorCode::kInvalidFile, label, ": model.dropout must be a number or null");
    const double p = model["dropout"].get<double>();
    H3_CHECK(p == 0.0, ErrorCode::kUnsupported, label, ": model.dropout is ", p,
             "; BPE dropout is a training feature and is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::string v = optional_string(model, key, label);
    H3_CHECK(v.empty(), ErrorCode::kUnsupported, label, ": model.", key, " is \"", v,
             "\"; only byte-level BPE without subword affixes is supported");
  }

  auto bpe = std::make_shared<BpeModel>();
  bpe->fuse_unk_ = optional_bool(model, "fuse_unk", label);
  bpe->byte_fallback_ = optional_bool(model, "byte_fallback", label);
  bpe->ignore_merges_ = optional_bool(model, "ignore_merges", label);

  int64_t max_id = -1;
  for (const auto& [token, id_json] : model["vocab"].items()) {
    H3_CHECK(id_json.is_number_integer(), ErrorCode::kInvalidFile, label, ": model.vocab[\"", token,
             "\"] must be an integer id");
    const int64_t id = id_json.get<int64_t>();
    H3_CHECK(id >= 0 && id <= kMaxTokenId, ErrorCode::kInvalidFile, label, ": model.vocab[\"", token,
             "\"] = ", id, " is outside [0, ", kMaxTokenId, "]");
    check_utf8(token, str_cat(label, ": model.vocab key"));
    bpe->vocab_.emplace(token, static_cast<int32_t>(id));
    if (id > max_id) max_id = id;
  }
  bpe->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  bpe->id_used_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : bpe->vocab_) {
    H3_CHECK(!bpe->id_used_[id], ErrorCode::kInvalidFile, label, ": model.vocab gives id ", id,
             " to both \"", bpe->id_to_token_[id], "\" and \"", token, "\"");
    bpe->id_used_[id] = true;
    bpe->id_to_token_[id] = token;
  }

  const std::string unk = optional_string(model, "unk_token", label);
  if (!unk.empty()) {
    auto it = bpe->vocab_.find(unk);
    H3_CHECK(it != bpe->vocab_.end(), ErrorCode::kInvalidFile, label, ": model.unk_token \"", unk,
             "\" is not in model.vocab");
    bpe->unk_id_ = it->second;
  }

  const auto& merges = model["merges"];
  bpe->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    std::string a, b;
    if (m.is_string()) {
      // "a b": exactly one space separates the two parts (neither part can hold a space in a
      // byte-level vocabulary).
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      H3_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos && sp > 0 &&
                   sp + 1 < s.size(),
               ErrorCode::kInvalidFile, label, ": model.merges[", rank, "] = \"", s,
               "\" must be two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail(ErrorCode::kInvalidFile, label, ": model.merges[", rank,
           "] must be a string \"a b\" or a pair [\"a\", \"b\"]");
    }
    const auto ia = bpe->vocab_.find(a);
    H3_CHECK(ia != bpe->vocab_.end(), ErrorCode::kInvalidFile, label, ": model.merges[", rank,
             "] references \"", a, "\", which is not in model.vocab");
    const auto ib = bpe->vocab_.find(b);
    H3_CHECK(ib != bpe->vocab_.end(), ErrorCode::kInvalidFile, label, ": model.merges[", rank,
             "] references \"", b, "\", which is not in model.vocab");
    const auto ic = bpe->vocab_.find(a + b);
    H3_CHECK(ic != bpe->vocab_.end(), ErrorCode::kInvalidFile, label, ": model.merges[", rank,
             "] merges into \"", a + b, "\", which is not in model.vocab");
    // A repeated pair keeps its last rank, as the reference's map insertion does.
    bpe->merges_[pair_key(ia->second, ib->second)] = {static_cast<int32_t>(rank), ic->second};
  }
  bpe->cache_ = std::make_unique<Cache>();
  return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !id_used_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      ids->push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->words.find(std::string(word));
    if (it != cache_->words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> out;
  merge_word(word, &out);
  ids->insert(ids->end(), out.begin(), out.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->words.size() < kCacheMaxEntries) cache_->words.emplace(std::string(word), std::move(out));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  // Pending unknown run (fuse_unk joins consecutive unknown characters into one unk).
  bool unk_pending = false;
  auto push_symbol = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  };
  auto flush_unk = [&] {
    if (unk_pending) push_symbol(*unk_id_);
    unk_pending = false;
  };

  size_t i = 0;
  while (i < word.size()) {
    size_t len = utf8_sequence_length(word, i);
    if (len == 0) len = 1;  // not reachable for validated text; treat a stray byte as one char
    const std::string ch(word.substr(i, len));
    i += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      flush_unk();
      push_symbol(it->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> byte_ids;
      for (const char c : ch) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(static_cast<unsigned char>(c)));
        auto it = vocab_.find(name);
        if (it == vocab_.end()) break;
        byte_ids.push_back(it->second);
      }
      if (byte_ids.size() == ch.size()) {
        flush_unk();
        for (const int32_t id : byte_ids) push_symbol(id);
        continue;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && unk_pending)) {
        flush_unk();
        unk_pending = true;
      }
    }
    // Without an unk token the character is dropped, as in the reference.
  }
  flush_unk();

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto lookup = [&](int32_t a, int32_t b) -> const MergeTarget* {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const MergeTarget* m = lookup(symbols[k].id, symbols[k + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(k), m->id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const MergeTarget* m = lookup(left.id, right.id);
    if (m == nullptr || m->id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeTarget* p = lookup(symbols[left.prev].id, left.id)) {
        queue.push({p->rank, left.prev, p->id});
      }
    }
    if (left.next >= 0) {
      if (const MergeTarget* n = lookup(left.id, symbols[left.next].id)) {
        queue.push({n->rank, top.pos, n->id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.alive) ids->push_back(s.id);
  }
}

}  // namespace h3::text
