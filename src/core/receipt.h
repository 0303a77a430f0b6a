// The timing receipt of one run: named stages with wall time and, for work queued on a CUDA
// stream, GPU time between two events; nesting (a stage inside a stage, e.g. "denoise" > "step 3"),
// bytes moved (weight loads) with the GB/s that follows, and free-form key/values (attention
// backend, memory plan, resolution). Printed as an aligned table and written as JSON, so a bench
// result can be pasted into an issue and compared by scripts.
//
//   Receipt r;
//   { auto s = r.stage("load dit"); ... s.add_bytes(n); }
//   { auto d = r.stage("denoise", &stream); for (...) { auto st = r.stage("step " + i, &stream); }
//   } r.set("attention", "flash-h3"); std::fputs(r.table().c_str(), stderr);
//   r.write_json("receipt.json");
//
// GPU times are resolved lazily (the end event is waited on when entries are read), so timing a
// stage never adds a synchronization inside the run. Safe to use from several threads; stages
// nest per receipt in the order they are opened.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3 {

class Stream;
class Event;

class Receipt {
 public:
  struct Entry {
    std::string name;
    int parent = -1;  // index of the enclosing entry, -1 at the top level
    int depth = 0;
    double wall_ms = 0;
    double gpu_ms = -1;  // < 0: not measured (no stream, or a CPU-only build)
    uint64_t bytes = 0;  // bytes moved in the stage; 0: not a transfer
    bool open = false;   // still running
    double gb_per_s() const {
      return bytes && wall_ms > 0 ? static_cast<double>(bytes) / (wall_ms * 1e6) : 0;
    }
  };

  // RAII handle of an open stage; ends it (wall time, end event) when destroyed or by end().
  class Stage {
   public:
    Stage() = default;
    Stage(Stage&& o) noexcept;
    Stage& operator=(Stage&& o) noexcept;
    Stage(const Stage&) = delete;
    Stage& operator=(const Stage&) = delete;
    ~Stage();
    void end();
    void add_bytes(uint64_t n);
    int index() const { return index_; }

   private:
    friend class Receipt;
    Receipt* receipt_ = nullptr;
    int index_ = -1;
    std::chrono::steady_clock::time_point t0_;
    const Stream* stream_ = nullptr;
    uint64_t nvtx_ = 0;  // open NVTX range, 0 when none
  };

  Receipt();
  ~Receipt();
  Receipt(const Receipt&) = delete;
  Receipt& operator=(const Receipt&) = delete;

  // Opens a stage nested in the innermost open one. With a stream, GPU time is measured between
  // events recorded on it at open and at end (the stream must outlive the Stage handle).
  Stage stage(const std::string& name, const Stream* stream = nullptr);
  // Adds a finished entry (measured elsewhere) under the innermost open stage; returns its index.
  int add(const std::string& name, double wall_ms, double gpu_ms = -1, uint64_t bytes = 0);

  void set(const std::string& key, const std::string& value);
  void set(const std::string& key, const char* value) { set(key, std::string(value)); }
  void set(const std::string& key, double value);
  void set(const std::string& key, int64_t value);
  void set(const std::string& key, int value) { set(key, static_cast<int64_t>(value)); }
  void set(const std::string& key, bool value);

  // Entries in the order they were opened (GPU times resolved).
  std::vector<Entry> entries() const;
  // Sum of the wall times of the entries named `name` (e.g. every "step" entry is not summed
  // unless named alike); 0 when none.
  double total_wall_ms(const std::string& name) const;
  const nlohmann::json& values() const { return values_; }

  // Columns: stage (indented by depth), wall ms, gpu ms, bytes, GB/s; then the key/values.
  std::string table() const;
  // {"stages": [{name, path, parent, depth, wall_ms, gpu_ms|null, bytes, gb_per_s}], "values":
  // {...}}
  nlohmann::json to_json() const;
  // Writes to_json() (indented) to `path`; throws kIo naming the path on failure.
  void write_json(const std::string& path) const;

 private:
  struct GpuTiming;
  void end_stage(Stage& s);
  void resolve_gpu() const;

  mutable std::mutex mu_;
  mutable std::vector<Entry> entries_;
  std::vector<int> open_;  // stack of open entry indices
  mutable std::vector<std::unique_ptr<GpuTiming>> pending_;
  nlohmann::json values_ = nlohmann::json::object();
};

}  // namespace h3
