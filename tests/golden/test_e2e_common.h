// Shared pieces of the end-to-end golden tests (golden README "End-to-end runs", "Reference
// media"): a GenerateRequest rebuilt from a run's meta and stored input media, the injection of its
// stored draws and prompt embeddings, and the per-step and final checks against TOLERANCES.md
// (latents after every step rel_max <= 1e-5, frames float32 rel_max <= 1e-5 and uint8 within +-1,
// waveform max abs <= 5e-5).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "io/repo.h"
#include "io/safetensors.h"
#include "media/image_io.h"
#include "pipeline/engine.h"
#include "pipeline/generate.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3::test::e2e {

inline constexpr double kStepBound = 1e-5;         // latents after every step, rel_max
inline constexpr double kFrameBound = 1e-5;        // frames float32, rel_max
inline constexpr double kUint8Bound = 1.0;         // frames uint8, abs
inline constexpr double kWaveBound = 5e-5;         // waveform, max abs
inline constexpr double kVaeBound = 1e-5;          // video VAE encode, rel_max
inline constexpr double kAudioEncodeBound = 1e-4;  // audio VAE encode, rel_max

inline std::vector<GoldenCase> cases_of(const std::vector<GoldenCase>& all,
                                        const std::string& workflow) {
  std::vector<GoldenCase> out;
  for (const GoldenCase& c : all)
    if (c.entry.contains("meta") && c.entry["meta"].value("workflow", "") == workflow)
      out.push_back(c);
  return out;
}

inline std::string step_name(int64_t i, const char* what) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "step%02lld_%s", static_cast<long long>(i), what);
  return buf;
}

// The stored tensor whose name ends in `suffix` after a "draw<k>_" prefix ("" when none).
inline std::string draw_name(const io::SafetensorsFile& f, const std::string& suffix) {
  for (const io::TensorInfo& t : f.tensors()) {
    const std::string& n = t.name;
    if (n.rfind("draw", 0) == 0) {
      const size_t us = n.find('_');
      if (us != std::string::npos && n.substr(us + 1) == suffix) return n;
    }
  }
  return "";
}

inline std::vector<int64_t> i64_vector(const Tensor& t) { return t.contiguous().to_i64_vector(); }

inline pipeline::AudioClip audio_clip(const io::SafetensorsFile& f, const std::string& prefix) {
  pipeline::AudioClip a;
  a.waveform = f.tensor(prefix + "_audio");
  // A clip stored without its rate is at the audio VAE's 32 kHz.
  a.sample_rate =
      f.has(prefix + "_sample_rate") ? f.tensor(prefix + "_sample_rate").to_i64_vector()[0] : 32000;
  return a;
}

// The request of a run, from its meta and stored inputs (media in request order).
inline pipeline::GenerateRequest request_of(const GoldenCase& c, const io::SafetensorsFile& f) {
  const nlohmann::json& meta = c.entry["meta"];
  pipeline::GenerateRequest req;
  req.workflow = meta["workflow"].get<std::string>();
  req.prompt = meta["prompt"].get<std::string>();
  req.seed = meta["seed"].get<uint64_t>();
  req.height = meta["height"].get<int64_t>();
  req.width = meta["width"].get<int64_t>();
  req.num_frames = meta["num_frames"].get<int64_t>();
  req.num_inference_steps = meta["num_inference_steps"].get<int64_t>();
  req.allow_any_duration = true;  // the golden runs bypass the 5 s minimum
  if (f.has("input_image")) req.first_image = media::image_from_tensor(f.tensor("input_image"));
  if (f.has("input_last_image"))
    req.last_image = media::image_from_tensor(f.tensor("input_last_image"));
  if (meta.contains("references") && meta["references"].is_array()) {
    int k = 0;
    for (const nlohmann::json& r : meta["references"]) {
      const std::string p = "input_reference_" + std::to_string(k++);
      const std::string kind = r.at("kind").get<std::string>();
      if (kind == "image") {
        req.references.push_back(
            pipeline::Reference::from_image(media::image_from_tensor(f.tensor(p + "_image"))));
      } else if (kind == "video") {
        pipeline::VideoClip v;
        v.frames = media::frames_from_tensor(f.tensor(p + "_video"));
        v.fps = f.has(p + "_fps") ? f.tensor(p + "_fps").item_as_double({0}) : 24.0;
        if (f.has(p + "_audio")) v.soundtrack = audio_clip(f, p);
        req.references.push_back(pipeline::Reference::from_video(std::move(v)));
      } else {
        req.references.push_back(pipeline::Reference::from_audio(audio_clip(f, p)));
      }
    }
  }
  return req;
}

