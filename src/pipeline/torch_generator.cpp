#include "pipeline/torch_generator.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "core/status.h"

namespace h3 {

namespace {

constexpr int kStateN = 624;
constexpr int kStateM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;

// 2*pi as torch forms it in normal_fill_16: `2.0f * c10::pi<double>`, a double.
constexpr double kTwoPi = 2.0 * std::numbers::pi;

inline uint32_t twist_pair(uint32_t u, uint32_t v) {
  const uint32_t mixed = (u & kUpperMask) | (v & kLowerMask);
  return (mixed >> 1) ^ ((v & 1u) ? kMatrixA : 0u);
}

// at::uniform_real_distribution<T>(0, 1): the low `digits` bits of one output times 2^-digits.
// The products are exact (k / 2^digits), so computing them in float is the same as torch's
// float accumulation for float/half/bfloat16.
inline float uniform_bits(uint32_t raw, int digits) {
  const uint32_t mask = (1u << digits) - 1u;
  return static_cast<float>(raw & mask) * std::ldexp(1.0f, -digits);
}

inline double uniform_f64(uint64_t raw) {
  constexpr uint64_t kMask = (uint64_t{1} << 53) - 1;
  return static_cast<double>(raw & kMask) * (1.0 / static_cast<double>(uint64_t{1} << 53));
}

// Box-Muller over one block of 16 float32 uniforms as torch's non-AVX2 CPU build computes it
// (ATen normal_fill_16, mean 0, std 1): float32 libm log/cos/sin; theta is the double product
// double(2*pi) * u2 rounded to float when it is stored.
void normal_block_f32_libm(float* d) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const float theta = static_cast<float>(kTwoPi * static_cast<double>(u2));
    d[j] = radius * std::cos(theta);
    d[j + 8] = radius * std::sin(theta);
  }
}

// ---- torch's AVX2 Box-Muller, one lane at a time ----------------------------------------------
//
// x86 builds of torch with AVX2 run normal_fill_16_AVX2 for float32, which calls the cephes-style
// polynomials of ATen's avx_mathfun.h (log256_ps, sincos256_ps) instead of libm, and multiplies
// theta in float by float(2*pi). The golden draws (torch 2.11 on x86) are this path. The lane
// functions below repeat the same float32 operations in the same order. torch is compiled with
// GCC, -mfma and GNU floating-point contraction, so a vector multiply whose only use is an add
// becomes a fused multiply-add; those places are written as std::fma here, and contraction is
// switched off for the rest so that every other product is rounded on its own, as in torch.
// Constants: Cephes single-precision logf / sinf / cosf coefficients, as float.

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

constexpr float kLogP[9] = {
    static_cast<float>(7.0376836292E-2), static_cast<float>(-1.1514610310E-1),
    static_cast<float>(1.1676998740E-1), static_cast<float>(-1.2420140846E-1),
    static_cast<float>(1.4249322787E-1), static_cast<float>(-1.6668057665E-1),
    static_cast<float>(2.0000714765E-1), static_cast<float>(-2.4999993993E-1),
    static_cast<float>(3.3333331174E-1)};
constexpr float kLogQ1 = static_cast<float>(-2.12194440e-4);
constexpr float kLogQ2 = static_cast<float>(0.693359375);
constexpr float kSqrtHalf = static_cast<float>(0.707106781186547524);
constexpr float kMinusDP1 = static_cast<float>(-0.78515625);
constexpr float kMinusDP2 = static_cast<float>(-2.4187564849853515625e-4);
constexpr float kMinusDP3 = static_cast<float>(-3.77489497744594108e-8);
constexpr float kSinP[3] = {static_cast<float>(-1.9515295891E-4),
                            static_cast<float>(8.3321608736E-3),
                            static_cast<float>(-1.6666654611E-1)};
constexpr float kCosP[3] = {static_cast<float>(2.443315711809948E-005),
                            static_cast<float>(-1.388731625493765E-003),
                            static_cast<float>(4.166664568298827E-002)};
constexpr float kFourOverPi = static_cast<float>(1.27323954473516);

