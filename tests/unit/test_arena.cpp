// The activation arena: alignment, exhaustion, reset and rewind, the high-water mark, and tensors
// that keep the arena's memory alive.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/arena.h"
#include "core/status.h"

namespace h3 {
namespace {

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(Arena, AlignedBumpAllocation) {
  Arena a(4096);
  EXPECT_EQ(a.capacity(), 4096u);
  EXPECT_EQ(addr(a.base()) % Arena::kDefaultAlignment, 0u);
  void* p1 = a.allocate(10);
  void* p2 = a.allocate(10);
  EXPECT_EQ(p1, a.base());
  EXPECT_EQ(addr(p2) - addr(p1), 256u);  // the second slice starts at the next 256-byte boundary
  EXPECT_EQ(a.used(), 266u);
  void* p3 = a.allocate(4, 8);  // a smaller alignment packs tightly
  EXPECT_EQ(addr(p3) - addr(p2), 16u);
  EXPECT_EQ(a.allocate(0), static_cast<char*>(a.base()) + 512);
  EXPECT_THROW(a.allocate(8, 24), Error);  // not a power of two
}

TEST(Arena, LargeAlignmentIsHonoured) {
  Arena a(1 << 16, Device::cpu(), 4096);
  EXPECT_EQ(addr(a.base()) % 4096, 0u);
  a.allocate(1);
  EXPECT_EQ(addr(a.allocate(1)) % 4096, 0u);
  EXPECT_THROW(Arena(64, Device::cpu(), 100), Error);
}

TEST(Arena, ExhaustionNamesTheRequest) {
  Arena a(1024);
  a.allocate(1000);
  try {
    a.allocate(100);
    FAIL() << "allocation past the capacity should throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(e.message().find("100 bytes"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("1000 of 1024"), std::string::npos) << e.message();
  }
  EXPECT_EQ(a.used(), 1000u);  // a failed request changes nothing
  a.reset();
  EXPECT_EQ(a.used(), 0u);
  EXPECT_NO_THROW(a.allocate(1024));
  EXPECT_THROW(a.allocate(1), Error);
}

TEST(Arena, MarkRewindAndHighWater) {
  Arena a(1 << 20);
  a.allocate(1000);
  const Arena::Marker m = a.mark();
  a.allocate(5000);
  a.allocate(7000);
  const size_t peak = a.used();
  a.rewind(m);
  EXPECT_EQ(a.used(), 1000u);
  EXPECT_EQ(a.high_water(), peak);
  a.allocate(100);
  EXPECT_EQ(a.high_water(), peak);
  a.reset();
  EXPECT_EQ(a.high_water(), peak);
  a.reset_high_water();
  EXPECT_EQ(a.high_water(), 0u);
  Arena::Marker beyond;
  beyond.offset = 5;
  EXPECT_THROW(a.rewind(beyond), Error);
}

TEST(Arena, TensorsBorrowAndKeepTheArenaAlive) {
  Tensor t;
  {
    Arena a(1 << 12);
    t = a.tensor({4, 8}, DType::kF32);
    EXPECT_EQ(t.raw(), a.base());
    EXPECT_FALSE(t.storage()->owned());
    t.fill(2.5);
    const Tensor u = a.tensor({3}, DType::kBF16);
    EXPECT_EQ(addr(u.raw()) - addr(t.raw()), 256u);
    EXPECT_THROW(a.tensor({-1}, DType::kF32), Error);
    EXPECT_THROW(a.tensor({1 << 12}, DType::kF32), Error);
  }
  // The arena object is gone; its memory is not, because the tensor holds it.
  for (float v : t.to_f32_vector()) EXPECT_EQ(v, 2.5f);
}

TEST(Arena, DeviceArenaNeedsCudaInCpuBuilds) {
  if (cuda_available()) {
    Arena a(1 << 20, Device::cuda(0));
    EXPECT_EQ(addr(a.allocate(3)) % 256, 0u);
    EXPECT_EQ(a.device(), Device::cuda(0));
    return;
  }
  EXPECT_THROW(Arena(1024, Device::cuda(0)), Error);
}

}  // namespace
}  // namespace h3
