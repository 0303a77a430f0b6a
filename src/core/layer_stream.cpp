#include "core/layer_stream.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

#include "core/status.h"

namespace h3 {
namespace {

size_t align_up(size_t n) {
  return (n + kLayerTensorAlign - 1) / kLayerTensorAlign * kLayerTensorAlign;
}

std::atomic<uint64_t> g_pinned_live{0};

}  // namespace

uint64_t layer_packed_bytes(const std::vector<uint64_t>& tensor_bytes) {
  size_t total = 0;
  for (uint64_t b : tensor_bytes) total = align_up(total) + static_cast<size_t>(b);
  return total;
}

uint64_t pinned_layer_bytes_live() { return g_pinned_live.load(); }

namespace {

// One piece of a pin_layers() copy: `count` elements of `src` from element `first`, converted into
// `dst` (the element's place in the layer's pinned buffer).
struct PinCopy {
  const Tensor* src;
  uint8_t* dst;
  int64_t first, count;
};

// Pieces of about this many destination bytes: small enough that the threads share even a
// single large tensor, large enough that each read-ahead request is one long read.
constexpr size_t kPinPieceBytes = size_t{8} << 20;

// Threads that read the checkpoint into pinned memory. The sources are usually mmap views of a
// file that is not in the page cache (a host whose RAM cannot hold every component's file): one
// thread faulting pages in one after the other reads it at a fraction of what the disk gives, so
// several read different places at once.
// H3_PIN_THREADS=N (1-64) sets the count, for the load benchmark's comparison.
int pin_threads(size_t pieces) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  size_t n = std::min(hw, 8u);
  if (const char* v = std::getenv("H3_PIN_THREADS")) {
    const long e = std::strtol(v, nullptr, 10);
    if (e >= 1 && e <= 64) n = static_cast<size_t>(e);
  }
  return static_cast<int>(std::max<size_t>(1, std::min(pieces, n)));
}

// Asks the kernel to start reading a piece's source pages (a no-op for memory that is not a file
// mapping): the copy then waits on one large read instead of a fault per read-ahead window.
void will_need(const void* p, size_t bytes) {
  // The host's page size (64 KiB on some ARM hosts): madvise refuses an address not aligned to it.
  static const uintptr_t page = [] {
    const long v = ::sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<uintptr_t>(v) : uintptr_t{4096};
  }();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) + bytes;
  ::madvise(reinterpret_cast<void*>(a), static_cast<size_t>(b - a), MADV_WILLNEED);
}

