// Element types and their exact conversions.
//
// Every narrowing conversion rounds to nearest, ties to even, as torch does, so a value rounded here
// equals the value the reference produces when it casts the same float. Widening is always exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace h3 {

enum class DType : uint8_t { kF32, kBF16, kF16, kF64, kF8E4M3, kI32, kI64, kU8, kBool };

size_t dtype_size(DType t);
// Our own short name ("f32", "bf16", ...), used in messages and `h3 info`.
const char* dtype_name(DType t);
// The safetensors header name ("F32", "BF16", "F8_E4M3", ...).
const char* dtype_safetensors_name(DType t);
// Parses a safetensors dtype name; returns false for names we do not know.
bool dtype_from_safetensors_name(std::string_view name, DType* out);
bool dtype_is_float(DType t);

// ---- scalar conversions -------------------------------------------------------------------------

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bfloat16 is the top half of a float32: widening is a shift.
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
// Rounds a float to the nearest bf16 value and returns it as float (the bf16-emulation primitive).
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

float f16_to_f32(uint16_t h);
uint16_t f16_from_f32(float f);
inline float round_f16(float f) { return f16_to_f32(f16_from_f32(f)); }

// float8 e4m3fn (no infinities; 0x7f/0xff are NaN; max finite 448). As in torch, magnitudes at or
// above 480 (half-way past the largest finite value) become NaN rather than saturating.
float f8e4m3_to_f32(uint8_t v);
uint8_t f8e4m3_from_f32(float f);

// Converts n elements between any two dtypes (float types through f32/f64; integer types by value).
// Used by Tensor::to and by the loaders; src and dst must not overlap.
void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

// Reads element i of a buffer as double / writes a double into it (slow paths: tests, tools).
double load_as_double(const void* data, DType t, size_t i);
void store_from_double(void* data, DType t, size_t i, double v);

}  // namespace h3
