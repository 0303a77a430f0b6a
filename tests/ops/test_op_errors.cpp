// The op interface refuses bad arguments with h3::Error (kInvalidArgument) naming the op, and the
// CPU ops give identical bytes on repeated runs.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/status.h"
#include "ops/ops.h"

namespace h3 {
namespace {

template <typename Fn>
void expect_invalid(const std::string& what, const std::string& op, Fn fn) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what << ": " << e.message();
    EXPECT_NE(e.message().find("ops::" + op), std::string::npos) << what << ": " << e.message();
    std::printf("[refused] %s: %s\n", what.c_str(), e.message().c_str());
  }
}

Tensor f32(const Shape& s, float v = 1.0f) {
  Tensor t = Tensor::empty(s, DType::kF32);
  t.fill(v);
  return t;
}

TEST(OpErrors, ShapeMismatchesAreRefused) {
  {
    const Tensor x = f32({1, 2, 8}), p = f32({2}), filt = f32({2, 1, 12});
    expect_invalid("anti_aliased_snake_beta filter length", "anti_aliased_snake_beta", [&] {
      ops::anti_aliased_snake_beta(x, p, p, filt, f32({2, 1, 6}), 2);
    });
    expect_invalid("anti_aliased_snake_beta filter channels", "anti_aliased_snake_beta", [&] {
      ops::anti_aliased_snake_beta(x, p, p, f32({3, 1, 12}), filt, 2);
    });
    expect_invalid("anti_aliased_snake_beta ratio past K", "anti_aliased_snake_beta",
                   [&] { ops::anti_aliased_snake_beta(x, p, p, filt, filt, 13); });
    expect_invalid("anti_aliased_snake_beta log_beta size", "anti_aliased_snake_beta",
                   [&] { ops::anti_aliased_snake_beta(x, p, f32({3}), filt, filt, 2); });
  }
  expect_invalid("linear K mismatch", "linear", [] { ops::linear(f32({3, 4}), f32({5, 6})); });
  expect_invalid("linear bias size", "linear", [] {
    const Tensor b = f32({4});
    ops::linear(f32({3, 6}), f32({5, 6}), &b);
  });
  expect_invalid("linear_segmented row_starts", "linear_segmented",
                 [] { ops::linear_segmented(f32({5, 6}), f32({3, 6}), nullptr, {0, 2, 4}); });
  expect_invalid("linear_segmented falling row_starts", "linear_segmented",
                 [] { ops::linear_segmented(f32({5, 6}), f32({3, 6}), nullptr, {0, 3, 2, 5}); });
  expect_invalid("matmul inner dims", "matmul", [] { ops::matmul(f32({2, 3, 4}), f32({2, 5, 6})); });
  expect_invalid("attention heads", "attention",
                 [] { ops::attention(f32({4, 3, 8}), f32({4, 2, 8}), f32({4, 2, 8})); });
  expect_invalid("attention cu_seqlens", "attention", [] {
    ops::AttentionParams p;
    p.cu_seqlens = {0, 3, 5};
    ops::attention(f32({4, 2, 8}), f32({4, 2, 8}), f32({4, 2, 8}), p);
  });
  expect_invalid("rope rotary_dim", "rope",
                 [] { ops::rope(f32({4, 2, 8}), f32({4, 10}), f32({4, 10}), 10); });
  expect_invalid("group_norm groups", "group_norm",
                 [] { ops::group_norm(f32({1, 6, 4}), 4, nullptr, nullptr, 1e-6f); });
  expect_invalid("conv1d groups", "conv1d", [] {
    ops::Conv1dParams p;
    p.groups = 2;
    ops::conv1d(f32({1, 4, 10}), f32({4, 4, 3}), nullptr, p);
  });
  expect_invalid("conv3d reflect pad", "conv3d", [] {
    ops::Conv3dParams p;
    p.padding[1] = 3;
    p.pad_mode = ops::PadMode::kReflect;
    ops::conv3d(f32({1, 1, 3, 3, 3}), f32({1, 1, 1, 1, 1}), nullptr, p);
  });
  expect_invalid("swiglu odd width", "swiglu", [] { ops::swiglu(f32({2, 5})); });
  expect_invalid("add broadcast", "add", [] { ops::add(f32({2, 5}), f32({4})); });
  expect_invalid("concat dtype", "concat", [] {
    ops::concat({f32({2, 3}), f32({2, 3}).to(DType::kBF16)}, 0);
  });
}

TEST(OpErrors, IndicesAreRangeChecked) {
  const Tensor idx = Tensor::from_i64({0, 5}, {2});
  expect_invalid("gather index out of range", "gather_rows", [&] { ops::gather_rows(f32({5, 2}), idx); });
  expect_invalid("modulate index out of range", "modulate",
                 [&] { ops::modulate(f32({2, 3}), f32({5, 3}), f32({4, 3}), idx); });
  expect_invalid("float index", "gated_residual",
                 [&] { ops::gated_residual(f32({2, 3}), f32({2, 3}), f32({6, 3}), f32({2})); });
  Tensor dst = f32({5, 2});
  expect_invalid("scatter src rows", "scatter_rows",
                 [&] { ops::scatter_rows(dst, Tensor::from_i64({0, 1}, {2}), f32({3, 2})); });
  expect_invalid("undefined input", "silu", [] { ops::silu(Tensor()); });
}

TEST(OpDeterminism, RepeatedRunsGiveIdenticalBytes) {
  Tensor q = Tensor::empty({50, 4, 32}, DType::kBF16);
  Tensor x = Tensor::empty({1, 4, 5, 9, 9}, DType::kF32);
  Tensor w = Tensor::empty({6, 4, 3, 3, 3}, DType::kF32);
  // Deterministic but irregular contents.
  for (Tensor* t : {&q, &x, &w}) {
    std::vector<float> v(static_cast<size_t>(t->numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(((i * 7919) % 1013) / 507.0 - 1.0);
    t->copy_from(Tensor::from_f32(v, t->shape()));
  }
  ops::Conv3dParams p;
  p.padding[1] = p.padding[2] = 1;
  p.pad_mode = ops::PadMode::kReflect;
  const Tensor a1 = ops::attention(q, q, q), a2 = ops::attention(q, q, q);
  const Tensor c1 = ops::conv3d(x, w, nullptr, p), c2 = ops::conv3d(x, w, nullptr, p);
  EXPECT_EQ(std::memcmp(a1.raw(), a2.raw(), a1.nbytes()), 0);
  EXPECT_EQ(std::memcmp(c1.raw(), c2.raw(), c1.nbytes()), 0);
}

}  // namespace
}  // namespace h3