void run_pin_copies(const std::vector<PinCopy>& pieces, DType dtype) {
  const size_t es = dtype_size(dtype);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i = next++; i < pieces.size() && !failed; i = next++) {
      const PinCopy& c = pieces[i];
      try {
        const size_t ses = dtype_size(c.src->dtype());
        const auto* from = static_cast<const uint8_t*>(c.src->raw()) + c.first * ses;
        will_need(from, static_cast<size_t>(c.count) * ses);
        convert_elements(from, c.src->dtype(), c.dst + c.first * es, dtype,
                         static_cast<size_t>(c.count));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  const int n = pin_threads(pieces.size());
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

void pin_layers(const std::vector<std::vector<Tensor*>>& layers, DType dtype,
                const std::string& what, int64_t first_index) {
  // All buffers first (on this thread, where the CUDA device is current), then the copies over
  // several threads, then the tensors replaced: an error on the way leaves every tensor as it was
  // and frees what was pinned.
  std::vector<std::vector<Tensor>> dst(layers.size());
  std::vector<std::vector<Tensor>> src(layers.size());
  std::vector<PinCopy> pieces;
  const size_t es = dtype_size(dtype);
  const int64_t piece_elems = static_cast<int64_t>(std::max<size_t>(1, kPinPieceBytes / es));
  for (size_t li = 0; li < layers.size(); ++li) {
    const std::vector<Tensor*>& list = layers[li];
    const int64_t i = first_index + static_cast<int64_t>(li);
    H3_CHECK(!list.empty(), ErrorCode::kInvalidArgument, what, " ", i,
             ": no tensors to place in host memory");
    std::vector<size_t> offsets;
    size_t total = 0;
    for (const Tensor* t : list) {
      H3_CHECK(t->defined(), ErrorCode::kInvalidArgument, what, " ", i,
               ": a weight tensor is missing, cannot place it in host memory");
      total = align_up(total);
      offsets.push_back(total);
      total += static_cast<size_t>(t->numel()) * es;
    }
    const size_t bytes = std::max<size_t>(total, 1);
    void* p = cuda_host_alloc(bytes);
    g_pinned_live += bytes;
    // The buffer is freed with the last view of any of the layer's tensors.
    const std::shared_ptr<void> owner(p, [bytes](void* q) {
      cuda_host_free(q);
      g_pinned_live -= bytes;
    });
    src[li].reserve(list.size());  // the pieces point into it
    for (size_t k = 0; k < list.size(); ++k) {
      const Tensor& t = *list[k];
      auto* at = static_cast<uint8_t*>(p) + offsets[k];
      dst[li].push_back(Tensor::borrow(at, t.shape(), dtype, Device::cpu(), owner));
      // The source is normally the checkpoint's mmap view: read once, converted on the way.
      src[li].push_back(t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()));
      const Tensor* from = &src[li].back();
      for (int64_t e = 0; e < t.numel(); e += piece_elems)
        pieces.push_back({from, at, e, std::min(piece_elems, t.numel() - e)});
    }
  }
  run_pin_copies(pieces, dtype);
  for (size_t li = 0; li < layers.size(); ++li) {
    for (size_t k = 0; k < layers[li].size(); ++k) *layers[li][k] = std::move(dst[li][k]);
  }
}

// ---- LayerSlotSchedule
// ---------------------------------------------------------------------------

LayerSlotSchedule::LayerSlotSchedule(int64_t num_layers) : num_layers_(num_layers) {
  H3_CHECK(num_layers > 0, ErrorCode::kInvalidArgument, "layer stream: ", num_layers,
           " layers (expected at least one)");
}

void LayerSlotSchedule::check_layer(int64_t i, const char* what) const {
  H3_CHECK(i >= 0 && i < num_layers_, ErrorCode::kInvalidArgument, "layer stream: ", what,
           " of layer ", i, ", outside [0, ", num_layers_, ")");
}

int LayerSlotSchedule::slot_of(int64_t layer) const {
  for (int s = 0; s < kSlots; ++s) {
    if (slots_[s].layer == layer) return s;
  }
  return -1;
}

int LayerSlotSchedule::in_use_slot() const {
  for (int s = 0; s < kSlots; ++s) {
    if (slots_[s].in_use) return s;
  }
  return -1;
}

std::optional<LayerSlotSchedule::Copy> LayerSlotSchedule::bring(int64_t layer, int avoid_slot) {
  if (slot_of(layer) >= 0) return std::nullopt;  // still there: slots are only written by copies
  // Alternate: the slot not written last, unless that is the one in use.
  const int n = num_slots();
  const int s = avoid_slot >= 0 ? (avoid_slot + 1) % n : (last_copied_ + 1) % n;
  H3_CHECK(!slots_[s].in_use, ErrorCode::kInternal, "layer stream: the copy of layer ", layer,
           " would overwrite layer ", slots_[s].layer, ", which is in use");
  Copy c{layer, s, slots_[s].ran};
  slots_[s].layer = layer;
  last_copied_ = s;
  ++copies_;
  return c;
}

std::optional<LayerSlotSchedule::Copy> LayerSlotSchedule::begin(int64_t first) {
  check_layer(first, "begin");
  for (Slot& s : slots_) s.in_use = false;
  return bring(first, -1);
}

int LayerSlotSchedule::acquire(int64_t i) {
  check_layer(i, "acquire");
  const int s = slot_of(i);
  H3_CHECK(s >= 0, ErrorCode::kInternal, "layer stream: layer ", i,
           " was not copied to a slot (begin() or a prefetch must bring it first)");
  const int busy = in_use_slot();
  H3_CHECK(busy < 0, ErrorCode::kInternal, "layer stream: acquire of layer ", i, " while layer ",
           slots_[busy].layer, " is still in use (release it first)");
  slots_[s].in_use = true;
  return s;
}

std::optional<LayerSlotSchedule::Copy> LayerSlotSchedule::prefetch(int64_t next) {
  check_layer(next, "prefetch");
  const int busy = in_use_slot();
  H3_CHECK(busy >= 0, ErrorCode::kInternal, "layer stream: prefetch of layer ", next,
           " outside a pass (no layer is in use)");
  return bring(next, busy);
}

int LayerSlotSchedule::release(int64_t i) {
  check_layer(i, "release");
  const int s = slot_of(i);
  H3_CHECK(s >= 0 && slots_[s].in_use, ErrorCode::kInternal, "layer stream: release of layer ", i,
           ", which is not in use");
  slots_[s].in_use = false;
  slots_[s].ran = true;
  return s;
}

// ---- LayerStream
// ---------------------------------------------------------------------------------

LayerStream::LayerStream(std::vector<std::vector<Tensor>> layers, Device device, std::string what)
    : layers_(std::move(layers)),
      what_(std::move(what)),
      device_(device),
      schedule_(static_cast<int64_t>(layers_.size())) {
  H3_CHECK(device.is_cuda(), ErrorCode::kUnsupported, what_, " streaming needs a CUDA device, got ",
           device.str());
  for (size_t i = 0; i < layers_.size(); ++i) {
    // pin_layers() lays a layer's tensors out one after the other (aligned) in one pinned buffer,
    // each tensor borrowing it: the layer is the span from the first tensor to the end of the
    // last, copied to a slot in one transfer.
    const std::vector<Tensor>& list = layers_[i];
    H3_CHECK(!list.empty() && list.front().defined(), ErrorCode::kInternal, what_, " ", i,
             ": no tensors to stream");
    const auto* base = static_cast<const uint8_t*>(list.front().raw());
    size_t span = 0, packed = 0;
    for (const Tensor& t : list) {
      const auto* p = static_cast<const uint8_t*>(t.raw());
      H3_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous() && p >= base,
               ErrorCode::kInternal, what_, " ", i,
               ": streamed weights must be laid out in one pinned host buffer per layer");
      span = std::max(span, static_cast<size_t>(p - base) + t.nbytes());
      packed = align_up(packed) + t.nbytes();
    }
    H3_CHECK(span == packed, ErrorCode::kInternal, what_, " ", i, ": streamed weights span ", span,
             " bytes, expected ", packed, " (one pinned buffer per layer)");
    host_.push_back({base, span});
    host_bytes_ += span;
    slot_capacity_ = std::max(slot_capacity_, span);
  }
  // The slots (two, one for a single layer), allocated once: the pool is ordered on the default
  // stream, and begin() orders the copy stream after these allocations.
  for (int s = 0; s < schedule_.num_slots(); ++s) {
    slots_[s] = Storage::allocate(std::max<size_t>(slot_capacity_, 1), device_);
  }
  copy_stream_ = Stream::create(device_.index, /*non_blocking=*/true);
  start_ = Event::create(device_.index, false);
  for (int s = 0; s < LayerSlotSchedule::kSlots; ++s) {
    copy_done_[s] = Event::create(device_.index, false);
    compute_done_[s] = Event::create(device_.index, false);
  }
}

