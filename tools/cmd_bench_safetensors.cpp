// h3 bench safetensors-open: what opening a checkpoint costs on the CPU, phase by phase. A small
// component's load (the audio VAE's is about 40 ms) is mostly fixed costs, and parsing a header of
// a thousand tensors is one of them.
//
// For each file: the header parse, the sort into data order with the overlap check, the name
// index, SafetensorsFile::open and Checkpoint::open as a whole (mapping included; the page cache
// is warm after the first round). --synthetic N first writes FILE as a sparse file of N tensors
// with names and shapes like the transformer's blocks, for header sizes no small model has.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "command.h"
#include "core/status.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "io/safetensors_header.h"

namespace {

using h3::ErrorCode;
using Clock = std::chrono::steady_clock;

int64_t int_flag(const std::string& flag, const std::string& v) {
  H3_CHECK(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() < 10 &&
               std::stoll(v) > 0,
           ErrorCode::kInvalidArgument, flag, " expects a positive integer, got '", v, "'");
  return std::stoll(v);
}

// Tensors named and shaped like the transformer's blocks (bf16, float32 norms), `count` of them.
std::vector<h3::io::TensorInfo> synthetic_infos(int64_t count) {
  struct Spec {
    const char* suffix;
    h3::Shape shape;
    h3::DType dtype;
  };
  const int64_t d = 5120, f = 13824;
  const std::vector<Spec> specs = {
      {"attn1.to_q.weight", {d, d}, h3::DType::kBF16},
      {"attn1.to_k.weight", {d, d}, h3::DType::kBF16},
      {"attn1.to_v.weight", {d, d}, h3::DType::kBF16},
      {"attn1.to_out.0.weight", {d, d}, h3::DType::kBF16},
      {"attn1.to_out.0.bias", {d}, h3::DType::kBF16},
      {"attn1.norm_q.weight", {128}, h3::DType::kF32},
      {"attn1.norm_k.weight", {128}, h3::DType::kF32},
      {"ff.net.0.proj.weight", {f, d}, h3::DType::kBF16},
      {"ff.net.0.proj.bias", {f}, h3::DType::kBF16},
      {"ff.net.2.weight", {d, f}, h3::DType::kBF16},
      {"ff.net.2.bias", {d}, h3::DType::kBF16},
      {"norm1.linear.weight", {6 * d, d}, h3::DType::kBF16},
      {"norm2.weight", {d}, h3::DType::kF32},
      {"scale_shift_table", {1, 6, d}, h3::DType::kF32},
  };
  std::vector<h3::io::TensorInfo> out;
  for (int64_t i = 0; i < count; ++i) {
    const Spec& s = specs[static_cast<size_t>(i) % specs.size()];
    h3::io::TensorInfo t;
    t.name = "transformer_blocks." + std::to_string(i / static_cast<int64_t>(specs.size())) + "." +
             s.suffix;
    t.dtype = s.dtype;
    t.shape = s.shape;
    out.push_back(std::move(t));
  }
  return out;
}

struct Timing {
  double mean_ms = 0, min_ms = 0;
};

// Runs `fn` `repeat` times; `setup`, untimed, before each run.
Timing time_it(int64_t repeat, const std::function<void()>& setup,
               const std::function<void()>& fn) {
  Timing t;
  t.min_ms = 1e30;
  for (int64_t r = 0; r < repeat; ++r) {
    if (setup) setup();
    const auto t0 = Clock::now();
    fn();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    t.mean_ms += ms / static_cast<double>(repeat);
    t.min_ms = std::min(t.min_ms, ms);
  }
  return t;
}

void line(const char* what, const Timing& t) {
  std::printf("  %-28s mean %8.3f ms   min %8.3f ms\n", what, t.mean_ms, t.min_ms);
}

void bench_file(const std::string& path, int64_t repeat) {
  const auto map = h3::io::MappedFile::open(path);
  const uint8_t* p = map->data();
  const uint64_t file_size = map->size();
  std::vector<h3::io::TensorInfo> infos;
  std::map<std::string, std::string> metadata;
  const uint64_t n = h3::io::parse_safetensors_bytes(p, file_size, path, &infos, &metadata);
  const uint64_t data_start = 8 + n;
  std::printf("%s: %zu tensors, header %llu bytes, %zu metadata entries; %lld rounds\n",
              path.c_str(), infos.size(), static_cast<unsigned long long>(n), metadata.size(),
              static_cast<long long>(repeat));

  std::vector<h3::io::TensorInfo> parsed;
  line("header parse (json)", time_it(repeat, nullptr, [&] {
         h3::io::parse_header_json(p + 8, n, data_start, file_size - data_start, path, &parsed,
                                   &metadata);
       }));
  line("header parse (fast)", time_it(repeat, nullptr, [&] {
         H3_CHECK(h3::io::parse_header_fast(p + 8, n, data_start, file_size - data_start, path,
                                            &parsed, &metadata),
                  ErrorCode::kInternal, path, ": the fast header parser declined this file");
       }));
  std::vector<h3::io::TensorInfo> work;
  line("sort + overlap check", time_it(
                                   repeat, [&] { work = parsed; },
                                   [&] { h3::io::sort_and_check_spans(&work, data_start, path); }));
  line("name index (std::map)", time_it(repeat, nullptr, [&] {
         std::map<std::string, size_t> index;
         for (size_t i = 0; i < infos.size(); ++i) index.emplace(infos[i].name, i);
       }));
  // What SafetensorsFile::open builds.
  line("name index (hashed views)", time_it(repeat, nullptr, [&] {
         std::unordered_map<std::string_view, size_t> index;
         index.reserve(infos.size());
         for (size_t i = 0; i < infos.size(); ++i) index.emplace(infos[i].name, i);
       }));
  line("SafetensorsFile::open",
       time_it(repeat, nullptr, [&] { h3::io::SafetensorsFile::open(path); }));
  line("Checkpoint::open", time_it(repeat, nullptr, [&] { h3::io::Checkpoint::open(path); }));
}

int run_bench_safetensors_open(const std::vector<std::string>& args) {
  int64_t repeat = 20, synthetic = 0;
  std::vector<std::string> files;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: h3 bench safetensors-open FILE... [--repeat N] [--synthetic N]\n\n"
          "Times opening safetensors files on the CPU: header parse, sort + overlap check,\n"
          "name index, SafetensorsFile::open and Checkpoint::open (mean and min of N rounds,\n"
          "default 20). --synthetic N first writes each FILE as a sparse file of N tensors\n"
          "named and shaped like the transformer's blocks.\n");
      return 0;
    }
    if (a.rfind("--", 0) != 0) {
      files.push_back(a);
      continue;
    }
    H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, a, " needs a value");
    const std::string& v = args[++i];
    if (a == "--repeat") {
      repeat = int_flag(a, v);
    } else if (a == "--synthetic") {
      synthetic = int_flag(a, v);
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", a,
               "' (see h3 bench safetensors-open --help)");
    }
  }
  H3_CHECK(!files.empty(), ErrorCode::kInvalidArgument,
           "h3 bench safetensors-open needs at least one FILE");
  for (const std::string& f : files) {
    if (synthetic > 0) {
      h3::io::write_safetensors_sparse(f, synthetic_infos(synthetic),
                                       {{"format", "pt"}, {"note", "h3 bench synthetic"}});
    }
    bench_file(f, repeat);
  }
  return 0;
}

}  // namespace

H3_COMMAND("bench safetensors-open",
           "time opening safetensors files: header parse, sort, name index, whole open",
           run_bench_safetensors_open);
