#include "io/device_loader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/log.h"
#include "core/status.h"
#include "io/cufile.h"
#include "io/weight_fill.h"
#include "ops/ops.h"

namespace h3::io {

const char* load_method_name(LoadMethod m) {
  switch (m) {
    case LoadMethod::kMmap: return "mmap";
    case LoadMethod::kPreadHost: return "pread-host";
    case LoadMethod::kPinnedRing: return "pinned-ring";
    case LoadMethod::kCufile: return "cufile";
    case LoadMethod::kCufileCompat: return "cufile-compat";
  }
  return "?";
}

std::string LoadStats::str() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << static_cast<double>(bytes) / 1e9 << " GB in " << seconds << " s (" << gb_per_s()
     << " GB/s, " << load_method_name(method) << ", " << tensors << " tensors)";
  return os.str();
}

std::string LoadStats::parts_str() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "alloc " << alloc_seconds * 1e3 << ", probe " << probe_seconds * 1e3 << ", read "
     << read_seconds * 1e3 << ", copy " << copy_seconds * 1e3 << ", wait " << wait_seconds * 1e3
     << ", fill " << fill_seconds * 1e3 << " ms";
  return os.str();
}

LoadStats LoadStats::since(const LoadStats& before) const {
  LoadStats d = *this;
  d.bytes -= before.bytes;
  d.tensors -= before.tensors;
  d.seconds -= before.seconds;
  d.alloc_seconds -= before.alloc_seconds;
  d.probe_seconds -= before.probe_seconds;
  d.read_seconds -= before.read_seconds;
  d.copy_seconds -= before.copy_seconds;
  d.wait_seconds -= before.wait_seconds;
  d.fill_seconds -= before.fill_seconds;
  return d;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A packed load's runs start at this boundary (what cudaMalloc guarantees one tensor alone); the
// tensors inside a run keep the file's distances where those are multiples of kRunAlign (what
// vectorized kernels ask of a pointer), across gaps of at most kRunGap bytes (unread tensors, or
// the few bytes a writer's alignment leaves, that then take device memory unused).
constexpr uint64_t kPackAlign = 256;
constexpr uint64_t kRunAlign = 16;
constexpr uint64_t kRunGap = uint64_t{64} << 10;

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Where each item of a packed load goes in its allocation (LoadLayout), and the run it belongs
// to (ByteSpan::run; 0 for none). Returns the allocation's size.
uint64_t packed_layout(const Checkpoint& ckpt, const std::vector<LoadItem>& items,
                       std::vector<uint64_t>* at, std::vector<uint32_t>* run) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // File by file, in file order (a file's position in the checkpoint stands for the file).
  std::vector<std::pair<const SafetensorsFile*, uint64_t>> key(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    key[i] = {&ckpt.file_of(items[i].name), ckpt.info(items[i].name).begin};
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
  // A tensor asked for more than once gets a place per request (a caller may write one over):
  // the repeats go last, so that they do not break the run of the tensors around them.
  {
    std::vector<size_t> firsts, repeats;
    for (size_t k = 0; k < order.size(); ++k)
      (k > 0 && key[order[k]] == key[order[k - 1]] ? repeats : firsts).push_back(order[k]);
    firsts.insert(firsts.end(), repeats.begin(), repeats.end());
    order = std::move(firsts);
  }
  at->assign(items.size(), 0);
  run->assign(items.size(), 0);
  uint64_t end = 0;  // of the allocation so far
  uint32_t runs = 0;
  const SafetensorsFile* run_file = nullptr;
  uint64_t run_begin = 0, run_at = 0, run_end = 0;  // file offsets, and the run's place
  for (size_t i : order) {
    const TensorInfo& info = ckpt.info(items[i].name);
    const bool joins = runs > 0 && key[i].first == run_file && info.begin >= run_end &&
                       info.begin - run_end <= kRunGap && (info.begin - run_begin) % kRunAlign == 0;
    if (!joins) {
      run_file = key[i].first;
      run_begin = info.begin;
      run_at = align_up(end, kPackAlign);
      ++runs;
    }
    (*at)[i] = run_at + (info.begin - run_begin);
    (*run)[i] = runs;
    run_end = info.begin + info.nbytes;
    end = std::max(end, (*at)[i] + info.nbytes);
  }
  return end;
}

CufileMode resolve_cufile_mode(CufileMode m) {
  if (m != CufileMode::kEnv) return m;
  const char* env = std::getenv("H3_CUFILE");
  if (!env || !*env) return CufileMode::kAuto;
  const std::string v(env);
  if (v == "1" || v == "on" || v == "true") return CufileMode::kOn;
  if (v == "0" || v == "off" || v == "false") return CufileMode::kOff;
  if (v != "auto")
    H3_LOG_WARN("H3_CUFILE='", v, "' is not 0, 1 or auto; using auto");
  return CufileMode::kAuto;
}

// A host sink: plain buffers and memcpy. Used for owned CPU copies and the CPU tests of the
// chunked reader.
class HostSink final : public DeviceLoader::Sink {
 public:
  HostSink(int n, size_t bytes) : bytes_(bytes), bufs_(static_cast<size_t>(n)) {
    for (auto& b : bufs_) b.reset(new uint8_t[bytes]);
  }
  int count() const override { return static_cast<int>(bufs_.size()); }
  size_t capacity() const override { return bytes_; }
  uint8_t* buffer(int i) override { return bufs_[static_cast<size_t>(i)].get(); }
  void wait(int) override {}
  void copy(void* dst, const uint8_t* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void release(int) override {}
  void finish() override {}

 private:
  size_t bytes_;
  std::vector<std::unique_ptr<uint8_t[]>> bufs_;
};

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    H3_CHECK(fd_ >= 0, errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "cannot open ",
             path, " for reading: ", std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly n bytes at `offset`, or throws kIo naming the file, the offset and the tensor
// (a file cut short after its header was validated reads short here).
void pread_exact(int fd, uint8_t* dst, size_t n, uint64_t offset, const std::string& path,
                 const std::string& label) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    H3_CHECK(r >= 0, ErrorCode::kIo, "reading ", path, " at byte ", offset + done, " (tensor '",
             label, "') failed: ", std::strerror(errno));
    H3_CHECK(r > 0, ErrorCode::kIo, path, " is truncated: it ends at byte ", offset + done,
             " while tensor '", label, "' needs bytes up to ", offset + n,
             " (the file changed after it was opened?)");
    done += static_cast<size_t>(r);
  }
}

// The reader threads of every load in the process, started once and kept: a load reads its
// chunks as pieces on them, several chunks in flight, instead of starting threads per chunk and
// waiting for the slowest piece of each before the next (both cost a small component from the
// page cache a sizeable part of its load). Grows to the largest reader count asked for.
class ReaderPool {
 public:
  using Job = std::function<void()>;
  static ReaderPool& get() {
    static ReaderPool* pool = new ReaderPool();  // never destroyed: workers may outlive statics
    return *pool;
  }
  void ensure(int threads) {
    std::lock_guard<std::mutex> lock(mu_);
    for (; started_ < threads; ++started_) std::thread([this] { work(); }).detach();
  }
  void submit(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void work() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  int started_ = 0;
};

// One chunk's reads on the pool: its pieces count down, the first error is kept.
class ChunkReads {
 public:
  void start(int fd, uint8_t* dst, size_t n, uint64_t offset, int threads, const std::string& path,
             const std::string& label) {
    // Pieces of at least 4 MiB: a hot page cache copies faster from several cores, a cold disk
    // sees the same sequential range split into a few requests.
    constexpr size_t kMinPiece = size_t{4} << 20;
    const size_t pieces =
        std::clamp<size_t>(n / kMinPiece, 1, static_cast<size_t>(std::max(threads, 1)));
    const size_t step = (n / pieces + 4095) & ~size_t{4095};
    std::vector<std::pair<size_t, size_t>> parts;
    for (size_t b = 0; b < n; b += step) parts.emplace_back(b, std::min(step, n - b));
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = parts.size();
      error_ = nullptr;
    }
    ReaderPool& pool = ReaderPool::get();
    pool.ensure(threads);
    for (const auto& [b, len] : parts) {
      pool.submit([this, fd, dst, b = b, len = len, offset, &path, &label] {
        std::exception_ptr err;
        try {
          pread_exact(fd, dst + b, len, offset + b, path, label);
        } catch (...) {
          err = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (err && !error_) error_ = err;
        if (--pending_ == 0) cv_.notify_all();
      });
    }
  }
  // Waits for every piece; rethrows the first error unless `quiet`.
  void wait(bool quiet = false) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return pending_ == 0; });
    if (error_ && !quiet) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t pending_ = 0;
  std::exception_ptr error_;
};

