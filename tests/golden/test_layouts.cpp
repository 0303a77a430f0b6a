// Packed-sequence layouts against the golden `layouts` cases (larger geometries, no model) and the
// layout tensors of every `e2e` run: positions (float64), tags, index tensors and condition row
// counts must be equal (TOLERANCES.md: exact), and so must the per-step unique timesteps and
// inverse indices. The e2e runs also pin the data movement: the first step's target rows are the
// patchified noise draws, and the final latents are the unpatchified last rows.
//
// Geometry comes from the data, never from a table here: the target from the case name
// (`<workflow>_<anchors>_<frames>f_<H>x<W>`) or the e2e meta, references from the `layouts` meta
// text or the e2e condition tensors.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/repo.h"
#include "pipeline/generate.h"
#include "pipeline/geometry.h"
#include "pipeline/packing.h"
#include "pipeline/scheduler.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

// "step07_": the e2e per-step tensor prefix.
std::string step_prefix(int64_t k) {
  return std::string("step") + (k < 10 ? "0" : "") + std::to_string(k) + "_";
}

using pipeline::KeyframeAnchor;
using pipeline::LatentGrid;
using pipeline::PackedLayout;
using pipeline::ReferenceKind;
using pipeline::ReferenceLayout;

int64_t scalar_i64(const io::SafetensorsFile& f, const std::string& name) {
  const std::vector<int64_t> v = f.tensor(name).to_i64_vector();
  H3_CHECK(v.size() == 1, ErrorCode::kInvalidFile, f.path(), ": ", name, " is not one value");
  return v[0];
}

std::vector<int64_t> i64_of(const io::SafetensorsFile& f, const std::string& name) {
  return f.tensor(name).to_i64_vector();
}

// Compares every layout tensor stored under `prefix` with ours; prints a one-line summary.
void expect_layout(const std::string& label, const io::SafetensorsFile& f,
                   const std::string& prefix, const PackedLayout& got) {
  const Tensor ref_pos = f.tensor(prefix + "position_ids");
  ASSERT_EQ(ref_pos.shape(), got.position_ids.shape()) << label << ": position_ids shape";
  test::expect_equal(label + " position_ids", got.position_ids, ref_pos);
  const test::Metrics m = test::compare(got.position_ids, ref_pos);
  test::expect_equal(label + " token_tags", got.token_tags, f.tensor(prefix + "token_tags"));
  test::expect_equal(label + " video_indices", got.video_indices,
                     f.tensor(prefix + "video_indices"));
  test::expect_equal(label + " audio_indices", got.audio_indices,
                     f.tensor(prefix + "audio_indices"));
  if (f.has(prefix + "text_indices")) {
    test::expect_equal(label + " text_indices", got.text_indices,
                       f.tensor(prefix + "text_indices"));
  }
  EXPECT_EQ(got.num_condition_video_rows, scalar_i64(f, prefix + "num_condition_video_rows"))
      << label;
  EXPECT_EQ(got.num_condition_audio_rows, scalar_i64(f, prefix + "num_condition_audio_rows"))
      << label;
  std::printf(
      "  %s: S=%lld (video %lld, audio %lld, text %lld; condition video %lld, audio %lld)"
      " positions max_abs=%.3g\n",
      label.c_str(), static_cast<long long>(got.sequence_length),
      static_cast<long long>(got.video_indices.numel()),
      static_cast<long long>(got.audio_indices.numel()), static_cast<long long>(got.num_text_rows),
      static_cast<long long>(got.num_condition_video_rows),
      static_cast<long long>(got.num_condition_audio_rows), m.max_abs);
}

// ---- `layouts` cases -------------------------------------------------------------------------

struct LayoutCaseSpec {
  std::string label;      // "L3"
  std::string workflow;   // t2va, fl2va, ref2va
  std::string qualifier;  // anchors for fl2va ("first_last"), reference list for ref2va
  int64_t frames = 0;
  int64_t height = 0;
  int64_t width = 0;
};

bool parse_case_name(const std::string& prefix, LayoutCaseSpec* spec) {
  static const std::regex re(
      R"(^(L[0-9A-Za-z]+)_(t2va|fl2va|ref2va)_?(.*?)_?([0-9]+)f_([0-9]+)x([0-9]+)$)");
  std::smatch m;
  if (!std::regex_match(prefix, m, re)) return false;
  spec->label = m[1];
  spec->workflow = m[2];
  spec->qualifier = m[3];
  spec->frames = std::stoll(m[4]);
  spec->height = std::stoll(m[5]);
  spec->width = std::stoll(m[6]);
  return true;
}