// The stored prompt embeddings, ids, tags and every draw.
inline pipeline::GenerateInjection injection_of(const io::SafetensorsFile& f) {
  pipeline::GenerateInjection inj;
  inj.prompt_embeds = f.tensor("prompt_embeds");
  inj.input_ids = i64_vector(f.tensor("input_ids"));
  inj.text_tags = i64_vector(f.tensor("text_token_tags"));
  for (int k = 0;; ++k) {
    const std::string n = draw_name(f, "condition_noise_" + std::to_string(k));
    if (n.empty()) break;
    inj.condition_noise.push_back(f.tensor(n));
  }
  for (int k = 0; f.has("condition_latents_" + std::to_string(k)); ++k)
    inj.condition_latents.push_back(f.tensor("condition_latents_" + std::to_string(k)));
  for (int k = 0; f.has("audio_condition_rows_" + std::to_string(k)); ++k)
    inj.audio_condition_rows.push_back(f.tensor("audio_condition_rows_" + std::to_string(k)));
  inj.video_noise = f.tensor(draw_name(f, "video_noise"));
  inj.audio_noise_rows = f.tensor(draw_name(f, "audio_noise_rows"));
  return inj;
}

// The clean condition latents of a run from media against the stored ones. The reference rounds
// each posterior sample to float16 before normalizing it (pipeline fact 6), so a float32 encode
// difference within the VAE bound can move a sample across a float16 rounding boundary: that
// element then differs by one float16 step of the sample divided by the channel's latents_std.
// Every element must be within the VAE bound or exactly such a step (from the stored latent, the
// VAE config's latents_mean/std); the steps are counted and reported, at most 1 % of the elements.
inline void check_condition_latents(const std::string& file, const io::SafetensorsFile& f,
                                    const pipeline::GenerateResult& r) {
  const nlohmann::json vae =
      io::read_json_file(Golden::get()->checkpoint_dir() + "/vae/config.json");
  const std::vector<double> mean = vae.at("latents_mean").get<std::vector<double>>();
  const std::vector<double> stdv = vae.at("latents_std").get<std::vector<double>>();
  for (size_t k = 0; k < r.condition_latents.size(); ++k) {
    const std::string name = "condition_latents_" + std::to_string(k);
    if (!f.has(name)) continue;
    const Tensor ref = f.tensor(name);
    const Tensor got = r.condition_latents[k];
    EXPECT_EQ(got.shape(), ref.shape()) << file << ":" << name;
    if (got.shape() != ref.shape() || ref.dim() != 5) continue;
    const Metrics m = compare(got, ref);
    const std::vector<float> a = got.contiguous().to_f32_vector();
    const std::vector<float> b = ref.contiguous().to_f32_vector();
    const int64_t per_channel = ref.size(2) * ref.size(3) * ref.size(4);
    double ref_max = 0;
    for (float v : b) ref_max = std::max(ref_max, std::fabs(static_cast<double>(v)));
    int64_t steps = 0, beyond = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
      if (d <= kVaeBound * ref_max) continue;
      const size_t ch = static_cast<size_t>((static_cast<int64_t>(i) / per_channel) %
                                            static_cast<int64_t>(stdv.size()));
      const double sample = static_cast<double>(b[i]) * stdv[ch] + mean[ch];
      // One float16 step at this magnitude (normal range: 2^(e-10)), normalized.
      int e = 0;
      std::frexp(std::max(std::fabs(sample), std::ldexp(1.0, -14)), &e);
      const double step = std::ldexp(1.0, e - 1 - 10) / stdv[ch];
      if (std::fabs(d - step) <= 0.01 * step)
        ++steps;
      else
        ++beyond;
    }
    std::printf(
        "[golden] %s:%s (from media): %s; %lld element(s) one float16 step apart, %lld "
        "other (expected 0) of %zu\n",
        file.c_str(), name.c_str(), format_metrics(m).c_str(), static_cast<long long>(steps),
        static_cast<long long>(beyond), a.size());
    EXPECT_EQ(beyond, 0) << file << ":" << name;
    EXPECT_LE(static_cast<double>(steps), 0.01 * static_cast<double>(a.size()))
        << file << ":" << name << ": too many float16 rounding flips";
  }
}

// The checkpoint components a run's stored outputs depend on: its DiT partitions (meta
// `transformer_used`, else the workflow's), the conditioner and both VAEs.
inline std::vector<std::string> components_of(const GoldenCase& c) {
  const nlohmann::json& meta = c.entry["meta"];
  std::vector<std::string> out;
  if (meta.contains("transformer_used") && meta["transformer_used"].is_array()) {
    for (const auto& t : meta["transformer_used"]) out.push_back(t.get<std::string>());
  } else {
    out.push_back(meta.value("workflow", "") == "ref2va" ? "transformer_ref" : "transformer");
  }
  for (const char* comp : {"text_encoder", "vae", "audio_vae"}) out.emplace_back(comp);
  return out;
}