LayerStream::~LayerStream() {
  // Copies still in flight (a prefetch for a pass that never came) read pinned memory and write a
  // slot: let them land before either goes.
  try {
    if (copy_stream_.owned()) copy_stream_.synchronize();
  } catch (...) {
  }
}

void LayerStream::issue(const LayerSlotSchedule::Copy& c) {
  // The slot's previous layer must be done reading it on the default stream.
  if (c.wait_compute) copy_stream_.wait(compute_done_[c.slot]);
  const HostLayer& h = host_[static_cast<size_t>(c.layer)];
  copy_to_device_async(slots_[c.slot]->data(), h.base, h.bytes, copy_stream_);
  copy_done_[c.slot].record(copy_stream_);
}

void LayerStream::begin(int64_t first) {
  const std::optional<LayerSlotSchedule::Copy> c = schedule_.begin(first);
  // Everything queued so far on the default stream (the slots' allocation, an abandoned pass)
  // comes before this pass's copies.
  start_.record(default_stream_);
  copy_stream_.wait(start_);
  if (c) issue(*c);
}

std::vector<Tensor> LayerStream::acquire(int64_t i, int64_t next) {
  const int slot = schedule_.acquire(i);
  default_stream_.wait(copy_done_[slot]);
  if (next >= 0) {
    if (const std::optional<LayerSlotSchedule::Copy> c = schedule_.prefetch(next)) issue(*c);
  }
  const std::vector<Tensor>& host = layers_[static_cast<size_t>(i)];
  const uint8_t* base = host_[static_cast<size_t>(i)].base;
  auto* dev = static_cast<uint8_t*>(slots_[slot]->data());
  std::vector<Tensor> views;
  views.reserve(host.size());
  for (const Tensor& t : host) {
    const size_t off = static_cast<size_t>(static_cast<const uint8_t*>(t.raw()) - base);
    views.push_back(Tensor::borrow(dev + off, t.shape(), t.dtype(), device_, slots_[slot]));
  }
  return views;
}

void LayerStream::release(int64_t i) {
  const int slot = schedule_.release(i);
  compute_done_[slot].record(default_stream_);
}

}  // namespace h3