std::vector<KeyframeAnchor> anchors_of(const std::string& qualifier) {
  if (qualifier == "first") return {KeyframeAnchor::kFirst};
  if (qualifier == "last") return {KeyframeAnchor::kLast};
  if (qualifier == "first_last") return {KeyframeAnchor::kFirst, KeyframeAnchor::kLast};
  fail(ErrorCode::kInvalidFile, "unknown keyframe anchors '", qualifier, "'");
}

// Parses the reference list of the `layouts` meta, e.g.
// "ref2va [image 384x512, video+audio (17 latent frames 256x448, 93 audio latents), audio (120)]".
// Pixel sizes are height x width (as in the case names), latents are 1/16 of them.
std::vector<ReferenceLayout> parse_reference_list(const std::string& text) {
  const size_t open = text.find('[');
  const size_t close = text.rfind(']');
  H3_CHECK(open != std::string::npos && close != std::string::npos && close > open,
           ErrorCode::kInvalidFile, "layouts meta without a reference list: ", text);
  std::vector<std::string> items;
  int depth = 0;
  std::string cur;
  for (size_t i = open + 1; i < close; ++i) {
    const char ch = text[i];
    if (ch == '(') ++depth;
    if (ch == ')') --depth;
    if (ch == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  items.push_back(cur);
  static const std::regex image_re(R"(^\s*image\s+([0-9]+)x([0-9]+)\s*$)");
  static const std::regex audio_re(R"(^\s*audio\s*\(([0-9]+)\)\s*$)");
  static const std::regex video_re(
      R"(^\s*video(\+audio)?\s*\(([0-9]+) latent frames? ([0-9]+)x([0-9]+)(,\s*([0-9]+) audio latents)?\)\s*$)");
  std::vector<ReferenceLayout> refs;
  for (const std::string& item : items) {
    std::smatch m;
    ReferenceLayout r;
    if (std::regex_match(item, m, image_re)) {
      r.kind = ReferenceKind::kImage;
      r.grid = LatentGrid{1, std::stoll(m[1]) / pipeline::kVaeSpatialRatio,
                          std::stoll(m[2]) / pipeline::kVaeSpatialRatio};
    } else if (std::regex_match(item, m, audio_re)) {
      r.kind = ReferenceKind::kAudio;
      r.audio_latents = std::stoll(m[1]);
    } else if (std::regex_match(item, m, video_re)) {
      r.kind = ReferenceKind::kVideo;
      r.grid = LatentGrid{std::stoll(m[2]), std::stoll(m[3]) / pipeline::kVaeSpatialRatio,
                          std::stoll(m[4]) / pipeline::kVaeSpatialRatio};
      r.audio_latents = m[6].matched ? std::stoll(m[6]) : 0;
      H3_CHECK(m[1].matched == (r.audio_latents > 0), ErrorCode::kInvalidFile,
               "video reference soundtrack mismatch in '", item, "'");
    } else {
      fail(ErrorCode::kInvalidFile, "cannot read reference '", item, "' of: ", text);
    }
    refs.push_back(r);
  }
  return refs;
}

TEST(GoldenLayouts, PackedLayoutsAtLargerGeometries) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "layouts");
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    std::set<std::string> prefixes;
    for (const io::TensorInfo& t : f->tensors()) {
      const size_t dot = t.name.find('.');
      if (dot != std::string::npos) prefixes.insert(t.name.substr(0, dot));
    }
    const nlohmann::json meta = c.entry.value("meta", nlohmann::json::object());
    for (const std::string& prefix : prefixes) {
      LayoutCaseSpec spec;
      ASSERT_TRUE(parse_case_name(prefix, &spec)) << "unrecognized layout case name " << prefix;
      const std::string p = prefix + ".";
      const std::vector<int64_t> text_tags = i64_of(*f, p + "text_token_tags");
      // The target geometry through the request rules (frames already 17n+5; limits lifted, as
      // the 362-frame case is beyond 15 s).
      const pipeline::FrameCount fc = pipeline::resolve_num_frames(spec.frames, true);
      ASSERT_EQ(fc.frames, spec.frames) << prefix << ": frame count is not 17n+5";
      const pipeline::TargetGeometry g =
          pipeline::make_target_geometry({spec.height, spec.width}, fc.frames);
      const LatentGrid target{g.latent_frames, g.latent_height, g.latent_width};
      PackedLayout got;
      if (spec.workflow == "t2va") {
        got = pipeline::build_packed_sequence(text_tags, target, g.audio_latents);
      } else if (spec.workflow == "fl2va") {
        got = pipeline::build_packed_sequence(text_tags, target, g.audio_latents,
                                              anchors_of(spec.qualifier));
      } else {
        ASSERT_TRUE(meta.contains(spec.label) && meta[spec.label].is_string())
            << prefix << ": no reference list in the meta under " << spec.label;
        got = pipeline::build_ref2va_packed_sequence(
            text_tags, parse_reference_list(meta[spec.label].get<std::string>()), target,
            g.audio_latents);
      }
      expect_layout(prefix, *f, p, got);

      // build_row_timesteps(video t, audio t, condition max(t, 0.999), reference audio 1.0):
      // the plan name encodes t as digits after "0." (t025 -> 0.25, a060 -> 0.60).
      static const std::regex plan_re(R"(^plan_t([0-9])([0-9]+)_a([0-9])([0-9]+)\.unique$)");
      for (const io::TensorInfo& t : f->tensors()) {
        if (t.name.rfind(p, 0) != 0) continue;
        const std::string rest = t.name.substr(p.size());
        std::smatch m;
        if (!std::regex_match(rest, m, plan_re)) continue;
        const float tv = static_cast<float>(std::stod(m[1].str() + "." + m[2].str()));
        const float ta = static_cast<float>(std::stod(m[3].str() + "." + m[4].str()));
        const pipeline::RowTimesteps plan = pipeline::plan_step_timesteps(got, tv, ta);
        test::expect_equal(t.name, plan.unique, f->tensor(t.name));
        std::printf("  %s: %lld unique timesteps, equal\n", t.name.c_str(),
                    static_cast<long long>(plan.unique.numel()));
      }
      ++ran;
    }
  }
  std::printf("[layouts] %d layout case(s) checked\n", ran);
  EXPECT_GT(ran, 0);
}

