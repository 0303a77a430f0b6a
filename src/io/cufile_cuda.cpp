// io/cufile.h on CUDA builds: libcufile through dlopen, with the few types of its public C API
// declared here (cuFile API reference: CUfileError_t is {CUfileOpError, CUresult}, a file is
// registered from an opaque POSIX fd descriptor, cuFileRead returns the bytes read or a negative
// error). Reads go straight into the destination device memory; unaligned offsets and sizes are
// legal (cuFile splits them into aligned direct I/O and bounce-buffered edges), and the file is
// opened with O_DIRECT where the filesystem allows it (retried buffered when refused).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/status.h"
#include "io/cufile.h"

namespace h3::io {

namespace {

// ---- the minimal C API (types declared from the public interface, not the header) -------------

struct CufileError {
  int err = 0;     // CUfileOpError: 0 = success, 5000+ = cuFile errors
  int cu_err = 0;  // CUresult of an underlying CUDA driver error
};
constexpr int kHandleTypeOpaqueFd = 1;
struct CufileDescr {
  int type = kHandleTypeOpaqueFd;
  union {
    int fd;
    void* handle;
  } handle{};
  const void* fs_ops = nullptr;
};
using CufileHandle = void*;
// CUfileDrvProps_t; only nvfs.major/minor are read. Padded: later releases append fields.
struct CufileDrvProps {
  struct {
    unsigned int major_version;
    unsigned int minor_version;
    size_t poll_thresh_size;
    size_t max_direct_io_size;
    unsigned int dstatusflags;
    unsigned int dcontrolflags;
  } nvfs;
  unsigned int rest[64];
};

struct Api {
  CufileError (*driver_open)() = nullptr;
  CufileError (*driver_close)() = nullptr;  // resolved; the driver stays open for the process
  CufileError (*handle_register)(CufileHandle*, CufileDescr*) = nullptr;
  void (*handle_deregister)(CufileHandle) = nullptr;
  ssize_t (*read)(CufileHandle, void*, size_t, off_t, off_t) = nullptr;
  CufileError (*get_properties)(CufileDrvProps*) = nullptr;
};

// One probe per library choice (H3_CUFILE_LIBRARY may change between tests of one process).
struct Entry {
  CufileInfo info;
  Api api;
};

std::string library_choice() {
  const char* env = std::getenv("H3_CUFILE_LIBRARY");
  return env ? env : "";
}

template <typename F>
bool resolve(void* lib, const char* name, F* out) {
  void* p = ::dlsym(lib, name);
  *out = reinterpret_cast<F>(p);
  return p != nullptr;
}

void probe_once(const std::string& choice, int device, Entry* entry) {
  CufileInfo& info = entry->info;
  std::vector<std::string> names;
  if (!choice.empty())
    names.push_back(choice);
  else
    names = {"libcufile.so.0", "libcufile.so"};
  void* lib = nullptr;
  std::string errors;
  for (const std::string& n : names) {
    info.library = n;
    lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    const char* e = ::dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(e ? e : n + ": not found");
  }
  if (!lib) {
    info.reason = "cannot load libcufile (" + errors + ")";
    return;
  }
  Api& a = entry->api;
  const bool ok = resolve(lib, "cuFileDriverOpen", &a.driver_open) &&
                  resolve(lib, "cuFileHandleRegister", &a.handle_register) &&
                  resolve(lib, "cuFileHandleDeregister", &a.handle_deregister) &&
                  resolve(lib, "cuFileRead", &a.read);
  if (!resolve(lib, "cuFileDriverClose_v2", &a.driver_close))
    resolve(lib, "cuFileDriverClose", &a.driver_close);
  resolve(lib, "cuFileDriverGetProperties", &a.get_properties);
  if (!ok) {
    info.reason = info.library + " lacks a cuFile entry point (cuFileDriverOpen, "
                                 "cuFileHandleRegister, cuFileHandleDeregister or cuFileRead)";
    ::dlclose(lib);
    a = Api{};
    return;
  }
  // The driver attaches to the current CUDA context: make sure there is one.
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    cudaGetLastError();
    info.reason = "cuda:" + std::to_string(device) + " is not available";
    return;
  }
  const CufileError e = a.driver_open();
  if (e.err != 0) {
    info.reason = "cuFileDriverOpen failed (cuFile error " + std::to_string(e.err) +
                  ", CUDA error " + std::to_string(e.cu_err) + ")";
    return;
  }
  // Real GDS needs the nvidia-fs kernel driver; without it libcufile silently runs in
  // compatibility mode (POSIX reads into host bounce buffers, then copies).
  unsigned major = 0, minor = 0;
  bool have_props = false;
  if (a.get_properties) {
    CufileDrvProps props{};
    if (a.get_properties(&props).err == 0) {
      have_props = true;
      major = props.nvfs.major_version;
      minor = props.nvfs.minor_version;
    }
  }
  info.available = true;
  info.compat = !nvidia_fs_present() || (have_props && major == 0);
  std::ostringstream os;
  os << info.library << ", ";
  if (have_props) os << "nvidia-fs " << major << "." << minor << ", ";
  os << (info.compat ? "compatibility mode" : "GPUDirect");
  info.reason = os.str();
}

Entry& probe_entry(int device) {
  static std::mutex mu;
  static std::map<std::string, Entry> entries;  // node-based: references stay valid
  std::lock_guard<std::mutex> lock(mu);
  const std::string choice = library_choice();
  auto it = entries.find(choice);
  if (it == entries.end()) {
    it = entries.emplace(choice, Entry{}).first;
    probe_once(choice, device, &it->second);
  }
  return it->second;
}

class File {
 public:
  File(const Api& api, const std::string& path, bool direct) : api_(api) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd_ < 0)
      fail(ErrorCode::kUnsupported, "cannot open ", path, direct ? " with O_DIRECT" : "", ": ",
           std::strerror(errno));
    CufileDescr d;
    d.handle.fd = fd_;
    const CufileError e = api_.handle_register(&handle_, &d);
    if (e.err != 0) {
      ::close(fd_);
      fail(ErrorCode::kUnsupported, "cuFileHandleRegister(", path, direct ? ", O_DIRECT" : "",
           ") failed (cuFile error ", e.err, ", CUDA error ", e.cu_err, ")");
    }
  }
  ~File() {
    api_.handle_deregister(handle_);
    ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  CufileHandle handle() const { return handle_; }
  const Api& api() const { return api_; }

 private:
  const Api& api_;
  int fd_ = -1;
  CufileHandle handle_ = nullptr;
};

