// End-to-end T2VA parity against every golden `e2e` case whose meta says workflow t2va (golden
// README "End-to-end runs", "Pipeline facts" 1-9): the presentation and the random draws exactly,
// then a full generate_t2va run fed the golden prompt embeddings and draws, checked after every
// step and at every decoded output. Bounds from TOLERANCES.md: latents after every step rel_max <=
// 1e-5, frames float32 rel_max <= 1e-5 and uint8 within +-1, waveform max abs <= 5e-5.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "pipeline/generate.h"
#include "pipeline/torch_generator.h"
#include "support/golden.h"
#include "support/golden_checks.h"
#include "test_e2e_common.h"
#include "text/presentation.h"
#include "text/tokenizer.h"

namespace h3 {
namespace {

using test::e2e::draw_name;
using test::e2e::kFrameBound;
using test::e2e::kStepBound;
using test::e2e::kUint8Bound;
using test::e2e::kWaveBound;
using test::e2e::step_name;

// The t2va cases whose stored outputs can be compared (model and tensors present); the others are
// printed with the reason, and the test skips when none is left.
std::vector<test::GoldenCase> runnable(const std::vector<test::GoldenCase>& all, bool injected,
                                       std::string* skipped) {
  std::vector<test::GoldenCase> out;
  for (const test::GoldenCase& c : test::e2e::cases_of(all, "t2va")) {
    const auto f = c.open();
    std::string why;
    if (!test::golden_outputs_match_checkpoint(test::e2e::components_of(c), &why)) {
      why = "stored outputs do not apply to this checkpoint: " + why;
    } else if (const std::string missing = test::e2e::missing_for_run(c, *f, injected); !missing.empty()) {
      why = "lacks " + missing;
    }
    if (why.empty()) {
      out.push_back(c);
    } else {
      std::printf("%s: skipped (%s)\n", c.file.c_str(), why.c_str());
      *skipped += (skipped->empty() ? "" : "; ") + c.file + ": " + why;
    }
  }
  return out;
}

TEST(E2eT2vaGolden, PresentationAndDrawsAreExact) {
  H3_GOLDEN_CASES_OR_SKIP(all, "e2e");
  const std::vector<test::GoldenCase> cases = test::e2e::cases_of(all, "t2va");
  if (cases.empty()) GTEST_SKIP() << "no e2e case with workflow t2va";
  const text::Tokenizer tok =
      text::Tokenizer::from_file(all_golden->checkpoint_dir() + "/tokenizer");
  const text::PromptPresenter presenter(tok);
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    const nlohmann::json& meta = c.entry["meta"];
    // One generator, video noise then audio rows (fact 6), whatever the draws' indices.
    const std::string vname = draw_name(*f, "video_noise"), aname = draw_name(*f, "audio_noise_rows");
    if (!f->has("input_ids") || vname.empty() || aname.empty()) {
      std::printf("%s: skipped (lacks input_ids or a noise draw)\n", c.file.c_str());
      continue;
    }
    std::printf("%s: prompt '%s' seed %lld\n", c.file.c_str(),
                meta["prompt"].get<std::string>().c_str(),
                static_cast<long long>(meta["seed"].get<int64_t>()));
    const text::Presentation p =
        presenter.present(text::Workflow::kT2VA, meta["prompt"].get<std::string>(), {});
    const Tensor ids = Tensor::from_i64(p.input_ids, {static_cast<int64_t>(p.input_ids.size())});
    test::expect_equal(c.file + ":input_ids", ids, f->tensor("input_ids"));
    TorchGenerator gen(meta["seed"].get<uint64_t>());
    const Tensor vref = f->tensor(vname);
    const Tensor aref = f->tensor(aname);
    test::expect_bits_equal(c.file + ":" + vname, gen.randn(vref.shape()), vref);
    test::expect_bits_equal(c.file + ":" + aname, gen.randn(aref.shape()), aref);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no t2va case stores input_ids and its noise draws";
}

TEST(E2eT2vaGolden, EveryStepAndDecodedOutputs) {
  H3_GOLDEN_CASES_OR_SKIP(all, "e2e");
  if (test::e2e::cases_of(all, "t2va").empty()) GTEST_SKIP() << "no e2e case with workflow t2va";
  std::string skipped;
  const std::vector<test::GoldenCase> cases = runnable(all, /*injected=*/true, &skipped);
  if (cases.empty()) GTEST_SKIP() << "no t2va case could be compared: " << skipped;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    const nlohmann::json& meta = c.entry["meta"];
    pipeline::GenerateRequest req;
    req.prompt = meta["prompt"].get<std::string>();
    req.seed = meta["seed"].get<uint64_t>();
    req.height = meta["height"].get<int64_t>();
    req.width = meta["width"].get<int64_t>();
    req.num_frames = meta["num_frames"].get<int64_t>();
    req.num_inference_steps = meta["num_inference_steps"].get<int64_t>();
    req.allow_any_duration = true;  // the golden runs bypass the 5 s minimum

    pipeline::GenerateInjection inj;
    inj.prompt_embeds = f->tensor("prompt_embeds");
    inj.video_noise = f->tensor(draw_name(*f, "video_noise"));
    inj.audio_noise_rows = f->tensor(draw_name(*f, "audio_noise_rows"));
    pipeline::GenerateOptions opt;
    opt.inject = &inj;
    int64_t steps_seen = 0;
    opt.on_step = [&](int64_t i, const Tensor& video_rows, const Tensor& audio_rows,
                      const Tensor& noise_pred) {
      ++steps_seen;
      test::expect_close(c.file + ":" + step_name(i, "noise_pred"), noise_pred,
                         f->tensor(step_name(i, "noise_pred")), kStepBound, -1.0);
      test::expect_close(c.file + ":" + step_name(i, "video_rows_out"), video_rows,
                         f->tensor(step_name(i, "video_rows_out")), kStepBound, -1.0);
      test::expect_close(c.file + ":" + step_name(i, "audio_rows_out"), audio_rows,
                         f->tensor(step_name(i, "audio_rows_out")), kStepBound, -1.0);
    };
    Receipt receipt;
    const pipeline::GenerateResult r =
        pipeline::generate_t2va(test::Golden::get()->checkpoint_dir(), req, opt, &receipt);
    std::fputs(receipt.table().c_str(), stdout);
    EXPECT_EQ(steps_seen, meta["num_model_evaluations"].get<int64_t>());

    ASSERT_EQ(r.latents.shape(), f->tensor("latents_final").shape());
    test::expect_close(c.file + ":latents_final", r.latents, f->tensor("latents_final"), kStepBound,
                       -1.0);
    ASSERT_EQ(r.audio_latents.shape(), f->tensor("audio_latents_final").shape());
    test::expect_close(c.file + ":audio_latents_final", r.audio_latents,
                       f->tensor("audio_latents_final"), kStepBound, -1.0);
    if (f->has("frames_float")) {
      ASSERT_EQ(r.frames_float.shape(), f->tensor("frames_float").shape());
      test::expect_close(c.file + ":frames_float", r.frames_float, f->tensor("frames_float"),
                         kFrameBound, -1.0);
    }
    ASSERT_EQ(r.frames.shape(), f->tensor("frames_uint8").shape());
    test::expect_max_abs(c.file + ":frames_uint8", r.frames, f->tensor("frames_uint8"),
                         kUint8Bound);
    const Tensor audio_ref = f->tensor("audio");  // [1, 2, S]
    ASSERT_EQ(r.audio.numel(), audio_ref.numel());
    ASSERT_EQ(r.audio.size(-1), audio_ref.size(-1));
    test::expect_max_abs(c.file + ":audio", r.audio, audio_ref, kWaveBound);
  }
}

// The same run from the prompt alone: presentation, conditioner and the generator's own draws (no
// injection), so the whole pipeline is under test. The conditioner's float32 error (<= 1e-5) is
// carried through the steps; the bounds are the same.
TEST(E2eT2vaGolden, FullRunFromPrompt) {
  H3_GOLDEN_CASES_OR_SKIP(all, "e2e");
  if (test::e2e::cases_of(all, "t2va").empty()) GTEST_SKIP() << "no e2e case with workflow t2va";
  std::string skipped;
  const std::vector<test::GoldenCase> cases = runnable(all, /*injected=*/false, &skipped);
  if (cases.empty()) GTEST_SKIP() << "no t2va case could be compared: " << skipped;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    const nlohmann::json& meta = c.entry["meta"];
    pipeline::GenerateRequest req;
    req.prompt = meta["prompt"].get<std::string>();
    req.seed = meta["seed"].get<uint64_t>();
    req.height = meta["height"].get<int64_t>();
    req.width = meta["width"].get<int64_t>();
    req.num_frames = meta["num_frames"].get<int64_t>();
    req.num_inference_steps = meta["num_inference_steps"].get<int64_t>();
    req.allow_any_duration = true;
    pipeline::GenerateOptions opt;
    opt.on_step = [&](int64_t i, const Tensor& video_rows, const Tensor& audio_rows,
                      const Tensor&) {
      test::expect_close(c.file + ":" + step_name(i, "video_rows_out") + " (from prompt)",
                         video_rows, f->tensor(step_name(i, "video_rows_out")), kStepBound, -1.0);
      test::expect_close(c.file + ":" + step_name(i, "audio_rows_out") + " (from prompt)",
                         audio_rows, f->tensor(step_name(i, "audio_rows_out")), kStepBound, -1.0);
    };
    const pipeline::GenerateResult r =
        pipeline::generate_t2va(test::Golden::get()->checkpoint_dir(), req, opt);
    const Tensor ids = Tensor::from_i64(r.input_ids, {static_cast<int64_t>(r.input_ids.size())});
    test::expect_equal(c.file + ":input_ids (from prompt)", ids, f->tensor("input_ids"));
    test::expect_close(c.file + ":prompt_embeds (from prompt)", r.prompt_embeds,
                       f->tensor("prompt_embeds"), kStepBound, kStepBound);
    test::expect_close(c.file + ":latents_final (from prompt)", r.latents,
                       f->tensor("latents_final"), kStepBound, -1.0);
    test::expect_max_abs(c.file + ":frames_uint8 (from prompt)", r.frames,
                         f->tensor("frames_uint8"), kUint8Bound);
    test::expect_max_abs(c.file + ":audio (from prompt)", r.audio, f->tensor("audio"), kWaveBound);
  }
}

}  // namespace
}  // namespace h3
