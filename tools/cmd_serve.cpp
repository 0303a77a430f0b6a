// h3 serve: the HTTP service (src/serve/server.h) over one warm engine. Engine flags are h3
// generate's (one parser); the request flags (prompt, size, media, out) are not taken here: they
// come with each job.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "command.h"
#include "core/device.h"
#include "core/status.h"
#include "generate_flags.h"

#if H3_WITH_SERVE
#include "serve/server.h"
#endif

namespace {

using h3::ErrorCode;

void print_help() {
  std::printf(
      "usage: h3 serve --model DIR [options]\n\n"
      "Serves an HTTP API shaped like OpenAI's video API (POST /v1/videos, GET /v1/videos/ID,\n"
      "/content, /events, DELETE), a web page at /, /health and /metrics. One engine stays\n"
      "loaded; jobs run one at a time in arrival order and are kept in SQLite under --data.\n\n"
      "  --model DIR              MiniMax-H3 repository folder (its name is the API's model)\n"
      "  --host ADDR              address to listen on (default 127.0.0.1, loopback only)\n"
      "  --port N                 port (default 8080; 0: any free port, printed on start)\n"
      "  --data DIR               job store and outputs (default ./h3-serve)\n"
      "  --max-queue N            queued jobs before 429 (default 16)\n"
      "  --max-body-mb N          request size limit in MiB, uploads included (default 64)\n"
      "  --api-key KEY            require 'Authorization: Bearer KEY' on every endpoint but\n"
      "                           /health and / (default: $H3_API_KEY, else none)\n"
      "  --device D               cpu or cuda[:N] (default cpu)\n"
      "  --preset P               dense or fasth3: the server's default (default: the model's)\n"
      "  --steps N                default sigma-grid points of a job\n"
      "  --attention A            dense or vsa; --vsa-tile-size, --vsa-sparsity, --vsa-mode,\n"
      "                           --vsa-dense-layers, --vsa-dense-first-steps as in h3 generate\n"
      "  --sequential-load, --no-sequential-load, --cpu-offload   as in h3 generate\n"
      "  --lora-dir DIR           LoRA adapters a request may name in its \"loras\" field\n"
      "                           ([\"name.safetensors:0.8\"] or [{\"name\", \"scale\"}]): every\n"
      "                           *.safetensors in DIR, checked at start\n"
      "  --lora-mode M, --lora-allow-unmatched   as in h3 generate\n");
}

#if H3_WITH_SERVE
struct ServeFlags {
  std::string host = "127.0.0.1";
  std::string port = "8080";
  std::string data = "h3-serve";
  std::string max_queue = "16";
  std::string max_body_mb = "64";
  std::string api_key;
  bool have_key = false;
  std::string lora_dir;
};

int serve_flag(const std::string& flag, const std::string* value, void* ctx) {
  auto& s = *static_cast<ServeFlags*>(ctx);
  std::string* target = nullptr;
  if (flag == "--host") target = &s.host;
  if (flag == "--port") target = &s.port;
  if (flag == "--data") target = &s.data;
  if (flag == "--max-queue") target = &s.max_queue;
  if (flag == "--max-body-mb") target = &s.max_body_mb;
  if (flag == "--lora-dir") target = &s.lora_dir;
  if (flag == "--api-key") {
    target = &s.api_key;
    s.have_key = true;
  }
  // Request flags belong to each job, not to the server.
  static const char* const kJobFlags[] = {
      "--prompt",     "--image",        "--last-image", "--ref",  "--out",
      "--num-frames", "--height",       "--width",      "--seed", "--repeat",
      "--receipt",    "--save-latents", "--workflow",   "--lora"};
  for (const char* f : kJobFlags)
    H3_CHECK(flag != f, ErrorCode::kInvalidArgument, flag,
             " is a per-job setting; send it with each POST /v1/videos (see h3 serve --help)");
  if (!target) return -1;
  if (value) *target = *value;
  return 1;
}

int64_t to_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  H3_CHECK(!v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string::npos,
           ErrorCode::kInvalidArgument, flag, " expects an integer, got '", v, "'");
  const int64_t n = std::stoll(v);
  H3_CHECK(n >= lo && n <= hi, ErrorCode::kInvalidArgument, flag, " must be in [", lo, ", ", hi,
           "], got ", n);
  return n;
}

#endif

int run_serve(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
  }
#if H3_WITH_SERVE
  h3::cli::GenerateFlags f;
  ServeFlags s;
  h3::cli::parse_generate_flags(args, f, "h3 serve --help", serve_flag, &s);
  for (const std::string& a : args)
    H3_CHECK(a != "--no-stream" && a != "--progress" && a != "--allow-any-duration",
             ErrorCode::kInvalidArgument, a, " does not apply to h3 serve (see h3 serve --help)");
  H3_CHECK(!f.model_dir.empty(), ErrorCode::kInvalidArgument,
           "missing --model DIR (see h3 serve --help)");
  h3::serve::ServeOptions o;
  o.model_dir = f.model_dir;
  o.host = s.host;
  o.port = static_cast<int>(to_int("--port", s.port, 0, 65535));
  o.data_dir = s.data;
  o.max_queue = static_cast<size_t>(to_int("--max-queue", s.max_queue, 1, 100000));
  o.max_body_bytes = static_cast<size_t>(to_int("--max-body-mb", s.max_body_mb, 1, 4096)) << 20;
  if (s.have_key) {
    o.api_key = s.api_key;
  } else if (const char* k = std::getenv("H3_API_KEY")) {
    o.api_key = k;
  }
  H3_CHECK(!s.have_key || !o.api_key.empty(), ErrorCode::kInvalidArgument,
           "--api-key must not be empty");
  f.engine.device = h3::parse_device(f.device_text);
  o.engine = f.engine;
  o.settings = f.settings;
  o.lora_dir = s.lora_dir;
  o.lora_allow_unmatched = f.lora_allow_unmatched;
  o.on_listening = [&](const std::string& host, int port) {
    std::printf("h3 serve: listening on http://%s:%d (model %s, data %s%s)\n", host.c_str(), port,
                o.model_dir.c_str(), o.data_dir.c_str(),
                o.api_key.empty() ? "" : ", API key required");
    std::fflush(stdout);
  };
  return h3::serve::run_server(o);
#else
  (void)args;
  h3::fail(ErrorCode::kUnsupported,
           "this build has no server: configure with -DH3_SERVE=ON and the packages "
           "libcpp-httplib-dev, libsqlite3-dev and libturbojpeg0-dev");
#endif
}

}  // namespace

H3_COMMAND("serve", "serve the HTTP API and web page (OpenAI-video-shaped) over one warm engine",
           run_serve);