// A range of the file read as a whole: spans [first, last) of the sorted list.
struct Range {
  uint64_t begin = 0, end = 0;
  size_t first = 0, last = 0;
};

// Whether at least 90 % of the ranges' pages are in the page cache (mincore over a mapping of
// the file; false when it cannot tell). Costs one bit per page: about 2.4 MB for 10 GB.
bool mostly_cached(int fd, const std::vector<Range>& ranges) {
  if (ranges.empty()) return false;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t end = ranges.back().end;
  void* map = ::mmap(nullptr, static_cast<size_t>(end), PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return false;
  uint64_t pages = 0, resident = 0;
  std::vector<unsigned char> vec;
  for (const Range& r : ranges) {
    const uint64_t b = r.begin / page * page;
    const size_t n = static_cast<size_t>((r.end - b + page - 1) / page);
    vec.assign(n, 0);
    if (::mincore(static_cast<uint8_t*>(map) + b, static_cast<size_t>(r.end - b), vec.data()) !=
        0) {
      ::munmap(map, static_cast<size_t>(end));
      return false;
    }
    pages += n;
    for (unsigned char v : vec) resident += v & 1u;
  }
  ::munmap(map, static_cast<size_t>(end));
  return resident * 10 >= pages * 9;
}

// The readers for ranges in the page cache: the options' count, or H3_LOAD_READERS (1-64), which
// benchmarks use to measure a host's memcpy scaling.
int cached_reader_count(const DeviceLoaderOptions& options) {
  static const int env = [] {
    const char* v = std::getenv("H3_LOAD_READERS");
    if (v == nullptr || *v == '\0') return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 64) {
      H3_LOG_WARN("H3_LOAD_READERS='", v, "' is not a count from 1 to 64; ignored");
      return 0;
    }
    return static_cast<int>(n);
  }();
  if (env > 0) return env;
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::min(options.cached_reader_threads, cores);
}

}  // namespace

