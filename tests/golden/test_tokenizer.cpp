// Golden parity of the tokenizer and the prompt presentation (components spec §1.3, golden README
// "Pipeline facts" 1). Everything here is an integer path, so every comparison is exact
// (TOLERANCES.md: token ids and modality tags must be equal).
//
// Cases come from manifest.json by kind: `tokenizer` (strings -> ids/tokens/decoded), `e2e`
// (input_ids, text_token_tags, mm_token_type_ids of full runs; prompt and references in the meta),
// `conditioner_text` (prompt in the meta) and `conditioner_presentation` (ids of a keyframe or
// reference presentation; its prompt and reference list are those of the e2e run of the same name).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "text/presentation.h"
#include "text/tokenizer.h"

namespace h3::text {
namespace {

using nlohmann::json;
using test::GoldenCase;

std::string tokenizer_dir(const test::Golden& golden) {
  return (std::filesystem::path(golden.checkpoint_dir()) / "tokenizer").string();
}

// The processor's merge size (processor_config.json, image_processor.merge_size), 2 when absent.
int64_t merge_size(const test::Golden& golden) {
  const auto path = std::filesystem::path(golden.checkpoint_dir()) / "processor" / "processor_config.json";
  std::ifstream in(path);
  if (!in) return 2;
  const json j = json::parse(in, nullptr, false);
  if (j.is_object() && j.contains("image_processor") && j["image_processor"].contains("merge_size")) {
    return j["image_processor"]["merge_size"].get<int64_t>();
  }
  return 2;
}

std::string stem(const std::string& file) { return std::filesystem::path(file).stem().string(); }

json case_meta(const GoldenCase& c) {
  if (c.entry.contains("meta") && c.entry["meta"].is_object()) return c.entry["meta"];
  return json::object();
}

std::vector<int64_t> i64(const io::SafetensorsFile& f, const std::string& name) {
  return f.tensor(name).to_i64_vector();
}

// First of `names` present in any of `files`, as int64 values; nullopt when none is.
std::optional<std::vector<int64_t>> find_i64(const std::vector<const io::SafetensorsFile*>& files,
                                             const std::vector<std::string>& names) {
  for (const auto* f : files) {
    for (const auto& n : names) {
      if (f->has(n)) return i64(*f, n);
    }
  }
  return std::nullopt;
}

VisionGrid grid_row(const std::vector<int64_t>& rows, size_t k, const std::string& what) {
  if (rows.size() < 3 * (k + 1)) {
    ADD_FAILURE() << what << " has " << rows.size() / 3 << " rows; row " << k << " is needed";
    return {};
  }
  return {rows[3 * k], rows[3 * k + 1], rows[3 * k + 2]};
}

struct Request {
  Workflow workflow = Workflow::kT2VA;
  std::string prompt;
  std::vector<PresentedMedia> media;
};

// Rebuilds the presentation inputs of a run from its meta (workflow, prompt, references) and the
// Qwen grids / block timestamps stored in `files` (searched in order).
std::optional<Request> request_of(const json& meta, const std::vector<const io::SafetensorsFile*>& files,
                                  const std::string& name) {
  Request r;
  if (!meta.contains("prompt") || !meta["prompt"].is_string()) {
    ADD_FAILURE() << name << ": meta has no prompt";
    return std::nullopt;
  }
  r.prompt = meta["prompt"].get<std::string>();
  const std::string workflow = meta.value("workflow", "t2va");
  const auto image_grids = find_i64(files, {"qwen_image_grid_thw", "image_grid_thw"});
  const auto video_grids = find_i64(files, {"qwen_video_grid_thw", "video_grid_thw"});
  if (workflow == "t2va") {
    r.workflow = Workflow::kT2VA;
  } else if (workflow == "fl2va") {
    r.workflow = Workflow::kFL2VA;
    if (!image_grids) {
      ADD_FAILURE() << name << ": fl2va run without a stored Qwen image grid";
      return std::nullopt;
    }
    for (size_t k = 0; k < image_grids->size() / 3; ++k) {
      r.media.push_back(PresentedMedia::image(grid_row(*image_grids, k, name + " image grid")));
    }
  } else if (workflow == "ref2va") {
    r.workflow = Workflow::kRef2VA;
    if (!meta.contains("references") || !meta["references"].is_array()) {
      ADD_FAILURE() << name << ": ref2va run without a reference list in its meta";
      return std::nullopt;
    }
    size_t image_k = 0, video_k = 0;
    const json& refs = meta["references"];
    for (size_t i = 0; i < refs.size(); ++i) {
      const std::string kind = refs[i].value("kind", "");
      if (kind == "image") {
        if (!image_grids) {
          ADD_FAILURE() << name << ": image reference without a stored Qwen image grid";
          return std::nullopt;
        }
        r.media.push_back(PresentedMedia::image(grid_row(*image_grids, image_k++, name + " image grid")));
      } else if (kind == "audio") {
        r.media.push_back(PresentedMedia::audio());
      } else if (kind == "video") {
        if (!video_grids) {
          ADD_FAILURE() << name << ": video reference without a stored Qwen video grid";
          return std::nullopt;
        }
        // Timestamps: the stored tensor named by the reference index, else the meta's list.
        std::vector<double> ts;
        bool found = false;
        for (const auto* f : files) {
          const std::string n = "qwen_video_" + std::to_string(i) + "_block_timestamps";
          if (!found && f->has(n)) {
            ts = f->tensor(n).to_f64_vector();
            found = true;
          }
        }
        if (!found && meta.contains("video_references")) {
          for (const auto& v : meta["video_references"]) {
            if (v.value("reference", -1) == static_cast<int>(i) && v.contains("timestamps")) {
              ts = v["timestamps"].get<std::vector<double>>();
              found = true;
            }
          }
        }
        if (!found) {
          ADD_FAILURE() << name << ": no block timestamps for video reference " << i;
          return std::nullopt;
        }
        const bool soundtrack = refs[i].contains("audio") && !refs[i]["audio"].is_null();
        r.media.push_back(PresentedMedia::video(grid_row(*video_grids, video_k++, name + " video grid"), ts, soundtrack));
      } else {
        ADD_FAILURE() << name << ": reference " << i << " has unknown kind \"" << kind << "\"";
        return std::nullopt;
      }
    }
  } else {
    ADD_FAILURE() << name << ": unknown workflow \"" << workflow << "\"";
    return std::nullopt;
  }
  return r;
}

// Compares one integer vector exactly, printing the first mismatch; returns true when equal.
bool expect_ids(const std::string& what, const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (got[i] != want[i] && mismatches++ == 0) first = i;
  }
  const bool ok = got.size() == want.size() && mismatches == 0;
  std::printf("  %-58s length %zu (golden %zu), mismatches %zu -> %s\n", what.c_str(), got.size(), want.size(),
              mismatches, ok ? "exact" : "DIFFERENT");
  EXPECT_EQ(got.size(), want.size()) << what;
  if (mismatches > 0) {
    ADD_FAILURE() << what << ": first mismatch at " << first << ": got " << got[first] << ", golden " << want[first];
  }
  return ok;
}

TEST(TokenizerGolden, EveryCaseExact) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "tokenizer");
  const Tokenizer tok = Tokenizer::from_file(tokenizer_dir(*cases_golden));
  int total = 0, exact_ids = 0, exact_tokens = 0, exact_decoded = 0;
  for (const GoldenCase& c : cases) {
    std::ifstream in(c.path);
    ASSERT_TRUE(in.good()) << "cannot open " << c.path;
    const json j = json::parse(in);
    if (j.contains("special_token_ids")) {
      int specials = 0;
      for (const auto& [content, id] : j["special_token_ids"].items()) {
        EXPECT_EQ(tok.token_to_id(content), std::optional<int32_t>(id.get<int32_t>())) << content;
        ++specials;
      }
      std::printf("  %d special token ids checked\n", specials);
    }
    ASSERT_TRUE(j.contains("cases") && j["cases"].is_array()) << c.path << " has no \"cases\" array";
    for (const auto& k : j["cases"]) {
      ++total;
      const std::string text = k["text"].get<std::string>();
      const auto want = k["ids"].get<std::vector<int32_t>>();
      const auto got = tok.encode(text);
      const bool ids_ok = got == want;
      exact_ids += ids_ok;
      EXPECT_TRUE(ids_ok) << "ids differ for " << json(text).dump();
      if (k.contains("ids_add_special_tokens_default")) {
        // The Qwen tokenizer adds nothing even with add_special_tokens=True.
        EXPECT_EQ(got, k["ids_add_special_tokens_default"].get<std::vector<int32_t>>()) << json(text).dump();
      }
      if (k.contains("tokens")) {
        std::vector<std::string> tokens;
        for (const int32_t id : want) tokens.push_back(tok.id_to_token(id));
        const bool ok = tokens == k["tokens"].get<std::vector<std::string>>();
        exact_tokens += ok;
        EXPECT_TRUE(ok) << "token strings differ for " << json(text).dump();
      }
      if (k.contains("decoded")) {
        const bool ok = tok.decode(want) == k["decoded"].get<std::string>();
        exact_decoded += ok;
        EXPECT_TRUE(ok) << "decode differs for " << json(text).dump() << ": " << json(tok.decode(want)).dump();
      }
    }
  }
  std::printf("[tokenizer] ids exact %d/%d, token strings exact %d/%d, decoded exact %d/%d (bound: all equal)\n",
              exact_ids, total, exact_tokens, total, exact_decoded, total);
  EXPECT_GT(total, 0);
}

