#include "serve/server.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "io/mp4_stream.h"
#include "io/mp4_writer.h"
#include "media/image_io.h"
#include "media/video_io.h"
#include "media/wav_io.h"
#include "pipeline/generate.h"
#include "serve/job_store.h"
#include "serve/preview.h"

namespace h3::serve {

namespace {

namespace fs = std::filesystem;
namespace pl = h3::pipeline;
namespace dit = h3::dit;
using json = nlohmann::json;

// A request the client got wrong: answered with `status` and an OpenAI-shaped error naming `param`.
struct HttpError {
  int status;
  std::string param;
  std::string message;
};

[[noreturn]] void bad(const std::string& param, const std::string& message, int status = 400) {
  throw HttpError{status, param, message};
}

void send_error(httplib::Response& res, int status, const std::string& param,
                const std::string& message) {
  json e = {{"message", message},
            {"type", status >= 500 ? "server_error" : "invalid_request_error"},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", nullptr}};
  res.status = status;
  res.set_content(json{{"error", e}}.dump(), "application/json");
}

// Compares in time that depends on the lengths only, not on where the strings first differ.
bool same_secret(const std::string& given, const std::string& want) {
  unsigned char diff = given.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ want[i % std::max<size_t>(1, want.size())]);
  return diff == 0 && !want.empty();
}

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

std::string random_id() {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string id = "video_";
  for (int i = 0; i < 8; ++i) {
    const uint32_t v = rd();
    for (int k = 0; k < 4; ++k) id += kHex[(v >> (k * 4)) & 15];
  }
  return id;
}

bool valid_id(const std::string& id) {
  if (id.size() < 7 || id.rfind("video_", 0) != 0) return false;
  return std::all_of(id.begin() + 6, id.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string format_seconds(int64_t frames) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", static_cast<double>(frames) / 24.0);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// ---- request fields -----------------------------------------------------------------------------

const std::set<std::string> kValueFields = {"prompt",   "model",      "seconds",
                                            "size",     "seed",       "steps",
                                            "preset",   "num_frames", "allow_any_duration",
                                            "workflow", "loras"};
const std::set<std::string> kFileFields = {"image", "last_image", "input_reference"};

int64_t field_int(const std::string& name, const json& v, int64_t min_value) {
  int64_t out = 0;
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
  } else if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) bad(name, name + " is out of range");
    out = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos)
      bad(name, name + " must be a non-negative integer, got '" + s + "'");
    out = std::stoll(s);
  } else {
    bad(name, name + " must be an integer");
  }
  if (out < min_value) bad(name, name + " must be at least " + std::to_string(min_value));
  return out;
}

double field_number(const std::string& name, const json& v) {
  double out = 0;
  if (v.is_number()) {
    out = v.get<double>();
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t used = 0;
    try {
      out = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (s.empty() || used != s.size()) bad(name, name + " must be a number, got '" + s + "'");
  } else {
    bad(name, name + " must be a number or a numeric string");
  }
  if (!std::isfinite(out) || out <= 0 || out > 600) bad(name, name + " must be in (0, 600]");
  return out;
}

bool field_bool(const std::string& name, const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "true" || s == "1") return true;
    if (s == "false" || s == "0") return false;
  }
  bad(name, name + " must be true or false");
}

std::string field_string(const std::string& name, const json& v) {
  if (!v.is_string()) bad(name, name + " must be a string");
  return v.get<std::string>();
}

// One uploaded file of a request, in the order given.
struct Upload {
  std::string field;  // image, last_image, input_reference
  std::string content;
};

std::string sniff_kind(const std::string& field, const std::string& bytes) {
  auto starts = [&](const char* magic, size_t n) {
    return bytes.size() >= n && bytes.compare(0, n, magic, n) == 0;
  };
  const bool pnm = bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '6';
  if (starts("\x89PNG", 4) || starts("\xFF\xD8\xFF", 3) || starts("BM", 2) || starts("GIF8", 4) ||
      pnm)
    return "image";
  if (bytes.size() >= 12 && starts("RIFF", 4) && bytes.compare(8, 4, "WAVE") == 0) return "audio";
  if (field != "input_reference") bad(field, field + " must be a PNG, JPEG, BMP, GIF or PNM image");
  return "video";
}

// The normalized request: canonical types, every field checked, uploads listed with their kinds
// and file names (kept in the job's input folder). This JSON is what the job store holds.
// "loras": a list of adapter names offered by the server, each "name", "name:scale" or
// {"name": ..., "scale": ...}; normalized to [{"name", "scale"}].
json normalize_loras(
    const json& v, const std::map<std::string, std::shared_ptr<const dit::LoraAdapter>>& offered) {
  if (!v.is_array())
    bad("loras", "loras must be a list of adapter names (or {name, scale} objects)");
  json out = json::array();
  for (const json& item : v) {
    std::string name;
    double scale = 1.0;
    if (item.is_string()) {
      const dit::LoraSpec spec = [&] {
        try {
          return dit::parse_lora_spec(item.get<std::string>());
        } catch (const h3::Error& e) {
          bad("loras", "loras: " + e.message());
        }
      }();
      name = spec.file;
      scale = spec.scale;
    } else if (item.is_object() && item.contains("name")) {
      name = field_string("loras", item["name"]);
      if (item.contains("scale")) {
        if (!item["scale"].is_number() || !std::isfinite(item["scale"].get<double>()))
          bad("loras", "loras: scale of '" + name + "' must be a finite number");
        scale = item["scale"].get<double>();
      }
    } else {
      bad("loras", "loras entries must be \"name[:scale]\" or {\"name\": ..., \"scale\": ...}");
    }
    if (!offered.count(name)) {
      std::string list;
      for (const auto& [n, a] : offered) list += (list.empty() ? "" : ", ") + n;
      bad("loras",
          "loras: adapter '" + name + "' is not offered by this server" +
              (list.empty() ? std::string(" (it offers none: start h3 serve with --lora-dir)")
                            : " (offered: " + list + ")"));
    }
    out.push_back({{"name", name}, {"scale", scale}});
  }
  return out;
}

