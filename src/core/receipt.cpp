#include "core/receipt.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <utility>

#include "core/cuda_stream.h"
#include "core/nvtx.h"
#include "core/status.h"

namespace h3 {

// Start and end events of one entry, kept until its GPU time is read.
struct Receipt::GpuTiming {
  int index = -1;
  Event start;
  Event end;
  bool ended = false;
};

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string format_bytes(uint64_t b) {
  char buf[32];
  const double v = static_cast<double>(b);
  if (b >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", v / (1024.0 * 1024.0 * 1024.0));
  } else if (b >= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", v / (1024.0 * 1024.0));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", v / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  }
  return buf;
}

std::string format_ms(double ms) {
  if (ms < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", ms);
  return buf;
}

}  // namespace

// ---- Stage ------------------------------------------------------------------------------------

Receipt::Stage::Stage(Stage&& o) noexcept
    : receipt_(std::exchange(o.receipt_, nullptr)),
      index_(o.index_),
      t0_(o.t0_),
      stream_(o.stream_),
      nvtx_(std::exchange(o.nvtx_, 0)) {}

Receipt::Stage& Receipt::Stage::operator=(Stage&& o) noexcept {
  if (this != &o) {
    end();
    receipt_ = std::exchange(o.receipt_, nullptr);
    index_ = o.index_;
    t0_ = o.t0_;
    stream_ = o.stream_;
    nvtx_ = std::exchange(o.nvtx_, 0);
  }
  return *this;
}

Receipt::Stage::~Stage() {
  // A destructor must not throw; a failing end event (a broken CUDA context) only loses the time.
  try {
    end();
  } catch (...) {
  }
}

void Receipt::Stage::end() {
  nvtx_range_end(std::exchange(nvtx_, 0));
  if (!receipt_) return;
  Receipt* r = std::exchange(receipt_, nullptr);
  r->end_stage(*this);
}

void Receipt::Stage::add_bytes(uint64_t n) {
  if (!receipt_) return;
  std::lock_guard<std::mutex> lock(receipt_->mu_);
  receipt_->entries_[index_].bytes += n;
}

// ---- Receipt ----------------------------------------------------------------------------------

Receipt::Receipt() = default;
Receipt::~Receipt() = default;

Receipt::Stage Receipt::stage(const std::string& name, const Stream* stream) {
  Stage s;
  // Events first: if CUDA fails here, the receipt is left unchanged.
  std::unique_ptr<GpuTiming> g;
  if (stream) {
    g = std::make_unique<GpuTiming>();
    g->start = Event::create(stream->device(), true);
    g->end = Event::create(stream->device(), true);
    g->start.record(*stream);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry e;
    e.name = name;
    e.parent = open_.empty() ? -1 : open_.back();
    e.depth = static_cast<int>(open_.size());
    e.open = true;
    entries_.push_back(std::move(e));
    s.index_ = static_cast<int>(entries_.size()) - 1;
    open_.push_back(s.index_);
    if (g) {
      g->index = s.index_;
      pending_.push_back(std::move(g));
    }
  }
  s.receipt_ = this;
  s.stream_ = stream;
  s.nvtx_ = nvtx_range_start(name.c_str());  // Nsight Systems timelines (H3_NVTX=1)
  s.t0_ = std::chrono::steady_clock::now();
  return s;
}

void Receipt::end_stage(Stage& s) {
  const double wall = ms_since(s.t0_);
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[s.index_];
  e.wall_ms = wall;
  e.open = false;
  // Stages normally end in LIFO order; one that ends early is simply taken off the stack.
  const auto it = std::find(open_.rbegin(), open_.rend(), s.index_);
  if (it != open_.rend()) open_.erase(std::next(it).base());
  if (s.stream_) {
    for (auto& g : pending_) {
      if (g->index == s.index_ && !g->ended) {
        g->end.record(*s.stream_);
        g->ended = true;
      }
    }
  }
}

int Receipt::add(const std::string& name, double wall_ms, double gpu_ms, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry e;
  e.name = name;
  e.parent = open_.empty() ? -1 : open_.back();
  e.depth = static_cast<int>(open_.size());
  e.wall_ms = wall_ms;
  e.gpu_ms = gpu_ms;
  e.bytes = bytes;
  entries_.push_back(std::move(e));
  return static_cast<int>(entries_.size()) - 1;
}

void Receipt::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[key] = value;
}
void Receipt::set(const std::string& key, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[key] = value;
}
void Receipt::set(const std::string& key, int64_t value) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[key] = value;
}
void Receipt::set(const std::string& key, bool value) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[key] = value;
}

