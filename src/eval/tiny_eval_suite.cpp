#include "eval/tiny_eval_suite.h"

#include <chrono>

#include "core/status.h"
#include "pipeline/engine.h"

namespace h3::eval {

std::string_view split_name(TinySplit s) {
  return s == TinySplit::kTraining ? "training" : "held-out";
}

std::vector<TinyEvalCase> tiny_eval_cases(int64_t count, uint64_t first_seed, TinySplit split) {
  H3_CHECK(count >= 1, ErrorCode::kInvalidArgument,
           "tiny eval: the number of cases must be at "
           "least 1, got ",
           count);
  const std::vector<ClipAttributes> triples =
      split == TinySplit::kTraining ? training_attributes() : held_out_attributes();
  std::vector<TinyEvalCase> out;
  for (int64_t k = 0; k < count; ++k) {
    TinyEvalCase c;
    c.index = k;
    c.attributes = triples[static_cast<size_t>(k) % triples.size()];
    c.prompt = tiny_prompt(c.attributes.colour, c.attributes.shape, c.attributes.motion);
    c.seed = first_seed + static_cast<uint64_t>(k);
    out.push_back(c);
  }
  return out;
}

pipeline::GenerateRequest tiny_eval_request(const TinyEvalCase& c,
                                            const pipeline::GenerateRequest& base) {
  pipeline::GenerateRequest r = base;
  r.workflow = "t2va";
  r.prompt = c.prompt;
  r.seed = c.seed;
  r.height = kTinyHeight;
  r.width = kTinyWidth;
  r.num_frames = kTinyFrames;
  r.allow_any_duration = true;
  r.first_image.reset();
  r.last_image.reset();
  r.references.clear();
  return r;
}

TinyEvalResult judge_tiny_clip(const TinyEvalCase& c, const Tensor& frames, const Tensor& audio,
                               int64_t sample_rate) {
  H3_CHECK(frames.defined() && frames.shape() == Shape({kTinyFrames, kTinyHeight, kTinyWidth, 3}),
           ErrorCode::kInvalidArgument, "tiny eval: the clip must have ", kTinyFrames,
           " frames of ", kTinyHeight, " x ", kTinyWidth,
           " pixels (tools/train_tiny/SPEC.md), got ",
           frames.defined() ? frames.desc() : std::string("none"));
  H3_CHECK(sample_rate == kTinySampleRate, ErrorCode::kInvalidArgument,
           "tiny eval: the audio must be at ", kTinySampleRate, " Hz, got ", sample_rate);
  TinyEvalResult r;
  r.c = c;
  r.estimate = estimate_attributes(frames, audio, sample_rate);
  const ClipAttributes& want = c.attributes;
  r.colour = r.estimate.colour && r.estimate.colour->colour == want.colour;
  r.shape = r.estimate.shape && r.estimate.shape->shape == want.shape;
  r.motion = r.estimate.motion && r.estimate.motion->motion == want.motion;
  r.pitch = r.estimate.pitch.colour == want.colour;
  return r;
}

TinyEvalReport summarize(std::vector<TinyEvalResult> results) {
  TinyEvalReport rep;
  rep.results = std::move(results);
  if (rep.results.empty()) return rep;
  for (const TinyEvalResult& r : rep.results) {
    rep.colour += r.colour ? 1 : 0;
    rep.shape += r.shape ? 1 : 0;
    rep.motion += r.motion ? 1 : 0;
    rep.pitch += r.pitch ? 1 : 0;
  }
  const double n = static_cast<double>(rep.results.size());
  rep.colour /= n;
  rep.shape /= n;
  rep.motion /= n;
  rep.pitch /= n;
  return rep;
}

TinyEvalReport run_tiny_eval(pipeline::Engine& engine, const std::vector<TinyEvalCase>& cases,
                             const pipeline::GenerateRequest& base,
                             const std::function<void(const TinyEvalResult&)>& on_result) {
  std::vector<TinyEvalResult> results;
  for (const TinyEvalCase& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const pipeline::GenerateRequest req = tiny_eval_request(c, base);
    pipeline::GenerateOptions opt;
    opt.keep_frames = true;
    const pipeline::GenerateResult g = pipeline::generate(engine, req, opt);
    TinyEvalResult r = judge_tiny_clip(c, g.frames, g.audio, kTinySampleRate);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (on_result) on_result(r);
    results.push_back(std::move(r));
  }
  return summarize(std::move(results));
}

}  // namespace h3::eval
