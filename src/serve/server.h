// h3 serve: an HTTP service shaped like the OpenAI video API, over one warm Engine.
//
//   POST   /v1/videos                 JSON or multipart (files: image, last_image, input_reference)
//   GET    /v1/videos                 newest first; ?limit=1..100 (default 20) &after=ID
//   GET    /v1/videos/{id}            the job: status queued|in_progress|completed|failed, progress
//   GET    /v1/videos/{id}/content    video/mp4 (Range honoured); ?variant=thumbnail: image/jpeg
//   GET    /v1/videos/{id}/events     server-sent events: stage, progress, preview, then
//                                     completed | failed | deleted
//   DELETE /v1/videos/{id}            cancels (a running job stops at its next step) and deletes
//   GET    /health, /metrics (Prometheus text), / (the web page)
//
// Jobs run one at a time, in arrival order, on one worker thread; the job list lives in SQLite
// under the data folder (JobStore), outputs beside it, each written to a temporary name and
// renamed. A job that was running when the process died is marked failed on restart (code
// "interrupted"), not run again: the crash may have been that job's doing (memory, a bad input),
// and re-running it unasked could crash the server in a loop; the client resubmits. A job stopped
// by SIGINT/SIGTERM is put back in the queue and runs after the restart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "pipeline/engine.h"
#include "pipeline/presets.h"

namespace h3::serve {

struct ServeOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  std::string data_dir = "h3-serve";
  size_t max_queue = 16;                // queued jobs (the running one not counted); more: 429
  std::string api_key;                  // non-empty: Bearer auth on everything but /health and /
  size_t max_body_bytes = 64u << 20;    // whole request, uploads included; more: 413
  pipeline::EngineOptions engine;       // device, sequential load, offload, VSA defaults
  pipeline::SettingOverrides settings;  // the server's default preset / steps / attention
  // LoRA adapters a request may name (its "loras" field): every *.safetensors in this folder, read
  // and checked at start. Empty: requests cannot ask for adapters.
  std::string lora_dir;
  bool lora_allow_unmatched = false;
  // Called once the socket listens, with the port (the chosen one when port was 0).
  std::function<void(const std::string& host, int port)> on_listening;
};

// Serves until SIGINT or SIGTERM; returns the exit code. Throws h3::Error for a bad model folder,
// an unusable data folder or a port that cannot be bound.
int run_server(const ServeOptions& options);

// The web page served at "/" (one self-contained HTML file).
const char* web_page_html();

}  // namespace h3::serve