// ---- `e2e` layouts ---------------------------------------------------------------------------

// Reference geometry of an e2e ref2va run, in request order: visual references take the next
// `condition_latents_<v>` shape, audio-bearing ones the next `audio_condition_rows_<a>` count.
std::vector<ReferenceLayout> e2e_references(const io::SafetensorsFile& f,
                                            const nlohmann::json& refs) {
  std::vector<ReferenceLayout> out;
  int visual = 0;
  int audio = 0;
  for (const nlohmann::json& r : refs) {
    const std::string kind = r.at("kind").get<std::string>();
    ReferenceLayout ref;
    if (kind == "image" || kind == "video") {
      ref.kind = kind == "image" ? ReferenceKind::kImage : ReferenceKind::kVideo;
      const Shape s = f.info("condition_latents_" + std::to_string(visual++)).shape;
      H3_CHECK(s.size() == 5, ErrorCode::kInvalidFile, f.path(), ": condition latent not 5-D");
      ref.grid = LatentGrid{s[2], s[3], s[4]};
    } else {
      ref.kind = ReferenceKind::kAudio;
    }
    if (kind == "audio" || (kind == "video" && r.contains("audio") && !r["audio"].is_null())) {
      const Shape s = f.info("audio_condition_rows_" + std::to_string(audio++)).shape;
      ref.audio_latents = s[0] / pipeline::kAudioChannels;
    }
    out.push_back(ref);
  }
  return out;
}

PackedLayout e2e_layout(const test::GoldenCase& c, const io::SafetensorsFile& f) {
  const nlohmann::json& meta = c.entry.at("meta");
  const std::string workflow = meta.at("workflow").get<std::string>();
  const pipeline::FrameCount fc =
      pipeline::resolve_num_frames(meta.at("num_frames").get<int64_t>(), true);
  // The checkpoint the case ran with sets the canvas multiple and the latent grid (its VAE's ratio).
  const pipeline::CanvasConfig cc =
      pipeline::repository_canvas_config(io::Repository::open(test::Golden::get()->checkpoint_dir()));
  const pipeline::Canvas canvas = pipeline::resolve_target_canvas(
      meta.at("height").get<int64_t>(), meta.at("width").get<int64_t>(), 16, 9, cc);
  const pipeline::TargetGeometry g = pipeline::make_target_geometry(canvas, fc.frames, cc.vae_spatial_ratio);
  const LatentGrid target{g.latent_frames, g.latent_height, g.latent_width};
  const std::vector<int64_t> text_tags = i64_of(f, "text_token_tags");
  if (workflow == "ref2va") {
    return pipeline::build_ref2va_packed_sequence(
        text_tags, e2e_references(f, meta.at("references")), target, g.audio_latents);
  }
  std::vector<KeyframeAnchor> anchors;
  if (workflow == "fl2va") {
    // One keyframe per condition draw; a lone keyframe is "last" only when only a last image
    // was given.
    int n = 0;
    while (f.has("condition_latents_" + std::to_string(n))) ++n;
    if (n == 2) anchors = {KeyframeAnchor::kFirst, KeyframeAnchor::kLast};
    if (n == 1) {
      const bool last_only = f.has("input_last_image") && !f.has("input_image");
      anchors = {last_only ? KeyframeAnchor::kLast : KeyframeAnchor::kFirst};
    }
  }
  return pipeline::build_packed_sequence(text_tags, target, g.audio_latents, anchors);
}