TEST(PresentationGolden, EndToEndRunsExact) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  const PromptPresenter presenter(Tokenizer::from_file(tokenizer_dir(*cases_golden)), merge_size(*cases_golden));
  int exact = 0, compared = 0;
  for (const GoldenCase& c : cases) {
    const auto file = c.open();
    const std::string name = stem(c.file);
    if (!file->has("input_ids")) {
      std::printf("  %s: skipped (no input_ids stored)\n", name.c_str());
      continue;
    }
    const auto req = request_of(case_meta(c), {file.get()}, name);
    if (!req) continue;
    ++compared;
    const Presentation p = presenter.present(req->workflow, req->prompt, req->media);
    bool ok = expect_ids(name + " input_ids", p.input_ids, i64(*file, "input_ids"));
    if (file->has("text_token_tags"))
      ok &= expect_ids(name + " text_token_tags", p.text_token_tags, i64(*file, "text_token_tags"));
    if (file->has("mm_token_type_ids"))
      ok &= expect_ids(name + " mm_token_type_ids", p.mm_token_type_ids, i64(*file, "mm_token_type_ids"));
    const json meta = case_meta(c);
    if (meta.contains("text_tokens")) {
      EXPECT_EQ(static_cast<int64_t>(p.size()), meta["text_tokens"].get<int64_t>()) << name << " meta text_tokens";
    }
    exact += ok;
  }
  std::printf("[e2e presentation] %d/%d runs exact (%zu in the manifest)\n", exact, compared, cases.size());
  if (compared == 0) GTEST_SKIP() << "no e2e case stores input_ids";
}

