// Tensor layout and storage: views share bytes, strides follow permute/slice/select, contiguous()
// and conversions copy correctly, and borrowed storage keeps its owner alive.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace h3 {
namespace {

Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from_f32(v, shape);
}

TEST(Tensor, EmptyZerosAndMetadata) {
  const Tensor t = Tensor::zeros({2, 3, 4}, DType::kBF16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.desc(), "bf16[2, 3, 4] cpu");
  for (float v : t.to_f32_vector()) EXPECT_EQ(v, 0.0f);
  EXPECT_FALSE(Tensor().defined());
  EXPECT_THROW(Tensor::empty({2, -1}, DType::kF32), Error);
  EXPECT_THROW(t.size(3), Error);
}

TEST(Tensor, ViewSharesStorageAndInfersMinusOne) {
  Tensor t = iota({2, 6});
  Tensor v = t.view({3, -1});
  EXPECT_EQ(v.shape(), (Shape{3, 4}));
  EXPECT_EQ(v.storage(), t.storage());
  v.data<float>()[5] = 100.0f;
  EXPECT_EQ(t.item_as_double({0, 5}), 100.0);
  EXPECT_THROW(t.view({5, -1}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_THROW(t.view({7}), Error);
}

TEST(Tensor, PermuteTransposeAndContiguous) {
  const Tensor t = iota({2, 3, 4});
  const Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(p.item_as_double({3, 1, 2}), t.item_as_double({1, 2, 3}));
  const Tensor c = p.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  const std::vector<float> cv = c.to_f32_vector();
  for (int64_t a = 0; a < 4; ++a) {
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t d = 0; d < 3; ++d) {
        EXPECT_EQ(cv[static_cast<size_t>((a * 2 + b) * 3 + d)], t.item_as_double({b, d, a}));
      }
    }
  }
  const Tensor tt = t.transpose(0, -1);
  EXPECT_EQ(tt.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(tt.item_as_double({1, 2, 0}), t.item_as_double({0, 2, 1}));
  EXPECT_THROW(t.permute({0, 0, 1}), Error);
  EXPECT_THROW(t.permute({0, 1}), Error);
  // reshape of a strided view copies; view refuses.
  EXPECT_THROW(p.view({24}), Error);
  const Tensor r = p.reshape({24});
  EXPECT_EQ(r.to_f32_vector(), cv);
}

TEST(Tensor, SliceSelectSqueezeUnsqueeze) {
  const Tensor t = iota({4, 5});
  const Tensor s = t.slice(1, 1, 4);  // columns 1..3
  EXPECT_EQ(s.shape(), (Shape{4, 3}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.item_as_double({2, 0}), 11.0);
  EXPECT_EQ(s.contiguous().to_f32_vector(),
            (std::vector<float>{1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18}));
  const Tensor rows = t.slice(0, 1, 3);  // a row slice stays contiguous
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.item_as_double({0, 0}), 5.0);
  const Tensor col = t.select(1, 2);
  EXPECT_EQ(col.shape(), (Shape{4}));
  EXPECT_EQ(col.to_f32_vector(), (std::vector<float>{2, 7, 12, 17}));
  const Tensor u = col.unsqueeze(0);
  EXPECT_EQ(u.shape(), (Shape{1, 4}));
  EXPECT_EQ(u.squeeze(0).to_f32_vector(), col.to_f32_vector());
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{4, 5, 1}));
  EXPECT_THROW(t.squeeze(0), Error);
  EXPECT_THROW(t.slice(0, 2, 5), Error);
  EXPECT_THROW(t.slice(0, 3, 2), Error);
  EXPECT_THROW(t.select(0, 4), Error);
  EXPECT_EQ(t.slice(0, 2, 2).numel(), 0);
}

TEST(Tensor, WritesThroughStridedViews) {
  Tensor t = Tensor::zeros({3, 4}, DType::kF32);
  Tensor col = t.slice(1, 1, 3);
  col.fill(7.0);
  EXPECT_EQ(t.to_f32_vector(), (std::vector<float>{0, 7, 7, 0, 0, 7, 7, 0, 0, 7, 7, 0}));
  Tensor dst = t.transpose(0, 1);  // (4, 3) strided destination
  dst.copy_from(iota({4, 3}));
  EXPECT_EQ(t.item_as_double({2, 1}), 5.0);  // dst[1][2] = 1*3 + 2
  EXPECT_THROW(dst.copy_from(iota({3, 4})), Error);
}

