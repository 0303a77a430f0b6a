// Loading checkpoint tensors straight into device memory (issue "memory runtime";
// ENGINEERING.md "The picture": weights go file -> device without a CPU copy of any tensor).
//
// Path on CUDA: the file is read with pread() in large sequential chunks, in file order, into a
// ring of page-locked staging buffers; each chunk's bytes are copied to their tensors with async
// host-to-device copies on a copy stream while the next chunks are being read (a process-wide
// pool of reader threads takes each chunk in pieces, one chunk per free buffer in flight, so that
// a hot page cache is not limited by one memcpy nor by waiting on each chunk). A buffer is reused
// only after the copies out of it finished (an event per buffer). Tensors next to each other in
// the file are read as one range, so a checkpoint of many small tensors still reads in big
// requests. dtype conversion (bf16 -> f32 widening, ...) runs on the device afterwards.
//
// On the CPU the tensors are the borrowed mmap views (no copy at all), unless the caller asks for
// owned copies (`host_copy`), which go through the same chunked reader: the CPU tests exercise
// the chunking, ring reuse and error paths with it.
//
// GPUDirect Storage (cuFile, io/cufile.h) is an optional second path on CUDA: libcufile is
// loaded at run time, each tensor's bytes are read straight into its device memory, and any
// failure (library absent, driver or registration refused, a read error) falls back to the
// staging ring with a warning. H3_CUFILE=1 forces trying it, H3_CUFILE=0 never; by default it is
// used only where the nvidia-fs driver provides real GDS (compatibility mode bounces through host
// memory, which the staging ring already does faster).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "io/safetensors.h"

namespace h3::io {

enum class LoadMethod { kMmap, kPreadHost, kPinnedRing, kCufile, kCufileCompat };
// "mmap", "pread-host", "pinned-ring", "cufile", "cufile-compat"
const char* load_method_name(LoadMethod m);

// Whether a CUDA load tries cuFile: kEnv reads H3_CUFILE ("1" = kOn, "0" = kOff, unset or
// "auto" = kAuto); kAuto uses it only with real GDS (not compatibility mode); kOn tries it
// whenever libcufile loads (compatibility mode included), falling back with a warning.
enum class CufileMode { kEnv, kAuto, kOff, kOn };

struct LoadStats {
  uint64_t bytes = 0;    // tensor bytes as stored in the file
  uint64_t tensors = 0;
  double seconds = 0;    // wall time of the loads, conversions included
  LoadMethod method = LoadMethod::kMmap;
  // Parts of `seconds` in staging-ring and host-copy loads: the destination allocations, the
  // page-cache check (mincore), waiting for the preads into the staging buffers (the reader
  // threads read several chunks ahead), issuing the copies out of them, and waiting for copies
  // (a buffer to come free, the last copies). `fill`, outside
  // `seconds`: the benchmark weight fill of the helpers below (io/weight_fill.h), no part of a
  // real load.
  double alloc_seconds = 0, probe_seconds = 0, read_seconds = 0, copy_seconds = 0, wait_seconds = 0,
         fill_seconds = 0;
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
  std::string str() const;  // "1.23 GB in 0.45 s (2.73 GB/s, pinned-ring, 17 tensors)"
  // The parts in milliseconds: "alloc 0.12, probe 0.30, read 17.1, copy 1.4, wait 0.8, fill 0 ms".
  std::string parts_str() const;
  // What happened between `before` and this (both cumulative figures of one loader or process).
  LoadStats since(const LoadStats& before) const;
};

// Where a load puts its tensors on the device (or in host copies): each in its own allocation,
// or all in one allocation. Packing saves a component of hundreds of small tensors as many pool
// allocations; its memory returns only when the last of them goes, so it suits a set that lives
// and dies together (a dtype conversion, `as`, makes a separate tensor and leaves its packed bytes
// unused). A packed load mirrors the file where it can: tensors that follow one another in the
// file with small gaps and 16-byte aligned offsets keep their distances, so that a staging buffer
// goes to the device in one copy rather than one per tensor (a released audio VAE decoder has 660
// tensors, most of a few kilobytes); each such run starts at a 256-byte boundary, and a tensor
// that breaks the alignment starts a new one. Every packed tensor is 16-byte aligned at least.
enum class LoadLayout { kSeparate, kPacked };

struct DeviceLoaderOptions {
  size_t staging_bytes = size_t{64} << 20;  // one ring buffer
  int staging_buffers = 4;                  // ring size (>= 2 for overlap)
  int reader_threads = 4;                   // parallel preads per chunk
  // Readers when the ranges are already in the page cache (mincore): copying out of the cache is
  // bound by memcpy per core, not by the disk, which more parallel requests would only slow down
  // (bench/RESULTS.md, weight loading: warm 12.3-15.2 GB/s with 4 readers, 15.6-16.3 with 8; the
  // audio VAE alone 13.4 GB/s with 8, 15.0 with 12, 17.6 with 16). At most one per hardware thread.
  int cached_reader_threads = 16;
  // Ranges of wanted tensors separated by at most this many unwanted bytes are read as one.
  uint64_t merge_gap = uint64_t{1} << 20;
  // CPU target only: return owned copies read through the chunked reader instead of mmap views.
  bool host_copy = false;
  // CUDA target only: the GPUDirect Storage path (see CufileMode).
  CufileMode cufile = CufileMode::kEnv;
};

// One request: a tensor of the checkpoint, optionally converted to `as` after the copy.
struct LoadItem {
  std::string name;
  std::optional<DType> as;
};

class DeviceLoader {
 public:
  explicit DeviceLoader(Device device, const DeviceLoaderOptions& options = {});
  ~DeviceLoader();
  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;

