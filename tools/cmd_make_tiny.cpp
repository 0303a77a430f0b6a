// h3 make-tiny DIR [--seed N] [--released-shapes]: writes a MiniMax-H3 repository with random
// weights, either tiny (golden tiny-h3 dimensions) or at the released shapes as sparse files.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "command.h"
#include "core/status.h"
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
  std::string dir;
  h3::models::MakeTinyOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: h3 make-tiny DIR [--seed N] [--released-shapes] [--fasth3] [--force]\n\n"
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
          "  --force             replace an existing MiniMax-H3 repository in DIR\n");
      return 0;
    }
    if (a == "--seed") {
      H3_CHECK(i + 1 < args.size(), h3::ErrorCode::kInvalidArgument, "--seed needs a value");
      opt.seed = parse_seed(args[++i]);
    } else if (a.rfind("--seed=", 0) == 0) {
      opt.seed = parse_seed(a.substr(7));
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
  h3::models::make_tiny(dir, opt);
  std::printf("wrote %s MiniMax-H3 repository to %s (seed %llu)\n",
              opt.released_shapes ? "released-shape (sparse)" : "tiny", dir.c_str(),
              static_cast<unsigned long long>(opt.seed));
  return 0;
}

}  // namespace

H3_COMMAND("make-tiny", "write a small (or sparse full-size) MiniMax-H3 repository", run_make_tiny);
