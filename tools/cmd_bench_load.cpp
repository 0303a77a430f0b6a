// h3 bench load: how fast weights reach the GPU. Writes (or reuses) a synthetic DiT-shaped
// safetensors file at the released width (the first transformer blocks' tensors with their
// released names and shapes, random bf16, float32 islands as float32) of at least --size-gb, then
// measures: the raw disk read (O_DIRECT, page cache dropped), a cold load to the GPU through
// io/device_loader.h, a warm load (page cache hot), and the plain path it replaces (mmap view ->
// synchronous cudaMemcpy per tensor) cold and warm, the streamed layers' copy into pinned host
// memory (pin_layers) cold and warm, and GPUDirect Storage (io/cufile.h) cold and warm where
// libcufile loads. Each line gives GB/s and the method.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/layer_stream.h"
#include "core/log.h"
#include "core/status.h"
#include "io/cufile.h"
#include "io/device_loader.h"
#include "io/safetensors.h"
#include "models/audio_vae/audio_vae_model.h"
#include "models/h3_dit/dit_config.h"
#include "models/h3_dit/dit_weights.h"
#include "models/tiny_model.h"
#include "models/video_vae/video_vae_model.h"
#include "pipeline/random_weights.h"

namespace {

using h3::ErrorCode;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Args {
  std::string file;
  double size_gb = 12;
  std::string device = "cuda:0";
  size_t staging_mb = 64;
  int buffers = 4;
  int threads = 4;
  bool rewrite = false;
};

// The released DiT's block tensors, blocks 0, 1, ... until `bytes` is reached.
std::vector<h3::io::TensorInfo> synthetic_layout(uint64_t bytes) {
  const h3::dit::DitConfig cfg = h3::dit::DitConfig::from_json(
      h3::models::make_tiny_config("transformer", true), "released transformer config");
  std::vector<h3::io::TensorInfo> out;
  uint64_t total = 0;
  const std::vector<h3::dit::DitTensorSpec> specs = h3::dit::dit_tensor_specs(cfg);
  for (int64_t block = 0; total < bytes; ++block) {
    const std::string prefix = "transformer_blocks." + std::to_string(block % cfg.num_layers) + ".";
    const std::string rename = "transformer_blocks." + std::to_string(block) + ".";
    for (const auto& s : specs) {
      if (s.name.rfind(prefix, 0) != 0) continue;
      h3::io::TensorInfo t;
      t.name = rename + s.name.substr(prefix.size());
      t.dtype = s.fp32_island ? h3::DType::kF32 : h3::DType::kBF16;
      t.shape = s.shape;
      t.nbytes = static_cast<uint64_t>(h3::shape_numel(s.shape)) * h3::dtype_size(t.dtype);
      total += t.nbytes;
      out.push_back(t);
    }
  }
  return out;
}

// Streams the file: header, then random data in 64 MiB pieces (xorshift; bf16 bit patterns of
// any value are fine for a transfer benchmark). Written to a temporary name renamed at the end.
void write_synthetic(const std::string& path, std::vector<h3::io::TensorInfo> infos) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t off = 0;
  for (auto& t : infos) {
    header[t.name] = {{"dtype", h3::dtype_safetensors_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {off, off + t.nbytes}}};
    off += t.nbytes;
  }
  header["__metadata__"] = {{"format", "pt"}, {"note", "h3 bench load synthetic"}};
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  H3_CHECK(fd >= 0, ErrorCode::kIo, "cannot create ", tmp, ": ", std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, b, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = errno;
        ::close(fd);
        h3::fail(ErrorCode::kIo, "writing ", tmp, " failed: ", std::strerror(err));
      }
      b += w;
      n -= static_cast<size_t>(w);
    }
  };
  const uint64_t hlen = h.size();
  put(&hlen, 8);
  put(h.data(), h.size());
  std::vector<uint64_t> buf((size_t{64} << 20) / 8);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  const auto t0 = Clock::now();
  for (uint64_t left = off; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size() * 8));
    for (size_t i = 0; i < (n + 7) / 8; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      buf[i] = x;
    }
    put(buf.data(), n);
    left -= n;
  }
  ::fsync(fd);
  ::close(fd);
  std::filesystem::rename(tmp, path);
  std::printf("wrote %s: %.2f GB, %zu tensors, %.1f s\n", path.c_str(), off / 1e9, infos.size(),
              seconds_since(t0));
}