uint64_t stream_spans(const std::string& path, std::vector<ByteSpan> spans,
                      DeviceLoader::Sink& sink, const DeviceLoaderOptions& options,
                      LoadStats* times) {
  LoadStats local;
  LoadStats& t = times ? *times : local;
  std::sort(spans.begin(), spans.end(),
            [](const ByteSpan& a, const ByteSpan& b) { return a.offset < b.offset; });
  spans.erase(std::remove_if(spans.begin(), spans.end(), [](const ByteSpan& s) { return s.nbytes == 0; }),
              spans.end());
  if (spans.empty()) return 0;
  std::vector<Range> ranges;
  for (size_t i = 0; i < spans.size(); ++i) {
    const ByteSpan& s = spans[i];
    if (!ranges.empty() && s.offset <= ranges.back().end + options.merge_gap &&
        s.offset >= ranges.back().end) {
      ranges.back().end = std::max(ranges.back().end, s.offset + s.nbytes);
      ranges.back().last = i + 1;
    } else {
      ranges.push_back({s.offset, s.offset + s.nbytes, i, i + 1});
    }
  }
  Fd fd(path);
  auto t0 = Clock::now();
  uint64_t total = 0;
  for (const Range& r : ranges) total += r.end - r.begin;
  // A small load takes the cached count without asking: the probe (a page-cache lookup per page)
  // costs milliseconds, a sizeable part of such a load from the cache, while the extra parallel
  // requests it would spare a cold disk cost that read little.
  constexpr uint64_t kProbeFrom = uint64_t{1} << 30;
  const int cached_readers = std::max(options.reader_threads, cached_reader_count(options));
  const int readers = total < kProbeFrom || mostly_cached(fd.get(), ranges)
                          ? cached_readers
                          : options.reader_threads;
  t.probe_seconds += seconds_since(t0);
  // Tell the kernel the reads are sequential (larger readahead), per range.
  for (const Range& r : ranges)
    ::posix_fadvise(fd.get(), static_cast<off_t>(r.begin), static_cast<off_t>(r.end - r.begin),
                    POSIX_FADV_SEQUENTIAL);
  // A small load reads in smaller chunks (down to 16 MiB), so that the first read and the last
  // copy, which nothing overlaps, stay a small part of it: at least 8 chunks where it has them.
  constexpr uint64_t kMinChunk = uint64_t{16} << 20;
  const size_t cap = static_cast<size_t>(std::min<uint64_t>(
      sink.capacity(), std::max<uint64_t>(kMinChunk, (total / 8 + 4095) & ~uint64_t{4095})));
  // Up to one chunk per staging buffer is read at once; a chunk's copies are issued once its
  // reads are done, in file order, while the later chunks are still being read.
  const int nbuf = sink.count();
  struct Chunk {
    uint64_t pos = 0;
    size_t len = 0, first_span = 0, last_span = 0;
    int slot = 0;
  };
  std::vector<Chunk> chunks;
  for (const Range& r : ranges) {
    size_t next_span = r.first;  // first span that may still overlap the coming chunks
    for (uint64_t pos = r.begin; pos < r.end; pos += cap) {
      Chunk c;
      c.pos = pos;
      c.len = static_cast<size_t>(std::min<uint64_t>(cap, r.end - pos));
      c.first_span = next_span;
      c.last_span = r.last;
      c.slot = static_cast<int>(chunks.size() % static_cast<size_t>(nbuf));
      chunks.push_back(c);
      while (next_span < r.last && spans[next_span].offset + spans[next_span].nbytes <= pos + c.len)
        ++next_span;
    }
  }
  std::vector<ChunkReads> reads(static_cast<size_t>(nbuf));
  size_t done = 0, started = 0;
  // Waits for the oldest chunk's reads and issues its copies.
  auto complete_oldest = [&] {
    const Chunk& c = chunks[done];
    t0 = Clock::now();
    reads[static_cast<size_t>(c.slot)].wait();
    t.read_seconds += seconds_since(t0);
    t0 = Clock::now();
    uint8_t* buf = sink.buffer(c.slot);
    const uint64_t chunk_end = c.pos + c.len;
    // One copy per stretch of a run (ByteSpan::run) in this chunk, else one per span.
    uint8_t* pending_dst = nullptr;
    uint64_t pending_b = 0, pending_e = 0;
    uint32_t pending_run = 0;
    auto flush = [&] {
      if (pending_e > pending_b)
        sink.copy(pending_dst, buf + (pending_b - c.pos), static_cast<size_t>(pending_e - pending_b),
                  c.slot);
      pending_e = pending_b;
    };
    for (size_t i = c.first_span; i < c.last_span && spans[i].offset < chunk_end; ++i) {
      const ByteSpan& sp = spans[i];
      const uint64_t b = std::max(sp.offset, c.pos);
      const uint64_t e = std::min(sp.offset + sp.nbytes, chunk_end);
      if (e <= b) continue;
      uint8_t* dst = static_cast<uint8_t*>(sp.dst) + (b - sp.offset);
      if (sp.run != 0 && sp.run == pending_run && pending_e > pending_b && b >= pending_e &&
          dst == pending_dst + (b - pending_b)) {
        pending_e = e;
        continue;
      }
      flush();
      pending_dst = dst;
      pending_b = b;
      pending_e = e;
      pending_run = sp.run;
    }
    flush();
    sink.release(c.slot);
    t.copy_seconds += seconds_since(t0);
    ++done;
  };
  uint64_t read_bytes = 0;
  try {
    while (done < chunks.size()) {
      if (started < chunks.size() && started - done < static_cast<size_t>(nbuf)) {
        const Chunk& c = chunks[started];
        t0 = Clock::now();
        sink.wait(c.slot);  // the copies out of this buffer from its last chunk are done
        t.wait_seconds += seconds_since(t0);
        reads[static_cast<size_t>(c.slot)].start(fd.get(), sink.buffer(c.slot), c.len, c.pos,
                                                 readers, path, spans[c.first_span].label);
        read_bytes += c.len;
        ++started;
        // Keep the readers fed: start every chunk a free buffer allows before waiting.
        if (started < chunks.size() && started - done < static_cast<size_t>(nbuf)) continue;
      }
      complete_oldest();
    }
  } catch (...) {
    // Pieces still in flight write into the staging buffers and read through `fd`: they finish
    // before either goes away.
    for (size_t i = done; i < started; ++i) reads[static_cast<size_t>(chunks[i].slot)].wait(true);
    throw;
  }
  t0 = Clock::now();
  sink.finish();
  t.wait_seconds += seconds_since(t0);
  return read_bytes;
}

