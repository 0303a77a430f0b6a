// h3 bench e2e: the whole path a user runs (`h3 generate`'s stages: prepare, encode, denoise,
// decode, mux), timed per stage for a first and warm generations in one process. It takes
// generate's flags, so the benchmark runs exactly the product path; on a released-shape
// repository (sparse files of zeros, `h3 make-tiny --released-shapes`) the weights are filled with
// seeded random values where they are loaded, so the DiT sees realistic activations.
//
// Builds without FFmpeg (the GPU machine) hand the frames to a null sink, and the table says that
// the MP4 stage did not run; with FFmpeg the MP4 is written (to --out, or a temporary file that is
// removed) and its tail after the decode is the "mux" stage.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "core/device.h"
#include "core/receipt.h"
#include "core/status.h"
#include "generate_flags.h"
#include "io/mp4_stream.h"
#include "io/mp4_writer.h"
#include "io/repo.h"
#include "pipeline/engine.h"
#include "pipeline/generate.h"
#include "pipeline/memory_plan.h"
#include "pipeline/random_weights.h"

namespace {

using h3::ErrorCode;
namespace fs = std::filesystem;
namespace pl = h3::pipeline;

constexpr const char* kDefaultPrompt = "A red fox runs through fresh snow at dawn";

struct BenchFlags {
  std::optional<bool> random_weights;  // unset: on for a sparse (released-shape) repository
  uint64_t weights_seed = 0;
  bool json = false;
};

int bench_flag(const std::string& flag, const std::string* value, void* ctx) {
  BenchFlags& b = *static_cast<BenchFlags*>(ctx);
  if (flag == "--random-weights" || flag == "--no-random-weights") {
    b.random_weights = flag == "--random-weights";
    return 0;
  }
  if (flag == "--json") {
    b.json = true;
    return 0;
  }
  if (flag == "--weights-seed") {
    if (!value) return 1;
    H3_CHECK(!value->empty() && value->find_first_not_of("0123456789") == std::string::npos,
             ErrorCode::kInvalidArgument, "--weights-seed expects a non-negative integer, got '",
             *value, "'");
    b.weights_seed = std::stoull(*value);
    return 1;
  }
  return -1;
}

void print_help() {
  std::printf(
      "usage: h3 bench e2e --model DIR [options]\n\n"
      "Runs h3 generate's whole path (prepare, encode, denoise, decode, mux) and prints a table\n"
      "per generation: each stage's milliseconds (component loads apart), bytes loaded and their\n"
      "GB/s, the mean milliseconds per DiT block of the step loop, peak device memory per stage\n"
      "and the memory plan's decision. Defaults: --repeat 2 (a first and a warm generation),\n"
      "--device cuda when a GPU is present, the prompt \"%s\".\n\n"
      "  --random-weights         fill every loaded weight with seeded random values where it\n"
      "                           lives (default for a released-shape repository of sparse files)\n"
      "  --no-random-weights      use the checkpoint's values\n"
      "  --weights-seed N         seed of the random weights (default 0)\n"
      "  --json                   print only a JSON array, one object per generation: stages\n"
      "                           {name: ms}, loaded_bytes, peak_device_bytes, ms_per_block, plan\n"
      "  --out FILE.mp4           keep the MP4 (default: a temporary file, removed)\n"
      "and h3 generate's flags:\n%s",
      kDefaultPrompt, h3::cli::generate_flags_help());
}

// A released-shape repository's files are holes: far fewer blocks on disk than bytes.
bool checkpoint_is_sparse(const std::string& model_dir, const std::string& component) {
  const h3::io::Repository repo = h3::io::Repository::open(model_dir);
  if (!repo.has(component)) return false;
  const h3::io::Checkpoint ck = repo.checkpoint(component);
  uint64_t size = 0, allocated = 0;
  for (const auto& f : ck.files()) {
    struct stat st {};
    if (::stat(f->path().c_str(), &st) != 0) return false;
    size += static_cast<uint64_t>(st.st_size);
    allocated += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return size > (uint64_t{64} << 20) && allocated * 4 < size;
}

// A generation's receipt, flattened for the table: the stages under the "generation" wrapper in
// order, each without the component loads nested in it (a load is its own row, counted once).
struct StageTimes {
  std::vector<std::pair<std::string, double>> ms;
  uint64_t loaded_bytes = 0;
  std::map<std::string, double> load_gbps;
  double denoise_ms = 0;
  std::vector<double> step_ms;  // each DiT forward of the loop, in order (inside denoise_ms)
};

StageTimes stage_times(const std::vector<h3::Receipt::Entry>& es) {
  StageTimes st;
  std::vector<double> nested_loads(es.size(), 0.0);
  // Entry 0 is the wrapper; its children are the stages.
  auto stage_of = [&](int i) {
    while (i >= 0 && es[static_cast<size_t>(i)].parent > 0) i = es[static_cast<size_t>(i)].parent;
    return i;
  };
  for (size_t i = 1; i < es.size(); ++i) {
    const h3::Receipt::Entry& e = es[i];
    if (e.name.rfind("load ", 0) != 0) continue;
    st.loaded_bytes += e.bytes;
    st.load_gbps[e.name] = e.gb_per_s();
    if (e.parent > 0) nested_loads[static_cast<size_t>(stage_of(static_cast<int>(i)))] += e.wall_ms;
  }
  for (size_t i = 1; i < es.size(); ++i) {
    const h3::Receipt::Entry& e = es[i];
    const bool load = e.name.rfind("load ", 0) == 0;
    if (e.parent != 0 && !load) continue;
    st.ms.emplace_back(e.name, load ? e.wall_ms : e.wall_ms - nested_loads[i]);
    if (e.name == "denoise") st.denoise_ms = e.wall_ms;
  }
  for (size_t i = 1; i < es.size(); ++i) {
    const h3::Receipt::Entry& e = es[i];
    if (e.parent > 0 && es[static_cast<size_t>(e.parent)].name == "denoise" &&
        e.name.rfind("step ", 0) == 0) {
      st.step_ms.push_back(e.wall_ms);
    }
  }
  return st;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

int run_bench_e2e(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
  }
  h3::cli::GenerateFlags f;
  f.repeat = 2;
  f.device_text = h3::cuda_available() ? "cuda" : "cpu";
  f.request.prompt = kDefaultPrompt;
  BenchFlags b;
  h3::cli::parse_generate_flags(args, f, "h3 bench e2e --help", bench_flag, &b);
  H3_CHECK(!f.model_dir.empty(), ErrorCode::kInvalidArgument,
           "missing --model DIR (see h3 bench e2e --help)");
  const pl::ResolvedSettings settings = h3::cli::finish_generate_flags(f);
  const bool random = b.random_weights.value_or(checkpoint_is_sparse(
      f.model_dir, f.request.workflow == "ref2va" ? "transformer_ref" : "transformer"));
  const bool mux = h3::io::mp4_writer_available();
  std::string out = f.out;
  const bool keep_out = !out.empty();
  if (mux && !keep_out)
    out = (fs::temp_directory_path() / ("h3-bench-e2e-" + std::to_string(::getpid()) + ".mp4"))
              .string();
  if (keep_out) h3::cli::check_out_folder("--out", out);

  std::unique_ptr<pl::RandomWeightsScope> fill;
  if (random) fill = std::make_unique<pl::RandomWeightsScope>(b.weights_seed);
  const auto t_engine = std::chrono::steady_clock::now();
  pl::Engine engine(f.model_dir, f.engine);
  const double engine_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_engine).count();
  const pl::MemoryPlan& plan = engine.plan();
  const h3::Device dev = engine.device();

  nlohmann::json all = nlohmann::json::array();
  pl::GenerateRequest& req = f.request;
  const uint64_t first_seed = req.seed;
  for (int64_t k = 0; k < f.repeat; ++k) {
    req.seed = first_seed + static_cast<uint64_t>(k);
    h3::Receipt rc;
    rc.set("preset", settings.preset);
    rc.set("settings", settings.describe());
    const std::string out_k = h3::cli::with_seed(out, req.seed, f.repeat > 1 && keep_out);
    std::optional<h3::io::Mp4StreamWriter> muxer;
    if (mux) muxer.emplace(out_k);
    pl::GenerateOptions opt;
    opt.keep_frames = false;
    opt.on_audio = [&](const pl::TargetGeometry& g, const h3::Tensor& audio) {
      if (muxer) muxer->start(g.num_frames, g.height, g.width, audio);
    };
    opt.on_frames = [&](int64_t, const h3::Tensor& frames) {
      if (muxer) muxer->push(frames);
    };
    if (dev.is_cuda()) h3::cuda_pool_reset_peak(dev.index);
    const auto t0 = std::chrono::steady_clock::now();
    // Each stage's start on stderr as it happens: a run stopped by a time limit still shows where
    // its time went (the receipt is printed only at the end).
    opt.on_progress = [&, k](const std::string& stage, int64_t step, int64_t steps) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (stage == "denoise" && steps > 0 && step > 0)
        std::fprintf(stderr, "h3 bench e2e: generation %lld +%.1f s: %s step %lld of %lld\n",
                     static_cast<long long>(k), s, stage.c_str(), static_cast<long long>(step),
                     static_cast<long long>(steps));
      else if (step == 0)
        std::fprintf(stderr, "h3 bench e2e: generation %lld +%.1f s: %s\n",
                     static_cast<long long>(k), s, stage.c_str());
    };
    {
      auto total = rc.stage("generation");
      pl::Generation gen(engine, req, opt, &rc);
      gen.run();
      if (muxer) {
        auto s = rc.stage("mux");
        muxer->finish();
      }
    }
    const double total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (mux && !keep_out) fs::remove(out_k);
    const uint64_t peak = dev.is_cuda() ? h3::cuda_pool_peak_bytes(dev.index) : 0;

    const StageTimes st = stage_times(rc.entries());
    const nlohmann::json& values = rc.values();
    const int64_t blocks = values.value("dit_blocks", int64_t{0});
    const int64_t forwards = values.value("dit_forwards", int64_t{0});
    const double ms_per_block =
        blocks > 0 && forwards > 0 ? st.denoise_ms / static_cast<double>(blocks * forwards) : 0;

    nlohmann::json g;
    g["generation"] = k;
    g["warm"] = k > 0;
    g["seed"] = req.seed;
    nlohmann::json stages = nlohmann::json::object();
    for (const auto& [name, ms] : st.ms) stages[name] = ms;
    if (!mux) stages["mux"] = nullptr;
    stages["total"] = total_ms;
    g["stages"] = stages;
    g["loaded_bytes"] = st.loaded_bytes;
    g["load_gb_per_s"] = st.load_gbps;
    g["peak_device_bytes"] = peak;
    nlohmann::json stage_peaks = nlohmann::json::object();
    for (const char* s : {"encode", "denoise", "decode"}) {
      const std::string key = std::string("peak_device_bytes ") + s;
      if (values.contains(key)) stage_peaks[s] = values.at(key);
    }
    g["stage_peak_device_bytes"] = stage_peaks;
    g["ms_per_block"] = ms_per_block;
    // Where the loop's time goes beyond the forwards: the per-generation set-up inside
    // "denoise" (text refiner, RoPE tables, VSA tiling) is denoise minus the steps.
    g["denoise_step_ms"] = st.step_ms;
    double steps_total = 0;
    for (double ms : st.step_ms) steps_total += ms;
    g["denoise_setup_ms"] = st.denoise_ms - steps_total;
    g["dit_blocks"] = blocks;
    g["dit_forwards"] = forwards;
    g["packed_rows"] = values.value("packed_rows", int64_t{0});
    g["device"] = dev.str();
    g["attention"] = values.value("attention", std::string());
    // FP8 weights (--dit-dtype / --text-encoder-dtype fp8, or an FP8 checkpoint) say so here.
    for (const char* key : {"dit_dtype", "text_encoder_dtype"})
      if (values.contains(key)) g[key] = values[key];
    nlohmann::json graphs;
    graphs["state"] = values.value("cuda_graphs", std::string());
    graphs["captures"] = values.value("cuda_graph_captures", int64_t{0});
    graphs["replays"] = values.value("cuda_graph_replays", int64_t{0});
    graphs["capture_ms"] = values.value("cuda_graph_capture_ms", 0.0);
    g["cuda_graphs"] = graphs;
    g["preset"] = settings.preset;
    g["settings"] = settings.describe();
    g["random_weights"] = random;
    g["mp4"] = mux ? (keep_out ? out_k : std::string("written, removed")) : std::string("not run (no FFmpeg in this build)");
    nlohmann::json p;
    p["decision"] = pl::plan_decision_name(plan.decision);
    p["reason"] = plan.reason;
    p["peak_bytes"] = plan.peak_bytes;
    p["dit_resident_blocks"] = plan.dit_resident_blocks;
    p["dit_num_blocks"] = plan.dit_num_blocks;
    // The plan's per-stage device estimates, beside the measured stage peaks above.
    nlohmann::json planned = nlohmann::json::object();
    for (const pl::StagePeak& sp : plan.stage_peaks) planned[sp.name] = sp.device_bytes();
    p["stage_peaks"] = planned;
    p["summary"] = pl::describe(plan);
    g["plan"] = p;
    g["engine_setup_ms"] = engine_ms;
    all.push_back(g);

    if (!b.json) {
      std::string fp8;
      if (g.contains("dit_dtype")) fp8 += ", DiT projections in FP8";
      if (g.contains("text_encoder_dtype")) fp8 += ", conditioner projections in FP8";
      std::printf("generation %lld (%s), seed %llu, %s, %s%s%s\n", static_cast<long long>(k),
                  k == 0 ? "first" : "warm", static_cast<unsigned long long>(req.seed),
                  dev.str().c_str(), settings.describe().c_str(),
                  random ? ", random weights" : "", fp8.c_str());
      std::printf("  %-26s %12s %10s\n", "stage", "ms", "GB/s");
      for (const auto& [name, ms] : st.ms) {
        const auto it = st.load_gbps.find(name);
        if (it != st.load_gbps.end() && it->second > 0)
          std::printf("  %-26s %12.1f %10.2f\n", name.c_str(), ms, it->second);
        else
          std::printf("  %-26s %12.1f\n", name.c_str(), ms);
      }
      if (!mux) std::printf("  %-26s %12s\n", "mux", "not run (no FFmpeg in this build)");
      std::printf("  %-26s %12.1f\n", "total", total_ms);
      std::printf("  loaded %.2f GB; denoise %lld forwards x %lld blocks: %.2f ms per block\n",
                  static_cast<double>(st.loaded_bytes) / 1e9, static_cast<long long>(forwards),
                  static_cast<long long>(blocks), ms_per_block);
      std::printf("  denoise steps ms:");
      for (double ms : st.step_ms) std::printf(" %.1f", ms);
      std::printf(" (set-up %.1f)\n", g["denoise_setup_ms"].get<double>());
      std::printf("  CUDA graphs: %s (%lld captured in %.1f ms, %lld replays)\n",
                  graphs["state"].get<std::string>().c_str(),
                  static_cast<long long>(graphs["captures"].get<int64_t>()),
                  graphs["capture_ms"].get<double>(),
                  static_cast<long long>(graphs["replays"].get<int64_t>()));
      if (dev.is_cuda()) {
        std::printf("  peak device memory %s (pool high-water mark)", gib(static_cast<double>(peak)).c_str());
        for (auto it = stage_peaks.begin(); it != stage_peaks.end(); ++it)
          std::printf("; %s %s", it.key().c_str(), gib(it.value().get<double>()).c_str());
        std::printf("\n");
      }
      std::printf("  plan: %s\n", pl::describe(plan).c_str());
      if (dev.is_cuda()) {
        std::printf("  planned stage peaks:");
        for (const pl::StagePeak& sp : plan.stage_peaks)
          std::printf(" %s %s;", sp.name.c_str(), gib(static_cast<double>(sp.device_bytes())).c_str());
        std::printf("\n");
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (b.json) std::printf("%s\n", all.dump(2).c_str());
  return 0;
}

}  // namespace

H3_COMMAND("bench e2e",
           "time the whole generation path per stage (first and warm), loads, ms per block, memory",
           run_bench_e2e);
