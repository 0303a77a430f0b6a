#include "core/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/status.h"

namespace h3 {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF64: return 8;
    case DType::kF8E4M3: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF64: return "f64";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
  }
  return "?";
}

const char* dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF64: return "F64";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

bool dtype_from_safetensors_name(std::string_view name, DType* out) {
  static const struct {
    const char* name;
    DType type;
  } kNames[] = {{"F32", DType::kF32},     {"BF16", DType::kBF16}, {"F16", DType::kF16},
                {"F64", DType::kF64},     {"F8_E4M3", DType::kF8E4M3}, {"I32", DType::kI32},
                {"I64", DType::kI64},     {"U8", DType::kU8},     {"BOOL", DType::kBool}};
  for (const auto& n : kNames) {
    if (name == n.name) {
      *out = n.type;
      return true;
    }
  }
  return false;
}

bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kF64 ||
         t == DType::kF8E4M3;
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    // Subnormal: value = man * 2^-24, exactly representable in float32.
    const float v = static_cast<float>(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

namespace {

// The unbiased exponent of a positive finite float (float32 subnormals give -127: every caller
// clamps to a minimum far above that). Bit arithmetic, not frexp/ldexp: these conversions run per
// element in the CPU emulation of f16 autocast and FP8, where the libm calls dominated.
int exponent_of(float f) { return static_cast<int>((f32_bits(f) >> 23) & 0xffu) - 127; }

// 2^e for e in float32's normal range.
constexpr float pow2(int e) { return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23); }

// Round-to-nearest-even of a finite float onto a binary format with `man_bits` stored mantissa
// bits and minimum normal exponent `emin` (unbiased), as a float; the callers then encode it.
// Works for every target narrower than float32.
float round_to_format(float f, int man_bits, int emin) {
  if (f == 0.0f || !std::isfinite(f)) return f;
  const int exp = std::max(exponent_of(std::fabs(f)), emin);  // below emin: a fixed quantum
  const float quantum = pow2(exp - man_bits);
  // nearbyint under the default rounding mode rounds ties to even; f/quantum is exact (power of two).
  return std::nearbyint(f / quantum) * quantum;
}

// e4m3fn values by code: a table, since decoding runs once per weight element per GEMM in the
// CPU emulation. constexpr, so it is filled before any static initializer could read it.
struct F8E4M3Table {
  float v[256] = {};
  constexpr F8E4M3Table() {
    for (uint32_t c = 0; c < 256; ++c) {
      const uint32_t exp = (c >> 3) & 0xfu, man = c & 0x7u;
      float r;
      if (exp == 0xf && man == 0x7) {
        r = std::numeric_limits<float>::quiet_NaN();
      } else if (exp == 0) {
        r = static_cast<float>(man) * 0x1p-9f;
      } else {
        r = (1.0f + static_cast<float>(man) / 8.0f) * pow2(static_cast<int>(exp) - 7);
      }
      v[c] = (c & 0x80u) ? -r : r;
    }
  }
};
constexpr F8E4M3Table kF8E4M3;

}  // namespace

uint16_t f16_from_f32(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  const float r = round_to_format(std::fabs(f), 10, -14);
  if (!(r < 65520.0f) || std::isinf(f)) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (r >= 65504.0f) return static_cast<uint16_t>(sign | 0x7bffu);
  if (r == 0.0f) return sign;
  const int exp = exponent_of(r);
  if (exp < -14)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r * 0x1p24f));  // subnormal
  const uint32_t man = (f32_bits(r) >> 13) & 0x3ffu;  // r has at most 10 mantissa bits
  return static_cast<uint16_t>(sign | ((exp + 15) << 10) | man);
}

// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; exponent 15 with mantissa 7 is NaN.
float f8e4m3_to_f32(uint8_t v) { return kF8E4M3.v[v]; }

uint8_t f8e4m3_from_f32(float f) {
  const uint8_t sign = (f32_bits(f) >> 24) & 0x80u;
  if (std::isnan(f) || std::fabs(f) >= 480.0f) return static_cast<uint8_t>(sign | 0x7fu);
  const float r = round_to_format(std::fabs(f), 3, -6);
  if (r == 0.0f) return sign;
  if (r >= 448.0f) return static_cast<uint8_t>(sign | 0x7eu);
  const int exp = exponent_of(r);
  if (exp < -6) return static_cast<uint8_t>(sign | static_cast<uint8_t>(r * 0x1p9f));  // subnormal
  const uint32_t man = (f32_bits(r) >> 20) & 0x7u;  // r has at most 3 mantissa bits
  return static_cast<uint8_t>(sign | ((exp + 7) << 3) | man);
}

double load_as_double(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF64: return static_cast<const double*>(data)[i];
    case DType::kF8E4M3: return f8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::kI32: return static_cast<const int32_t*>(data)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::kU8: return static_cast<const uint8_t*>(data)[i];
    case DType::kBool: return static_cast<const uint8_t*>(data)[i] ? 1.0 : 0.0;
  }
  return 0.0;
}

void store_from_double(void* data, DType t, size_t i, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[i] = static_cast<float>(v); return;
    case DType::kBF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(static_cast<float>(v)); return;
    case DType::kF16: static_cast<uint16_t*>(data)[i] = f16_from_f32(static_cast<float>(v)); return;
    case DType::kF64: static_cast<double*>(data)[i] = v; return;
    case DType::kF8E4M3: static_cast<uint8_t*>(data)[i] = f8e4m3_from_f32(static_cast<float>(v)); return;
    case DType::kI32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v); return;
    case DType::kI64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v); return;
    case DType::kU8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v); return;
    case DType::kBool: static_cast<uint8_t*>(data)[i] = v != 0.0 ? 1 : 0; return;
  }
}

void convert_elements(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (n == 0) return;  // empty tensors may have no storage: memcpy(null, null, 0) is undefined
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  // Fast paths for the conversions the loaders use on large tensors.
  if (st == DType::kBF16 && dt == DType::kF32) {
    const auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    return;
  }
  if (st == DType::kF32 && dt == DType::kBF16) {
    const auto* s = static_cast<const float*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
    return;
  }
  if (st == DType::kF16 && dt == DType::kF32) {
    const auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
    return;
  }
  // Every other pair goes through double, which is exact for every source type and rounds once on
  // the way to the target, except f64 sources with a target narrower than f32: there a direct
  // rounding and a rounding via f32 can differ, so we refuse instead of guessing which one is meant.
  if (st == DType::kF64 && (dt == DType::kBF16 || dt == DType::kF16 || dt == DType::kF8E4M3)) {
    fail(ErrorCode::kUnsupported, "conversion from f64 to ", dtype_name(dt),
         " is not supported (it would round twice); convert to f32 first");
  }
  for (size_t i = 0; i < n; ++i) store_from_double(dst, dt, i, load_as_double(src, st, i));
}

}  // namespace h3