// The stored tensors an e2e layout needs: the presentation's tags, the layout itself, and for ref2va
// the condition shapes that give the references' grids ("" when all are there).
std::string missing_for_layout(const test::GoldenCase& c, const io::SafetensorsFile& f) {
  std::vector<std::string> need = {"text_token_tags", "position_ids", "token_tags", "video_indices",
                                   "audio_indices", "num_condition_video_rows", "num_condition_audio_rows"};
  const nlohmann::json& meta = c.entry.at("meta");
  if (meta.value("workflow", "") == "ref2va" && meta.contains("references") && meta["references"].is_array()) {
    int visual = 0, audio = 0;
    for (const nlohmann::json& r : meta["references"]) {
      const std::string kind = r.value("kind", "");
      if (kind == "image" || kind == "video") need.push_back("condition_latents_" + std::to_string(visual++));
      if (kind == "audio" || (kind == "video" && r.contains("audio") && !r["audio"].is_null()))
        need.push_back("audio_condition_rows_" + std::to_string(audio++));
    }
  }
  return test::missing_tensors(f, need);
}

TEST(GoldenLayouts, EndToEndLayoutsAndStepPlans) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    if (const std::string missing = missing_for_layout(c, *f); !missing.empty()) {
      std::printf("  %s: skipped (lacks %s)\n", c.file.c_str(), missing.c_str());
      continue;
    }
    const PackedLayout layout = e2e_layout(c, *f);
    expect_layout(c.file, *f, "", layout);
    ++ran;

    const int64_t points = c.entry.at("meta").at("num_inference_steps").get<int64_t>();
    const pipeline::DualSchedule sched = pipeline::make_dual_schedule(points);
    // Every stored step plan must be one of ours and equal; a folder may store fewer steps.
    int stored = 0;
    static const std::regex plan_re(R"(^step[0-9]+_unique_timesteps$)");
    for (const io::TensorInfo& t : f->tensors()) stored += std::regex_match(t.name, plan_re);
    int steps = 0;
    for (int64_t k = 0; k < sched.num_steps(); ++k) {
      const std::string prefix = step_prefix(k);
      if (!f->has(prefix + "unique_timesteps")) continue;
      const pipeline::RowTimesteps plan =
          pipeline::plan_step_timesteps(layout, sched.video.timesteps()[static_cast<size_t>(k)],
                                        sched.audio.timesteps()[static_cast<size_t>(k)]);
      test::expect_equal(prefix + "unique_timesteps", plan.unique,
                         f->tensor(prefix + "unique_timesteps"));
      if (f->has(prefix + "timestep_indices"))
        test::expect_equal(prefix + "timestep_indices", plan.indices,
                           f->tensor(prefix + "timestep_indices"));
      ++steps;
    }
    EXPECT_EQ(steps, stored) << c.file << ": stored step plans beyond the schedule's "
                             << sched.num_steps() << " steps";
    std::printf("  %s: %d of %d stored step plan(s) equal (unique timesteps + indices)\n",
                c.file.c_str(), steps, stored);
  }
  if (ran == 0) GTEST_SKIP() << "no e2e case stores its packed layout";
}

