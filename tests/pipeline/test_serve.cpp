// `h3 serve` as a client meets it: the built binary started as a child process on a loopback port
// that it picks itself, driven over HTTP with the tiny model on the CPU. Every wait is bounded.
#if H3_WITH_SERVE

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "media/wav_io.h"
#include "models/h3_dit/dit_config.h"
#include "models/tiny_model.h"
#include "serve/preview.h"
#include "support/cli.h"
#include "support/temp_dir.h"

namespace h3::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A tiny job: a few seconds on the CPU.
json tiny_job(const std::string& prompt = "a red ball", int steps = 3) {
  return {{"prompt", prompt},           {"size", "64x32"}, {"num_frames", 22},
          {"allow_any_duration", true}, {"steps", steps},  {"seed", 1}};
}

// `h3 serve ARGS --port 0` as a child; its output goes to a log file, whose first line names the
// port.
class ServerProcess {
 public:
  ServerProcess(const std::string& args, const fs::path& log) : log_(log) {
    const std::string cmd =
        "exec " + shell_quote(std::getenv("H3_BIN")) + " serve --port 0 " + args;
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline && port_ == 0) {
      std::smatch m;
      const std::string text = log_text();
      if (std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
      int status = 0;
      if (port_ == 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServerProcess() { stop(SIGTERM); }
  int port() const { return port_; }
  std::string log_text() const {
    std::ifstream f(log_);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // Sends `sig` and waits (at most 30 s, then SIGKILL) for the process to end.
  void stop(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
  }
  std::unique_ptr<httplib::Client> client(const std::string& key = "") const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(60, 0);
    c->set_connection_timeout(5, 0);
    if (!key.empty()) c->set_bearer_token_auth(key.c_str());
    return c;
  }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

class ServeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("h3_serve");
    tiny_ = (dir_->path() / "tiny").string();
    models::make_tiny(tiny_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    if (!std::getenv("H3_BIN")) GTEST_SKIP() << "H3_BIN is not set (run through ctest)";
    work_ = std::make_unique<TempDir>("h3_serve_case");
  }
  std::unique_ptr<ServerProcess> start(const std::string& extra = "",
                                       const std::string& data = "") {
    const std::string d = data.empty() ? (work_->path() / "data").string() : data;
    auto s = std::make_unique<ServerProcess>(
        "--model " + shell_quote(tiny_) + " --data " + shell_quote(d) + " " + extra,
        work_->path() / ("server" + std::to_string(starts_++) + ".log"));
    EXPECT_GT(s->port(), 0) << s->log_text();
    return s;
  }
  static json post(httplib::Client& c, const json& body, int want = 200) {
    auto r = c.Post("/v1/videos", body.dump(), "application/json");
    EXPECT_TRUE(r) << "no answer";
    if (!r) return json();
    EXPECT_EQ(r->status, want) << r->body;
    return json::parse(r->body, nullptr, false);
  }
  static json get(httplib::Client& c, const std::string& path, int want = 200) {
    auto r = c.Get(path.c_str());
    EXPECT_TRUE(r) << path << ": no answer";
    if (!r) return json();
    EXPECT_EQ(r->status, want) << path << ": " << r->body;
    return json::parse(r->body, nullptr, false);
  }
  // Polls the job until `pred` holds or `seconds` pass; returns its last state.
  template <typename Pred>
  static json wait_for(httplib::Client& c, const std::string& id, Pred pred, int seconds = 120) {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    json v;
    while (Clock::now() < deadline) {
      auto r = c.Get(("/v1/videos/" + id).c_str());
      if (r && r->status == 200) {
        v = json::parse(r->body);
        if (pred(v)) return v;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "timed out waiting on " << id << ", last state " << v.dump();
    return v;
  }
  static bool is(const json& v, const char* status) { return v.value("status", "") == status; }

  static std::unique_ptr<TempDir> dir_;
  static std::string tiny_;
  std::unique_ptr<TempDir> work_;
  int starts_ = 0;
};
std::unique_ptr<TempDir> ServeCli::dir_;
std::string ServeCli::tiny_;

TEST_F(ServeCli, JobStreamsEventsThenServesMp4RangeThumbnailAndIsDeleted) {
  auto s = start();
  auto c = s->client();
  EXPECT_EQ(get(*c, "/health").value("status", ""), "ok");
  auto page = c->Get("/");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("<video"), std::string::npos);
  EXPECT_NE(page->body.find("EventSource"), std::string::npos);

  const json job = post(*c, tiny_job());
  ASSERT_TRUE(job.is_object());
  EXPECT_EQ(job.value("status", ""), "queued");
  EXPECT_EQ(job.value("object", ""), "video");
  EXPECT_EQ(job.value("size", ""), "64x32");
  const std::string id = job.value("id", "");
  ASSERT_EQ(id.rfind("video_", 0), 0u) << id;

  // Events until the final one (the stream ends there).
  std::string events;
  auto r = c->Get(("/v1/videos/" + id + "/events").c_str(), [&](const char* data, size_t n) {
    events.append(data, n);
    return events.size() < (16u << 20);
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  for (const char* e : {"event: stage", "\"stage\":\"denoise\"", "event: progress",
                        "event: preview", "data:image/jpeg;base64,", "event: completed"})
    EXPECT_NE(events.find(e), std::string::npos) << e << " not in the events";
  EXPECT_LT(events.find("event: preview"), events.find("event: completed"));

  const json done = get(*c, "/v1/videos/" + id);
  EXPECT_EQ(done.value("status", ""), "completed");
  EXPECT_EQ(done.value("progress", 0), 100);

  auto mp4 = c->Get(("/v1/videos/" + id + "/content").c_str());
  ASSERT_TRUE(mp4);
  ASSERT_EQ(mp4->status, 200);
  EXPECT_EQ(mp4->get_header_value("Content-Type"), "video/mp4");
  ASSERT_GT(mp4->body.size(), 8u);
  EXPECT_EQ(mp4->body.substr(4, 4), "ftyp");
  if (std::system("command -v ffprobe >/dev/null 2>&1") == 0) {
    const fs::path file = work_->path() / "out.mp4";
    std::ofstream(file, std::ios::binary) << mp4->body;
    const std::string cmd = "ffprobe -v error -show_entries stream=codec_name -of csv=p=0 " +
                            shell_quote(file.string());
    std::string probe;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[256];
      while (fgets(buf, sizeof(buf), p)) probe += buf;
      pclose(p);
    }
    EXPECT_NE(probe.find("h264"), std::string::npos) << probe;
    EXPECT_NE(probe.find("aac"), std::string::npos) << probe;
  } else {
    std::fprintf(stderr, "ffprobe not found: stream codecs not checked\n");
  }

  auto part = c->Get(("/v1/videos/" + id + "/content").c_str(), {{"Range", "bytes=4-11"}});
  ASSERT_TRUE(part);
  EXPECT_EQ(part->status, 206);
  EXPECT_EQ(part->body, mp4->body.substr(4, 8));
  EXPECT_EQ(part->get_header_value("Content-Range"),
            "bytes 4-11/" + std::to_string(mp4->body.size()));

  auto thumb = c->Get(("/v1/videos/" + id + "/content?variant=thumbnail").c_str());
  ASSERT_TRUE(thumb);
  EXPECT_EQ(thumb->status, 200);
  EXPECT_EQ(thumb->get_header_value("Content-Type"), "image/jpeg");
  ASSERT_GT(thumb->body.size(), 3u);
  EXPECT_EQ(thumb->body.substr(0, 3), "\xFF\xD8\xFF");

  auto metrics = c->Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* m : {"h3_queue_length 0", "h3_jobs{status=\"completed\"} 1",
                        "h3_stage_seconds_total{stage=\"denoise\"}"})
    EXPECT_NE(metrics->body.find(m), std::string::npos) << m << " in\n" << metrics->body;

  auto del = c->Delete(("/v1/videos/" + id).c_str());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
  EXPECT_EQ(json::parse(del->body).value("deleted", false), true);
  get(*c, "/v1/videos/" + id, 404);
  get(*c, "/v1/videos/" + id + "/content", 404);
  EXPECT_FALSE(fs::exists(work_->path() / "data" / "videos" / (id + ".mp4")));
}

TEST_F(ServeCli, MultipartKeyframeAndOrderedReferencesRunFl2vaAndRef2va) {
  auto s = start();
  auto c = s->client();
  serve::RgbBytes img;
  img.height = 32;
  img.width = 64;
  for (int64_t i = 0; i < 32 * 64; ++i)
    for (int k = 0; k < 3; ++k) img.data.push_back(static_cast<uint8_t>((i * (k + 3)) % 251));
  const std::string jpeg = serve::encode_jpeg(img);
  const fs::path wav = work_->path() / "ref.wav";
  std::vector<float> samples(2 * 16000);
  for (size_t i = 0; i < samples.size(); ++i)
    samples[i] = 0.1f * static_cast<float>((i % 50) / 50.0);
  media::write_wav_float(wav.string(), Tensor::from_f32(samples, {2, 16000}), 16000);
  std::ifstream wf(wav, std::ios::binary);
  const std::string wav_bytes((std::istreambuf_iterator<char>(wf)), {});
  const httplib::MultipartFormDataItems common = {{"prompt", "a ball", "", ""},
                                                  {"size", "64x32", "", ""},
                                                  {"num_frames", "22", "", ""},
                                                  {"steps", "3", "", ""},
                                                  {"allow_any_duration", "true", "", ""}};
  auto fl2va = common;
  fl2va.push_back({"image", jpeg, "first.jpg", "image/jpeg"});
  auto ref2va = common;
  ref2va.push_back({"input_reference", jpeg, "a.jpg", "image/jpeg"});
  ref2va.push_back({"input_reference", wav_bytes, "b.wav", "audio/wav"});
  std::vector<std::string> ids;
  for (const auto* items : {&fl2va, &ref2va}) {
    auto r = c->Post("/v1/videos", *items);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    ids.push_back(json::parse(r->body).value("id", ""));
  }
  for (const std::string& id : ids) {
    const json v =
        wait_for(*c, id, [](const json& j) { return is(j, "completed") || is(j, "failed"); });
    EXPECT_EQ(v.value("status", ""), "completed") << v.dump();
  }
}

TEST_F(ServeCli, ThreeQueuedJobsCompleteInArrivalOrderAndListNewestFirst) {
  auto s = start();
  auto c = s->client();
  std::vector<std::string> ids;
  for (int k = 0; k < 3; ++k)
    ids.push_back(post(*c, tiny_job("job " + std::to_string(k))).value("id", ""));
  // The order in which they finish, seen by polling all three.
  std::vector<std::string> finished;
  const auto deadline = Clock::now() + std::chrono::seconds(180);
  while (finished.size() < 3 && Clock::now() < deadline) {
    for (const std::string& id : ids) {
      if (std::find(finished.begin(), finished.end(), id) != finished.end()) continue;
      const json v = get(*c, "/v1/videos/" + id);
      ASSERT_FALSE(is(v, "failed")) << v.dump();
      if (is(v, "completed")) finished.push_back(id);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(finished, ids);
  const json page1 = get(*c, "/v1/videos?limit=2");
  ASSERT_EQ(page1["data"].size(), 2u);
  EXPECT_EQ(page1["data"][0]["id"], ids[2]);
  EXPECT_EQ(page1["data"][1]["id"], ids[1]);
  EXPECT_EQ(page1["has_more"], true);
  const json page2 = get(*c, "/v1/videos?limit=2&after=" + ids[1]);
  ASSERT_EQ(page2["data"].size(), 1u);
  EXPECT_EQ(page2["data"][0]["id"], ids[0]);
  EXPECT_EQ(page2["has_more"], false);
}

TEST_F(ServeCli, KillNineAndRestartKeepsFinishedAndQueuedJobsAndFailsTheInterruptedOne) {
  const std::string data = (work_->path() / "data").string();
  std::string done_id, running_id, queued_id;
  size_t mp4_size = 0;
  {
    auto s = start("", data);
    auto c = s->client();
    done_id = post(*c, tiny_job()).value("id", "");
    wait_for(*c, done_id, [](const json& v) { return is(v, "completed"); });
    auto mp4 = c->Get(("/v1/videos/" + done_id + "/content").c_str());
    ASSERT_TRUE(mp4);
    mp4_size = mp4->body.size();
    running_id = post(*c, tiny_job("long", 1000)).value("id", "");
    queued_id = post(*c, tiny_job("after")).value("id", "");
    wait_for(*c, running_id, [](const json& v) {
      return is(v, "in_progress") && v.value("stage", "") == "denoise";
    });
    s->stop(SIGKILL);
  }
  auto s = start("", data);
  auto c = s->client();
  const json list = get(*c, "/v1/videos?limit=100");
  ASSERT_EQ(list["data"].size(), 3u) << list.dump();
  const json done = get(*c, "/v1/videos/" + done_id);
  EXPECT_EQ(done.value("status", ""), "completed");
  auto mp4 = c->Get(("/v1/videos/" + done_id + "/content").c_str());
  ASSERT_TRUE(mp4);
  EXPECT_EQ(mp4->status, 200);
  EXPECT_EQ(mp4->body.size(), mp4_size);
  const json interrupted = get(*c, "/v1/videos/" + running_id);
  EXPECT_EQ(interrupted.value("status", ""), "failed");
  EXPECT_EQ(interrupted["error"].value("code", ""), "interrupted") << interrupted.dump();
  // The queued job was kept and runs now.
  const json after = wait_for(*c, queued_id, [](const json& v) { return is(v, "completed"); });
  EXPECT_EQ(after.value("status", ""), "completed");
  // No temporary file is left behind.
  for (const auto& e : fs::directory_iterator(fs::path(data) / "videos")) {
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
    EXPECT_EQ(e.path().string().find(".partial"), std::string::npos) << e.path();
  }
  EXPECT_FALSE(fs::exists(fs::path(data) / "inputs" / running_id));
}

TEST_F(ServeCli, SigtermStopsAtTheNextStepAndRequeuesTheRunningJob) {
  const std::string data = (work_->path() / "data").string();
  std::string id;
  {
    auto s = start("", data);
    auto c = s->client();
    id = post(*c, tiny_job("long", 1000)).value("id", "");
    wait_for(*c, id, [](const json& v) { return v.value("stage", "") == "denoise"; });
    const auto t0 = Clock::now();
    s->stop(SIGTERM);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20)) << "SIGTERM did not stop the server";
  }
  auto s = start("", data);
  auto c = s->client();
  const json v = get(*c, "/v1/videos/" + id);
  EXPECT_TRUE(is(v, "queued") || is(v, "in_progress")) << v.dump();
  auto del = c->Delete(("/v1/videos/" + id).c_str());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
}

TEST_F(ServeCli, DeleteStopsARunningJobAtTheNextStep) {
  auto s = start();
  auto c = s->client();
  const std::string id = post(*c, tiny_job("long", 1000)).value("id", "");
  wait_for(*c, id, [](const json& v) { return v.value("stage", "") == "denoise"; });
  auto del = c->Delete(("/v1/videos/" + id).c_str());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
  get(*c, "/v1/videos/" + id, 404);
  // The worker is free again: the next job runs to the end well before 1000 steps could.
  const std::string next = post(*c, tiny_job()).value("id", "");
  const json v = wait_for(
      *c, next, [](const json& j) { return is(j, "completed"); }, 60);
  EXPECT_EQ(v.value("status", ""), "completed");
  EXPECT_FALSE(fs::exists(work_->path() / "data" / "inputs" / id));
}

TEST_F(ServeCli, BadRequestsAreAnsweredNamingTheField) {
  auto s = start("--api-key sesame --max-body-mb 1 --max-queue 1");
  auto anon = s->client();
  auto c = s->client("sesame");
  // Auth: everything but /health and the page needs the key.
  get(*anon, "/health", 200);
  get(*anon, "/v1/videos", 401);
  get(*s->client("wrong"), "/v1/videos", 401);
  post(*anon, tiny_job(), 401);
  get(*c, "/v1/videos", 200);

  json unknown = tiny_job();
  unknown["colour"] = "blue";
  const json e1 = post(*c, unknown, 400);
  EXPECT_EQ(e1["error"].value("param", ""), "colour") << e1.dump();
  EXPECT_NE(e1["error"].value("message", "").find("colour"), std::string::npos);

  for (const char* size : {"65x32", "64", "0x32", "axb"}) {
    json bad_size = tiny_job();
    bad_size["size"] = size;
    const json e = post(*c, bad_size, 400);
    EXPECT_EQ(e["error"].value("param", ""), "size") << size << ": " << e.dump();
  }
  json bad_steps = tiny_job();
  bad_steps["steps"] = "many";
  EXPECT_EQ(post(*c, bad_steps, 400)["error"].value("param", ""), "steps");
  json bad_model = tiny_job();
  bad_model["model"] = "sora-2";
  EXPECT_EQ(post(*c, bad_model, 400)["error"].value("param", ""), "model");

  auto bad_json = c->Post("/v1/videos", "{\"prompt\": ", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_NE(bad_json->body.find("not valid JSON"), std::string::npos) << bad_json->body;

  // Bad media in a multipart upload: named by its field.
  httplib::MultipartFormDataItems items = {
      {"prompt", "x", "", ""}, {"image", std::string("\x89PNG not really"), "a.png", "image/png"}};
  auto bad_media = c->Post("/v1/videos", items);
  ASSERT_TRUE(bad_media);
  EXPECT_EQ(bad_media->status, 400);
  EXPECT_EQ(json::parse(bad_media->body)["error"].value("param", ""), "image") << bad_media->body;
  EXPECT_EQ(bad_media->body.find(work_->path().string()), std::string::npos) << bad_media->body;

  json big = tiny_job();
  big["prompt"] = std::string(2u << 20, 'a');
  auto too_big = c->Post("/v1/videos", big.dump(), "application/json");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413);

  // Queue full: one running, one waiting (the limit), the next is refused.
  const std::string running = post(*c, tiny_job("long", 1000)).value("id", "");
  wait_for(*c, running, [](const json& v) { return is(v, "in_progress"); });
  const std::string waiting = post(*c, tiny_job()).value("id", "");
  const json full = post(*c, tiny_job(), 429);
  EXPECT_NE(full["error"].value("message", "").find("queue is full"), std::string::npos);
  get(*c, "/v1/videos/not-an-id", 404);
  auto d1 = c->Delete(("/v1/videos/" + running).c_str());
  auto d2 = c->Delete(("/v1/videos/" + waiting).c_str());
  ASSERT_TRUE(d1 && d2);
  EXPECT_EQ(d1->status, 200);
  EXPECT_EQ(d2->status, 200);
}

// A checkpoint that declares its geometry (default_height, default_width, default_num_frames in its
// index) gives it to a request that names no size or duration, as h3 generate does.
TEST_F(ServeCli, ARequestWithoutSizeOrDurationTakesTheCheckpointsGeometry) {
  const fs::path model = work_->path() / "declared";
  fs::copy(tiny_, model, fs::copy_options::recursive);
  const fs::path index = model / "modular_model_index.json";
  json j = json::parse(std::ifstream(index));
  j["default_height"] = 32;
  j["default_width"] = 64;
  j["default_num_frames"] = 22;
  std::ofstream(index) << j.dump(2);
  ServerProcess s("--model " + shell_quote(model.string()) + " --data " +
                      shell_quote((work_->path() / "data").string()),
                  work_->path() / "declared.log");
  ASSERT_GT(s.port(), 0) << s.log_text();
  auto c = s.client();
  const json job = post(*c, {{"prompt", "a red circle bounces"}, {"steps", 2}});
  EXPECT_EQ(job.value("size", ""), "64x32") << job.dump();
  EXPECT_EQ(job.value("seconds", ""), "0.92") << job.dump();
  EXPECT_TRUE(is(wait_for(*c, job.value("id", ""),
                          [](const json& v) { return is(v, "completed") || is(v, "failed"); }),
                 "completed"));
}

TEST_F(ServeCli, RefusesJobFlagsAndBadServerFlags) {
  RunResult r = run_h3("serve --model " + shell_quote(tiny_) + " --prompt hi");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("per-job"), std::string::npos) << r.output;
  r = run_h3("serve --model " + shell_quote(tiny_) + " --port 99999");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--port"), std::string::npos) << r.output;
  r = run_h3("serve");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--model"), std::string::npos) << r.output;
}

// Adapters offered from --lora-dir, per request: a job that names one differs from the base, the
// next job without it is the base again byte for byte (the engine restores the fused weights), and
// a name the server does not offer is answered naming the field.
TEST_F(ServeCli, LoraAdaptersPerRequestAndTheBaseAfterThem) {
  const fs::path loras = work_->path() / "loras";
  fs::create_directories(loras);
  const dit::DitConfig c = dit::DitConfig::load(tiny_ + "/transformer");
  std::vector<io::NamedTensor> ts;
  std::vector<float> a(static_cast<size_t>(4 * c.hidden_size)),
      b(static_cast<size_t>(c.inner_dim() * 4));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.3f * static_cast<float>((i * 37) % 11) - 1.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.2f * static_cast<float>((i * 53) % 13) - 1.2f;
  for (const char* m : {"attn.to_q", "attn.to_v"}) {
    const std::string p = std::string("transformer.transformer_blocks.0.") + m;
    ts.push_back({p + ".lora_A.weight", Tensor::from_f32(a, {4, c.hidden_size})});
    ts.push_back({p + ".lora_B.weight", Tensor::from_f32(b, {c.inner_dim(), 4})});
  }
  io::write_safetensors((loras / "style.safetensors").string(), ts);

  auto s = start("--lora-dir " + shell_quote(loras.string()));
  auto cl = s->client();
  auto run = [&](const json& job) {
    const json j = post(*cl, job);
    const std::string id = j.value("id", "");
    const json done = wait_for(*cl, id, [](const json& v) {
      return v.value("status", "") == "completed" || v.value("status", "") == "failed";
    });
    EXPECT_EQ(done.value("status", ""), "completed") << done.dump();
    auto mp4 = cl->Get(("/v1/videos/" + id + "/content").c_str());
    return mp4 ? mp4->body : std::string();
  };
  const std::string base = run(tiny_job());
  json with = tiny_job();
  with["loras"] = json::array({"style.safetensors:0.8"});
  const std::string adapted = run(with);
  const std::string again = run(tiny_job());
  ASSERT_FALSE(base.empty());
  EXPECT_NE(adapted, base) << "the adapter did not change the video";
  EXPECT_EQ(again, base) << "the base model after an adapter differs from the base model before it";

  json missing = tiny_job();
  missing["loras"] = json::array({json{{"name", "other.safetensors"}, {"scale", 1.0}}});
  const json e = post(*cl, missing, 400);
  EXPECT_EQ(e["error"].value("param", ""), "loras") << e.dump();
  EXPECT_NE(e["error"].value("message", "").find("style.safetensors"), std::string::npos)
      << e.dump();
}

}  // namespace
}  // namespace h3::test

#endif  // H3_WITH_SERVE
