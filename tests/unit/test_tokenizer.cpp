// Unit tests of the byte-level BPE tokenizer and the prompt presentation on a small tokenizer.json
// built here (components spec §1.3). Golden parity against the tiny-h3 tokenizer lives in
// tests/golden/test_tokenizer.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/pre_tokenizer.h"
#include "text/presentation.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace h3::text {
namespace {

using nlohmann::json;

constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Ids of the merged tokens below; byte b has id b.
enum : int32_t {
  kGt = 256,  // "Ġt"
  kLl,
  kEll,
  kHell,
  kHello,
  kHe,
  kGthe,
  kAa,
  kAaaa,
  kEAcute,  // "Ã©", the two bytes of U+00E9
  kVisionStart = 300,
  kVisionEnd,
  kImagePad,
  kVideoPad,
  kX,   // "<x>", not special
  kXy,  // "<x>y", special
};

const std::vector<std::pair<std::string, std::string>>& merge_list() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"Ġ", "t"},   {"l", "l"},     {"e", "ll"}, {"h", "ell"}, {"hell", "o"},
      {"h", "e"},   {"Ġt", "he"},   {"a", "a"},  {"aa", "aa"}, {"Ã", "©"},
  };
  return m;
}

// A Qwen2-shaped tokenizer.json: 256 byte tokens, 10 merges, 6 added tokens.
json small_tokenizer_json(bool list_merges = false) {
  json vocab = json::object();
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  json merges = json::array();
  int32_t id = 256;
  for (const auto& [a, b] : merge_list()) {
    vocab[a + b] = id++;
    if (list_merges) {
      merges.push_back(json::array({a, b}));
    } else {
      merges.push_back(a + " " + b);
    }
  }
  auto added = [](int id, const char* content, bool special) {
    return json{{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false},   {"normalized", false}, {"special", special}};
  };
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({added(kVisionStart, "<|vision_start|>", true),
                                   added(kVisionEnd, "<|vision_end|>", true),
                                   added(kImagePad, "<|image_pad|>", true),
                                   added(kVideoPad, "<|video_pad|>", true), added(kX, "<x>", false),
                                   added(kXy, "<x>y", true)});
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({json{{"type", "Split"},
                         {"pattern", {{"Regex", kQwen2Pattern}}},
                         {"behavior", "Isolated"},
                         {"invert", false}},
                    json{{"type", "ByteLevel"},
                         {"add_prefix_space", false},
                         {"trim_offsets", true},
                         {"use_regex", false}}})}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  return j;
}

const Tokenizer& small_tokenizer() {
  static const Tokenizer t = Tokenizer::from_json_text(small_tokenizer_json().dump(), "small-tokenizer.json");
  return t;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Expects `fn` to throw h3::Error with `code` and a message containing every string of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::vector<std::string>& parts, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error was raised";
  } catch (const Error& e) {
    std::printf("  %s -> [%s] %s\n", what.c_str(), error_code_name(e.code()), e.what());
    EXPECT_EQ(e.code(), code) << what << ": " << e.what();
    for (const auto& p : parts) {
      EXPECT_NE(e.message().find(p), std::string::npos) << what << ": message lacks \"" << p << "\": " << e.what();
    }
  }
}

TEST(Tokenizer, EncodesByMergeRank) {
  const Tokenizer& t = small_tokenizer();
  // Words "the" | " hello" | " the": "h e" has a worse rank than the "l l" ... "hell o" chain, and
  // "Ġt he" needs "Ġ t" and "h e" first.
  const auto ids = t.encode("the hello the");
  std::printf("  encode(\"the hello the\") = %s\n", ids_str(ids).c_str());
  EXPECT_EQ(ids, (std::vector<int32_t>{'t', kHe, ' ', kHello, kGthe}));
  // Equal ranks merge leftmost first: a a a a a -> aa aa a -> aaaa a.
  EXPECT_EQ(t.encode("aaaaa"), (std::vector<int32_t>{kAaaa, 'a'}));
  EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{kAa, 'a'}));
  EXPECT_TRUE(t.encode("").empty());
}

TEST(Tokenizer, MergesInStringAndListFormAgree) {
  const Tokenizer list = Tokenizer::from_json_text(small_tokenizer_json(true).dump(), "list-merges.json");
  for (const char* s : {"the hello the", "aaaaaaa", "café, hello!", "Ġt he"}) {
    EXPECT_EQ(list.encode(s), small_tokenizer().encode(s)) << s;
  }
}

