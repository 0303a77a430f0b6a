// The two safetensors header parsers against each other (src/io/safetensors_header.h).
//
// The hand-written parser may decline any header, but when it accepts one the JSON parser must
// accept it too with the same tensors and metadata, and parse_safetensors_header (fast first, JSON
// on decline) must give exactly what the JSON parser alone gives: the same result, or an error of
// the same code and message. Inputs: generated valid headers (random key order, whitespace,
// escapes, multi-byte names, metadata anywhere) and their corruptions (every truncation, byte
// substitutions at every position, duplicated keys, extra fields, odd numbers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "io/safetensors_header.h"

namespace h3::io {
namespace {

struct Outcome {
  bool ok = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  std::vector<TensorInfo> infos;
  std::map<std::string, std::string> metadata;
};

struct Tally {
  int cases = 0, fast_accepted = 0, json_accepted = 0;
};

// Runs every parser over `header` in front of `data_len` bytes of data and checks the promises
// of the file comment.
void compare(const std::string& header, uint64_t data_len, Tally* tally) {
  SCOPED_TRACE("header: " + header);
  const auto* data = reinterpret_cast<const uint8_t*>(header.data());
  const size_t size = header.size();
  const uint64_t data_start = 8 + size;
  const uint64_t file_size = data_start + data_len;
  ++tally->cases;

  Outcome json;
  try {
    parse_header_json(data, size, data_start, data_len, "t.safetensors", &json.infos,
                      &json.metadata);
    sort_and_check_spans(&json.infos, data_start, "t.safetensors");
    json.ok = true;
    ++tally->json_accepted;
  } catch (const Error& e) {
    json.code = e.code();
    json.message = e.message();
  }

  std::vector<TensorInfo> fast_infos;
  std::map<std::string, std::string> fast_metadata;
  bool fast_ok = false;
  try {
    fast_ok = parse_header_fast(data, size, data_start, data_len, "t.safetensors", &fast_infos,
                                &fast_metadata);
  } catch (const Error& e) {
    ADD_FAILURE() << "the fast parser threw instead of declining: " << e.what();
  }
  if (fast_ok) {
    ++tally->fast_accepted;
    // The JSON parser accepted the same header (the overlap check is a separate step).
    std::vector<TensorInfo> json_unsorted;
    std::map<std::string, std::string> json_metadata;
    EXPECT_NO_THROW(parse_header_json(data, size, data_start, data_len, "t.safetensors",
                                      &json_unsorted, &json_metadata));
    EXPECT_EQ(fast_metadata, json_metadata);
    bool fast_sorted_ok = true;
    try {
      sort_and_check_spans(&fast_infos, data_start, "t.safetensors");
    } catch (const Error&) {
      fast_sorted_ok = false;
    }
    EXPECT_EQ(fast_sorted_ok, json.ok);
    if (json.ok) {
      EXPECT_TRUE(fast_infos == json.infos);
    }
  }

  Outcome both;
  if (size >= 2) {
    try {
      parse_safetensors_header(data, size, file_size, "t.safetensors", &both.infos, &both.metadata);
      both.ok = true;
    } catch (const Error& e) {
      both.code = e.code();
      both.message = e.message();
    }
    EXPECT_EQ(both.ok, json.ok) << both.message << json.message;
    if (both.ok && json.ok) {
      EXPECT_TRUE(both.infos == json.infos);
      EXPECT_EQ(both.metadata, json.metadata);
    } else if (!both.ok && !json.ok) {
      EXPECT_EQ(both.code, json.code);
      EXPECT_EQ(both.message, json.message);
    }
  }
}

// Random valid headers in the writers' grammar, with the liberties JSON allows.
class HeaderGenerator {
 public:
  explicit HeaderGenerator(uint32_t seed) : rng_(seed) {}

  // Returns the header; `data_len` receives the bytes the spans cover.
  std::string make(uint64_t* data_len) {
    const int n = pick(0, 6);
    const int meta_at = pick(-1, n);  // -1: no metadata
    std::string out = "{" + space();
    uint64_t offset = 0;
    bool first = true;
    auto sep = [&] {
      if (!first) out += space() + "," + space();
      first = false;
    };
    for (int i = 0; i <= n; ++i) {
      if (i == meta_at) {
        sep();
        out += "\"__metadata__\"" + space() + ":" + space() + metadata();
      }
      if (i == n) break;
      sep();
      out += quoted(name(i)) + space() + ":" + space() + entry(&offset);
    }
    out += space() + "}" + space();
    *data_len = offset + static_cast<uint64_t>(pick(0, 3));
    return out;
  }

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