json normalize_request(
    const json& in, const std::vector<Upload>& uploads, const std::string& model_name,
    const std::map<std::string, std::shared_ptr<const dit::LoraAdapter>>& loras) {
  if (!in.is_object()) bad("", "the request body must be a JSON object");
  std::vector<std::string> unknown;
  for (auto it = in.begin(); it != in.end(); ++it)
    if (!kValueFields.count(it.key())) unknown.push_back(it.key());
  if (!unknown.empty()) {
    std::string names;
    for (const auto& u : unknown) names += (names.empty() ? "" : ", ") + u;
    bad(unknown.front(),
        "unknown field" + std::string(unknown.size() > 1 ? "s" : "") + ": " + names);
  }
  json out = json::object();
  if (!in.contains("prompt")) bad("prompt", "prompt is required");
  out["prompt"] = field_string("prompt", in["prompt"]);
  if (in.contains("model")) {
    const std::string m = field_string("model", in["model"]);
    if (m != model_name)
      bad("model", "model '" + m + "' is not served here (this server runs '" + model_name + "')");
  }
  if (in.contains("seconds") && in.contains("num_frames"))
    bad("seconds", "give seconds or num_frames, not both");
  if (in.contains("seconds"))
    out["num_frames"] =
        std::max<int64_t>(1, std::llround(field_number("seconds", in["seconds"]) * 24.0));
  if (in.contains("num_frames")) out["num_frames"] = field_int("num_frames", in["num_frames"], 1);
  if (in.contains("size")) {
    const std::string s = field_string("size", in["size"]);
    const size_t x = s.find('x');
    const std::string ws = x == std::string::npos ? "" : s.substr(0, x);
    const std::string hs = x == std::string::npos ? "" : s.substr(x + 1);
    auto digits = [](const std::string& t) {
      return !t.empty() && t.size() <= 6 && t.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(ws) || !digits(hs))
      bad("size", "size must be WIDTHxHEIGHT, e.g. 1344x768; got '" + s + "'");
    const int64_t w = std::stoll(ws), h = std::stoll(hs);
    if (w <= 0 || h <= 0) bad("size", "size must be positive, got '" + s + "'");
    out["width"] = w;
    out["height"] = h;
  }
  out["seed"] = in.contains("seed") ? field_int("seed", in["seed"], 0) : 0;
  if (in.contains("steps")) out["steps"] = field_int("steps", in["steps"], 2);
  if (in.contains("preset")) {
    const std::string p = field_string("preset", in["preset"]);
    if (p != "dense" && p != "fasth3")
      bad("preset", "preset must be dense or fasth3, got '" + p + "'");
    out["preset"] = p;
  }
  if (in.contains("allow_any_duration"))
    out["allow_any_duration"] = field_bool("allow_any_duration", in["allow_any_duration"]);
  if (in.contains("workflow")) {
    const std::string w = field_string("workflow", in["workflow"]);
    if (w != "t2va" && w != "fl2va" && w != "ref2va")
      bad("workflow", "workflow must be t2va, fl2va or ref2va, got '" + w + "'");
    out["workflow"] = w;
  }
  if (in.contains("loras")) out["loras"] = normalize_loras(in["loras"], loras);
  json inputs = json::array();
  int counts[3] = {0, 0, 0};
  for (size_t k = 0; k < uploads.size(); ++k) {
    const Upload& u = uploads[k];
    if (u.field != "input_reference" && ++counts[u.field == "image" ? 0 : 1] > 1)
      bad(u.field, u.field + " given more than once");
    ++counts[2];
    inputs.push_back({{"field", u.field},
                      {"kind", sniff_kind(u.field, u.content)},
                      {"file", "input-" + std::to_string(k)}});
  }
  out["inputs"] = inputs;
  return out;
}

// The request a normalized JSON describes, its media read from `input_dir` with the strict
// readers `h3 generate` uses. A file that does not decode is answered naming its field.
struct BuiltRequest {
  pl::GenerateRequest request;
  pl::SettingOverrides overrides;
};