TEST(Tokenizer, NormalizesToNfcBetweenAddedTokens) {
  const Tokenizer& t = small_tokenizer();
  const auto composed = t.encode("caf\xC3\xA9");     // U+00E9
  const auto decomposed = t.encode("cafe\xCC\x81");  // e + U+0301
  EXPECT_EQ(composed, (std::vector<int32_t>{'c', 'a', 'f', kEAcute}));
  EXPECT_EQ(decomposed, composed);
}

TEST(Tokenizer, AddedTokensMatchLongestFirstInRawText) {
  const Tokenizer& t = small_tokenizer();
  EXPECT_EQ(t.encode("<x>yz"), (std::vector<int32_t>{kXy, 'z'}));
  EXPECT_EQ(t.encode("<x>z"), (std::vector<int32_t>{kX, 'z'}));
  EXPECT_EQ(t.encode("a<|image_pad|><|image_pad|>b"), (std::vector<int32_t>{'a', kImagePad, kImagePad, 'b'}));
  // A partial special token is plain text.
  EXPECT_EQ(t.encode("<|image_pad|"), (std::vector<int32_t>{'<', '|', 'i', 'm', 'a', 'g', 'e', '_', 'p', 'a', 'd', '|'}));
  EXPECT_EQ(t.require_token_id("<|video_pad|>"), kVideoPad);
  EXPECT_EQ(t.token_to_id("hello"), std::optional<int32_t>(kHello));
  EXPECT_FALSE(t.token_to_id("nope").has_value());
  EXPECT_TRUE(t.is_special(kXy));
  EXPECT_FALSE(t.is_special(kX));
  EXPECT_EQ(t.id_to_token(' '), "Ġ");
  EXPECT_EQ(t.id_to_token(kVisionEnd), "<|vision_end|>");
  EXPECT_EQ(t.id_limit(), kXy + 1);
}

TEST(Tokenizer, DecodeRoundTrips) {
  const Tokenizer& t = small_tokenizer();
  const std::vector<std::string> texts = {
      "the hello the",
      "   leading and trailing   ",
      "Hello,\tworld!\n\nNew paragraph\r\nWindows",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
      "Emoji \xF0\x9F\xA6\x8A and ZWJ \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB",
      "<|vision_start|><|image_pad|><|vision_end|>a cat <x>y",
      "I'm, you're, DON'T",
      std::string("nul\0byte", 8),
  };
  int exact = 0;
  for (const auto& s : texts) {
    const auto ids = t.encode(s);
    const std::string back = t.decode(ids);
    EXPECT_EQ(back, s) << "ids " << ids_str(ids);
    exact += back == s;
  }
  std::printf("  decode(encode(x)) == x for %d/%zu texts\n", exact, texts.size());
  // skip_special_tokens drops special added tokens only.
  EXPECT_EQ(t.decode(t.encode("<|vision_start|>a<x>b<x>y"), true), "a<x>b");
  // A lone byte of a multi-byte character decodes to U+FFFD, as the reference's lossy decode does.
  EXPECT_EQ(t.decode({0xC3}), "\xEF\xBF\xBD");
  EXPECT_EQ(t.decode({0xC3, 'a'}), "\xEF\xBF\xBD" "a");
  expect_error([&] { t.decode({5000}); }, ErrorCode::kInvalidArgument, {"5000", "small-tokenizer.json"},
               "decode of an unknown id");
  expect_error([&] { t.decode({-1}); }, ErrorCode::kInvalidArgument, {"-1"}, "decode of a negative id");
}

TEST(Tokenizer, RefusesInvalidUtf8) {
  const Tokenizer& t = small_tokenizer();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"abc\xFF", "byte 3"},                // never valid
      {"ab\xC3", "byte 2"},                 // truncated 2-byte sequence
      {"\xED\xA0\x80", "byte 0"},           // UTF-16 surrogate
      {"x\xC0\xAF", "byte 1"},              // overlong '/'
      {"\xF4\x90\x80\x80", "byte 0"},       // above U+10FFFF
      {"ok \xE2\x82 no", "byte 3"},         // truncated 3-byte sequence
  };
  for (const auto& item : bad) {
    const std::string& text = item.first;
    expect_error([&] { t.encode(text); }, ErrorCode::kInvalidArgument, {"not valid UTF-8", item.second},
                 "encode " + item.second);
  }
}