// Drops the file's pages from the page cache: fadvise(DONTNEED) always, and the global
// drop_caches when permitted. Returns the fraction of the file still cached (mincore).
double drop_cache(const std::string& path, bool* global_drop) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  H3_CHECK(fd >= 0, ErrorCode::kIo, "cannot open ", path, ": ", std::strerror(errno));
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::sync();
  {
    std::ofstream dc("/proc/sys/vm/drop_caches");
    if (dc) {
      dc << "3\n";
      dc.flush();
      *global_drop = static_cast<bool>(dc);
    } else {
      *global_drop = false;
    }
  }
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  double cached = -1;
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (m != MAP_FAILED) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> vec((size + page - 1) / page);
    if (::mincore(m, size, vec.data()) == 0) {
      size_t in = 0;
      for (unsigned char v : vec) in += v & 1;
      cached = vec.empty() ? 0 : static_cast<double>(in) / static_cast<double>(vec.size());
    }
    ::munmap(m, size);
  }
  ::close(fd);
  return cached;
}

// Sequential read of the whole file with O_DIRECT (no page cache) in 64 MiB requests, 4 in
// flight from 4 threads on interleaved pieces; falls back to buffered reads where O_DIRECT is
// refused (tmpfs).
double raw_read(const std::string& path, uint64_t size, std::string* how) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  *how = "O_DIRECT";
  if (fd < 0) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    *how = "buffered after drop";
  }
  H3_CHECK(fd >= 0, ErrorCode::kIo, "cannot open ", path, ": ", std::strerror(errno));
  constexpr size_t kPiece = size_t{64} << 20;
  constexpr int kThreads = 4;
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  std::atomic<bool> failed{false};
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      void* buf = nullptr;
      if (::posix_memalign(&buf, 4096, kPiece) != 0) {
        failed = true;
        return;
      }
      for (uint64_t off = static_cast<uint64_t>(t) * kPiece; off < size; off += kThreads * kPiece) {
        const ssize_t r = ::pread(fd, buf, kPiece, static_cast<off_t>(off));
        if (r <= 0) {
          failed = true;
          break;
        }
      }
      std::free(buf);
    });
  }
  for (auto& th : pool) th.join();
  const double s = seconds_since(t0);
  ::close(fd);
  H3_CHECK(!failed, ErrorCode::kIo, "raw read of ", path, " failed");
  return s;
}

void line(const char* what, uint64_t bytes, double s, const std::string& method, const char* ref) {
  std::printf("  %-28s %7.2f GB/s  %6.2f s  %-26s %s\n", what, bytes / s / 1e9, s, method.c_str(),
              ref);
}

// --component DIR: a VAE folder of a repository loaded as the engine loads it for a
// generation that encodes nothing (decoder only), from the page cache: once to warm the cache
// and the staging ring, then `repeat` times with the device's cached memory returned in between
// (each allocation is the driver's, as at a generation's first load). Each line gives the
// load's time, GB/s, and the component's own phase times.
int run_component_load(const std::string& dir, int repeat, bool random, const h3::Device& dev) {
  const std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
  const std::string kind = name.empty() ? std::filesystem::path(dir).parent_path().filename().string() : name;
  H3_CHECK(kind == "audio_vae" || kind == "vae", ErrorCode::kInvalidArgument, "--component ", dir,
           ": expected a repository's audio_vae/ or vae/ folder");
  std::unique_ptr<h3::pipeline::RandomWeightsScope> fill;
  if (random) fill = std::make_unique<h3::pipeline::RandomWeightsScope>(0);
  auto load_once = [&] {
    if (kind == "audio_vae") {
      h3::audio_vae::AudioVaeOptions o;
      o.device = dev;
      o.load_encoder = false;
      (void)h3::audio_vae::AudioVae::load(dir, o);
    } else {
      h3::video_vae::VideoVaeOptions o;
      o.device = dev;
      o.load_encoder = false;
      (void)h3::video_vae::VideoVae::load(dir, o);
    }
  };
  load_once();  // the files into the page cache, the staging ring pinned
  std::printf("%s (%s, decoder only%s): %d loads from the page cache\n", dir.c_str(), kind.c_str(),
              random ? ", random weights" : "", repeat);
  const h3::LogLevel level = h3::log_level();
  h3::set_log_level(h3::LogLevel::kDebug);  // the component's phase line, on stderr
  double best = 0.0;
  for (int i = 0; i < repeat; ++i) {
    h3::cuda_release_cached(dev.index);
    h3::Stream().synchronize();
    const h3::io::LoadStats before = h3::io::device_load_totals();
    const auto t0 = Clock::now();
    load_once();
    h3::Stream().synchronize();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const h3::io::LoadStats d = h3::io::device_load_totals().since(before);
    const double gbps = static_cast<double>(d.bytes) / s / 1e9;
    best = std::max(best, gbps);
    std::fflush(stderr);
    std::printf("  load %d: %.2f ms, %.3f GB, %.2f GB/s (loader: %s)\n", i + 1, s * 1e3, d.bytes / 1e9,
                gbps, d.parts_str().c_str());
    std::fflush(stdout);
  }
  h3::set_log_level(level);
  std::printf("best %.2f GB/s\n", best);
  return 0;
}