BuiltRequest build_request(const json& n, const fs::path& input_dir, const io::Repository& repo) {
  BuiltRequest b;
  pl::GenerateRequest& r = b.request;
  r.prompt = n.at("prompt").get<std::string>();
  r.seed = static_cast<uint64_t>(n.at("seed").get<int64_t>());
  if (n.contains("width")) {
    r.width = n["width"].get<int64_t>();
    r.height = n["height"].get<int64_t>();
  }
  if (n.contains("steps")) b.overrides.steps = n["steps"].get<int64_t>();
  if (n.contains("preset")) b.overrides.preset = n["preset"].get<std::string>();
  r.allow_any_duration = n.value("allow_any_duration", false);
  if (n.contains("workflow")) r.workflow = n["workflow"].get<std::string>();
  int ref_index = 0;
  for (const json& in : n.at("inputs")) {
    const std::string field = in.at("field").get<std::string>();
    const std::string kind = in.at("kind").get<std::string>();
    const std::string path = (input_dir / in.at("file").get<std::string>()).string();
    const std::string param =
        field == "input_reference" ? "input_reference[" + std::to_string(ref_index++) + "]" : field;
    try {
      if (field == "image") {
        r.first_image = media::read_image(path);
      } else if (field == "last_image") {
        r.last_image = media::read_image(path);
      } else if (kind == "image") {
        r.references.push_back(pl::Reference::from_image(media::read_image(path)));
      } else if (kind == "audio") {
        const media::Waveform w = media::read_wav(path);
        r.references.push_back(pl::Reference::from_audio(pl::AudioClip{w.samples, w.sample_rate}));
      } else {
        if (!media::video_reader_available())
          bad(param, "this build cannot read video references (built without FFmpeg)");
        media::DecodedVideo d = media::read_video(path);
        pl::VideoClip v;
        v.frames = std::move(d.frames);
        v.fps = d.fps;
        if (d.audio.defined()) v.soundtrack = pl::AudioClip{d.audio, d.sample_rate};
        r.references.push_back(pl::Reference::from_video(std::move(v)));
      }
    } catch (const h3::Error& e) {
      // The message names the upload by its field, never by where the server keeps it.
      std::string m = e.message();
      for (size_t at = m.find(path); at != std::string::npos; at = m.find(path))
        m.replace(at, path.size(), "the upload");
      bad(param, param + ": " + m);
    }
  }
  if (n.contains("num_frames")) r.num_frames = n["num_frames"].get<int64_t>();
  // The workflow's duration (FL2VA's preset is 8 s, §4.2) or the checkpoint's geometry, as in
  // h3 generate; a request whose media contradict its workflow is refused later, by name.
  try {
    pl::apply_request_defaults(repo, n.contains("num_frames"), r);
  } catch (const h3::Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
  }
  return b;
}

// ---- signals ----

int g_signal_pipe[2] = {-1, -1};

void on_signal(int) {
  const char c = 's';
  if (write(g_signal_pipe[1], &c, 1) < 0) {
  }
}

// ---- jobs ---------------------------------------------------------------------------------------

struct Job {
  JobRecord rec;
  json request;  // normalized
  std::string stage;
  // Server-sent events, numbered from first_event; finished jobs keep only their last event.
  std::deque<std::string> events;
  int64_t first_event = 0;
  bool terminal = false;
  bool cancel = false;
  bool deleted = false;
};

class Server {
 public:
  explicit Server(const ServeOptions& o) : o_(o) {
    model_name_ = fs::path(o_.model_dir).lexically_normal().filename().string();
    if (model_name_.empty())
      model_name_ = fs::path(o_.model_dir).lexically_normal().parent_path().filename().string();
    H3_CHECK(fs::is_directory(o_.model_dir), ErrorCode::kNotFound, "--model folder '", o_.model_dir,
             "' does not exist or is not a folder");
    const io::Repository repo = io::Repository::open(o_.model_dir);
    settings_ = pl::resolve_settings(repo, "t2va", o_.settings);
    pl::EngineOptions eo = o_.engine;
    eo.attention = settings_.attention;
    eo.vsa.sparsity = settings_.vsa_sparsity;
    eo.vsa.tile_size = settings_.vsa_tile_size;
    eo.plan_request.workflow = "t2va";
    // The checkpoint's default request, checked once here (a malformed index entry stops the
    // server at start, not each request) and planned for.
    const pl::RequestDefaults defaults = pl::request_defaults(repo, "t2va");
    eo.plan_request.num_frames = defaults.num_frames;
    if (defaults.height) {
      eo.plan_request.height = *defaults.height;
      eo.plan_request.width = *defaults.width;
    }
    // Adapters are offered from one folder, read and checked now; a request names them. The
    // engine keeps the original tensors a fused adapter rewrites, so that the next request's set
    // is applied without reading the checkpoint again.
    if (!o_.lora_dir.empty()) {
      H3_CHECK(fs::is_directory(o_.lora_dir), ErrorCode::kNotFound, "--lora-dir folder '",
               o_.lora_dir, "' does not exist or is not a folder");
      for (const auto& e : fs::directory_iterator(o_.lora_dir)) {
        if (e.path().extension() != ".safetensors") continue;
        const std::vector<pl::EngineLora> one =
            pl::read_loras(repo, {{e.path().string(), 1.0f}}, o_.lora_allow_unmatched);
        offered_loras_[e.path().filename().string()] = one.front().adapter;
      }
      H3_LOG_INFO("offering ", offered_loras_.size(), " LoRA adapter(s) from ", o_.lora_dir);
    }
    eo.lora_restorable = true;
    engine_ = std::make_unique<pl::Engine>(o_.model_dir, eo);

    data_ = fs::path(o_.data_dir);
    std::error_code ec;
    fs::create_directories(data_ / "videos", ec);
    fs::create_directories(data_ / "inputs", ec);
    H3_CHECK(fs::is_directory(data_ / "videos") && fs::is_directory(data_ / "inputs"),
             ErrorCode::kIo, "--data folder '", o_.data_dir, "' cannot be created");
    store_ = std::make_unique<JobStore>((data_ / "jobs.sqlite3").string());
    const std::vector<std::string> interrupted = store_->mark_interrupted(
        "interrupted", "the server stopped while this job was running; submit it again");
    for (const std::string& id : interrupted)
      H3_LOG_WARN("job ", id, " was running when the server stopped: marked failed");
    // Leftover temporary outputs of an interrupted job.
    // (the thumbnail's ".tmp", the MP4 writer's ".partial").
    for (const auto& e : fs::directory_iterator(data_ / "videos", ec)) {
      const std::string name = e.path().filename().string();
      if (name.ends_with(".tmp") || name.ends_with(".partial")) fs::remove(e.path(), ec);
    }
    for (JobRecord& r : store_->all()) {
      auto job = std::make_shared<Job>();
      job->request = json::parse(r.request, nullptr, false);
      job->rec = std::move(r);
      if (job->rec.status == "queued") {
        queue_.push_back(job->rec.id);
        push_event_locked(*job, "queued", job_json(*job));
      } else {
        fs::remove_all(input_dir(job->rec.id), ec);  // uploads of a job that will not run again
        finish_events_locked(*job, job->rec.status);
      }
      jobs_[job->rec.id] = job;
    }
  }

