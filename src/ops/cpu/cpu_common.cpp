// Helpers shared by the CPU ops: float32 widening, one-rounding stores, index reading, threads and
// the GEMM's split over them.
#ifdef __linux__
#include <sched.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>

#include "core/log.h"
#include "core/status.h"
#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

F32::F32(const Tensor& t) : n_(t.numel()) {
  H3_CHECK(t.device().is_cpu(), ErrorCode::kInternal, "cpu op given a tensor on ", t.device().str());
  H3_CHECK(dtype_is_float(t.dtype()), ErrorCode::kUnsupported, "cpu op: expected a float tensor, got ",
           t.desc());
  if (t.dtype() == DType::kF32 && t.is_contiguous()) {
    holder_ = t;
  } else {
    // copy_from gathers strided views and widens in one pass (exact for the 16- and 8-bit types).
    holder_ = Tensor::empty(t.shape(), DType::kF32);
    holder_.copy_from(t);
  }
  ptr_ = n_ ? static_cast<const float*>(holder_.raw()) : nullptr;
}

std::vector<float> widen_optional(const Tensor* t) {
  if (!t) return {};
  F32 f(*t);
  return std::vector<float>(f.data(), f.data() + f.size());
}

Tensor store_f32(const float* values, const Shape& shape, DType dtype) {
  Tensor out = Tensor::empty(shape, dtype);
  const int64_t n = out.numel();
  if (n) convert_elements(values, DType::kF32, out.raw(), dtype, static_cast<size_t>(n));
  return out;
}

std::vector<int64_t> index_values(const Tensor& idx) {
  H3_CHECK(idx.dtype() == DType::kI64 || idx.dtype() == DType::kI32, ErrorCode::kInvalidArgument,
           "index tensor must be int32 or int64, got ", idx.desc());
  const Tensor c = idx.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(c.numel()));
  if (c.dtype() == DType::kI64) {
    if (!out.empty()) std::memcpy(out.data(), c.raw(), out.size() * 8);
  } else {
    const auto* p = static_cast<const int32_t*>(c.raw());
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  }
  return out;
}

float round_to(float v, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return round_bf16(v);
    case DType::kF16:
      return round_f16(v);
    case DType::kF8E4M3:
      return f8e4m3_to_f32(f8e4m3_from_f32(v));
    default:
      return v;
  }
}

namespace {
thread_local bool t_in_part = false;
// A GEMM is split when it has at least this much arithmetic (about a millisecond on one core,
// against tens of microseconds to start a thread) and each part gets at least kMinRows rows.
constexpr double kParallelFlops = double(1 << 24);
constexpr int64_t kMinRows = 16;
}  // namespace

int cpu_threads() {
  static const int n = [] {
    if (const char* v = std::getenv("H3_CPU_THREADS"); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long t = std::strtol(v, &end, 10);
      if (*end == '\0' && t >= 1 && t <= 1024) return static_cast<int>(t);
      H3_LOG_WARN("H3_CPU_THREADS='", v, "' is not a count from 1 to 1024; ignored");
    }
#ifdef __linux__
    // The CPUs this process may run on (a container's or taskset's share), not the host's.
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

void parallel_for(int64_t parts, const std::function<void(int64_t)>& f) {
  if (parts <= 1 || t_in_part) {
    for (int64_t p = 0; p < parts; ++p) f(p);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
  auto run = [&](int64_t p) {
    t_in_part = true;
    try {
      f(p);
    } catch (...) {
      errors[static_cast<size_t>(p)] = std::current_exception();
    }
    t_in_part = false;
  };
  std::vector<std::thread> pool;
  int64_t started = 1;
  try {
    for (; started < parts; ++started) pool.emplace_back(run, started);
  } catch (const std::system_error&) {
    // No more threads to be had (a process or container limit): the caller runs the rest.
  }
  run(0);
  for (int64_t p = started; p < parts; ++p) run(p);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int64_t parts = t_in_part || 2.0 * double(m) * double(n) * double(k) < kParallelFlops
                            ? 1
                            : std::min<int64_t>(cpu_threads(), m / kMinRows);
  if (parts <= 1) {
    sgemm_serial(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  parallel_for(parts, [&](int64_t p) {
    const int64_t r0 = m * p / parts, r1 = m * (p + 1) / parts;
    // Rows r0..r1 of op(A): row offsets when A is stored [m, k], column offsets when [k, m].
    sgemm_serial(trans_a, trans_b, r1 - r0, n, k, alpha, trans_a ? a + r0 : a + r0 * lda, lda, b,
                 ldb, beta, c + r0 * ldc, ldc);
  });
}

}  // namespace h3::ops::cpu