TEST(Tokenizer, Utf8Helpers) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), kUtf8Valid);
  EXPECT_EQ(find_invalid_utf8("\xF0\x9F\xA6\x8A"), kUtf8Valid);
  EXPECT_EQ(find_invalid_utf8("a\x80"), 1u);
  // Maximal subparts: E2 82 is one truncated sequence -> one U+FFFD; C0 and AF are two.
  EXPECT_EQ(utf8_lossy("\xE2\x82z"), "\xEF\xBF\xBDz");
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  std::string s;
  for (int b = 0; b < 256; ++b) s.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(from_byte_level(to_byte_level(s), &back));
  EXPECT_EQ(back, s);
  EXPECT_EQ(to_byte_level(" \n"), "Ġ" "Ċ");
  EXPECT_FALSE(from_byte_level("a b", &back));  // ' ' is not in the alphabet
}

TEST(Tokenizer, SplitBehaviors) {
  // The documented example of the reference: "the-final--countdown" split on "-".
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"Removed", {"the", "final", "countdown"}},
      {"Isolated", {"the", "-", "final", "-", "-", "countdown"}},
      {"MergedWithPrevious", {"the-", "final-", "-", "countdown"}},
      {"MergedWithNext", {"the", "-final", "-", "-countdown"}},
      {"Contiguous", {"the", "-", "final", "--", "countdown"}},
  };
  for (const auto& [behavior, want] : cases) {
    const json spec = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", false}};
    std::vector<std::string> got;
    PreTokenizer::from_json(spec, "split.json").split("the-final--countdown", &got);
    EXPECT_EQ(got, want) << behavior;
  }
  // Inverted: the regex names what to keep; Removed then drops everything else.
  const json inv = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{L}+"}}}, {"behavior", "Removed"}, {"invert", true}};
  std::vector<std::string> got;
  PreTokenizer::from_json(inv, "split.json").split("ab, cd!", &got);
  EXPECT_EQ(got, (std::vector<std::string>{"ab", "cd"}));
}