std::unique_ptr<DeviceLoader::Sink> make_staging_sink(Device device, int buffers, size_t bytes);

namespace detail {
// Defined in device_loader_cuda.cpp / device_loader_nocuda.cpp.
std::unique_ptr<DeviceLoader::Sink> make_cuda_sink(int device, int buffers, size_t bytes);
}  // namespace detail

std::unique_ptr<DeviceLoader::Sink> make_staging_sink(Device device, int buffers, size_t bytes) {
  H3_CHECK(buffers >= 1 && bytes >= 4096, ErrorCode::kInvalidArgument,
           "staging ring needs at least one buffer of at least 4096 bytes, got ", buffers, " x ",
           bytes);
  if (device.is_cuda()) return detail::make_cuda_sink(device.index, buffers, bytes);
  return std::make_unique<HostSink>(buffers, bytes);
}

DeviceLoader::DeviceLoader(Device device, const DeviceLoaderOptions& options)
    : device_(device), options_(options) {
  stats_.method = device.is_cuda() ? LoadMethod::kPinnedRing
                  : options.host_copy ? LoadMethod::kPreadHost
                                      : LoadMethod::kMmap;
  if (!device.is_cuda()) return;
  const CufileMode mode = resolve_cufile_mode(options.cufile);
  if (mode == CufileMode::kOff) return;
  // Auto stays off unless the nvidia-fs driver is loaded (nothing is loaded otherwise): in
  // compatibility mode cuFile bounces through host memory like the staging ring, only slower.
  if (mode == CufileMode::kAuto && !nvidia_fs_present()) return;
  const CufileInfo& info = cufile_probe(device.index);
  if (!info.available) {
    if (mode == CufileMode::kOn)
      H3_LOG_WARN("cuFile was requested (H3_CUFILE=1) but is unavailable (", info.reason,
                  "); using the pinned staging ring");
    return;
  }
  if (mode == CufileMode::kAuto && info.compat) return;
  use_cufile_ = true;
  stats_.method = info.compat ? LoadMethod::kCufileCompat : LoadMethod::kCufile;
  H3_LOG_INFO("device loader on ", device.str(), ": cuFile (", info.reason, ")");
}