 private:
  std::string space() {
    static const char* const kSpaces[] = {"", "", "", " ", "\n", "\t", "\r\n  ", "  "};
    return kSpaces[pick(0, 7)];
  }
  // Writes `s` as a JSON string, escaping some characters that need no escape.
  std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (const char c : s) {
      const auto u = static_cast<uint8_t>(c);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (u < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", u);
        out += buf;
      } else if (u < 0x80 && pick(0, 15) == 0) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), pick(0, 1) ? "\\u%04x" : "\\u%04X", u);
        out += buf;
      } else if (c == '/' && pick(0, 1)) {
        out += "\\/";
      } else {
        out += c;
      }
    }
    return out + "\"";
  }
  std::string name(int i) {
    static const char* const kParts[] = {
        "blocks.",
        "attn.",
        "weight",
        "bias",
        "\xc3\xa9",          // é
        "\xf0\x9f\x98\x80",  // U+1F600, a surrogate pair in \u form
        "\n",
        "\"",
        "\\",
        "/",
        "\x7f",
        "",
        "__metadata_"};
    std::string s = std::to_string(i) + ".";
    const int parts = pick(0, 4);
    for (int k = 0; k < parts; ++k) s += kParts[pick(0, 12)];
    return s;
  }
  std::string metadata() {
    std::string out = "{" + space();
    const int n = pick(0, 3);
    for (int i = 0; i < n; ++i) {
      if (i) out += space() + "," + space();
      // Appended piece by piece: GCC 12 at -O3 raises a -Wstringop-overflow false positive on
      // `"k" + std::to_string(i)` here (libstdc++'s insert at the front, inlined).
      std::string key = "k";
      key += std::to_string(i);
      if (pick(0, 1)) key += "\xe2\x82\xac";
      out += quoted(key);
      out += space() + ":" + space();
      out += quoted(pick(0, 1) ? "pt" : "a \"v\"\n\xf0\x9f\x98\x80");
    }
    return out + space() + "}";
  }
  std::string entry(uint64_t* offset) {
    static const char* const kDtypes[] = {"F32", "BF16", "F16", "F64", "F8_E4M3",
                                          "I64", "I32",  "U8",  "BOOL"};
    static const uint64_t kSizes[] = {4, 2, 2, 8, 1, 8, 4, 1, 1};
    const int d = pick(0, 8);
    std::vector<uint64_t> shape(static_cast<size_t>(pick(0, 3)));
    uint64_t numel = 1;
    for (auto& e : shape) {
      e = static_cast<uint64_t>(pick(0, 5));
      numel *= e;
    }
    const uint64_t begin = *offset + static_cast<uint64_t>(pick(0, 1));
    const uint64_t end = begin + numel * kSizes[d];
    *offset = end;
    std::vector<std::string> fields;
    fields.push_back("\"dtype\"" + space() + ":" + space() + quoted(kDtypes[d]));
    std::string sh = "[" + space();
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i) sh += space() + "," + space();
      sh += std::to_string(shape[i]);
    }
    fields.push_back("\"shape\"" + space() + ":" + space() + sh + space() + "]");
    fields.push_back("\"data_offsets\"" + space() + ":" + space() + "[" + space() +
                     std::to_string(begin) + space() + "," + space() + std::to_string(end) +
                     space() + "]");
    std::shuffle(fields.begin(), fields.end(), rng_);
    std::string out = "{" + space();
    for (size_t i = 0; i < fields.size(); ++i) {
      if (i) out += space() + "," + space();
      out += fields[i];
    }
    return out + space() + "}";
  }

  std::mt19937 rng_;
};

TEST(SafetensorsHeaderParsers, AgreeOnGeneratedHeaders) {
  HeaderGenerator gen(1234);
  Tally tally;
  for (int i = 0; i < 3000; ++i) {
    uint64_t data_len = 0;
    const std::string h = gen.make(&data_len);
    compare(h, data_len, &tally);
  }
  std::printf("  %d headers: fast parser accepted %d, JSON parser %d\n", tally.cases,
              tally.fast_accepted, tally.json_accepted);
  EXPECT_EQ(tally.fast_accepted, tally.json_accepted);  // all of them in the writers' grammar
  EXPECT_GT(tally.fast_accepted, 2000);
}

TEST(SafetensorsHeaderParsers, AgreeOnCorruptedHeaders) {
  HeaderGenerator gen(99);
  Tally tally;
  static const char kSubstitutes[] = {'"', '{', '}',  '[',    ']',    ',',    ':',
                                      '-', '0', '9',  '\\',   'u',    ' ',    'x',
                                      '.', 'e', '\0', '\x80', '\xff', '\xc3', '\n'};
  for (int i = 0; i < 16; ++i) {
    uint64_t data_len = 0;
    std::string h = gen.make(&data_len);
    while (h.size() > 300) h = gen.make(&data_len);
    for (size_t cut = 0; cut < h.size(); ++cut) compare(h.substr(0, cut), data_len, &tally);
    for (size_t at = 0; at < h.size(); ++at) {
      for (const char c : kSubstitutes) {
        if (h[at] == c) continue;
        std::string m = h;
        m[at] = c;
        compare(m, data_len, &tally);
      }
      std::string dropped = h;
      dropped.erase(at, 1);
      compare(dropped, data_len, &tally);
    }
  }
  std::printf("  %d corrupted headers: fast parser accepted %d, JSON parser %d\n", tally.cases,
              tally.fast_accepted, tally.json_accepted);
  EXPECT_GT(tally.fast_accepted, 0);
}

