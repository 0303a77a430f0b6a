// h3 make-tiny DIR [--seed N] [--released-shapes] [--trained PARTS]: writes a MiniMax-H3
// repository with random weights, either tiny (golden tiny-h3 dimensions) or at the released shapes
// as sparse files, or the trained tiny model from its kept parts.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "command.h"
#include "core/status.h"
#include "eval/tiny_clips.h"
#include "models/tiny_model.h"

namespace {

uint64_t parse_seed(const std::string& s) {
  H3_CHECK(!s.empty() && s.find_first_not_of("0123456789") == std::string::npos,
           h3::ErrorCode::kInvalidArgument, "--seed expects a non-negative integer, got '", s, "'");
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    h3::fail(h3::ErrorCode::kInvalidArgument, "--seed value '", s, "' is out of range");
  }
}

int run_make_tiny(const std::vector<std::string>& args) {
  std::string dir, trained;
  h3::models::MakeTinyOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: h3 make-tiny DIR [--seed N] [--released-shapes] [--fasth3] [--force]\n"
          "       h3 make-tiny DIR --trained PARTS [--force]\n\n"
          "Writes a MiniMax-H3 repository (all nine components) with deterministic random\n"
          "weights into DIR, which must not exist or be empty (or, with --force, hold an\n"
          "earlier MiniMax-H3 repository, replaced once the new one is complete).\n\n"
          "  --seed N            weight seed (default 0); equal seeds give identical files\n"
          "  --released-shapes   full-size layout as sparse files (exact headers, no data)\n"
          "  --fasth3            add the FastH3 student's VSA gates to transformer/ (the\n"
          "                      engine then runs it with the fasth3 preset)\n"
          "  --vae-spatial-ratio N  the video VAE compresses by N = 4, 8 or 16 (default 16, as\n"
          "                      released): canvases then come in multiples of 2N\n"
          "  --vae-latent-channels N  the video VAE's latent width (default 24, as released;\n"
          "                      1-256); the DiT's in_channels follows it\n"
          "  --text-context-scale S  multiply the conditioner's attention output projections\n"
          "                      by S in [0, 1] (default 1): 0 makes each text row a function of\n"
          "                      its own token (the trained tiny model's conditioner)\n"
          "  --trained PARTS     the trained tiny model: transformer/, vae/ and audio_vae/ from\n"
          "                      the parts in PARTS (tools/train_tiny/parts in a checkout), the\n"
          "                      rest as the parts were trained on (seed 0, 4x VAE, context-free\n"
          "                      conditioner), 64x128x39 as its default request\n"
          "  --force             replace an existing MiniMax-H3 repository in DIR\n");
      return 0;
    }
    if (a == "--seed") {
      H3_CHECK(i + 1 < args.size(), h3::ErrorCode::kInvalidArgument, "--seed needs a value");
      opt.seed = parse_seed(args[++i]);
    } else if (a.rfind("--seed=", 0) == 0) {
      opt.seed = parse_seed(a.substr(7));
    } else if (a == "--trained") {
      H3_CHECK(i + 1 < args.size(), h3::ErrorCode::kInvalidArgument,
               "--trained needs the folder of trained parts (tools/train_tiny/parts)");
      trained = args[++i];
    } else if (a == "--force") {
      opt.force = true;
    } else if (a == "--released-shapes") {
      opt.released_shapes = true;
    } else if (a == "--fasth3") {
      opt.fasth3 = true;
    } else if (a == "--vae-spatial-ratio") {
      H3_CHECK(i + 1 < args.size(), h3::ErrorCode::kInvalidArgument, "--vae-spatial-ratio needs a value");
      const std::string& v = args[++i];
      H3_CHECK(v == "4" || v == "8" || v == "16", h3::ErrorCode::kInvalidArgument,
               "--vae-spatial-ratio must be 4, 8 or 16, got '", v, "'");
      opt.vae_spatial_ratio = std::stoll(v);
    } else if (a == "--vae-latent-channels") {
      H3_CHECK(i + 1 < args.size(), h3::ErrorCode::kInvalidArgument,
               "--vae-latent-channels needs a value");
      const std::string& v = args[++i];
      const bool digits =
          !v.empty() && v.size() <= 3 && v.find_first_not_of("0123456789") == std::string::npos;
      const int64_t n = digits ? std::stoll(v) : 0;
      H3_CHECK(n >= 1 && n <= 256, h3::ErrorCode::kInvalidArgument,
               "--vae-latent-channels must be an integer in [1, 256], got '", v, "'");
      opt.vae_latent_channels = n;
    } else if (a == "--text-context-scale") {
      H3_CHECK(i + 1 < args.size(), h3::ErrorCode::kInvalidArgument,
               "--text-context-scale needs a value");
      const std::string& v = args[++i];
      char* end = nullptr;
      const double s = std::strtod(v.c_str(), &end);
      H3_CHECK(!v.empty() && end == v.c_str() + v.size() && s >= 0.0 && s <= 1.0,
               h3::ErrorCode::kInvalidArgument,
               "--text-context-scale must be a number in [0, 1], got '", v, "'");
      opt.text_context_scale = static_cast<float>(s);
    } else if (!a.empty() && a[0] == '-') {
      h3::fail(h3::ErrorCode::kInvalidArgument, "unknown option '", a,
               "' (see h3 make-tiny --help)");
    } else {
      H3_CHECK(dir.empty(), h3::ErrorCode::kInvalidArgument, "expected one output folder, got '",
               dir, "' and '", a, "'");
      dir = a;
    }
  }
  H3_CHECK(!dir.empty(), h3::ErrorCode::kInvalidArgument,
           "missing output folder (usage: h3 make-tiny DIR [--seed N] [--released-shapes])");
  if (!trained.empty()) {
    // The repository the parts were trained from (tools/train_tiny/parts/README.md): its text
    // encoder made the prompt features the DiT learnt, so nothing else may differ.
    H3_CHECK(
        opt.seed == 0 && opt.vae_spatial_ratio == 0 && opt.vae_latent_channels == 0 &&
            opt.text_context_scale == 1.0f && !opt.released_shapes && !opt.fasth3,
        h3::ErrorCode::kInvalidArgument,
        "--trained takes the options the parts were trained with; only --force may go with it");
    opt.vae_spatial_ratio = 4;
    opt.text_context_scale = 0.0f;
    opt.trained_parts = trained;
    opt.default_height = h3::eval::kTinyHeight;
    opt.default_width = h3::eval::kTinyWidth;
    opt.default_num_frames = h3::eval::kTinyFrames;
  }
  h3::models::make_tiny(dir, opt);
  if (!trained.empty())
    std::printf("wrote the trained tiny MiniMax-H3 (parts from %s) to %s\n", trained.c_str(),
                dir.c_str());
  else
    std::printf("wrote %s MiniMax-H3 repository to %s (seed %llu)\n",
                opt.released_shapes ? "released-shape (sparse)" : "tiny", dir.c_str(),
                static_cast<unsigned long long>(opt.seed));
  return 0;
}

}  // namespace

H3_COMMAND("make-tiny", "write a small (or sparse full-size) MiniMax-H3 repository", run_make_tiny);