// Natural log of x in (0, 1] (the Box-Muller input never reaches 0 or a denormal): split x into
// exponent e and mantissa m in [0.5, 1), fold m below sqrt(1/2) into [sqrt(1/2), sqrt 2) - 1, then
// a degree-9 polynomial plus e*ln2 in two parts.
float cephes_logf_lane(float v) {
  const float min_normal = f32_from_bits(0x00800000u);
  if (v < min_normal) v = min_normal;  // _mm256_max_ps(x, min_norm_pos); NaN never occurs here
  const uint32_t bits = f32_bits(v);
  const int32_t exponent = static_cast<int32_t>(bits >> 23) - 0x7f;
  float x = f32_from_bits((bits & ~0x7f800000u) | f32_bits(0.5f));
  float e = static_cast<float>(exponent);
  e = e + 1.0f;
  const bool below = x < kSqrtHalf;
  const float tmp = below ? x : 0.0f;
  x = x - 1.0f;
  e = e - (below ? 1.0f : 0.0f);
  x = x + tmp;
  const float z = x * x;
  float y = kLogP[0];
  for (int i = 1; i < 9; ++i) y = std::fma(y, x, kLogP[i]);
  y = y * x;
  const float e_q1 = e * kLogQ1;
  y = std::fma(y, z, e_q1);
  y = y - z * 0.5f;  // z * 0.5 is exact: fused or not, the same value
  x = x + y;
  x = std::fma(e, kLogQ2, x);
  return v <= 0.0f ? std::numeric_limits<float>::quiet_NaN() : x;
}

// sin and cos of x >= 0 together: reduce by multiples of pi/4 (octant j made even), three-part
// Cody-Waite subtraction, then the cosine and sine polynomials, picked and signed per octant.
void cephes_sincosf_lane(float v, float* s, float* c) {
  const uint32_t sign_in = f32_bits(v) & 0x80000000u;
  float x = f32_from_bits(f32_bits(v) & 0x7fffffffu);
  float y = x * kFourOverPi;
  int32_t j = static_cast<int32_t>(y);  // truncation, as cvttps
  j = (j + 1) & ~1;
  y = static_cast<float>(j);
  const uint32_t swap_sin = static_cast<uint32_t>(j & 4) << 29;
  const bool first_poly_for_cos = (j & 2) == 0;
  x = std::fma(y, kMinusDP1, x);
  x = std::fma(y, kMinusDP2, x);
  x = std::fma(y, kMinusDP3, x);
  const uint32_t sign_cos = static_cast<uint32_t>(~(j - 2) & 4) << 29;
  const uint32_t sign_sin = sign_in ^ swap_sin;

  const float z = x * x;
  float yc = std::fma(kCosP[0], z, kCosP[1]);
  yc = std::fma(yc, z, kCosP[2]);
  yc = yc * z;
  yc = std::fma(yc, z, -(z * 0.5f));
  yc = yc + 1.0f;

  float ys = std::fma(kSinP[0], z, kSinP[1]);
  ys = std::fma(ys, z, kSinP[2]);
  ys = ys * z;
  ys = std::fma(ys, x, x);

  // The vector code blends with masks and adds zeros: sin = ysin1 + ysin2, cos = (y - ysin1) +
  // (y2 - ysin2); the arithmetic below is the same per lane, zeros included.
  const float ysin2 = first_poly_for_cos ? ys : 0.0f;
  const float ysin1 = first_poly_for_cos ? 0.0f : yc;
  const float sin_v = ysin1 + ysin2;
  const float cos_v = (yc - ysin1) + (ys - ysin2);
  *s = f32_from_bits(f32_bits(sin_v) ^ sign_sin);
  *c = f32_from_bits(f32_bits(cos_v) ^ sign_cos);
}

void normal_block_f32_avx2(float* d) {
  const float two_pi = static_cast<float>(kTwoPi);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * cephes_logf_lane(u1));
    const float theta = two_pi * u2;
    float s = 0.0f, c = 0.0f;
    cephes_sincosf_lane(theta, &s, &c);
    // fmadd(n, std = 1, mean = 0): exact product, and -0 becomes +0 as in the vector code.
    d[j] = radius * c + 0.0f;
    d[j + 8] = radius * s + 0.0f;
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

