// h3 eval tiny: the trained tiny model's quality check (src/eval/tiny_eval_suite.h). Generates the
// held-out prompt combinations of tools/train_tiny/SPEC.md, measures colour, shape, motion and
// pitch from each clip's frames and waveform, and prints the accuracy per attribute. It takes
// h3 generate's engine and preset flags (device, steps, attention, VSA, LoRA), so one model can be
// judged under each setting; the prompts, canvas and frame count are the spec's.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "command.h"
#include "core/status.h"
#include "eval/tiny_eval_suite.h"
#include "generate_flags.h"
#include "pipeline/engine.h"

namespace {

using h3::ErrorCode;
namespace ev = h3::eval;
namespace pl = h3::pipeline;

constexpr int64_t kDefaultCases = 12;  // every held-out combination once
// Where the README's main command writes the trained tiny model (`h3 make-tiny models/h3-tiny
// --trained tools/train_tiny/parts`), relative to the working folder: the README's commands run
// from the checkout's root.
constexpr const char* kShippedModel = "models/h3-tiny";

// The model `h3 eval tiny` judges without --model: the one the README's main command runs.
std::string default_model() {
  namespace fs = std::filesystem;
  H3_CHECK(fs::is_regular_file(fs::path(kShippedModel) / "modular_model_index.json"),
           ErrorCode::kNotFound, "no --model given and no trained tiny model at ", kShippedModel,
           " under the working folder (run from the checkout's root after `h3 make-tiny "
           "models/h3-tiny --trained tools/train_tiny/parts`, or pass --model DIR)");
  return kShippedModel;
}

struct EvalFlags {
  int64_t cases = kDefaultCases;
  bool json = false;
  ev::TinySplit split = ev::TinySplit::kHeldOut;
};

int eval_flag(const std::string& flag, const std::string* value, void* ctx) {
  EvalFlags& e = *static_cast<EvalFlags*>(ctx);
  if (flag == "--json") {
    e.json = true;
    return 0;
  }
  if (flag == "--split") {
    if (!value) return 1;
    if (*value == ev::split_name(ev::TinySplit::kHeldOut)) {
      e.split = ev::TinySplit::kHeldOut;
    } else if (*value == ev::split_name(ev::TinySplit::kTraining)) {
      e.split = ev::TinySplit::kTraining;
    } else {
      H3_CHECK(false, ErrorCode::kInvalidArgument, "--split expects held-out or training, got '",
               *value, "'");
    }
    return 1;
  }
  if (flag == "--cases") {
    if (!value) return 1;
    H3_CHECK(!value->empty() && value->size() < 10 &&
                 value->find_first_not_of("0123456789") == std::string::npos &&
                 std::stoll(*value) >= 1,
             ErrorCode::kInvalidArgument, "--cases expects a positive integer, got '", *value, "'");
    e.cases = std::stoll(*value);
    return 1;
  }
  return -1;
}

void print_help() {
  std::printf(
      "usage: h3 eval tiny [--model DIR] [options]\n\n"
      "Generates held-out prompt combinations of the tiny synthetic clips "
      "(tools/train_tiny/SPEC.md:\n"
      "64x128, 39 frames, 32 kHz) and measures, from the decoded frames and waveform alone, the\n"
      "object's colour, shape and motion and the tone's pitch; prints the accuracy per "
      "attribute.\n\n"
      "  --model DIR              the tiny MiniMax-H3 repository to evaluate (default: the\n"
      "                           trained one the README's main command runs, models/h3-tiny)\n"
      "  --cases N                number of clips (default %lld: every held-out combination once;\n"
      "                           case k is combination k mod 12 with seed S + k)\n"
      "  --split S                held-out (default: the 12 combinations no training clip has)\n"
      "                           or training (the other 48, case k is combination k mod 48):\n"
      "                           what the model learnt, beside what it composes\n"
      "  --json                   print only {\"model\", \"accuracy\": {\"colour\", \"shape\", "
      "\"motion\",\n"
      "                           \"pitch\"}, \"cases\"}, accuracies as fractions in [0, 1]\n"
      "  --seed S                 seed of the first case (default 0)\n"
      "  --device D               cpu or cuda[:N] (default cpu)\n"
      "  --preset, --steps, --attention, --dit-rounding, --vsa-*, --lora*, --sequential-load,\n"
      "  --no-sequential-load, --cpu-offload   as in h3 generate\n",
      static_cast<long long>(kDefaultCases));
}

// h3 generate's flags that the evaluation fixes itself.
const std::set<std::string>& fixed_flags() {
  static const std::set<std::string> s = {
      "--prompt",     "--workflow",     "--image",    "--last-image", "--ref",
      "--num-frames", "--height",       "--width",    "--out",        "--repeat",
      "--receipt",    "--save-latents", "--progress", "--no-stream",  "--allow-any-duration"};
  return s;
}

int run_eval_tiny(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
    H3_CHECK(fixed_flags().count(a) == 0, ErrorCode::kInvalidArgument, a,
             " is not an option of h3 eval tiny: the evaluation sets the prompts, canvas and frame "
             "count itself (see h3 eval tiny --help)");
  }
  h3::cli::GenerateFlags f;
  EvalFlags e;
  h3::cli::parse_generate_flags(args, f, "h3 eval tiny --help", eval_flag, &e);
  if (f.model_dir.empty()) f.model_dir = default_model();
  // The evaluation's request shape, so that the preset and the memory plan are resolved for it.
  const std::vector<ev::TinyEvalCase> cases = ev::tiny_eval_cases(e.cases, f.request.seed, e.split);
  f.request = ev::tiny_eval_request(cases.front(), f.request);
  f.have_prompt = f.have_frames = true;
  const pl::ResolvedSettings settings = h3::cli::finish_generate_flags(f);
  pl::Engine engine(f.model_dir, f.engine);