TEST(Tensor, DtypeConversionRoundsToNearestEven) {
  // 1 + 2^-8 is a bf16 tie (goes to 1.0); 1 + 3*2^-8 rounds up to even (1 + 2^-6).
  const Tensor f =
      Tensor::from_f32({1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8), -2.5f}, {3});
  const Tensor b = f.to(DType::kBF16);
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(b.to_f32_vector(), (std::vector<float>{1.0f, 1.0f + std::ldexp(1.0f, -6), -2.5f}));
  const Tensor h = f.to(DType::kF16);
  EXPECT_EQ(h.to_f32_vector()[2], -2.5f);
  const Tensor i = Tensor::from_f32({3.0f, -4.0f}, {2}).to(DType::kI64);
  EXPECT_EQ(i.to_i64_vector(), (std::vector<int64_t>{3, -4}));
  EXPECT_EQ(f.to(DType::kF32).storage(), f.storage());  // same dtype: no copy
  // Conversion of a strided view converts the viewed elements only.
  const Tensor d = iota({2, 3}).transpose(0, 1).to(DType::kF64);
  EXPECT_EQ(d.to_f64_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  const Tensor c = iota({2, 2}).clone();
  EXPECT_EQ(c.to_f32_vector(), (std::vector<float>{0, 1, 2, 3}));
}

TEST(Tensor, BorrowedStorageKeepsOwnerAlive) {
  std::weak_ptr<std::vector<float>> watch;
  Tensor view;
  {
    auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
    watch = owner;
    const Tensor t = Tensor::borrow(owner->data(), {2, 3}, DType::kF32, Device::cpu(), owner);
    EXPECT_FALSE(t.storage()->owned());
    view = t.slice(1, 1, 3).transpose(0, 1);
  }
  // The owner outlives its last local handle because the view holds it.
  ASSERT_FALSE(watch.expired());
  EXPECT_EQ(view.contiguous().to_f32_vector(), (std::vector<float>{2, 5, 3, 6}));
  view = Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(Tensor, OverSharesStorageAtAByteOffset) {
  const std::shared_ptr<Storage> s = Storage::allocate(64, Device::cpu());
  Tensor a = Tensor::over(s, 0, {2, 3}, DType::kF32);
  Tensor b = Tensor::over(s, 32, {4}, DType::kBF16);
  a.fill(1.5);
  b.fill(-2.0);
  EXPECT_EQ(a.storage(), s);
  EXPECT_TRUE(a.is_contiguous() && b.is_contiguous());
  EXPECT_EQ(static_cast<uint8_t*>(b.raw()) - static_cast<uint8_t*>(s->data()), 32);
  EXPECT_EQ(a.to_f32_vector(), std::vector<float>(6, 1.5f));
  EXPECT_EQ(b.to_f32_vector(), std::vector<float>(4, -2.0f));
  EXPECT_EQ(b.view({2, 2}).to_f32_vector(), std::vector<float>(4, -2.0f));
  // Past the end, or between elements: refused.
  EXPECT_THROW(Tensor::over(s, 48, {5}, DType::kF32), Error);
  EXPECT_THROW(Tensor::over(s, 2, {1}, DType::kF32), Error);
  EXPECT_THROW(Tensor::over(s, 72, {0}, DType::kF32), Error);
}

TEST(Tensor, FromValuesChecksCount) {
  EXPECT_THROW(Tensor::from_f32({1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(Tensor::from_i64({1}, {2}), Error);
  const Tensor t = Tensor::from_i64({5, 6}, {2});
  EXPECT_EQ(t.dtype(), DType::kI64);
  EXPECT_EQ(t.data<int64_t>()[1], 6);
  EXPECT_THROW(t.data<float>(), Error);  // element size does not match the dtype
}

TEST(Tensor, DeviceTransfersNeedCudaInCpuBuilds) {
  if (cuda_available()) GTEST_SKIP() << "CUDA present; covered by the gpu tests";
  const Tensor t = iota({2});
  EXPECT_THROW(t.to(Device::cuda(0)), Error);
}

}  // namespace
}  // namespace h3