TEST(SafetensorsHeaderParsers, AgreeOnChosenCases) {
  const std::string ok = R"("dtype":"U8","shape":[2],"data_offsets":[0,2])";
  const std::vector<std::string> cases = {
      "{}",
      " \t\r\n{ } \n",
      "{" + std::string("\"a\":{") + ok + "}}",
      // Duplicates: tensor names (also through an escape), fields, metadata keys, __metadata__.
      R"({"a":{)" + ok + R"(},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
      R"({"a":{)" + ok + R"(},"\u0061":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
      R"({"a":{"dtype":"U8",)" + ok + "}}",
      R"({"a":{"shape":[2],)" + ok + "}}",
      R"({"__metadata__":{"k":"v","k":"w"}})",
      R"({"__metadata__":{},"__metadata__":{}})",
      R"({"__metadata\u005f_":{"k":"v"}})",
      // Extra fields (the JSON path accepts them), including nested and deep ones.
      R"({"a":{)" + ok + R"(,"x":1}})",
      R"({"a":{)" + ok + R"(,"x":{"y":[1,{"z":null}]}}})",
      R"({"a":{)" + ok + R"(,"x":)" + std::string(20, '[') + std::string(20, ']') + "}}",
      R"({"a":{)" + ok + R"(,"x":{"y":1,"y":2}}})",
      // Numbers.
      R"({"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}})",
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[-0,0]}})",
      R"({"a":{"dtype":"U8","shape":[02],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"U8","shape":[2e0],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[9223372036854775807,9223372036854775807]}})",
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[9223372036854775808,9223372036854775808]}})",
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551616,0]}})",
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[99999999999999999999999,0]}})",
      R"({"a":{"dtype":"U8","shape":[4294967296,0,4294967296],"data_offsets":[0,0]}})",
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0,0]}})",
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0]}})",
      R"({"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})",
      // Dtypes: unknown, unsupported, escaped, not a string; two bad entries in both orders.
      R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"\u00553\u0032","shape":[2],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"U\u0038","shape":[2],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":8,"shape":[2],"data_offsets":[0,2]}})",
      R"({"b":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"F33","shape":[2],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"F33","shape":[2],"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},"b":1})",
      // Strings: surrogates, control characters, bad escapes, raw bytes.
      R"({"\ud83d\ude00":{)" + ok + "}}",
      R"({"\ud83d":{)" + ok + "}}",
      R"({"\ude00":{)" + ok + "}}",
      R"({"\ud83d\u0041":{)" + ok + "}}",
      R"({"\u0000":{)" + ok + "}}",
      R"({"\x":{)" + ok + "}}",
      R"({"\u12":{)" + ok + "}}",
      "{\"a\tb\":{" + ok + "}}",
      "{\"a\x7f\":{" + ok + "}}",
      "{\"\xed\xa0\x80\":{" + ok + "}}",
      "{\"\xf4\x90\x80\x80\":{" + ok + "}}",
      "{\"\xc3\":{" + ok + "}}",
      "\xef\xbb\xbf{}",  // byte order mark
      std::string("{}\0", 3),
      // Structure.
      "{,}",
      R"({"a":{)" + ok + "},}",
      R"({"a":{)" + ok + ",}}",
      R"({"a":{)" + ok + "}} {}",
      R"({"a":{)" + ok + "}}x",
      "[]",
      R"({"a":[]})",
      R"({"a":null})",
      R"({"__metadata__":[]})",
      R"({"__metadata__":{"k":1}})",
      R"({"a":{"dtype":"U8","shape":2,"data_offsets":[0,2]}})",
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":"0,2"}})",
      R"({"a":{}})",
      // Overlap (the shared step after either parser).
      R"({"a":{)" + ok + R"(},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
  };
  Tally tally;
  for (const std::string& c : cases) compare(c, 4, &tally);
  std::printf("  %d chosen headers: fast parser accepted %d, JSON parser %d\n", tally.cases,
              tally.fast_accepted, tally.json_accepted);
}

// A header the size of a large checkpoint's, through the fast parser without falling back.
TEST(SafetensorsHeaderParsers, FastParserTakesALargeHeader) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  const int n = 5000;
  for (int i = 0; i < n; ++i) {
    h += ",\"blocks." + std::to_string(i) + ".weight\":{\"dtype\":\"BF16\",\"shape\":[3,5]," +
         "\"data_offsets\":[" + std::to_string(30 * i) + "," + std::to_string(30 * i + 30) + "]}";
  }
  h += "}";
  const auto* data = reinterpret_cast<const uint8_t*>(h.data());
  std::vector<TensorInfo> infos;
  std::map<std::string, std::string> metadata;
  ASSERT_TRUE(parse_header_fast(data, h.size(), 8 + h.size(), 30 * n, "big", &infos, &metadata));
  EXPECT_EQ(infos.size(), static_cast<size_t>(n));
  EXPECT_EQ(metadata.at("format"), "pt");
}

}  // namespace
}  // namespace h3::io