void normal_block_f64(double* d) {
  for (int j = 0; j < 8; ++j) {
    const double u1 = 1.0 - d[j];
    const double u2 = d[j + 8];
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double theta = kTwoPi * u2;
    d[j] = radius * std::cos(theta);
    d[j + 8] = radius * std::sin(theta);
  }
}

// Rounding of one of torch's 16-bit float types (c10::Half / c10::BFloat16), as float.
using Round16 = float (*)(float);
float round_half(float f) { return round_f16(f); }
float round_bfloat(float f) { return round_bf16(f); }

// normal_fill_16 instantiated for c10::Half / c10::BFloat16. The reduced type shows up wherever
// torch holds a value in it: u1 (1 - x, exact here), the results of log/cos/sin (c10's math
// overloads for the 16-bit types compute in float and return the 16-bit type), radius, theta (a
// double that goes through float on its way to the 16-bit type) and the outputs.
void normal_block_16(float* d, Round16 round16) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = round16(1.0f - d[j]);
    const float u2 = d[j + 8];
    const float radius = round16(std::sqrt(-2.0f * round16(std::log(u1))));
    const float theta = round16(static_cast<float>(kTwoPi * static_cast<double>(u2)));
    d[j] = round16(radius * round16(std::cos(theta)));
    d[j + 8] = round16(radius * round16(std::sin(theta)));
  }
}

}  // namespace

// ---- the twister ------------------------------------------------------------------------------

