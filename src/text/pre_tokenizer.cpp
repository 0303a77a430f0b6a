#include "text/pre_tokenizer.h"

#include <algorithm>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/utf8.h"

namespace h3::text {
namespace {

// The GPT-2 split pattern that ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool json_bool(const nlohmann::json& spec, const char* key, bool fallback, const std::string& label,
               const std::string& field) {
  if (!spec.contains(key) || spec[key].is_null()) return fallback;
  H3_CHECK(spec[key].is_boolean(), ErrorCode::kInvalidFile, label, ": ", field, ".", key,
           " must be true or false");
  return spec[key].get<bool>();
}

struct Span {
  size_t begin, end;
  bool is_match;
};

}  // namespace

void PreTokenizer::collect(const nlohmann::json& spec, const std::string& label,
                           const std::string& field, int depth, PreTokenizer* out) {
  if (spec.is_null()) return;
  H3_CHECK(depth < 16, ErrorCode::kInvalidFile, label, ": ", field, " nests Sequence pre-tokenizers too deeply");
  H3_CHECK(spec.is_object() && spec.contains("type") && spec["type"].is_string(),
           ErrorCode::kInvalidFile, label, ": ", field, " must be an object with a string \"type\"");
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    H3_CHECK(spec.contains("pretokenizers") && spec["pretokenizers"].is_array(),
             ErrorCode::kInvalidFile, label, ": ", field, " of type Sequence needs a \"pretokenizers\" array");
    const auto& list = spec["pretokenizers"];
    for (size_t i = 0; i < list.size(); ++i) {
      collect(list[i], label, str_cat(field, ".pretokenizers[", i, "]"), depth + 1, out);
    }
  } else if (type == "Split") {
    Step step;
    step.kind = Step::Kind::kSplit;
    H3_CHECK(spec.contains("pattern") && spec["pattern"].is_object(), ErrorCode::kInvalidFile, label,
             ": ", field, " of type Split needs a \"pattern\" object ({\"Regex\": ...} or {\"String\": ...})");
    const auto& pattern = spec["pattern"];
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.regex = std::make_shared<const Regex>(pattern["Regex"].get<std::string>(),
                                                 str_cat(label, ": ", field, ".pattern.Regex"));
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      step.literal = pattern["String"].get<std::string>();
      check_utf8(step.literal, str_cat(label, ": ", field, ".pattern.String"));
    } else {
      fail(ErrorCode::kInvalidFile, label, ": ", field,
           ".pattern must hold a string \"Regex\" or \"String\"");
    }
    H3_CHECK(spec.contains("behavior") && spec["behavior"].is_string(), ErrorCode::kInvalidFile, label,
             ": ", field, " of type Split needs a string \"behavior\"");
    const std::string behavior = spec["behavior"].get<std::string>();
    if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      fail(ErrorCode::kUnsupported, label, ": ", field, ".behavior \"", behavior,
           "\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    }
    step.invert = json_bool(spec, "invert", false, label, field);
    out->steps_.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    Step step;
    step.kind = Step::Kind::kByteLevel;
    step.add_prefix_space = json_bool(spec, "add_prefix_space", true, label, field);
    if (json_bool(spec, "use_regex", true, label, field)) {
      step.regex = std::make_shared<const Regex>(kGpt2Pattern, str_cat(label, ": ", field, " (GPT-2 regex)"));
    }
    out->steps_.push_back(std::move(step));
    out->byte_level_ = true;
  } else {
    fail(ErrorCode::kUnsupported, label, ": ", field, " has type \"", type,
         "\"; supported pre-tokenizers are Sequence, Split and ByteLevel");
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& spec, const std::string& label) {
  PreTokenizer p;
  collect(spec, label, "pre_tokenizer", 0, &p);
  return p;
}

void PreTokenizer::apply_split(const Step& step, const std::string& piece,
                               std::vector<std::string>* out) {
  // Cover the piece with alternating gap / match spans, as the reference's find_matches does.
  std::vector<std::pair<size_t, size_t>> matches;
  if (step.regex) {
    matches = step.regex->find_all(piece);
  } else if (!step.literal.empty()) {
    size_t pos = 0;
    while ((pos = piece.find(step.literal, pos)) != std::string::npos) {
      matches.emplace_back(pos, pos + step.literal.size());
      pos += step.literal.size();
    }
  }
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev < piece.size()) spans.push_back({prev, piece.size(), false});
  if (step.invert) {
    for (auto& s : spans) s.is_match = !s.is_match;
  }

  // Regroup by behavior; the bool marks spans to drop (only Removed drops).
  std::vector<std::pair<Span, bool>> groups;
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::kRemoved:
    case Behavior::kIsolated:
      for (const auto& s : spans) groups.push_back({s, step.behavior == Behavior::kRemoved && s.is_match});
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !groups.empty()) {
          groups.back().first.end = s.end;
        } else {
          groups.push_back({s, false});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !previous_match && !groups.empty()) {
          groups.back().first.begin = s.begin;
        } else {
          groups.push_back({s, false});
        }
        previous_match = s.is_match;
      }
      std::reverse(groups.begin(), groups.end());
      break;
    case Behavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !groups.empty()) {
          groups.back().first.end = s.end;
        } else {
          groups.push_back({s, false});
        }
        previous_match = s.is_match;
      }
      break;
  }
  for (const auto& [span, drop] : groups) {
    if (drop || span.end == span.begin) continue;
    out->push_back(piece.substr(span.begin, span.end - span.begin));
  }
}

void PreTokenizer::apply_byte_level(const Step& step, const std::string& piece,
                                    std::vector<std::string>* out) {
  std::string text = piece;
  if (step.add_prefix_space && (text.empty() || text[0] != ' ')) text.insert(text.begin(), ' ');
  if (!step.regex) {
    out->push_back(to_byte_level(text));
    return;
  }
  // use_regex: an Isolated split by the GPT-2 pattern before the mapping, as the reference does.
  Step isolated;
  isolated.regex = step.regex;
  isolated.behavior = Behavior::kIsolated;
  std::vector<std::string> parts;
  apply_split(isolated, text, &parts);
  for (const auto& p : parts) out->push_back(to_byte_level(p));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>* words) const {
  if (text.empty()) return;
  std::vector<std::string> cur{std::string(text)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (const auto& piece : cur) {
      if (step.kind == Step::Kind::kSplit) {
        apply_split(step, piece, &next);
      } else {
        apply_byte_level(step, piece, &next);
      }
    }
    cur.swap(next);
  }
  for (auto& w : cur) {
    if (!w.empty()) words->push_back(std::move(w));
  }
}

}  // namespace h3::text
