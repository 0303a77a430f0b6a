// A CPU random generator that reproduces PyTorch's CPU `torch.Generator` draw for draw.
//
// The pipeline draws all of its noise from one `torch.Generator().manual_seed(seed)` (README
// "Pipeline facts" 6: conditioning noise, then video noise, then audio noise), so matching the
// reference video requires the same bits, not just the same distribution. What torch does:
//
// - State: a 32-bit Mersenne Twister (mt19937). manual_seed(s) keeps only the low 32 bits of s
//   (s & 0xffffffff) and seeds the twister with the standard init_genrand recurrence.
// - Uniforms: float32/f16/bf16 take one 32-bit output and keep its low `digits` bits (24 / 11 / 8),
//   scaled by 2^-digits; float64 takes two outputs (first = high word) and keeps the low 53 bits.
// - randn of a contiguous tensor with >= 16 elements: fill every element with a uniform first,
//   then Box-Muller in blocks of 16 where element j (0..7) and j+8 form a pair: u1 = 1 - x[j],
//   u2 = x[j+8], r = sqrt(-2 log u1), theta = 2 pi u2, x[j] = r cos theta, x[j+8] = r sin theta.
//   When n is not a multiple of 16 the last 16 elements are drawn again (16 fresh uniforms) and
//   transformed as one more block, overwriting the overlap.
// - randn with fewer than 16 elements: one float64 Box-Muller per element that caches its second
//   value (r sin theta) in the generator; the next scalar draw, even in a later call, uses the
//   cache first. Results are cast to the tensor's dtype.
// - rand: one uniform per element in order.
//
// Draws continue the stream: several calls on one generator equal torch's consecutive calls.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace h3 {

class TorchGenerator {
 public:
  // torch's default seed for a new torch.Generator() (c10::detail::default_rng_seed_val).
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;

  explicit TorchGenerator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }

  // How float32 randn of >= 16 elements evaluates log/sin/cos. x86 builds of torch run an AVX2
  // kernel with cephes-style polynomials (the golden data's path, and the default); other builds
  // (ARM, or x86 without AVX2 kernels) use float32 libm. Both consume the same uniforms; their
  // values differ in the last bits (relative 1.5e-6 at most), so only one can match a reference.
  enum class NormalMath { kX86Avx2, kLibm };
  void set_normal_math(NormalMath m) { normal_math_ = m; }
  NormalMath normal_math() const { return normal_math_; }

  // Resets the stream as torch.Generator.manual_seed does (also drops the cached normal).
  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const { return seed_; }

  // Raw outputs of the twister (CPUGeneratorImpl::random / random64).
  uint32_t random();
  uint64_t random64();

  // torch.randn(n) / torch.rand(n) of a contiguous tensor, written to `out`.
  void randn_f32(float* out, int64_t n);
  void randn_f64(double* out, int64_t n);
  void rand_f32(float* out, int64_t n);
  void rand_f64(double* out, int64_t n);
  // Half types are returned as their bit patterns (torch's c10::Half / c10::BFloat16 paths).
  void randn_f16(uint16_t* out, int64_t n);
  void randn_bf16(uint16_t* out, int64_t n);

  // torch.randn(shape, dtype=...) / torch.rand(shape, dtype=...) as a new CPU tensor.
  // dtype: f32, f64, f16, bf16 (randn); f32, f64 (rand). Others throw kUnsupported.
  Tensor randn(const Shape& shape, DType dtype = DType::kF32);
  Tensor rand(const Shape& shape, DType dtype = DType::kF32);

  // The complete state, so a caller can save and resume a stream (also what torch's
  // get_state/set_state carry: twister words, position, seed and the cached normal).
  struct State {
    std::array<uint32_t, 624> words{};
    int left = 1;
    int next = 0;
    uint64_t seed = 0;
    std::optional<double> next_double_normal;
  };
  State state() const;
  void set_state(const State& s);

 private:
  void twist();
  // One float64 normal through torch's scalar normal_distribution<double> (with its cache).
  double scalar_normal();

  std::array<uint32_t, 624> mt_{};
  int left_ = 1;
  int next_ = 0;
  uint64_t seed_ = 0;
  std::optional<double> next_double_normal_;
  NormalMath normal_math_ = NormalMath::kX86Avx2;
};

}  // namespace h3