TEST(Tokenizer, RegexWhitespaceIsUnicodeWhiteSpace) {
  // \s means White_Space as in the reference's Oniguruma: U+3000 is space, U+180E (a format
  // character) is not, though PCRE2's own \s would take it.
  const json spec = {{"type", "Split"}, {"pattern", {{"Regex", kQwen2Pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  const PreTokenizer pre = PreTokenizer::from_json(spec, "qwen2-split.json");
  std::vector<std::string> got;
  pre.split("a\xE3\x80\x80\xE3\x80\x80" "b", &got);  // a U+3000 U+3000 b
  EXPECT_EQ(got, (std::vector<std::string>{"a", "\xE3\x80\x80", "\xE3\x80\x80" "b"}));
  got.clear();
  pre.split("\xE1\xA0\x8E\xE1\xA0\x8Ex", &got);  // U+180E U+180E x: punctuation run, then a word
  EXPECT_EQ(got, (std::vector<std::string>{"\xE1\xA0\x8E\xE1\xA0\x8E", "x"}));
  // \s inside a class and \S outside one follow the same set: U+180E is not a space here either.
  const json cls = {{"type", "Split"}, {"pattern", {{"Regex", "[\\s,]+|\\S+"}}}, {"behavior", "Removed"}, {"invert", true}};
  got.clear();
  PreTokenizer::from_json(cls, "class.json").split("ab,\xE1\xA0\x8E c", &got);
  EXPECT_EQ(got, (std::vector<std::string>{"ab,\xE1\xA0\x8E", " ", "c"}));
}

TEST(Tokenizer, LongInputsStayFast) {
  const Tokenizer& t = small_tokenizer();
  const std::vector<std::string> texts = {std::string(200000, 'a'), std::string(200000, ' '),
                                          std::string(100000, '\n') + "x", std::string(50000, '<')};
  for (const auto& s : texts) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = t.encode(s);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %zu bytes -> %zu ids in %.1f ms\n", s.size(), ids.size(), ms);
    EXPECT_EQ(t.decode(ids), s);
    EXPECT_LT(ms, 5000.0);
  }
  EXPECT_EQ(t.encode(std::string(200000, 'a')).size(), 50000u);  // all "aaaa"
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const Tokenizer& t = small_tokenizer();
  const std::string text = "the hello the caf\xC3\xA9 aaaaaaa <|image_pad|> words words words";
  const auto want = t.encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) got[k] = t.encode(text + std::to_string(i % 7));
      got[k] = t.encode(text);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

TEST(Tokenizer, RefusesBadFiles) {
  const std::string label = "bad-tokenizer.json";
  auto load = [&](const json& j) { (void)Tokenizer::from_json_text(j.dump(), label); };
  auto mutated = [](auto&& edit) {
    json j = small_tokenizer_json();
    edit(j);
    return j;
  };
  expect_error([&] { load(mutated([](json& j) { j.erase("model"); })); }, ErrorCode::kInvalidFile,
               {label, "\"model\" is missing"}, "no model");
  expect_error([&] { load(mutated([](json& j) { j["model"].erase("vocab"); })); }, ErrorCode::kInvalidFile,
               {label, "model.vocab is missing"}, "no vocab");
  expect_error([&] { load(mutated([](json& j) { j["model"].erase("merges"); })); }, ErrorCode::kInvalidFile,
               {label, "model.merges is missing"}, "no merges");
  expect_error([&] { load(mutated([](json& j) { j["model"]["merges"].push_back("q zz"); })); },
               ErrorCode::kInvalidFile, {label, "model.merges[10]", "\"zz\"", "not in model.vocab"},
               "merge of an unknown token");
  expect_error([&] { load(mutated([](json& j) { j["model"]["merges"].push_back("q z"); })); },
               ErrorCode::kInvalidFile, {label, "model.merges[10]", "\"qz\""}, "merge into an unknown token");
  expect_error([&] { load(mutated([](json& j) { j["model"]["merges"].push_back("a b c"); })); },
               ErrorCode::kInvalidFile, {label, "model.merges[10]", "one space"}, "merge with three parts");
  expect_error([&] { load(mutated([](json& j) { j["model"]["merges"].push_back(7); })); },
               ErrorCode::kInvalidFile, {label, "model.merges[10]"}, "merge that is a number");
  expect_error([&] { load(mutated([](json& j) { j["model"]["type"] = "WordPiece"; })); }, ErrorCode::kUnsupported,
               {label, "model.type", "WordPiece"}, "WordPiece model");
  expect_error([&] { load(mutated([](json& j) { j["model"]["vocab"]["zz"] = -3; })); }, ErrorCode::kInvalidFile,
               {label, "model.vocab[\"zz\"]"}, "negative id");
  expect_error([&] { load(mutated([](json& j) { j["model"]["vocab"]["zz"] = 5; })); }, ErrorCode::kInvalidFile,
               {label, "id 5"}, "duplicate id");
  expect_error([&] { load(mutated([](json& j) { j["model"]["vocab"] = json::array(); })); },
               ErrorCode::kInvalidFile, {label, "model.vocab must be an object"}, "vocab as array");
  expect_error([&] { load(mutated([](json& j) { j["model"]["dropout"] = 0.1; })); }, ErrorCode::kUnsupported,
               {label, "model.dropout"}, "dropout");
  expect_error([&] { load(mutated([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; })); },
               ErrorCode::kUnsupported, {label, "pre_tokenizer", "Whitespace"}, "Whitespace pre-tokenizer");
  expect_error(
      [&] { load(mutated([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(open"; })); },
      ErrorCode::kInvalidFile, {label, "pre_tokenizer.pretokenizers[0].pattern.Regex", "does not compile"},
      "bad regex");
  expect_error(
      [&] { load(mutated([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; })); },
      ErrorCode::kUnsupported, {label, "behavior", "Sideways"}, "bad split behavior");
  expect_error([&] { load(mutated([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; })); },
               ErrorCode::kUnsupported, {label, "normalizer", "Lowercase"}, "Lowercase normalizer");
  expect_error([&] { load(mutated([](json& j) { j["decoder"] = {{"type", "Metaspace"}}; })); },
               ErrorCode::kUnsupported, {label, "decoder", "Metaspace"}, "Metaspace decoder");
  expect_error([&] { load(mutated([](json& j) { j["added_tokens"][0].erase("content"); })); },
               ErrorCode::kInvalidFile, {label, "added_tokens[0]", "content"}, "added token without content");
  expect_error([&] { load(mutated([](json& j) { j["added_tokens"][1]["id"] = 300; })); },
               ErrorCode::kInvalidFile, {label, "added_tokens[1]", "300"}, "added token id reused");
  expect_error([&] { load(mutated([](json& j) { j["added_tokens"][0]["id"] = 'a'; })); },
               ErrorCode::kInvalidFile, {label, "<|vision_start|>", "\"a\""}, "added token clashing with vocab");
  expect_error([&] { (void)Tokenizer::from_json_text("{\"model\": ", label); }, ErrorCode::kInvalidFile,
               {label, "not valid JSON"}, "truncated JSON");
  expect_error([&] { (void)Tokenizer::from_json_text("[1, 2]", label); }, ErrorCode::kInvalidFile,
               {label, "JSON object"}, "JSON array");
  expect_error([&] { (void)Tokenizer::from_json_text(std::string(100000, '[') + std::string(100000, ']'), label); },
               ErrorCode::kInvalidFile, {label, "nests deeper"}, "deep JSON");
  expect_error([&] { (void)Tokenizer::from_file("/nonexistent/folder/tokenizer.json"); }, ErrorCode::kNotFound,
               {"/nonexistent/folder/tokenizer.json"}, "missing file");
}

TEST(Tokenizer, EmptyTokenizerRefusesWork) {
  const Tokenizer empty;
  expect_error([&] { empty.encode("x"); }, ErrorCode::kInvalidArgument, {"before one was loaded"}, "encode on empty");
  expect_error([&] { empty.decode({1}); }, ErrorCode::kInvalidArgument, {"before one was loaded"}, "decode on empty");
}

TEST(Tokenizer, LoadsFromFolder) {
  const auto dir = std::filesystem::temp_directory_path() / ("h3_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer.json") << small_tokenizer_json().dump();
  }
  const Tokenizer t = Tokenizer::from_file(dir.string());
  EXPECT_EQ(t.encode("the hello the"), small_tokenizer().encode("the hello the"));
  EXPECT_NE(t.source().find("tokenizer.json"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Presentation, FormatsTimestampsLikePython) {
  // Python: "%.1f" % x, correctly rounded from the binary value, exact ties to even.
  const std::vector<std::pair<double, std::string>> cases = {
      {0.25, "<0.2 seconds>"},  {1.25, "<1.2 seconds>"},   {0.75, "<0.8 seconds>"},
      {0.35, "<0.3 seconds>"},  {0.45, "<0.5 seconds>"},   {2.0, "<2.0 seconds>"},
      {0.0, "<0.0 seconds>"},   {12.05, "<12.1 seconds>"}, {0.049999, "<0.0 seconds>"},
      {123456.75, "<123456.8 seconds>"},
  };
  for (const auto& [v, want] : cases) EXPECT_EQ(format_block_timestamp(v), want) << v;
  expect_error([] { format_block_timestamp(std::nan("")); }, ErrorCode::kInvalidArgument, {"timestamp"}, "NaN");
  expect_error([] { format_block_timestamp(-0.5); }, ErrorCode::kInvalidArgument, {"timestamp"}, "negative");
}

TEST(Presentation, FollowsTheGrammar) {
  const PromptPresenter p(small_tokenizer());
  const std::vector<int32_t> prompt = small_tokenizer().encode("the hello");
  const std::vector<int32_t> pic1 = small_tokenizer().encode("<Picture 1>: ");
  const std::vector<int32_t> aud1 = small_tokenizer().encode("<Audio 1>: ");

  const Presentation t2va = p.present(Workflow::kT2VA, "the hello", {});
  EXPECT_EQ(t2va.input_ids, std::vector<int64_t>(prompt.begin(), prompt.end()));
  EXPECT_EQ(t2va.text_token_tags, std::vector<int64_t>(prompt.size(), kTagText));
  EXPECT_EQ(t2va.mm_token_type_ids, std::vector<int64_t>(prompt.size(), kTokenTypeText));

  // One keyframe with grid (1, 4, 6): 6 image pads.
  const Presentation fl = p.present(Workflow::kFL2VA, "the hello", {PresentedMedia::image({1, 4, 6})});
  std::vector<int64_t> want(pic1.begin(), pic1.end());
  want.push_back(kVisionStart);
  want.insert(want.end(), 6, kImagePad);
  want.push_back(kVisionEnd);
  want.insert(want.end(), prompt.begin(), prompt.end());
  EXPECT_EQ(fl.input_ids, want);
  const size_t v0 = pic1.size();
  for (size_t i = 0; i < fl.size(); ++i) {
    const bool vision = i >= v0 && i < v0 + 8;
    const bool pad = i > v0 && i < v0 + 7;
    EXPECT_EQ(fl.text_token_tags[i], vision ? kTagVideo : kTagText) << i;
    EXPECT_EQ(fl.mm_token_type_ids[i], pad ? kTokenTypeImage : kTokenTypeText) << i;
  }

  // ref2va: video with soundtrack (2 blocks of 2x2 merged), then audio, then image.
  const Presentation ref = p.present(
      Workflow::kRef2VA, "the hello",
      {PresentedMedia::video({2, 4, 4}, {0.25, 1.25}, true), PresentedMedia::audio(), PresentedMedia::image({1, 2, 2})});
  std::vector<int64_t> w2;
  auto add_text = [&](const std::string& s) {
    for (const int32_t id : small_tokenizer().encode(s)) w2.push_back(id);
  };
  add_text("<Audio 1>: ");
  add_text("<Video 1>: ");
  for (const char* ts : {"<0.2 seconds>", "<1.2 seconds>"}) {
    add_text(ts);
    w2.push_back(kVisionStart);
    w2.insert(w2.end(), 4, kVideoPad);
    w2.push_back(kVisionEnd);
  }
  add_text("<Audio 2>: ");
  add_text("<Picture 1>: ");
  w2.push_back(kVisionStart);
  w2.push_back(kImagePad);
  w2.push_back(kVisionEnd);
  add_text("the hello");
  EXPECT_EQ(ref.input_ids, w2);
  int64_t video_pads = 0, image_pads = 0, vision_tags = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    video_pads += ref.mm_token_type_ids[i] == kTokenTypeVideo;
    image_pads += ref.mm_token_type_ids[i] == kTokenTypeImage;
    vision_tags += ref.text_token_tags[i] == kTagVideo;
  }
  EXPECT_EQ(video_pads, 8);
  EXPECT_EQ(image_pads, 1);
  EXPECT_EQ(vision_tags, 2 * 6 + 3);
  // Labels are tokenized on their own: "<Audio 1>: " keeps its trailing space token.
  EXPECT_EQ(std::vector<int64_t>(ref.input_ids.begin(), ref.input_ids.begin() + aud1.size()),
            std::vector<int64_t>(aud1.begin(), aud1.end()));
}

TEST(Presentation, RefusesRequestsOutsideTheGrammar) {
  const PromptPresenter p(small_tokenizer());
  const auto img = PresentedMedia::image({1, 4, 4});
  expect_error([&] { p.present(Workflow::kT2VA, "x", {img}); }, ErrorCode::kInvalidArgument, {"t2va"}, "t2va with media");
  expect_error([&] { p.present(Workflow::kFL2VA, "x", {}); }, ErrorCode::kInvalidArgument, {"fl2va", "1 or 2"},
               "fl2va without keyframes");
  expect_error([&] { p.present(Workflow::kFL2VA, "x", {img, img, img}); }, ErrorCode::kInvalidArgument,
               {"fl2va", "got 3"}, "fl2va with 3 keyframes");
  expect_error([&] { p.present(Workflow::kFL2VA, "x", {img, PresentedMedia::audio()}); },
               ErrorCode::kInvalidArgument, {"keyframe 1", "audio"}, "fl2va with audio");
  expect_error([&] { p.present(Workflow::kRef2VA, "x", {PresentedMedia::image({1, 3, 4})}); },
               ErrorCode::kInvalidArgument, {"image 0", "multiples of the merge size 2"}, "odd grid");
  expect_error([&] { p.present(Workflow::kRef2VA, "x", {PresentedMedia::image({0, 4, 4})}); },
               ErrorCode::kInvalidArgument, {"image 0", "(0, 4, 4)"}, "empty grid");
  expect_error([&] { p.present(Workflow::kRef2VA, "x", {PresentedMedia::video({2, 4, 4}, {0.5}, false)}); },
               ErrorCode::kInvalidArgument, {"video 0", "1 block timestamps", "grid_t = 2"}, "timestamp count");
  expect_error([&] { p.present(Workflow::kRef2VA, "x", {PresentedMedia::image({1, 1 << 20, 1 << 20})}); },
               ErrorCode::kInvalidArgument, {"image 0"}, "huge grid");
  expect_error([&] { p.present(Workflow::kT2VA, "bad \xFF prompt", {}); }, ErrorCode::kInvalidArgument,
               {"prompt is not valid UTF-8", "byte 4"}, "invalid prompt");
  expect_error([&] { PromptPresenter(small_tokenizer(), 0); }, ErrorCode::kInvalidArgument, {"merge_size"},
               "merge size 0");
  json no_vision = small_tokenizer_json();
  no_vision["added_tokens"].erase(3);  // <|video_pad|>
  const Tokenizer t = Tokenizer::from_json_text(no_vision.dump(), "no-video-pad.json");
  expect_error([&] { PromptPresenter{t}; }, ErrorCode::kNotFound, {"<|video_pad|>", "no-video-pad.json"},
               "tokenizer without <|video_pad|>");
}

}  // namespace
}  // namespace h3::text