// The tensors run_and_check reads unconditionally ("" for a run that stores them all). A run
// stored without its per-step or final outputs cannot be compared and is skipped visibly.
inline std::string missing_for_run(const GoldenCase& c, const io::SafetensorsFile& f, bool injected) {
  std::vector<std::string> need = {"input_ids", "num_condition_video_rows", "num_condition_audio_rows",
                                   "latents_final", "audio_latents_final", "frames_uint8", "audio",
                                   "step00_video_rows_in", "step00_audio_rows_in"};
  if (injected) {
    for (const char* n : {"prompt_embeds", "text_token_tags"}) need.emplace_back(n);
  } else {
    need.emplace_back("prompt_embeds");
  }
  const int64_t evals = c.entry["meta"].value("num_model_evaluations", int64_t{0});
  for (int64_t i = 0; i < evals; ++i) {
    need.push_back(step_name(i, "video_rows_out"));
    need.push_back(step_name(i, "audio_rows_out"));
    if (injected) need.push_back(step_name(i, "noise_pred"));
  }
  std::string missing = missing_tensors(f, need);
  if (injected) {
    for (const char* draw : {"video_noise", "audio_noise_rows"}) {
      if (!draw_name(f, draw).empty()) continue;
      missing += std::string(missing.empty() ? "" : ", ") + "draw<k>_" + draw;
    }
  }
  return missing;
}

// Runs the request on a fresh CPU engine over the golden checkpoint and checks every step and
// every output of the run. `from_media`: nothing injected (the label says so in the output).
inline pipeline::GenerateResult run_and_check(const GoldenCase& c, const io::SafetensorsFile& f,
                                              const pipeline::GenerateInjection* inj) {
  const std::string tag = inj ? "" : " (from media)";
  const pipeline::GenerateRequest req = request_of(c, f);
  const int64_t ncv = f.tensor("num_condition_video_rows").to_i64_vector()[0];
  const int64_t nca = f.tensor("num_condition_audio_rows").to_i64_vector()[0];
  pipeline::GenerateOptions opt;
  opt.inject = inj;
  int64_t steps_seen = 0;
  opt.on_step = [&](int64_t i, const Tensor& video_rows, const Tensor& audio_rows,
                    const Tensor& noise_pred) {
    ++steps_seen;
    const Tensor vref = f.tensor(step_name(i, "video_rows_out"));
    const Tensor aref = f.tensor(step_name(i, "audio_rows_out"));
    if (inj) {
      // Everything the reference computed is injected: every row of every step.
      expect_close(c.file + ":" + step_name(i, "noise_pred"), noise_pred,
                   f.tensor(step_name(i, "noise_pred")), kStepBound, -1.0);
      expect_close(c.file + ":" + step_name(i, "video_rows_out"), video_rows, vref, kStepBound,
                   -1.0);
      expect_close(c.file + ":" + step_name(i, "audio_rows_out"), audio_rows, aref, kStepBound,
                   -1.0);
      return;
    }
    // From media the held condition rows carry the encoders' own differences (checked once
    // below with their bounds); the generated rows are held to the step bound.
    expect_close(c.file + ":" + step_name(i, "video_rows_out") + " generated rows" + tag,
                 video_rows.slice(0, ncv, video_rows.size(0)), vref.slice(0, ncv, vref.size(0)),
                 kStepBound, -1.0);
    expect_close(c.file + ":" + step_name(i, "audio_rows_out") + " generated rows" + tag,
                 audio_rows.slice(0, nca, audio_rows.size(0)), aref.slice(0, nca, aref.size(0)),
                 kStepBound, -1.0);
  };
  pipeline::EngineOptions eo;
  pipeline::Engine engine(Golden::get()->checkpoint_dir(), eo);
  Receipt receipt;
  const pipeline::GenerateResult r = pipeline::generate(engine, req, opt, &receipt);
  std::fputs(receipt.table().c_str(), stdout);
  EXPECT_EQ(r.workflow, c.entry["meta"]["workflow"].get<std::string>());
  EXPECT_EQ(steps_seen, c.entry["meta"]["num_model_evaluations"].get<int64_t>());

  const Tensor ids = Tensor::from_i64(r.input_ids, {static_cast<int64_t>(r.input_ids.size())});
  expect_equal(c.file + ":input_ids" + tag, ids,
               f.tensor("input_ids").reshape({f.tensor("input_ids").numel()}));
  if (!inj) {
    expect_close(c.file + ":prompt_embeds" + tag, r.prompt_embeds, f.tensor("prompt_embeds"),
                 kStepBound, kStepBound);
  }
  // The held condition rows are the first rows of every step's input.
  if (ncv > 0) {
    EXPECT_TRUE(r.condition_rows.defined() && r.condition_rows.size(0) == ncv) << c.file;
    if (inj && r.condition_rows.defined())
      expect_close(c.file + ":condition rows (step00_video_rows_in)", r.condition_rows,
                   f.tensor("step00_video_rows_in").slice(0, 0, ncv), kStepBound, -1.0);
    if (!inj) check_condition_latents(c.file, f, r);
  }
  if (nca > 0) {
    EXPECT_TRUE(r.audio_condition_rows.defined() && r.audio_condition_rows.size(0) == nca)
        << c.file;
    // From media these are the audio VAE's encode: its bound (TOLERANCES.md, rel_max 1e-4).
    if (r.audio_condition_rows.defined())
      expect_close(c.file + ":reference audio rows (step00_audio_rows_in)" + tag,
                   r.audio_condition_rows, f.tensor("step00_audio_rows_in").slice(0, 0, nca),
                   inj ? kStepBound : kAudioEncodeBound, -1.0);
  }
  EXPECT_EQ(r.latents.shape(), f.tensor("latents_final").shape()) << c.file;
  if (r.latents.shape() == f.tensor("latents_final").shape())
    expect_close(c.file + ":latents_final" + tag, r.latents, f.tensor("latents_final"), kStepBound,
                 -1.0);
  EXPECT_EQ(r.audio_latents.shape(), f.tensor("audio_latents_final").shape()) << c.file;
  if (r.audio_latents.shape() == f.tensor("audio_latents_final").shape())
    expect_close(c.file + ":audio_latents_final" + tag, r.audio_latents,
                 f.tensor("audio_latents_final"), kStepBound, -1.0);
  if (f.has("frames_float") && r.frames_float.shape() == f.tensor("frames_float").shape())
    expect_close(c.file + ":frames_float" + tag, r.frames_float, f.tensor("frames_float"),
                 kFrameBound, -1.0);
  EXPECT_EQ(r.frames.shape(), f.tensor("frames_uint8").shape()) << c.file;
  if (r.frames.shape() == f.tensor("frames_uint8").shape())
    expect_max_abs(c.file + ":frames_uint8" + tag, r.frames, f.tensor("frames_uint8"), kUint8Bound);
  const Tensor audio_ref = f.tensor("audio");  // [1, 2, S]
  EXPECT_EQ(r.audio.numel(), audio_ref.numel()) << c.file;
  if (r.audio.numel() == audio_ref.numel())
    expect_max_abs(c.file + ":audio" + tag, r.audio, audio_ref, kWaveBound);
  return r;
}

