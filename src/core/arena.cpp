#include "core/arena.h"

#include <cstdint>

#include "core/status.h"

namespace h3 {

namespace {
bool is_power_of_two(size_t v) { return v != 0 && (v & (v - 1)) == 0; }
}  // namespace

Arena::Arena(size_t capacity, Device device, size_t alignment)
    : capacity_(capacity), alignment_(alignment) {
  H3_CHECK(is_power_of_two(alignment), ErrorCode::kInvalidArgument, "arena alignment ", alignment,
           " is not a power of two");
  // Storage aligns host memory to 64 bytes and cudaMalloc to 256; ask for enough slack that the
  // first slice can be aligned further when the arena's alignment is larger than that.
  const size_t slack = alignment > 64 ? alignment : 0;
  H3_CHECK(capacity <= SIZE_MAX - slack, ErrorCode::kInvalidArgument, "arena capacity ", capacity,
           " bytes is too large");
  storage_ = Storage::allocate(capacity + slack, device);
  // Usable bytes start at the first aligned address inside the allocation.
  const auto base = reinterpret_cast<uintptr_t>(storage_->data());
  const size_t lead = static_cast<size_t>((alignment - base % alignment) % alignment);
  start_offset_ = lead;
}

void* Arena::allocate(size_t bytes, size_t alignment) {
  if (alignment == 0) alignment = alignment_;
  H3_CHECK(is_power_of_two(alignment), ErrorCode::kInvalidArgument, "arena allocation alignment ",
           alignment, " is not a power of two");
  const auto base = reinterpret_cast<uintptr_t>(storage_->data()) + start_offset_;
  const uintptr_t cur = base + used_;
  const size_t pad = static_cast<size_t>((alignment - cur % alignment) % alignment);
  H3_CHECK(pad <= capacity_ - used_ && bytes <= capacity_ - used_ - pad, ErrorCode::kOutOfMemory,
           "arena on ", device().str(), ": cannot allocate ", bytes, " bytes (alignment ",
           alignment, "): ", used_, " of ", capacity_, " bytes in use");
  used_ += pad + bytes;
  if (used_ > high_water_) high_water_ = used_;
  return reinterpret_cast<void*>(cur + pad);
}

Tensor Arena::tensor(const Shape& shape, DType dtype, size_t alignment) {
  for (int64_t d : shape) {
    H3_CHECK(d >= 0, ErrorCode::kInvalidArgument, "arena tensor: negative dimension in shape ",
             shape_str(shape));
  }
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = allocate(bytes, alignment);
  // The tensor holds the arena's storage, so the memory stays valid as long as the tensor lives.
  return Tensor::borrow(p, shape, dtype, device(), storage_);
}

void Arena::rewind(Marker m) {
  H3_CHECK(m.offset <= used_, ErrorCode::kInternal, "arena rewind to offset ", m.offset,
           " beyond the current offset ", used_);
  used_ = m.offset;
}

}  // namespace h3
