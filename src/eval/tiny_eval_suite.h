// The tiny model's quality check (`h3 eval tiny`): generates the held-out prompt combinations of
// tools/train_tiny/SPEC.md at the clip geometry the model was trained on, estimates each clip's
// attributes from its decoded frames and waveform (tiny_eval.h) and counts how often each one
// matches the prompt.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/tiny_clips.h"
#include "eval/tiny_eval.h"
#include "pipeline/generate.h"

namespace h3::pipeline {
class Engine;
}

namespace h3::eval {

struct TinyEvalCase {
  int64_t index = 0;
  ClipAttributes attributes;
  std::string prompt;
  uint64_t seed = 0;  // the generation's seed
};

// Which prompts the evaluation asks for. The held-out triples measure what the model composes;
// the training ones what it learnt, so that the two together tell a model that cannot draw a
// shape from one that draws it only for the combinations it saw.
enum class TinySplit { kHeldOut, kTraining };
std::string_view split_name(TinySplit s);  // "held-out", "training"

// `count` cases of `split`: case k asks for its triple k mod n (held_out_attributes(), n = 12, or
// training_attributes(), n = 48) with seed first_seed + k, so the first n cover every triple once
// and any count is a prefix of a longer run.
std::vector<TinyEvalCase> tiny_eval_cases(int64_t count, uint64_t first_seed = 0,
                                          TinySplit split = TinySplit::kHeldOut);

// The request of a case: `base` (steps and anything else the caller set) with the case's prompt
// and seed, the t2va workflow and the spec's canvas and frame count (duration check off).
pipeline::GenerateRequest tiny_eval_request(const TinyEvalCase& c,
                                            const pipeline::GenerateRequest& base);

struct TinyEvalResult {
  TinyEvalCase c;
  AttributeEstimate estimate;
  bool colour = false, shape = false, motion = false, pitch = false;  // each matches the prompt
  double seconds = 0;                                                 // generation and estimation
};

// Judges one generated clip against the case's attributes. Throws kInvalidArgument when the
// clip's geometry is not the spec's (a model or pipeline that changed the output size).
TinyEvalResult judge_tiny_clip(const TinyEvalCase& c, const Tensor& frames, const Tensor& audio,
                               int64_t sample_rate);

struct TinyEvalReport {
  std::vector<TinyEvalResult> results;
  // Fractions in [0, 1] of the cases whose attribute matched (a clip without a detectable object
  // counts as wrong for colour, shape and motion).
  double colour = 0, shape = 0, motion = 0, pitch = 0;
};

TinyEvalReport summarize(std::vector<TinyEvalResult> results);

// Runs every case on `engine` in order; `on_result` (optional) sees each result as it is judged.
TinyEvalReport run_tiny_eval(pipeline::Engine& engine, const std::vector<TinyEvalCase>& cases,
                             const pipeline::GenerateRequest& base,
                             const std::function<void(const TinyEvalResult&)>& on_result = {});

}  // namespace h3::eval
