// A bump allocator over one allocation on one device (or the host), for activations.
//
// The whole capacity is allocated once (through Storage, i.e. core/device.h for CUDA memory);
// allocate() hands out aligned slices by moving an offset, reset() takes everything back at once,
// and mark()/rewind() release everything allocated after a mark (scoped temporaries of one layer).
// The high-water mark records the most bytes ever in use, which the memory planner reads after a
// dry run to size the arena.
//
// Tensors made by tensor() borrow the arena's storage and keep it alive, so a tensor never points
// at freed memory; after reset()/rewind() its bytes may be reused by later allocations, which is
// the caller's contract (an activation must not outlive the step that made it).
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"
#include "core/tensor.h"

namespace h3 {

class Arena {
 public:
  static constexpr size_t kDefaultAlignment = 256;  // cudaMalloc's own alignment; TMA needs 128

  // Allocates `capacity` bytes on `device`; throws kOutOfMemory (host or device) if that fails.
  Arena(size_t capacity, Device device = Device::cpu(), size_t alignment = kDefaultAlignment);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // `bytes` bytes aligned to `alignment` (0: the arena's default; must be a power of two). Zero
  // bytes give a valid aligned pointer that uses no space. Throws kOutOfMemory naming the request,
  // what is in use and the capacity when it does not fit.
  void* allocate(size_t bytes, size_t alignment = 0);
  // A contiguous tensor in the arena (contents uninitialized).
  Tensor tensor(const Shape& shape, DType dtype, size_t alignment = 0);

  struct Marker {
    size_t offset = 0;
  };
  Marker mark() const { return {used_}; }
  void rewind(Marker m);  // m must come from this arena and not be beyond the current offset
  void reset() { used_ = 0; }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t available() const { return capacity_ - used_; }
  size_t high_water() const { return high_water_; }
  void reset_high_water() { high_water_ = used_; }
  size_t alignment() const { return alignment_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  void* base() const {
    return storage_ ? static_cast<char*>(storage_->data()) + start_offset_ : nullptr;
  }

 private:
  std::shared_ptr<Storage> storage_;
  size_t start_offset_ = 0;  // first aligned byte of the allocation
  size_t capacity_ = 0;
  size_t alignment_ = kDefaultAlignment;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

}  // namespace h3