void Receipt::resolve_gpu() const {
  // Called with mu_ held. Waits only for stages that have ended.
  for (auto it = pending_.begin(); it != pending_.end();) {
    GpuTiming& g = **it;
    if (!g.ended) {
      ++it;
      continue;
    }
    entries_[g.index].gpu_ms = Event::elapsed_ms(g.start, g.end);
    it = pending_.erase(it);
  }
}

std::vector<Receipt::Entry> Receipt::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  resolve_gpu();
  return entries_;
}

double Receipt::total_wall_ms(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  double sum = 0;
  for (const Entry& e : entries_) {
    if (e.name == name) sum += e.wall_ms;
  }
  return sum;
}

std::string Receipt::table() const {
  const std::vector<Entry> es = entries();
  nlohmann::json vals;
  {
    std::lock_guard<std::mutex> lock(mu_);
    vals = values_;
  }
  struct Row {
    std::string cells[5];
  };
  std::vector<Row> rows;
  rows.push_back({{"stage", "wall ms", "gpu ms", "bytes", "GB/s"}});
  for (const Entry& e : es) {
    Row r;
    r.cells[0] =
        std::string(2 * static_cast<size_t>(e.depth), ' ') + e.name + (e.open ? " (open)" : "");
    r.cells[1] = format_ms(e.wall_ms);
    r.cells[2] = format_ms(e.gpu_ms);
    r.cells[3] = e.bytes ? format_bytes(e.bytes) : "-";
    if (e.bytes && e.wall_ms > 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2f", e.gb_per_s());
      r.cells[4] = buf;
    } else {
      r.cells[4] = "-";
    }
    rows.push_back(std::move(r));
  }
  size_t width[5] = {0, 0, 0, 0, 0};
  for (const Row& r : rows) {
    for (int c = 0; c < 5; ++c) width[c] = std::max(width[c], r.cells[c].size());
  }
  std::string out;
  for (const Row& r : rows) {
    std::string line = r.cells[0] + std::string(width[0] - r.cells[0].size(), ' ');
    for (int c = 1; c < 5; ++c) {
      line += "  " + std::string(width[c] - r.cells[c].size(), ' ') +
              r.cells[c];  // numbers right-aligned
    }
    out += line + "\n";
  }
  if (!vals.empty()) {
    size_t kw = 0;
    for (auto it = vals.begin(); it != vals.end(); ++it) kw = std::max(kw, it.key().size());
    for (auto it = vals.begin(); it != vals.end(); ++it) {
      const std::string v = it->is_string() ? it->get<std::string>() : it->dump();
      out += it.key() + std::string(kw - it.key().size(), ' ') + " = " + v + "\n";
    }
  }
  return out;
}

nlohmann::json Receipt::to_json() const {
  const std::vector<Entry> es = entries();
  nlohmann::json stages = nlohmann::json::array();
  std::vector<std::string> paths(es.size());
  for (size_t i = 0; i < es.size(); ++i) {
    const Entry& e = es[i];
    paths[i] = e.parent >= 0 ? paths[static_cast<size_t>(e.parent)] + "/" + e.name : e.name;
    nlohmann::json j;
    j["name"] = e.name;
    j["path"] = paths[i];
    j["parent"] = e.parent;
    j["depth"] = e.depth;
    j["wall_ms"] = e.wall_ms;
    j["gpu_ms"] = e.gpu_ms >= 0 ? nlohmann::json(e.gpu_ms) : nlohmann::json(nullptr);
    j["bytes"] = e.bytes;
    j["gb_per_s"] = e.bytes ? nlohmann::json(e.gb_per_s()) : nlohmann::json(nullptr);
    if (e.open) j["open"] = true;
    stages.push_back(std::move(j));
  }
  nlohmann::json out;
  out["stages"] = std::move(stages);
  std::lock_guard<std::mutex> lock(mu_);
  out["values"] = values_;
  return out;
}

void Receipt::write_json(const std::string& path) const {
  const std::string text = to_json().dump(2) + "\n";
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  H3_CHECK(f.good(), ErrorCode::kIo, "cannot open receipt file '", path, "' for writing");
  f << text;
  f.close();
  H3_CHECK(f.good(), ErrorCode::kIo, "cannot write receipt file '", path, "'");
}

}  // namespace h3