// The data movement of the step loop: step 0's target video rows are the patchified video noise
// draw, its target audio rows the audio noise draw, its condition rows the noise-augmented
// patchified condition latents; the final latents are the last step's target rows unpatchified /
// unpacked.
TEST(GoldenLayouts, EndToEndPatchifyAndAudioRows) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    const int64_t last_step = c.entry.at("meta").at("num_inference_steps").get<int64_t>() - 2;
    if (const std::string missing = test::missing_tensors(
            *f, {"num_condition_video_rows", "num_condition_audio_rows", "step00_video_rows_in",
                 "step00_audio_rows_in", step_prefix(last_step) + "video_rows_out",
                 step_prefix(last_step) + "audio_rows_out", "latents_final", "audio_latents_final"});
        !missing.empty()) {
      std::printf("  %s: skipped (lacks %s)\n", c.file.c_str(), missing.c_str());
      continue;
    }
    ++ran;
    const int64_t ncv = scalar_i64(*f, "num_condition_video_rows");
    const int64_t nca = scalar_i64(*f, "num_condition_audio_rows");
    std::string video_noise;
    std::string audio_noise;
    for (const io::TensorInfo& t : f->tensors()) {
      if (t.name.find("_video_noise") != std::string::npos) video_noise = t.name;
      if (t.name.find("_audio_noise_rows") != std::string::npos) audio_noise = t.name;
    }
    ASSERT_FALSE(video_noise.empty() || audio_noise.empty()) << c.file << ": noise draws missing";
    const Tensor v_in = f->tensor("step00_video_rows_in");
    const Tensor a_in = f->tensor("step00_audio_rows_in");
    const Tensor noise = f->tensor(video_noise);
    test::expect_equal("patchify(" + video_noise + ")", pipeline::patchify_video(noise),
                       v_in.slice(0, ncv, v_in.size(0)));
    test::expect_equal(audio_noise, f->tensor(audio_noise), a_in.slice(0, nca, a_in.size(0)));

    // Visual conditions: the frozen rows are scale_noise(0.999, patchify(condition_latents_k),
    // patchify(condition noise draw k)), concatenated in packed order, and are step 0's first rows.
    int64_t row = 0;
    for (int k = 0; f->has("condition_latents_" + std::to_string(k)); ++k) {
      const std::string ks = std::to_string(k);
      std::string draw;
      for (const io::TensorInfo& t : f->tensors()) {
        if (t.name.size() > ks.size() + 16 &&
            t.name.compare(t.name.size() - 16 - ks.size(), std::string::npos,
                           "condition_noise_" + ks) == 0) {
          draw = t.name;
        }
      }
      ASSERT_FALSE(draw.empty()) << c.file << ": no condition noise draw " << k;
      const Tensor rows =
          pipeline::scale_noise(pipeline::kConditionNoiseLevel,
                                pipeline::patchify_video(f->tensor("condition_latents_" + ks)),
                                pipeline::patchify_video(f->tensor(draw)));
      test::expect_equal("scale_noise(patchify(condition_latents_" + ks + "), " + draw + ")", rows,
                         v_in.slice(0, row, row + rows.size(0)));
      if (f->has("condition_rows")) {
        const Tensor ref = f->tensor("condition_rows");
        test::expect_equal("condition_rows " + ks, rows, ref.slice(0, row, row + rows.size(0)));
      }
      row += rows.size(0);
    }
    EXPECT_EQ(row, ncv) << c.file << ": condition rows";

    // Final latents from the last step's output rows.
    const int64_t last = last_step;
    const Tensor v_out = f->tensor(step_prefix(last) + "video_rows_out");
    const Tensor a_out = f->tensor(step_prefix(last) + "audio_rows_out");
    const Tensor latents = f->tensor("latents_final");
    const LatentGrid grid{latents.size(2), latents.size(3), latents.size(4)};
    const Tensor unpatched =
        pipeline::unpatchify_video(v_out.slice(0, ncv, v_out.size(0)), latents.size(1), grid);
    test::expect_equal("unpatchify -> latents_final", unpatched, latents);
    test::expect_equal("patchify(latents_final) round trip", pipeline::patchify_video(unpatched),
                       v_out.slice(0, ncv, v_out.size(0)));
    const Tensor audio_final = f->tensor("audio_latents_final");
    const Tensor unpacked =
        pipeline::unpack_audio_rows(a_out.slice(0, nca, a_out.size(0)), audio_final.size(2));
    test::expect_equal("unpack audio rows -> audio_latents_final", unpacked, audio_final);
    test::expect_equal("pack audio rows round trip", pipeline::pack_audio_rows(unpacked),
                       a_out.slice(0, nca, a_out.size(0)));
    std::printf("  %s: patchify/unpatchify and audio rows equal (%lld condition video rows)\n",
                c.file.c_str(), static_cast<long long>(ncv));
  }
  if (ran == 0) GTEST_SKIP() << "no e2e case stores its step rows and final latents";
}

}  // namespace
}  // namespace h3
