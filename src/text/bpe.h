// The BPE model of a tokenizer.json ("model": {"type": "BPE", vocab, merges, ...}).
//
// A word (one pre-tokenized piece, already in the byte-level alphabet for Qwen) starts as one
// symbol per character; then the adjacent pair with the lowest merge rank is merged, leftmost
// first on equal ranks, until no pair has a merge. This is the reference's priority-queue
// algorithm (including its rule that a queued pair is still valid when the pair now at that place
// merges into the same token), so ids agree even for vocabularies with several routes to one
// token. O(n log n) per word, and words up to 256 bytes are cached.
//
// Characters missing from the vocabulary become the unk token when there is one (fused when
// fuse_unk), byte tokens <0xNN> when byte_fallback is set, and are dropped otherwise, as in the
// reference. dropout, continuing_subword_prefix and end_of_word_suffix are refused when set.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace h3::text {

class BpeModel {
 public:
  // `model` is the "model" object of tokenizer.json; `label` names the file in errors.
  static std::shared_ptr<const BpeModel> from_json(const nlohmann::json& model, const std::string& label);

  // Appends the ids of one word.
  void encode_word(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Null when the id is not in the vocabulary.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id of the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t vocab_size() const { return vocab_.size(); }
  size_t merge_count() const { return merges_.size(); }

  BpeModel() = default;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<int32_t>* ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_used_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace h3::text