void TorchGenerator::manual_seed(uint64_t seed) {
  // at::mt19937 keeps the low 32 bits of the seed (init_with_uint32).
  seed_ = seed;
  mt_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
  for (int i = 1; i < kStateN; ++i) {
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
  left_ = 1;
  next_ = 0;
  next_double_normal_.reset();
}

void TorchGenerator::twist() {
  for (int i = 0; i < kStateN - kStateM; ++i) {
    mt_[i] = mt_[i + kStateM] ^ twist_pair(mt_[i], mt_[i + 1]);
  }
  for (int i = kStateN - kStateM; i < kStateN - 1; ++i) {
    mt_[i] = mt_[i + kStateM - kStateN] ^ twist_pair(mt_[i], mt_[i + 1]);
  }
  mt_[kStateN - 1] = mt_[kStateM - 1] ^ twist_pair(mt_[kStateN - 1], mt_[0]);
  left_ = kStateN;
  next_ = 0;
}

uint32_t TorchGenerator::random() {
  if (--left_ == 0) twist();
  uint32_t y = mt_[next_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t TorchGenerator::random64() {
  // CPUGeneratorImpl::random64: the first output is the high word.
  const uint64_t hi = random();
  const uint64_t lo = random();
  return (hi << 32) | lo;
}

TorchGenerator::State TorchGenerator::state() const {
  State s;
  s.words = mt_;
  s.left = left_;
  s.next = next_;
  s.seed = seed_;
  s.next_double_normal = next_double_normal_;
  return s;
}

void TorchGenerator::set_state(const State& s) {
  // After a twist and k draws, left = 625 - k and next = k (k = 1..624); a fresh seed has
  // left = 1, next = 0 so that the first draw twists.
  const bool fresh = s.left == 1 && s.next == 0;
  const bool running = s.next >= 1 && s.next <= kStateN && s.left + s.next == kStateN + 1;
  H3_CHECK(fresh || running, ErrorCode::kInvalidArgument,
           "TorchGenerator state: inconsistent position left=", s.left, " next=", s.next);
  mt_ = s.words;
  left_ = s.left;
  next_ = s.next;
  seed_ = s.seed;
  next_double_normal_ = s.next_double_normal;
}

// ---- distributions ----------------------------------------------------------------------------

double TorchGenerator::scalar_normal() {
  // at::normal_distribution<double>: Box-Muller on two 53-bit uniforms, the sine half cached.
  if (next_double_normal_) {
    const double v = *next_double_normal_;
    next_double_normal_.reset();
    return v;
  }
  const double u1 = uniform_f64(random64());
  const double u2 = uniform_f64(random64());
  const double r = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = kTwoPi * u1;
  next_double_normal_ = r * std::sin(theta);
  return r * std::cos(theta);
}

void TorchGenerator::randn_f32(float* out, int64_t n) {
  if (n <= 0) return;
  if (n < 16) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(scalar_normal());
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = uniform_bits(random(), 24);
  void (*block)(float*) =
      normal_math_ == NormalMath::kX86Avx2 ? normal_block_f32_avx2 : normal_block_f32_libm;
  for (int64_t i = 0; i + 16 <= n; i += 16) block(out + i);
  if (n % 16 != 0) {
    float* tail = out + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_bits(random(), 24);
    block(tail);
  }
}

void TorchGenerator::randn_f64(double* out, int64_t n) {
  if (n <= 0) return;
  if (n < 16) {
    for (int64_t i = 0; i < n; ++i) out[i] = scalar_normal();
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = uniform_f64(random64());
  for (int64_t i = 0; i + 16 <= n; i += 16) normal_block_f64(out + i);
  if (n % 16 != 0) {
    double* tail = out + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_f64(random64());
    normal_block_f64(tail);
  }
}

namespace {

// Shared body of the 16-bit randn paths; values are kept as (exactly representable) floats.
template <typename Gen>
void randn_16bit(Gen& gen, float* vals, int64_t n, int digits, Round16 round16) {
  for (int64_t i = 0; i < n; ++i) vals[i] = uniform_bits(gen.random(), digits);
  for (int64_t i = 0; i + 16 <= n; i += 16) normal_block_16(vals + i, round16);
  if (n % 16 != 0) {
    float* tail = vals + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_bits(gen.random(), digits);
    normal_block_16(tail, round16);
  }
}

}  // namespace

void TorchGenerator::randn_f16(uint16_t* out, int64_t n) {
  if (n <= 0) return;
  if (n < 16) {
    // static_cast<c10::Half>(double): the double becomes a float first.
    for (int64_t i = 0; i < n; ++i) out[i] = f16_from_f32(static_cast<float>(scalar_normal()));
    return;
  }
  std::vector<float> vals(static_cast<size_t>(n));
  randn_16bit(*this, vals.data(), n, 11, round_half);
  for (int64_t i = 0; i < n; ++i) out[i] = f16_from_f32(vals[i]);
}

void TorchGenerator::randn_bf16(uint16_t* out, int64_t n) {
  if (n <= 0) return;
  if (n < 16) {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(static_cast<float>(scalar_normal()));
    return;
  }
  std::vector<float> vals(static_cast<size_t>(n));
  randn_16bit(*this, vals.data(), n, 8, round_bfloat);
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(vals[i]);
}

void TorchGenerator::rand_f32(float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = uniform_bits(random(), 24);
}

void TorchGenerator::rand_f64(double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = uniform_f64(random64());
}

Tensor TorchGenerator::randn(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t n = t.numel();
  switch (dtype) {
    case DType::kF32:
      randn_f32(t.data<float>(), n);
      break;
    case DType::kF64:
      randn_f64(t.data<double>(), n);
      break;
    case DType::kF16:
      randn_f16(t.data<uint16_t>(), n);
      break;
    case DType::kBF16:
      randn_bf16(t.data<uint16_t>(), n);
      break;
    default:
      fail(ErrorCode::kUnsupported, "TorchGenerator::randn: dtype ", dtype_name(dtype),
           " is not a floating type torch samples normals in (f32, f64, f16, bf16)");
  }
  return t;
}

Tensor TorchGenerator::rand(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t n = t.numel();
  switch (dtype) {
    case DType::kF32:
      rand_f32(t.data<float>(), n);
      break;
    case DType::kF64:
      rand_f64(t.data<double>(), n);
      break;
    default:
      fail(ErrorCode::kUnsupported, "TorchGenerator::rand: dtype ", dtype_name(dtype),
           " not implemented (f32, f64)");
  }
  return t;
}

}  // namespace h3