  if (!e.json) {
    std::printf("h3 eval tiny: %s, %lld %s cases, %s, %s\n", f.model_dir.c_str(),
                static_cast<long long>(cases.size()), std::string(ev::split_name(e.split)).c_str(),
                engine.device().str().c_str(), settings.describe().c_str());
    // fill and taper are what the shape is read from (SPEC.md: triangle below 0.54 taper, else
    // square above 0.86 fill): they show how near a case is to turning.
    std::printf("  %-4s %-38s %-7s %-8s %-8s %-5s %-5s %-8s %-9s %-7s %-9s %-7s %7s\n", "case",
                "prompt", "colour", "", "shape", "fill", "taper", "", "motion", "", "pitch Hz", "",
                "s");
  }
  auto mark = [](bool ok) { return ok ? "ok" : "WRONG"; };
  const ev::TinyEvalReport rep =
      ev::run_tiny_eval(engine, cases, f.request, [&](const ev::TinyEvalResult& r) {
        if (e.json) return;
        const ev::AttributeEstimate& est = r.estimate;
        std::printf(
            "  %-4lld %-38s %-7s %-8s %-8s %-5.2f %-5.2f %-8s %-9s %-7s %-9.1f %-7s %7.2f\n",
            static_cast<long long>(r.c.index), r.c.prompt.c_str(),
            est.colour ? std::string(ev::colour_name(est.colour->colour)).c_str() : "-",
            mark(r.colour), est.shape ? std::string(ev::shape_name(est.shape->shape)).c_str() : "-",
            est.shape ? est.shape->fill : 0.0, est.shape ? est.shape->taper : 0.0, mark(r.shape),
            est.motion ? std::string(ev::motion_name(est.motion->motion)).c_str() : "-",
            mark(r.motion), est.pitch.peak_hz, mark(r.pitch), r.seconds);
        std::fflush(stdout);
      });

  if (e.json) {
    nlohmann::ordered_json j;
    j["model"] = f.model_dir;
    j["accuracy"] = {
        {"colour", rep.colour}, {"shape", rep.shape}, {"motion", rep.motion}, {"pitch", rep.pitch}};
    j["cases"] = static_cast<int64_t>(rep.results.size());
    // The format for the held-out cases, unchanged; a training run says so.
    if (e.split != ev::TinySplit::kHeldOut) j["split"] = ev::split_name(e.split);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "accuracy over %lld cases: colour %.1f %%, shape %.1f %%, motion %.1f %%, pitch "
        "%.1f %%\n",
        static_cast<long long>(rep.results.size()), 100 * rep.colour, 100 * rep.shape,
        100 * rep.motion, 100 * rep.pitch);
  }
  return 0;
}

}  // namespace

H3_COMMAND("eval tiny",
           "accuracy of a tiny model on held-out prompts: colour, shape, motion, pitch",
           run_eval_tiny);