// One piece of a span: at most kPiece bytes, so that reader threads share big tensors.
struct Piece {
  uint64_t offset = 0;
  size_t nbytes = 0;
  void* dst = nullptr;
  const std::string* label = nullptr;
};
constexpr size_t kPiece = size_t{64} << 20;

void read_all(const File& f, const std::string& path, const std::vector<Piece>& pieces,
              int device, int threads) {
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string error;
  auto worker = [&] {
    cudaSetDevice(device);
    for (size_t i = next++; i < pieces.size() && !stop; i = next++) {
      const Piece& p = pieces[i];
      size_t done = 0;
      while (done < p.nbytes) {
        const ssize_t r = f.api().read(f.handle(), p.dst, p.nbytes - done,
                                     static_cast<off_t>(p.offset + done), static_cast<off_t>(done));
        if (r > 0) {
          done += static_cast<size_t>(r);
          continue;
        }
        std::ostringstream os;
        os << "cuFileRead of " << path << " at byte " << p.offset + done << " (tensor '"
           << *p.label << "') ";
        if (r == 0)
          os << "reached the end of the file";
        else if (r == -1)
          os << "failed: " << std::strerror(errno);
        else
          os << "failed with cuFile error " << -r;
        std::lock_guard<std::mutex> lock(mu);
        if (error.empty()) error = os.str();
        stop = true;
        return;
      }
    }
  };
  const size_t n = std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1, pieces.size());
  if (n <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < n; ++t) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (!error.empty()) fail(ErrorCode::kUnsupported, error);
}

}  // namespace

bool nvidia_fs_present() {
  std::error_code ec;
  return std::filesystem::exists("/proc/driver/nvidia-fs", ec);
}

const CufileInfo& cufile_probe(int device) { return probe_entry(device).info; }

uint64_t cufile_read_spans(const std::string& path, std::vector<ByteSpan> spans, int device,
                           int threads) {
  const Entry& entry = probe_entry(device);
  const CufileInfo& info = entry.info;
  H3_CHECK(info.available, ErrorCode::kUnsupported, "cuFile is unavailable: ", info.reason);
  std::sort(spans.begin(), spans.end(),
            [](const ByteSpan& a, const ByteSpan& b) { return a.offset < b.offset; });
  std::vector<Piece> pieces;
  uint64_t total = 0;
  for (const ByteSpan& s : spans) {
    for (uint64_t b = 0; b < s.nbytes; b += kPiece) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kPiece, s.nbytes - b));
      pieces.push_back({s.offset + b, len, static_cast<uint8_t*>(s.dst) + b, &s.label});
    }
    total += s.nbytes;
  }
  if (pieces.empty()) return 0;
  // cuFileRead is synchronous and outside any stream: the destinations (pool blocks ordered on
  // the default stream, maybe reused from tensors freed with work still queued) must be idle.
  if (cudaSetDevice(device) != cudaSuccess ||
      cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess) {
    const cudaError_t err = cudaGetLastError();
    fail(ErrorCode::kInternal, "device loader: synchronizing cuda:", device,
         " before cuFile reads failed: ", cudaGetErrorString(err));
  }
  // O_DIRECT first (true GDS wants it); a filesystem refusing it, or a read failing on it
  // (compatibility mode with unaligned edges), gets one buffered attempt.
  std::string first_error;
  for (const bool direct : {true, false}) {
    try {
      File f(entry.api, path, direct);
      read_all(f, path, pieces, device, threads);
      return total;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnsupported) throw;
      if (!direct)
        fail(ErrorCode::kUnsupported, first_error.empty() ? "" : first_error + "; then ",
             e.what());
      first_error = e.what();
    }
  }
  return total;
}

}  // namespace h3::io