DeviceLoader::~DeviceLoader() = default;

std::vector<Tensor> DeviceLoader::load(const Checkpoint& ckpt, const std::vector<LoadItem>& items,
                                       LoadLayout layout) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> out(items.size());
  for (const LoadItem& it : items)
    H3_CHECK(ckpt.has(it.name), ErrorCode::kNotFound, "checkpoint ", ckpt.source(),
             " has no tensor '", it.name, "'");
  uint64_t bytes = 0;
  if (!device_.is_cuda() && !options_.host_copy) {
    // CPU: the mmap views are the tensors (no copy); a conversion makes an owned tensor.
    for (size_t i = 0; i < items.size(); ++i) {
      Tensor t = ckpt.tensor(items[i].name);
      bytes += t.nbytes();
      if (items[i].as && *items[i].as != t.dtype()) t = t.to(*items[i].as);
      out[i] = std::move(t);
    }
  } else {
    const auto a0 = Clock::now();
    std::shared_ptr<Storage> pack;  // LoadLayout::kPacked: every tensor's bytes
    std::vector<uint64_t> packed_at;
    std::vector<uint32_t> run(items.size(), 0);
    if (layout == LoadLayout::kPacked) {
      const uint64_t total = packed_layout(ckpt, items, &packed_at, &run);
      if (total > 0) pack = Storage::allocate(static_cast<size_t>(total), device_);
    }
    // Group by file (a sharded checkpoint streams each shard in its own order).
    std::map<const SafetensorsFile*, std::vector<ByteSpan>> by_file;
    for (size_t i = 0; i < items.size(); ++i) {
      const TensorInfo& info = ckpt.info(items[i].name);
      if (pack) {
        out[i] = Tensor::over(pack, static_cast<size_t>(packed_at[i]), info.shape, info.dtype);
      } else {
        out[i] = Tensor::empty(info.shape, info.dtype, device_);
      }
      bytes += info.nbytes;
      by_file[&ckpt.file_of(items[i].name)].push_back(
          {info.begin, info.nbytes, out[i].raw(), items[i].name, run[i]});
    }
    stats_.alloc_seconds += seconds_since(a0);
    bool done = false;
    if (use_cufile_) {
      try {
        for (const auto& [file, spans] : by_file)
          cufile_read_spans(file->path(), spans, device_.index, options_.reader_threads);
        done = true;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kUnsupported) throw;
        // Whatever went wrong (registration refused, O_DIRECT refused, a read error), the
        // staging ring re-reads every file and reports genuine I/O errors itself.
        H3_LOG_WARN("GPUDirect Storage failed (", e.what(),
                    "); this loader uses the pinned staging ring from now on");
        use_cufile_ = false;
        stats_.method = LoadMethod::kPinnedRing;
      }
    }
    if (!done) {
      if (!sink_) {
        const auto s0 = std::chrono::steady_clock::now();
        sink_ = make_staging_sink(device_, std::max(options_.staging_buffers, 1),
                                  options_.staging_bytes);
        H3_LOG_DEBUG(
            "device loader on ", device_.str(), ": staging ring of ",
            std::max(options_.staging_buffers, 1), " x ", options_.staging_bytes >> 20,
            " MiB set up in ",
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0)
                .count(),
            " ms");
      }
      sink_->begin();
      try {
        for (auto& [file, spans] : by_file)
          stream_spans(file->path(), std::move(spans), *sink_, options_, &stats_);
      } catch (...) {
        sink_->finish();  // no copy may still target the tensors freed on the way out
        throw;
      }
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].as || *items[i].as == out[i].dtype()) continue;
      out[i] = device_.is_cuda() ? ops::cast(out[i], *items[i].as) : out[i].to(*items[i].as);
    }
  }
  stats_.bytes += bytes;
  stats_.tensors += items.size();
  stats_.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