TEST(PresentationGolden, ConditionerTextExact) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_text");
  const PromptPresenter presenter(Tokenizer::from_file(tokenizer_dir(*cases_golden)), merge_size(*cases_golden));
  int exact = 0;
  for (const GoldenCase& c : cases) {
    const auto file = c.open();
    const std::string name = stem(c.file);
    const json meta = case_meta(c);
    ASSERT_TRUE(meta.contains("prompt") && meta["prompt"].is_string()) << name << ": meta has no prompt";
    const Presentation p = presenter.present(Workflow::kT2VA, meta["prompt"].get<std::string>(), {});
    bool ok = expect_ids(name + " input_ids", p.input_ids, i64(*file, "input_ids"));
    if (file->has("mm_token_type_ids"))
      ok &= expect_ids(name + " mm_token_type_ids", p.mm_token_type_ids, i64(*file, "mm_token_type_ids"));
    exact += ok;
  }
  std::printf("[conditioner_text presentation] %d/%zu prompts exact\n", exact, cases.size());
}

TEST(PresentationGolden, ConditionerPresentationExact) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_presentation");
  const test::Golden& golden = *cases_golden;
  const PromptPresenter presenter(Tokenizer::from_file(tokenizer_dir(golden)), merge_size(golden));
  // These files hold no prompt: "conditioner_presentation_<run>" presents the e2e run <run>.
  std::map<std::string, GoldenCase> runs;
  for (const GoldenCase& e : golden.cases("e2e")) runs.emplace(stem(e.file), e);
  const std::string prefix = "conditioner_presentation_";
  int exact = 0, linked = 0;
  for (const GoldenCase& c : cases) {
    const std::string name = stem(c.file);
    const std::string run = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
    auto it = runs.find(run);
    if (it == runs.end()) {
      std::printf("  %s: no e2e run named %s holds its prompt; not compared\n", name.c_str(), run.c_str());
      continue;
    }
    ++linked;
    const auto file = c.open();
    const auto run_file = it->second.open();
    // Grids from the presentation file itself first, then from the run.
    const auto req = request_of(case_meta(it->second), {file.get(), run_file.get()}, name);
    if (!req) continue;
    const Presentation p = presenter.present(req->workflow, req->prompt, req->media);
    bool ok = expect_ids(name + " input_ids", p.input_ids, i64(*file, "input_ids"));
    if (file->has("mm_token_type_ids"))
      ok &= expect_ids(name + " mm_token_type_ids", p.mm_token_type_ids, i64(*file, "mm_token_type_ids"));
    if (file->has("text_token_tags")) {
      ok &= expect_ids(name + " text_token_tags", p.text_token_tags, i64(*file, "text_token_tags"));
    }
    exact += ok;
  }
  std::printf("[conditioner_presentation] %d/%d linked cases exact (%zu in the manifest)\n", exact, linked,
              cases.size());
  if (linked == 0) GTEST_SKIP() << "no conditioner_presentation case has an e2e run with its prompt";
}

}  // namespace
}  // namespace h3::text