int run_bench_load(const std::vector<std::string>& argv) {
  Args a;
  std::string component;
  int repeat = 5;
  bool random = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& f = argv[i];
    auto value = [&]() -> std::string {
      H3_CHECK(i + 1 < argv.size(), ErrorCode::kInvalidArgument, f, " needs a value");
      return argv[++i];
    };
    if (f == "--help" || f == "-h") {
      std::printf(
          "usage: h3 bench load --file PATH [--size-gb N] [--device cuda:N] [--staging-mb N]\n"
          "                     [--buffers N] [--threads N] [--rewrite]\n"
          "       h3 bench load --component DIR [--repeat N] [--random-weights] [--device "
          "cuda:N]\n\n"
          "Writes (or reuses) a synthetic DiT-shaped safetensors file of at least N GB (default "
          "12)\n"
          "and measures raw disk read, cold and warm loads to the GPU, mmap + cudaMemcpy, the\n"
          "streamed layers' copy into pinned host memory (cold on 1 thread and on the default\n"
          "count, H3_PIN_THREADS; warm), and GPUDirect Storage (cuFile) cold and warm where\n"
          "libcufile loads.\n"
          "--component loads a repository's vae/ or audio_vae/ folder as a generation does\n"
          "(decoder only) from the page cache N times (default 5): ms, GB/s and the phases.\n");
      return 0;
    } else if (f == "--file") {
      a.file = value();
    } else if (f == "--size-gb") {
      a.size_gb = std::stod(value());
    } else if (f == "--device") {
      a.device = value();
    } else if (f == "--staging-mb") {
      a.staging_mb = static_cast<size_t>(std::stoul(value()));
    } else if (f == "--buffers") {
      a.buffers = std::stoi(value());
    } else if (f == "--threads") {
      a.threads = std::stoi(value());
    } else if (f == "--rewrite") {
      a.rewrite = true;
    } else if (f == "--component") {
      component = value();
    } else if (f == "--repeat") {
      repeat = std::stoi(value());
    } else if (f == "--random-weights") {
      random = true;
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown flag '", f, "' (see h3 bench load --help)");
    }
  }
  if (!component.empty()) {
    const h3::Device dev = h3::parse_device(a.device);
    H3_CHECK(dev.is_cuda() && h3::cuda_available(), ErrorCode::kUnsupported,
             "h3 bench load --component needs a CUDA device, got --device ", a.device);
    H3_CHECK(repeat >= 1 && repeat <= 1000, ErrorCode::kInvalidArgument,
             "--repeat must be in [1, 1000], got ", repeat);
    return run_component_load(component, repeat, random, dev);
  }
  H3_CHECK(!a.file.empty(), ErrorCode::kInvalidArgument,
           "h3 bench load needs --file PATH or --component DIR");
  H3_CHECK(a.size_gb > 0 && a.size_gb < 1000, ErrorCode::kInvalidArgument,
           "--size-gb must be in (0, 1000), got ", a.size_gb);
  H3_CHECK(a.staging_mb >= 1 && a.buffers >= 1 && a.threads >= 1, ErrorCode::kInvalidArgument,
           "--staging-mb, --buffers and --threads must be at least 1");
  const h3::Device dev = h3::parse_device(a.device);
  H3_CHECK(dev.is_cuda(), ErrorCode::kInvalidArgument, "h3 bench load measures loads to a GPU; --device ",
           a.device, " is not a CUDA device");
  H3_CHECK(h3::cuda_available(), ErrorCode::kUnsupported, "h3 bench load needs a CUDA device");

  const uint64_t want = static_cast<uint64_t>(a.size_gb * 1e9);
  bool reuse = !a.rewrite && std::filesystem::exists(a.file);
  if (reuse) {
    try {
      reuse = h3::io::Checkpoint::open(a.file).total_bytes() >= want;
    } catch (const h3::Error&) {
      reuse = false;
    }
  }
  if (reuse)
    std::printf("reusing %s\n", a.file.c_str());
  else
    write_synthetic(a.file, synthetic_layout(want));

  const h3::io::Checkpoint ck = h3::io::Checkpoint::open(a.file);
  const uint64_t bytes = ck.total_bytes();
  const uint64_t file_size = std::filesystem::file_size(a.file);
  std::vector<h3::io::LoadItem> items;
  for (const std::string& n : ck.names()) items.push_back({n, {}});
  std::printf("file %s: %.2f GB of tensors, %zu tensors; staging %d x %zu MiB, %d reader threads\n",
              a.file.c_str(), bytes / 1e9, items.size(), a.buffers, a.staging_mb, a.threads);

  h3::io::DeviceLoaderOptions lo;
  lo.staging_bytes = a.staging_mb << 20;
  lo.staging_buffers = a.buffers;
  lo.reader_threads = a.threads;
  lo.cached_reader_threads = a.threads;  // the count asked for, cached or not

  bool global = false;
  auto cold_note = [&](double cached) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "(cache dropped: %s, %.0f%% still cached)",
                  global ? "drop_caches" : "fadvise only", cached * 100);
    return std::string(buf);
  };

  std::printf("results:\n");
  {
    const double cached = drop_cache(a.file, &global);
    std::string how;
    const double s = raw_read(a.file, file_size, &how);
    line("raw disk read", file_size, s, how, cold_note(cached).c_str());
  }
  auto loader_run = [&](const char* label, const char* ref,
                        h3::io::CufileMode mode = h3::io::CufileMode::kEnv) {
    h3::io::DeviceLoaderOptions o = lo;
    o.cufile = mode;
    h3::io::DeviceLoader loader(dev, o);
    const auto t0 = Clock::now();
    std::vector<h3::Tensor> ts = loader.load(ck, items);
    const double s = seconds_since(t0);
    line(label, bytes, s, h3::io::load_method_name(loader.stats().method), ref);
  };
  {
    const double cached = drop_cache(a.file, &global);
    loader_run("cold load (h3 loader)", ("ref 1.77 GB/s (= the disk) " + cold_note(cached)).c_str());
  }
  loader_run("warm load (h3 loader)", "ref 7.3-7.9 GB/s");
  loader_run("warm load (h3 loader) #2", "ref 7.3-7.9 GB/s");
  auto mmap_run = [&](const char* label, const std::string& note) {
    const auto t0 = Clock::now();
    std::vector<h3::Tensor> ts;
    for (const auto& it : items) ts.push_back(ck.tensor(it.name).to(dev));
    const double s = seconds_since(t0);
    line(label, bytes, s, "mmap+cudaMemcpy", note.c_str());
  };
  {
    const double cached = drop_cache(a.file, &global);
    mmap_run("cold mmap -> cudaMemcpy", cold_note(cached));
  }
  mmap_run("warm mmap -> cudaMemcpy", "");
  // The streamed layers' path (core/layer_stream.h): the file's bf16 tensors, block by block,
  // into one pinned host buffer per block, on one thread and on the default count of threads;
  // each run's buffers are freed before the next.
  auto pin_run = [&](const char* label, int threads, const std::string& note) {
    std::vector<std::vector<h3::Tensor>> blocks;
    std::string current;
    for (const auto& it : items) {
      h3::Tensor t = ck.tensor(it.name);
      if (t.dtype() != h3::DType::kBF16) continue;
      const size_t dot = it.name.find('.', it.name.find('.') + 1);
      const std::string block = it.name.substr(0, dot);
      if (blocks.empty() || block != current) blocks.emplace_back();
      current = block;
      blocks.back().push_back(std::move(t));
    }
    std::vector<std::vector<h3::Tensor*>> lists;
    uint64_t pinned = 0;
    for (auto& b : blocks) {
      lists.emplace_back();
      for (h3::Tensor& t : b) {
        lists.back().push_back(&t);
        pinned += t.nbytes();
      }
    }
    const std::string n = std::to_string(threads);
    if (threads > 0) ::setenv("H3_PIN_THREADS", n.c_str(), 1);
    const auto t0 = Clock::now();
    h3::pin_layers(lists, h3::DType::kBF16, "bench block");
    const double s = seconds_since(t0);
    ::unsetenv("H3_PIN_THREADS");
    line(label, pinned, s, threads > 0 ? "pin_layers, " + n + " thread(s)" : "pin_layers, default",
         note.c_str());
  };
  {
    const double cached = drop_cache(a.file, &global);
    pin_run("cold pin to host, 1 thread", 1, cold_note(cached));
  }
  {
    const double cached = drop_cache(a.file, &global);
    pin_run("cold pin to host", 0, cold_note(cached));
  }
  pin_run("warm pin to host", 0, "");
  const h3::io::CufileInfo& cf = h3::io::cufile_probe(dev.index);
  if (cf.available) {
    const std::string note = "(" + cf.reason + ")";
    const double cached = drop_cache(a.file, &global);
    loader_run("cold load (cuFile)", (note + " " + cold_note(cached)).c_str(),
               h3::io::CufileMode::kOn);
    loader_run("warm load (cuFile)", note.c_str(), h3::io::CufileMode::kOn);
  } else {
    std::printf("  %-28s unavailable: %s\n", "cuFile (GPUDirect Storage)", cf.reason.c_str());
  }
  return 0;
}

}  // namespace

H3_COMMAND("bench load",
           "time weight loading to the GPU: disk, cold and warm loads, mmap + cudaMemcpy",
           run_bench_load);