  int run() {
    httplib::Server svr;
    svr.new_task_queue = [] { return new httplib::ThreadPool(32); };
    svr.set_payload_max_length(o_.max_body_bytes);
    svr.set_read_timeout(30, 0);
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      return authorize(req, res) ? httplib::Server::HandlerResponse::Unhandled
                                 : httplib::Server::HandlerResponse::Handled;
    });
    svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413) {
        send_error(res, 413, "", "the request body is larger than the server's limit");
      } else if (res.status == 404) {
        send_error(res, 404, "", "no such endpoint");
      } else {
        send_error(res, res.status, "", "HTTP error " + std::to_string(res.status));
      }
    });
    svr.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string msg = "internal error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            msg = e.what();
          } catch (...) {
          }
          send_error(res, 500, "", msg);
        });
    auto wrap = [this](void (Server::*fn)(const httplib::Request&, httplib::Response&)) {
      return [this, fn](const httplib::Request& req, httplib::Response& res) {
        try {
          (this->*fn)(req, res);
        } catch (const HttpError& e) {
          send_error(res, e.status, e.param, e.message);
        } catch (const h3::Error& e) {
          const bool client = e.code() == ErrorCode::kInvalidArgument ||
                              e.code() == ErrorCode::kInvalidFile ||
                              e.code() == ErrorCode::kUnsupported;
          send_error(res, client ? 400 : 500, "", e.message());
        }
      };
    };
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(web_page_html(), "text/html; charset=utf-8");
    });
    svr.Get("/health", wrap(&Server::health));
    svr.Get("/metrics", wrap(&Server::metrics));
    svr.Post("/v1/videos", wrap(&Server::create));
    svr.Get("/v1/videos", wrap(&Server::list));
    svr.Get(R"(/v1/videos/([^/]+))", wrap(&Server::retrieve));
    svr.Delete(R"(/v1/videos/([^/]+))", wrap(&Server::remove));
    svr.Get(R"(/v1/videos/([^/]+)/content)", wrap(&Server::content));
    svr.Get(R"(/v1/videos/([^/]+)/events)", wrap(&Server::events));

    int port = o_.port;
    if (port == 0) {
      port = svr.bind_to_any_port(o_.host);
      H3_CHECK(port > 0, ErrorCode::kIo, "cannot listen on ", o_.host, " (any port)");
    } else {
      H3_CHECK(svr.bind_to_port(o_.host, port), ErrorCode::kIo, "cannot listen on ", o_.host, ":",
               port, " (in use, or not an address of this machine)");
    }

    // SIGINT / SIGTERM: the handler only writes a byte to a pipe (any thread may take the signal:
    // libraries start their own threads before we could block it); one thread reads the pipe and
    // stops the server: the running job is cancelled at its next step and put back in the queue.
    H3_CHECK(pipe(g_signal_pipe) == 0, ErrorCode::kIo, "cannot create the signal pipe");
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::thread signals([&] {
      char c = 0;
      while (read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
      }
      if (c == 's') H3_LOG_INFO("h3 serve: stopping");
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
      }
      work_cv_.notify_all();
      events_cv_.notify_all();
      svr.stop();
    });
    std::thread worker([this] { work(); });
    if (o_.on_listening) o_.on_listening(o_.host, port);
    svr.listen_after_bind();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    events_cv_.notify_all();
    worker.join();
    const char quit = 'q';
    if (write(g_signal_pipe[1], &quit, 1) < 0) {
    }
    signals.join();
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
    return 0;
  }

 private:
  // ---- helpers (mu_ held where named _locked) ----

  bool authorize(const httplib::Request& req, httplib::Response& res) {
    if (o_.api_key.empty() || req.path == "/health" || req.path == "/") return true;
    if (same_secret(req.get_header_value("Authorization"), "Bearer " + o_.api_key)) return true;
    // EventSource cannot send headers: the events stream also takes the key as access_token.
    if (req.path.size() > 7 && req.path.compare(req.path.size() - 7, 7, "/events") == 0 &&
        same_secret(req.get_param_value("access_token"), o_.api_key))
      return true;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, 401, "", "missing or wrong API key (Authorization: Bearer KEY)");
    return false;
  }

  json job_json(const Job& j) const {
    const JobRecord& r = j.rec;
    json o = {{"id", r.id},
              {"object", "video"},
              {"model", model_name_},
              {"status", r.status},
              {"progress", r.progress},
              {"created_at", r.created_at},
              {"completed_at", r.completed_at ? json(r.completed_at) : json(nullptr)},
              {"expires_at", nullptr},
              {"size", r.size},
              {"seconds", r.seconds},
              {"prompt", j.request.is_object() ? j.request.value("prompt", "") : ""},
              {"error", nullptr}};
    if (j.request.is_object()) {
      o["seed"] = j.request.value("seed", 0);
      if (j.request.contains("steps")) o["steps"] = j.request["steps"];
    }
    if (r.status == "in_progress" && !j.stage.empty()) o["stage"] = j.stage;
    if (r.status == "failed") o["error"] = {{"code", r.error_code}, {"message", r.error_message}};
    return o;
  }

  void push_event_locked(Job& j, const std::string& type, const json& data) {
    const int64_t id = j.first_event + static_cast<int64_t>(j.events.size());
    j.events.push_back("id: " + std::to_string(id) + "\nevent: " + type + "\ndata: " + data.dump() +
                       "\n\n");
    events_cv_.notify_all();
  }

  // The last event of a job: history (with its previews) is dropped, the final state stays.
  void finish_events_locked(Job& j, const std::string& type) {
    j.first_event += static_cast<int64_t>(j.events.size());
    j.events.clear();
    push_event_locked(j, type, job_json(j));
    j.terminal = true;
  }

  std::shared_ptr<Job> find(const std::string& id) {
    if (!valid_id(id)) bad("id", "no video with id '" + id + "'", 404);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) bad("id", "no video with id '" + id + "'", 404);
    return it->second;
  }

  fs::path video_path(const std::string& id) const { return data_ / "videos" / (id + ".mp4"); }
  fs::path thumb_path(const std::string& id) const { return data_ / "videos" / (id + ".jpg"); }
  fs::path input_dir(const std::string& id) const { return data_ / "inputs" / id; }
  void remove_files(const std::string& id) {
    std::error_code ec;
    fs::remove(video_path(id), ec);
    fs::remove(thumb_path(id), ec);
    fs::remove_all(input_dir(id), ec);
  }

  // ---- routes ----

  void health(const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    res.set_content(
        json{{"status", "ok"}, {"model", model_name_}, {"queued", queue_.size()}}.dump(),
        "application/json");
  }

  void metrics(const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, int> by_status = {
        {"queued", 0}, {"in_progress", 0}, {"completed", 0}, {"failed", 0}};
    for (const auto& [id, j] : jobs_) ++by_status[j->rec.status];
    std::string t;
    t += "# HELP h3_queue_length Jobs waiting to run (the running one not counted).\n";
    t += "# TYPE h3_queue_length gauge\n";
    t += "h3_queue_length " + std::to_string(queue_.size()) + "\n";
    t += "# HELP h3_jobs Jobs known to the server by status.\n# TYPE h3_jobs gauge\n";
    for (const auto& [s, n] : by_status)
      t += "h3_jobs{status=\"" + s + "\"} " + std::to_string(n) + "\n";
    t += "# HELP h3_stage_seconds_total Seconds spent in each generation stage.\n";
    t += "# TYPE h3_stage_seconds_total counter\n";
    for (const auto& [s, sec] : stage_seconds_) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.6f", sec);
      t += "h3_stage_seconds_total{stage=\"" + s + "\"} " + buf + "\n";
    }
    t += "# HELP h3_jobs_finished_total Jobs finished since start, by outcome.\n";
    t += "# TYPE h3_jobs_finished_total counter\n";
    for (const auto& [s, n] : finished_)
      t += "h3_jobs_finished_total{status=\"" + s + "\"} " + std::to_string(n) + "\n";
    res.set_content(t, "text/plain; version=0.0.4");
  }

  void create(const httplib::Request& req, httplib::Response& res) {
    json fields = json::object();
    std::vector<Upload> uploads;
    if (req.is_multipart_form_data()) {
      for (const auto& [name, part] : req.files) {
        if (kFileFields.count(name)) {
          if (part.content.empty()) bad(name, name + " is an empty file");
          uploads.push_back({name, part.content});
        } else {
          if (fields.contains(name)) bad(name, name + " given more than once");
          fields[name] = part.content;
        }
      }
    } else {
      const std::string type = req.get_header_value("Content-Type");
      if (type.rfind("application/json", 0) != 0)
        bad("", "Content-Type must be application/json or multipart/form-data", 415);
      try {
        fields = json::parse(req.body);
      } catch (const json::parse_error& e) {
        bad("", std::string("the body is not valid JSON: ") + e.what());
      }
      if (fields.is_object())
        for (const std::string& f : kFileFields)
          if (fields.contains(f))
            bad(f, f + " must be sent as a file in a multipart/form-data request");
    }
    json n = normalize_request(fields, uploads, model_name_, offered_loras_);

    // Inputs go to a fresh folder; the request is checked with them as the worker will read them.
    const std::string id = random_id();
    const fs::path dir = input_dir(id);
    std::error_code ec;
    fs::create_directories(dir, ec);
    struct Cleanup {
      fs::path dir;
      bool keep = false;
      ~Cleanup() {
        std::error_code e;
        if (!keep) fs::remove_all(dir, e);
      }
    } cleanup{dir};
    for (size_t k = 0; k < uploads.size(); ++k) {
      std::ofstream f(dir / ("input-" + std::to_string(k)), std::ios::binary);
      f.write(uploads[k].content.data(), static_cast<std::streamsize>(uploads[k].content.size()));
      H3_CHECK(f.good(), ErrorCode::kIo, "cannot store an upload under ", dir.string());
    }
    BuiltRequest b = build_request(n, dir, engine_->repo());
    pl::TargetGeometry geo;
    try {
      b.request.num_inference_steps = resolve_steps(b, n);
      pl::GenerateOptions none;
      pl::Generation check(*engine_, b.request, none);
      check.prepare();
      geo = check.result().geometry;
    } catch (const h3::Error& e) {
      // The pipeline speaks in h3 generate's flag names; the API's fields are named instead.
      std::string m = e.message();
      for (const auto& [from, to] :
           {std::pair<std::string, std::string>{"--height and --width", "height and width"},
            {"--num-frames", "num_frames"},
            {"--steps", "steps"}})
        for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size()))
          m.replace(at, from.size(), to);
      std::string param;
      if (m.find("height") != std::string::npos || m.find("width") != std::string::npos ||
          m.find("canvas") != std::string::npos)
        param = "size";
      else if (m.find("frames") != std::string::npos || m.find("duration") != std::string::npos)
        param = n.contains("num_frames") && !fields.contains("seconds") ? "num_frames" : "seconds";
      else if (m.find("steps") != std::string::npos)
        param = "steps";
      else if (m.find("prompt") != std::string::npos)
        param = "prompt";
      else if (m.find("workflow") != std::string::npos ||
               m.find("reference") != std::string::npos || m.find("keyframe") != std::string::npos)
        param = "workflow";
      bad(param, param.empty() ? m : param + ": " + m,
          e.code() == ErrorCode::kInternal ? 500 : 400);
    }

    auto job = std::make_shared<Job>();
    job->request = n;
    JobRecord& r = job->rec;
    r.id = id;
    r.created_at = now_seconds();
    r.status = "queued";
    r.request = n.dump();
    r.size = std::to_string(geo.width) + "x" + std::to_string(geo.height);
    r.seconds = format_seconds(geo.num_frames);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) bad("", "the server is stopping", 503);
      if (queue_.size() >= o_.max_queue)
        bad("", "the queue is full (" + std::to_string(o_.max_queue) + " jobs waiting); try later",
            429);
      r.seq = store_->next_seq();
      store_->insert(r);
      jobs_[id] = job;
      queue_.push_back(id);
      push_event_locked(*job, "queued", job_json(*job));
      res.set_content(job_json(*job).dump(), "application/json");
    }
    cleanup.keep = true;
    work_cv_.notify_all();
  }

  int64_t resolve_steps(const BuiltRequest& b, const json& n) {
    // The engine's attention is fixed for the server's life; a request may pick another preset's
    // steps only when that preset runs the same attention.
    pl::SettingOverrides ov = o_.settings;
    if (b.overrides.preset) ov.preset = b.overrides.preset;
    if (b.overrides.steps) ov.steps = b.overrides.steps;
    const std::string workflow = pl::resolve_workflow(b.request);
    const pl::ResolvedSettings s = pl::resolve_settings(engine_->repo(), workflow, ov);
    if (n.contains("preset") && s.attention != engine_->options().attention)
      bad("preset", "preset " + s.preset + " needs other attention than this server runs (" +
                        settings_.describe() + "); start h3 serve with --preset " + s.preset);
    return s.steps;
  }

  void list(const httplib::Request& req, httplib::Response& res) {
    int64_t limit = 20;
    if (req.has_param("limit")) {
      limit = field_int("limit", json(req.get_param_value("limit")), 1);
      if (limit > 100) bad("limit", "limit must be at most 100");
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<Job>> all;
    for (const auto& [id, j] : jobs_) all.push_back(j);
    std::sort(all.begin(), all.end(),
              [](const auto& a, const auto& b) { return a->rec.seq > b->rec.seq; });
    size_t start = 0;
    if (req.has_param("after")) {
      const std::string after = req.get_param_value("after");
      auto it =
          std::find_if(all.begin(), all.end(), [&](const auto& j) { return j->rec.id == after; });
      if (it == all.end()) bad("after", "after: no video with id '" + after + "'");
      start = static_cast<size_t>(it - all.begin()) + 1;
    }
    json data = json::array();
    size_t i = start;
    for (; i < all.size() && data.size() < static_cast<size_t>(limit); ++i)
      data.push_back(job_json(*all[i]));
    json out = {{"object", "list"},
                {"data", data},
                {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
                {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
                {"has_more", i < all.size()}};
    res.set_content(out.dump(), "application/json");
  }

  void retrieve(const httplib::Request& req, httplib::Response& res) {
    auto job = find(req.matches[1]);
    std::lock_guard<std::mutex> lock(mu_);
    res.set_content(job_json(*job).dump(), "application/json");
  }

  void remove(const httplib::Request& req, httplib::Response& res) {
    auto job = find(req.matches[1]);
    const std::string id = job->rec.id;
    bool running = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (job->deleted) bad("id", "no video with id '" + id + "'", 404);
      job->deleted = true;
      job->cancel = true;
      running = job->rec.status == "in_progress";
      queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
      store_->remove(id);
      jobs_.erase(id);
      finish_events_locked(*job, "deleted");
    }
    // A running job's files are removed by the worker once it stops (at the next step).
    if (!running) remove_files(id);
    res.set_content(json{{"id", id}, {"object", "video.deleted"}, {"deleted", true}}.dump(),
                    "application/json");
  }

  void content(const httplib::Request& req, httplib::Response& res) {
    auto job = find(req.matches[1]);
    std::string variant = req.has_param("variant") ? req.get_param_value("variant") : "video";
    if (variant != "video" && variant != "thumbnail")
      bad("variant", "variant must be video or thumbnail, got '" + variant + "'");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (job->rec.status != "completed")
        bad("id", "video " + job->rec.id + " is not completed (status " + job->rec.status + ")",
            404);
    }
    const fs::path path = variant == "video" ? video_path(job->rec.id) : thumb_path(job->rec.id);
    auto file = std::make_shared<std::ifstream>(path, std::ios::binary);
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (!*file || ec) bad("id", "the " + variant + " of " + job->rec.id + " is missing", 404);
    res.set_header("Accept-Ranges", "bytes");
    res.set_content_provider(static_cast<size_t>(size),
                             variant == "video" ? "video/mp4" : "image/jpeg",
                             [file](size_t offset, size_t length, httplib::DataSink& sink) {
                               std::vector<char> buf(std::min<size_t>(length, 1 << 16));
                               file->clear();
                               file->seekg(static_cast<std::streamoff>(offset));
                               file->read(buf.data(), static_cast<std::streamsize>(buf.size()));
                               const auto n = file->gcount();
                               if (n <= 0) return false;
                               return sink.write(buf.data(), static_cast<size_t>(n));
                             });
  }

  void events(const httplib::Request& req, httplib::Response& res) {
    auto job = find(req.matches[1]);
    auto cursor = std::make_shared<int64_t>(0);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, job, cursor](
                                                              size_t, httplib::DataSink& sink) {
      std::unique_lock<std::mutex> lock(mu_);
      auto pending = [&] {
        return job->first_event + static_cast<int64_t>(job->events.size()) > *cursor;
      };
      events_cv_.wait_for(lock, std::chrono::seconds(15), [&] { return pending() || stopping_; });
      if (*cursor < job->first_event) *cursor = job->first_event;
      std::string out;
      while (pending()) out += job->events[static_cast<size_t>((*cursor)++ - job->first_event)];
      const bool end = (job->terminal && !pending()) || stopping_;
      lock.unlock();
      if (out.empty() && !end) out = ": keep-alive\n\n";
      if (!out.empty() && !sink.write(out.data(), out.size())) return false;
      if (end) sink.done();
      return true;
    });
  }

  // ---- the worker ----

  void work() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        job = jobs_.at(queue_.front());
        queue_.pop_front();
        job->rec.status = "in_progress";
        job->rec.progress = 0;
        store_->update(job->rec);
        push_event_locked(*job, "in_progress", job_json(*job));
      }
      run_job(job);
    }
  }

  void set_progress(Job& j, const std::string& stage, int progress) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (stage != j.stage) {
      if (!j.stage.empty())
        stage_seconds_[j.stage] += std::chrono::duration<double>(now - stage_start_).count();
      stage_start_ = now;
      j.stage = stage;
      j.rec.progress = std::max(j.rec.progress, progress);
      store_->update(j.rec);
      push_event_locked(j, "stage",
                        {{"id", j.rec.id}, {"stage", stage}, {"progress", j.rec.progress}});
    }
    j.rec.progress = std::max(j.rec.progress, progress);
  }

  void run_job(const std::shared_ptr<Job>& job) {
    Job& j = *job;
    const std::string id = j.rec.id;
    std::string fail_code, fail_message;
    bool requeue = false;
    std::string thumbnail;
    try {
      BuiltRequest b = build_request(j.request, input_dir(id), engine_->repo());
      b.request.num_inference_steps = resolve_steps(b, j.request);
      {
        // This job's adapters (none when it names none): the engine changes only what differs.
        std::vector<pl::EngineLora> loras;
        for (const json& l : j.request.value("loras", json::array())) {
          const std::string name = l.at("name").get<std::string>();
          auto it = offered_loras_.find(name);
          H3_CHECK(it != offered_loras_.end(), ErrorCode::kNotFound, "LoRA adapter '", name,
                   "' is no longer offered by this server");
          loras.push_back(
              {{(fs::path(o_.lora_dir) / name).string(), l.at("scale").get<float>()}, it->second});
        }
        Receipt rc;
        engine_->set_loras(std::move(loras), rc);
      }
      pl::GenerateOptions opt;
      opt.cancelled = [this, &j] {
        std::lock_guard<std::mutex> lock(mu_);
        return j.cancel || stopping_;
      };
      opt.on_progress = [this, &j](const std::string& stage, int64_t step, int64_t steps) {
        int p = 1;
        if (stage.rfind("encode", 0) == 0) p = 5;
        if (stage == "denoise") p = 10 + static_cast<int>(steps > 0 ? 80 * step / steps : 0);
        if (stage == "decode audio") p = 90;
        if (stage == "decode video") p = 92;
        set_progress(j, stage, p);
        if (steps > 0) {
          std::lock_guard<std::mutex> lock(mu_);
          push_event_locked(j, "progress",
                            {{"id", j.rec.id},
                             {"stage", stage},
                             {"step", step},
                             {"steps", steps},
                             {"progress", j.rec.progress}});
        }
      };
      opt.on_preview = [this, &j](int64_t step, int64_t steps, const Tensor& latents) {
        const std::string jpeg = encode_jpeg(latent_preview(latents, 0));
        std::lock_guard<std::mutex> lock(mu_);
        push_event_locked(j, "preview",
                          {{"id", j.rec.id},
                           {"step", step},
                           {"steps", steps},
                           {"image", "data:image/jpeg;base64," + base64_encode(jpeg)}});
      };
      io::Mp4StreamWriter muxer(video_path(id).string());
      opt.keep_frames = false;
      opt.on_audio = [&](const pl::TargetGeometry& g, const Tensor& audio) {
        muxer.start(g.num_frames, g.height, g.width, audio);
      };
      opt.on_frames = [&](int64_t first, const Tensor& frames) {
        if (first == 0 && frames.shape()[0] > 0) thumbnail = encode_jpeg(frame_image(frames, 0));
        muxer.push(frames);
      };
      pl::generate(*engine_, b.request, opt);
      set_progress(j, "write mp4", 98);
      muxer.finish();
      const fs::path tmp = thumb_path(id).string() + ".tmp";
      {
        std::ofstream f(tmp, std::ios::binary);
        f.write(thumbnail.data(), static_cast<std::streamsize>(thumbnail.size()));
        H3_CHECK(f.good(), ErrorCode::kIo, "cannot write ", tmp.string());
      }
      fs::rename(tmp, thumb_path(id));
    } catch (const h3::Error& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (e.code() == ErrorCode::kCancelled && stopping_ && !j.deleted) {
        requeue = true;
      } else {
        fail_code = e.code() == ErrorCode::kCancelled ? "cancelled" : error_code_name(e.code());
        fail_message = e.message();
      }
    } catch (const HttpError& e) {
      fail_code = "invalid_request";
      fail_message = e.message;
    } catch (const std::exception& e) {
      fail_code = "internal";
      fail_message = e.what();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!j.stage.empty()) {
      stage_seconds_[j.stage] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_start_).count();
      j.stage.clear();
    }
    if (j.deleted) {
      ++finished_["deleted"];
      remove_files(id);
      return;
    }
    if (requeue) {
      // Stopped by a signal: back to the queue, to run after the restart.
      j.rec.status = "queued";
      j.rec.progress = 0;
      store_->update(j.rec);
      return;
    }
    // The uploads were only needed to run the job.
    std::error_code input_ec;
    fs::remove_all(input_dir(id), input_ec);
    if (fail_code.empty()) {
      j.rec.status = "completed";
      j.rec.progress = 100;
    } else {
      j.rec.status = "failed";
      j.rec.error_code = fail_code;
      j.rec.error_message = fail_message;
      std::error_code ec;
      fs::remove(video_path(id), ec);
      fs::remove(thumb_path(id), ec);
    }
    j.rec.completed_at = now_seconds();
    store_->update(j.rec);
    ++finished_[j.rec.status];
    finish_events_locked(j, j.rec.status);
  }

  ServeOptions o_;
  std::string model_name_;
  pl::ResolvedSettings settings_;
  std::unique_ptr<pl::Engine> engine_;
  std::map<std::string, std::shared_ptr<const dit::LoraAdapter>> offered_loras_;
  fs::path data_;
  std::unique_ptr<JobStore> store_;

  std::mutex mu_;
  std::condition_variable work_cv_, events_cv_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::deque<std::string> queue_;
  bool stopping_ = false;
  std::map<std::string, double> stage_seconds_;
  std::map<std::string, int64_t> finished_;
  std::chrono::steady_clock::time_point stage_start_;
};

}  // namespace

int run_server(const ServeOptions& options) {
  H3_CHECK(io::mp4_writer_available(), ErrorCode::kUnsupported,
           "this build has no MP4 writer (built without FFmpeg); h3 serve needs one");
  Server server(options);
  return server.run();
}

}  // namespace h3::serve