// Both variants for every case of `workflow`: the stored embeddings and draws injected (each DiT
// call checked), then the whole run from the stored media alone.
// A case is skipped (with the reason printed) when its stored outputs come from another checkpoint
// (golden_checks.h) or it lacks tensors the comparison needs; the test skips when no case ran.
inline void check_workflow(const std::vector<GoldenCase>& all, const std::string& workflow,
                           bool from_media) {
  const std::vector<GoldenCase> cases = cases_of(all, workflow);
  if (cases.empty()) GTEST_SKIP() << "no e2e case with workflow " << workflow;
  int ran = 0;
  std::string skipped;
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    std::string why;
    if (!golden_outputs_match_checkpoint(components_of(c), &why)) {
      why = "stored outputs do not apply to this checkpoint: " + why;
    } else if (const std::string missing = missing_for_run(c, *f, !from_media); !missing.empty()) {
      why = "lacks " + missing;
    }
    if (!why.empty()) {
      std::printf("%s: skipped (%s)\n", c.file.c_str(), why.c_str());
      skipped += (skipped.empty() ? "" : "; ") + c.file + ": " + why;
      continue;
    }
    std::printf("%s: %s, seed %lld%s\n", c.file.c_str(), workflow.c_str(),
                static_cast<long long>(c.entry["meta"]["seed"].get<int64_t>()),
                from_media ? ", from media" : ", stored draws");
    if (from_media) {
      run_and_check(c, *f, nullptr);
    } else {
      const pipeline::GenerateInjection inj = injection_of(*f);
      run_and_check(c, *f, &inj);
    }
    ++ran;
  }
  std::printf("[golden] %s %s: %d of %zu case(s) run\n", workflow.c_str(),
              from_media ? "from media" : "stored draws", ran, cases.size());
  if (ran == 0) GTEST_SKIP() << "no " << workflow << " case could be compared: " << skipped;
}

}  // namespace h3::test::e2e