  Device device() const { return device_; }
  // Loads the tensors (read in file order whatever the order of `items`); returns them in the
  // order of `items`, contiguous, on the device, in their `as` dtype. Throws kNotFound naming the
  // checkpoint and tensor for an unknown name, kIo naming the file when a read fails or the file
  // is shorter than its header says (truncated after it was opened), kOutOfMemory from the
  // allocations. All copies have completed when it returns.
  std::vector<Tensor> load(const Checkpoint& ckpt, const std::vector<LoadItem>& items,
                           LoadLayout layout = LoadLayout::kSeparate);
  Tensor load_one(const Checkpoint& ckpt, const std::string& name,
                  std::optional<DType> as = std::nullopt);
  // Cumulative over this loader's calls.
  const LoadStats& stats() const { return stats_; }

  struct Sink;  // where staged bytes go (host memcpy, or async copies to a CUDA device)

 private:
  Device device_;
  DeviceLoaderOptions options_;
  std::unique_ptr<Sink> sink_;
  LoadStats stats_;
  bool use_cufile_ = false;  // decided at construction; cleared after a cuFile failure
};

// ---- process-wide helpers used by the model loaders ----------------------------------------------

// One tensor on `device` (CPU: the borrowed mmap view, converted with Tensor::to when `as` is
// given; CUDA: through a staging ring shared per device). Counts into device_load_totals().
Tensor load_tensor_to(const Checkpoint& ckpt, const std::string& name, Device device,
                      std::optional<DType> as = std::nullopt);
// Several tensors in one pass (file order), returned in the order of `items`.
std::vector<Tensor> load_tensors_to(const Checkpoint& ckpt, const std::vector<LoadItem>& items,
                                    Device device, LoadLayout layout = LoadLayout::kSeparate);
// Totals of every load through the two helpers above since the process started; the engine
// reports the difference around a component's load.
LoadStats device_load_totals();
// Frees the shared staging rings (pinned host memory) until the next load needs them. A ring
// otherwise stays from one load to the next: pinning its 256 MiB takes tens of milliseconds,
// more than reading a small component (the audio VAE's 0.26 GB) from the page cache.
void release_device_staging();

// ---- building blocks shared with the benchmark ---------------------------------------------------

// A contiguous byte range of a file to be delivered to `dst` (host or device memory, per sink).
struct ByteSpan {
  uint64_t offset = 0;  // in the file
  uint64_t nbytes = 0;
  void* dst = nullptr;
  std::string label;  // tensor name, for error messages
  // Spans of one nonzero run lie at the same distance between file and destination, and the
  // destination between them belongs to the run (a packed load's mirror of the file): one copy
  // may carry several of them and the file's bytes between.
  uint32_t run = 0;
};
// Streams `spans` of the file at `path` through `sink`'s ring (spans sorted here by offset).
// Returns the number of bytes read from the file (gaps merged in included). `times`, when given,
// gets the probe, read, copy and wait seconds added (LoadStats).
uint64_t stream_spans(const std::string& path, std::vector<ByteSpan> spans,
                      DeviceLoader::Sink& sink, const DeviceLoaderOptions& options,
                      LoadStats* times = nullptr);

// A sink with `buffers` staging buffers of `bytes` each: pinned + async copies on a copy stream
// for a CUDA device (kUnsupported in builds without CUDA), plain memory + memcpy for the CPU.
std::unique_ptr<DeviceLoader::Sink> make_staging_sink(Device device, int buffers, size_t bytes);

struct DeviceLoader::Sink {
  virtual ~Sink() = default;
  virtual int count() const = 0;
  virtual size_t capacity() const = 0;
  virtual uint8_t* buffer(int i) = 0;
  // Called once the destination tensors are allocated, before the first copy: device memory
  // comes from a pool ordered on the default stream (core/device.h), so the copy stream must not
  // write into it before the default stream has passed the allocation (and the last use of the
  // freed block it may reuse).
  virtual void begin() {}
  // Blocks until copies issued from buffer i (since its last release) have finished.
  virtual void wait(int i) = 0;
  // Copies n bytes from inside buffer i to dst (asynchronously where the sink can).
  virtual void copy(void* dst, const uint8_t* src, size_t n, int i) = 0;
  // Marks the end of the copies issued from buffer i.
  virtual void release(int i) = 0;
  // Blocks until every copy has finished.
  virtual void finish() = 0;
};

}  // namespace h3::io