Tensor DeviceLoader::load_one(const Checkpoint& ckpt, const std::string& name,
                              std::optional<DType> as) {
  return std::move(load(ckpt, {{name, as}})[0]);
}

// ---- process-wide helpers -------------------------------------------------------------------------

namespace {

struct Shared {
  std::mutex mu;
  std::map<int, std::unique_ptr<DeviceLoader>> cuda;  // by device index
  LoadStats totals;
  bool device_loaded = false;  // a load to a CUDA device has happened
};

Shared& shared() {
  static Shared s;
  return s;
}

}  // namespace

std::vector<Tensor> load_tensors_to(const Checkpoint& ckpt, const std::vector<LoadItem>& items,
                                    Device device, LoadLayout layout) {
  Shared& s = shared();
  // A device's loader (its staging ring) serves one load at a time; a host load has its own
  // loader and holds the lock only to count, so that it may run beside a device load (the audio
  // VAE reads its filters on the host while its weights stream to the device).
  std::unique_lock<std::mutex> lock(s.mu, std::defer_lock);
  std::unique_ptr<DeviceLoader> cpu;
  DeviceLoader* loader = nullptr;
  if (device.is_cuda()) {
    lock.lock();
    auto& l = s.cuda[device.index];
    if (!l) l = std::make_unique<DeviceLoader>(device);
    loader = l.get();
  } else {
    cpu = std::make_unique<DeviceLoader>(device);
    loader = cpu.get();
  }
  const LoadStats before = loader->stats();
  std::vector<Tensor> out = loader->load(ckpt, items, layout);
  const LoadStats d = loader->stats().since(before);
  if (!lock.owns_lock()) lock.lock();
  s.totals.bytes += d.bytes;
  s.totals.tensors += d.tensors;
  s.totals.seconds += d.seconds;
  s.totals.alloc_seconds += d.alloc_seconds;
  s.totals.probe_seconds += d.probe_seconds;
  s.totals.read_seconds += d.read_seconds;
  s.totals.copy_seconds += d.copy_seconds;
  s.totals.wait_seconds += d.wait_seconds;
  // The method names the device path once there is one: a host load beside it (or after it)
  // does not rename it.
  if (device.is_cuda() || !s.device_loaded) s.totals.method = d.method;
  s.device_loaded = s.device_loaded || device.is_cuda();
  // Benchmarks' random weights (io/weight_fill.h): after the read, so load timings stay real.
  if (weight_fill()) {
    const auto f0 = Clock::now();
    std::vector<std::string> names;
    names.reserve(items.size());
    for (const LoadItem& it : items) names.push_back(it.name);
    apply_weight_fill(ckpt.source(), names, out);
    s.totals.fill_seconds += seconds_since(f0);
  }
  return out;
}

Tensor load_tensor_to(const Checkpoint& ckpt, const std::string& name, Device device,
                      std::optional<DType> as) {
  return std::move(load_tensors_to(ckpt, {{name, as}}, device)[0]);
}

LoadStats device_load_totals() {
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.totals;
}

void release_device_staging() {
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  s.cuda.clear();
}

}  // namespace h3::io
