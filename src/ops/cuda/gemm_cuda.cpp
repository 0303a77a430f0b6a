// linear and matmul through cuBLASLt: bf16/f16 tensor cores with float32 accumulation, float32
// inputs as plain float32 GEMMs (CUBLAS_COMPUTE_32F: TF32 stays off, so f32 results match the CPU
// oracle to float32 rounding). The bias of a linear layer is added in cuBLASLt's epilogue, before
// the one rounding to the output dtype, as torch's addmm does.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_util.h"

namespace h3::ops::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr int kMaxDevices = 64;

void check_lt(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  fail(ErrorCode::kInternal, "cuBLASLt error in ", what, ": status ", static_cast<int>(st));
}

// One handle and workspace per device, created on first use and kept for the process.
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

struct AlgoKey {
  int64_t v[20];
  bool operator==(const AlgoKey& o) const { return std::memcmp(v, o.v, sizeof(v)) == 0; }
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t x : k.v) h = (h ^ static_cast<size_t>(x)) * 1099511628211ull;
    return h;
  }
};

std::mutex g_mutex;
LtContext g_ctx[kMaxDevices];
std::unordered_map<AlgoKey, cublasLtMatmulAlgo_t, AlgoKeyHash> g_algos;
// Keys cuBLASLt had no algorithm for: a caller with another path (gemm_fp8) asks once, not on
// every call of a step loop.
std::unordered_map<AlgoKey, cublasStatus_t, AlgoKeyHash> g_no_algo;

LtContext& context(int device) {
  H3_CHECK(device >= 0 && device < kMaxDevices, ErrorCode::kUnsupported, "cuda:", device,
           " is beyond the devices h3 supports");
  LtContext& c = g_ctx[device];
  if (!c.handle) {
    check_lt(cublasLtCreate(&c.handle), "cublasLtCreate");
    H3_CUDA_CHECK(cudaMalloc(&c.workspace, kWorkspaceBytes));
  }
  return c;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default:
      fail(ErrorCode::kUnsupported, "GEMM: dtype ", dtype_name(t),
           " is not supported on CUDA (expected f32, bf16 or f16)");
  }
}

int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t al = 256;
  while (al > 1 && (a % static_cast<uintptr_t>(al)) != 0) al >>= 1;
  return al;
}

struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    check_lt(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows),
                                        static_cast<uint64_t>(cols), ld),
             "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
      const int32_t b = static_cast<int32_t>(batch);
      check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof(b)),
               "layout batch count");
      check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &stride, sizeof(stride)),
               "layout batch stride");
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

// cuBLASLt's first `count` heuristic choices for a GEMM, best first (empty when it has none;
// `status` then says why).
std::vector<cublasLtMatmulHeuristicResult_t> heuristics(LtContext& ctx, cublasLtMatmulDesc_t desc,
                                                        const Layout& la, const Layout& lb,
                                                        const Layout& lc, int64_t al_a,
                                                        int64_t al_b, int64_t al_c, int count,
                                                        cublasStatus_t* status) {
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  const uint64_t ws = kWorkspaceBytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof(ws)),
           "workspace preference");
  const uint32_t a1 = static_cast<uint32_t>(al_a), a2 = static_cast<uint32_t>(al_b),
                 a3 = static_cast<uint32_t>(al_c);
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a1, 4),
           "alignment A");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a2, 4),
           "alignment B");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &a3, 4),
           "alignment C");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &a3, 4),
           "alignment D");
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
  int found = 0;
  *status = cublasLtMatmulAlgoGetHeuristic(ctx.handle, desc, la.l, lb.l, lc.l, lc.l, pref, count,
                                           results.data(), &found);
  if (*status != CUBLAS_STATUS_SUCCESS) found = 0;
  results.resize(static_cast<size_t>(found));
  return results;
}

// cuBLASLt's first heuristic choice for a GEMM, asked once per key and cached (the caller holds
// g_mutex). Null when it has none; `status` then says why. The first choice, not the fastest of
// several timed: a choice by timing could differ between runs, and with it the output's bits.
const cublasLtMatmulAlgo_t* algo_for(const AlgoKey& key, LtContext& ctx, cublasLtMatmulDesc_t desc,
                                     const Layout& la, const Layout& lb, const Layout& lc,
                                     int64_t al_a, int64_t al_b, int64_t al_c, cublasStatus_t* status) {
  auto it = g_algos.find(key);
  if (it != g_algos.end()) return &it->second;
  if (const auto miss = g_no_algo.find(key); miss != g_no_algo.end()) {
    *status = miss->second;
    return nullptr;
  }
  const auto found = heuristics(ctx, desc, la, lb, lc, al_a, al_b, al_c, 1, status);
  if (found.empty()) {
    g_no_algo.emplace(key, *status);
    return nullptr;
  }
  return &g_algos.emplace(key, found[0].algo).first->second;
}

// The matmul description of gemm_fp8: D^T [N, M] = W [N, K] x X^T [K, M] in cuBLASLt's
// column-major view, with outer-vector scales (per channel for W, per token for X) and, given a
// bias, the bias epilogue: one per output channel, added in float32 to the scaled accumulator
// before the one rounding to D's dtype.
// `block_scales`: 128 x 128 weight blocks and activations per token and 128 columns instead
// (cuBLASLt's BLK128x128 x VEC128 modes, which promote the accumulator per 128 columns anyway).
struct Fp8Desc {
  cublasLtMatmulDesc_t d = nullptr;
  Fp8Desc(const float* w_scale, const float* x_scale, bool fast_accum, const void* bias = nullptr,
          DType bias_dtype = DType::kF32, bool block_scales = false) {
    check_lt(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "fp8 matmul desc");
    // Hopper's FP8 kernels take only this "TN" form, both operands K-contiguous, which is how a
    // linear layer stores them anyway.
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t), "fp8 transa");
    set(CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n), "fp8 transb");
    const int32_t w_mode = block_scales ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                        : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const int32_t x_mode = block_scales ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                        : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &w_mode, sizeof(w_mode), "fp8 weight scale mode");
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &x_mode, sizeof(x_mode), "fp8 activation scale mode");
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale), "fp8 weight scale pointer");
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale),
        "fp8 activation scale pointer");
    const int8_t fast = fast_accum ? 1 : 0;
    set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast), "fp8 accumulation mode");
    if (bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi), "fp8 epilogue");
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias), "fp8 bias pointer");
      const cudaDataType_t bt = cuda_type(bias_dtype);
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt), "fp8 bias dtype");
    }
  }
  void set(cublasLtMatmulDescAttributes_t a, const void* v, size_t n, const char* what) {
    check_lt(cublasLtMatmulDescSetAttribute(d, a, v, n), what);
  }
  ~Fp8Desc() { cublasLtMatmulDescDestroy(d); }
  Fp8Desc(const Fp8Desc&) = delete;
  Fp8Desc& operator=(const Fp8Desc&) = delete;
};

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b, void* c,
          DType c_dtype, int64_t ldc, int64_t c_batch_stride, int64_t batch, const void* bias,
          int device, const void* c_in) {
  H3_CHECK(a.dtype == b.dtype, ErrorCode::kInternal, "gemm: operand dtypes differ (",
           dtype_name(a.dtype), ", ", dtype_name(b.dtype), ")");
  if (M == 0 || N == 0 || batch == 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  LtContext& ctx = context(device);
  const cudaDataType_t ab_t = cuda_type(a.dtype);
  const cudaDataType_t c_t = cuda_type(c_dtype);

  // Column-major view: D^T (N x M) = op(B_stored) x op(A_stored).
  cublasLtMatmulDesc_t desc = nullptr;
  check_lt(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  struct DescGuard {
    cublasLtMatmulDesc_t d;
    ~DescGuard() { cublasLtMatmulDescDestroy(d); }
  } desc_guard{desc};
  const cublasOperation_t op_first = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
           "transa");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
           "transb");
  const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
           "epilogue");
  if (bias) {
    check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "bias pointer");
  }

  // Stored shapes in column-major terms (rows, cols) = (stored row length, stored rows).
  const Layout la(ab_t, b.trans ? K : N, b.trans ? N : K, b.ld, batch, b.batch_stride);
  const Layout lb(ab_t, a.trans ? M : K, a.trans ? K : M, a.ld, batch, a.batch_stride);
  const Layout lc(c_t, N, M, ldc, batch, c_batch_stride);

  const int64_t al_a = alignment_of(b.ptr), al_b = alignment_of(a.ptr), al_c = alignment_of(c);
  AlgoKey key{};
  const int64_t vals[20] = {M,
                            N,
                            K,
                            a.ld,
                            b.ld,
                            ldc,
                            a.trans,
                            b.trans,
                            static_cast<int64_t>(a.dtype),
                            static_cast<int64_t>(c_dtype),
                            batch,
                            a.batch_stride,
                            b.batch_stride,
                            c_batch_stride,
                            bias != nullptr,
                            al_a,
                            al_b,
                            al_c,
                            device,
                            c_in != nullptr ? 1 + alignment_of(c_in) : 0};
  std::memcpy(key.v, vals, sizeof(vals));
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const cublasLtMatmulAlgo_t* algo = algo_for(key, ctx, desc, la, lb, lc, al_a, al_b, al_c, &st);
  H3_CHECK(algo != nullptr, ErrorCode::kUnsupported, "cuBLASLt has no algorithm for a GEMM of M=", M,
           " N=", N, " K=", K, " (", dtype_name(a.dtype), " -> ", dtype_name(c_dtype), ", batch ",
           batch, ", status ", static_cast<int>(st), ")");
  const float alpha = 1.0f, beta = c_in ? 1.0f : 0.0f;
  check_lt(
      cublasLtMatmul(ctx.handle, desc, &alpha, b.ptr, la.l, a.ptr, lb.l, &beta, c_in ? c_in : c,
                     lc.l, c, lc.l, algo, ctx.workspace, kWorkspaceBytes, current_stream()),
      "cublasLtMatmul");
}

namespace {

// gemm_fp8's cached algorithm for a shape, output, bias and the operands' alignments (null:
// cuBLASLt has none). The heuristic's first choice: `h3 bench fp8 --search` timed 200 of the 1,224
// configurations cuBLASLt accepts for each of the DiT's GEMMs on the H200, and none beat it.
const cublasLtMatmulAlgo_t* fp8_algo(LtContext& ctx, const Fp8Desc& desc, const Layout& la,
                                     const Layout& lb, const Layout& lc, int64_t M, int64_t N,
                                     int64_t K, DType c_dtype, int device, int64_t al_w,
                                     int64_t al_x, int64_t al_c, const void* bias, DType bias_dtype,
                                     bool block_scales) {
  AlgoKey key{};
  // Marker -1 keeps these apart from gemm()'s keys (whose first field, M, is positive).
  const int64_t vals[20] = {-1,
                            M,
                            N,
                            K,
                            static_cast<int64_t>(c_dtype),
                            al_w,
                            al_x,
                            al_c,
                            device,
                            bias ? 1 + static_cast<int64_t>(bias_dtype) : 0,
                            bias ? alignment_of(bias) : 0,
                            block_scales ? 1 : 0};
  std::memcpy(key.v, vals, sizeof(vals));
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  return algo_for(key, ctx, desc.d, la, lb, lc, al_w, al_x, al_c, &st);
}

// An algorithm's configuration ids as the timings report them (-1 where it has none).
Fp8AlgoTiming config_of(const cublasLtMatmulAlgo_t& a) {
  auto attr = [&](cublasLtMatmulAlgoConfigAttributes_t id) {
    int32_t v = -1;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&a, id, &v, sizeof(v), &written);
    return static_cast<int>(v);
  };
  Fp8AlgoTiming t;
  t.algo_id = attr(CUBLASLT_ALGO_CONFIG_ID);
  t.tile = attr(CUBLASLT_ALGO_CONFIG_TILE_ID);
  t.stages = attr(CUBLASLT_ALGO_CONFIG_STAGES_ID);
  t.split_k = attr(CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  t.swizzle = attr(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  t.custom = attr(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  uint16_t cluster = 0;  // a uint16_t attribute, unlike the others
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                       sizeof(cluster), &written);
  t.cluster = cluster;
  return t;
}

}  // namespace

bool gemm_fp8(int64_t M, int64_t N, int64_t K, const void* x_q, const float* x_scale,
              const void* w_q, const float* w_scale, void* c, DType c_dtype, int device,
              const void* bias, DType bias_dtype, bool block_scales) {
  if (M == 0 || N == 0) return true;
  std::lock_guard<std::mutex> lock(g_mutex);
  LtContext& ctx = context(device);
  const Fp8Desc desc(w_scale, x_scale, false, bias, bias_dtype, block_scales);
  const Layout la(CUDA_R_8F_E4M3, K, N, K, 1, 0);
  const Layout lb(CUDA_R_8F_E4M3, K, M, K, 1, 0);
  const Layout lc(cuda_type(c_dtype), N, M, N, 1, 0);
  const cublasLtMatmulAlgo_t* algo =
      fp8_algo(ctx, desc, la, lb, lc, M, N, K, c_dtype, device, alignment_of(w_q),
               alignment_of(x_q), alignment_of(c), bias, bias_dtype, block_scales);
  if (algo == nullptr) return false;
  const float alpha = 1.0f, beta = 0.0f;
  check_lt(cublasLtMatmul(ctx.handle, desc.d, &alpha, w_q, la.l, x_q, lb.l, &beta, c, lc.l, c, lc.l,
                          algo, ctx.workspace, kWorkspaceBytes, current_stream()),
           "cublasLtMatmul (fp8)");
  return true;
}

bool gemm_fp8_has_kernel(int64_t M, int64_t N, int64_t K, DType c_dtype, int device,
                         const DType* bias_dtype) {
  if (M == 0 || N == 0) return true;
  std::lock_guard<std::mutex> lock(g_mutex);
  LtContext& ctx = context(device);
  // Stand-in pointers at the 256-byte alignment of a fresh allocation: the description and the
  // heuristic only look at their values' alignment, never at what they point to.
  const void* aligned = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  const float* scale = static_cast<const float*>(aligned);
  const Fp8Desc desc(scale, scale, false, bias_dtype ? aligned : nullptr,
                     bias_dtype ? *bias_dtype : DType::kF32);
  const Layout la(CUDA_R_8F_E4M3, K, N, K, 1, 0);
  const Layout lb(CUDA_R_8F_E4M3, K, M, K, 1, 0);
  const Layout lc(cuda_type(c_dtype), N, M, N, 1, 0);
  return fp8_algo(ctx, desc, la, lb, lc, M, N, K, c_dtype, device, 256, 256, 256,
                  bias_dtype ? aligned : nullptr, bias_dtype ? *bias_dtype : DType::kF32,
                  false) != nullptr;
}

std::vector<Fp8AlgoTiming> sweep_gemm_fp8(int64_t M, int64_t N, int64_t K, const void* x_q,
                                          const float* x_scale, const void* w_q,
                                          const float* w_scale, void* c, DType c_dtype, int device,
                                          int count, int iters, bool fast_accum) {
  std::lock_guard<std::mutex> lock(g_mutex);
  LtContext& ctx = context(device);
  const Fp8Desc desc(w_scale, x_scale, fast_accum);
  const Layout la(CUDA_R_8F_E4M3, K, N, K, 1, 0);
  const Layout lb(CUDA_R_8F_E4M3, K, M, K, 1, 0);
  const Layout lc(cuda_type(c_dtype), N, M, N, 1, 0);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const auto found = heuristics(ctx, desc.d, la, lb, lc, alignment_of(w_q), alignment_of(x_q),
                                alignment_of(c), count, &st);
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  H3_CUDA_CHECK(cudaEventCreate(&e0));
  H3_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<Fp8AlgoTiming> out;
  const float alpha = 1.0f, beta = 0.0f;
  for (size_t i = 0; i < found.size(); ++i) {
    auto run = [&] {
      return cublasLtMatmul(ctx.handle, desc.d, &alpha, w_q, la.l, x_q, lb.l, &beta, c, lc.l, c,
                            lc.l, &found[i].algo, ctx.workspace, kWorkspaceBytes,
                            current_stream());
    };
    Fp8AlgoTiming t = config_of(found[i].algo);
    t.index = static_cast<int>(i);
    t.fast_accum = fast_accum;
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // a choice that does not run is left out
    std::vector<float> ms;
    for (int it = 0; it < iters; ++it) {
      H3_CUDA_CHECK(cudaEventRecord(e0, current_stream()));
      check_lt(run(), "cublasLtMatmul (fp8 sweep)");
      H3_CUDA_CHECK(cudaEventRecord(e1, current_stream()));
      H3_CUDA_CHECK(cudaEventSynchronize(e1));
      float v = 0.0f;
      H3_CUDA_CHECK(cudaEventElapsedTime(&v, e0, e1));
      ms.push_back(v);
    }
    std::sort(ms.begin(), ms.end());
    t.ms = ms.empty() ? 0.0 : ms[ms.size() / 2];
    out.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return out;
}

std::vector<Fp8AlgoTiming> search_gemm_fp8(int64_t M, int64_t N, int64_t K, const void* x_q,
                                           const float* x_scale, const void* w_q,
                                           const float* w_scale, void* c, DType c_dtype, int device,
                                           int max_configs, int iters, Fp8SearchStats* stats) {
  std::lock_guard<std::mutex> lock(g_mutex);
  LtContext& ctx = context(device);
  const Fp8Desc desc(w_scale, x_scale, false);
  const cudaDataType_t c_t = cuda_type(c_dtype);
  const Layout la(CUDA_R_8F_E4M3, K, N, K, 1, 0);
  const Layout lb(CUDA_R_8F_E4M3, K, M, K, 1, 0);
  const Layout lc(c_t, N, M, N, 1, 0);
  Fp8SearchStats local;
  Fp8SearchStats& st = stats ? *stats : local;
  // The starting points: the heuristic's own choices (algorithms that accept these outer-vector
  // scales; an algorithm merely initialized by id carries none of the description's modes and
  // may be refused for it), then every id the library lists for the types.
  cublasStatus_t hs = CUBLAS_STATUS_SUCCESS;
  std::vector<cublasLtMatmulAlgo_t> bases;
  for (const auto& h : heuristics(ctx, desc.d, la, lb, lc, alignment_of(w_q), alignment_of(x_q),
                                  alignment_of(c), 16, &hs))
    bases.push_back(h.algo);
  st.heuristic = static_cast<int>(bases.size());
  int ids[128] = {}, n_ids = 0;
  if (cublasLtMatmulAlgoGetIds(ctx.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3,
                               CUDA_R_8F_E4M3, c_t, c_t, 128, ids, &n_ids) != CUBLAS_STATUS_SUCCESS)
    n_ids = 0;
  st.ids = n_ids;
  for (int i = 0; i < n_ids; ++i) {
    cublasLtMatmulAlgo_t a;
    if (cublasLtMatmulAlgoInit(ctx.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3,
                               CUDA_R_8F_E4M3, c_t, c_t, ids[i], &a) == CUBLAS_STATUS_SUCCESS)
      bases.push_back(a);
  }
  // An algorithm's list-valued capability (tile or stage ids); {0} (undefined: the algorithm
  // picks) when it lists none.
  auto list_cap = [](const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t cap) {
    size_t bytes = 0;
    std::vector<uint32_t> v;
    if (cublasLtMatmulAlgoCapGetAttribute(&a, cap, nullptr, 0, &bytes) == CUBLAS_STATUS_SUCCESS &&
        bytes >= sizeof(uint32_t)) {
      v.resize(bytes / sizeof(uint32_t));
      if (cublasLtMatmulAlgoCapGetAttribute(&a, cap, v.data(), bytes, &bytes) != CUBLAS_STATUS_SUCCESS)
        v.clear();
    }
    if (v.empty()) v.push_back(0);
    return v;
  };
  auto int_cap = [](const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t cap) {
    int32_t v = 0;
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&a, cap, &v, sizeof(v), &bytes) != CUBLAS_STATUS_SUCCESS)
      return 0;
    return static_cast<int>(v);
  };
  // Hopper's cluster shapes that fit these GEMMs' grids (automatic first). The attribute is a
  // uint16_t: set with any other width, cuBLASLt refuses it.
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                               CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                               CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                               CUBLASLT_CLUSTER_SHAPE_1x4x1};
  struct Config {
    cublasLtMatmulAlgo_t algo;
    Fp8AlgoTiming t;
  };
  // Every configuration the library accepts is checked (cheap: no kernel runs), then at most
  // max_configs of them timed: the heuristic's own first, the rest evenly spread over the list so
  // that every algorithm and tile gets a look.
  std::vector<Config> found;
  std::set<std::array<int, 6>> seen;
  for (const cublasLtMatmulAlgo_t& base : bases) {
    const std::vector<uint32_t> tiles = list_cap(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    const std::vector<uint32_t> stages = list_cap(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    const uint32_t swizzles = int_cap(base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) ? 2 : 1;
    const uint32_t customs =
        static_cast<uint32_t>(std::clamp(int_cap(base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX), 0, 3)) + 1;
    const int id = config_of(base).algo_id;
    for (uint32_t tile : tiles)
      for (uint32_t stage : stages)
        for (uint16_t cluster : clusters)
          for (uint32_t swz = 0; swz < swizzles; ++swz)
            for (uint32_t custom = 0; custom < customs; ++custom) {
              const std::array<int, 6> key = {id, static_cast<int>(tile), static_cast<int>(stage),
                                              static_cast<int>(cluster), static_cast<int>(swz),
                                              static_cast<int>(custom)};
              if (!seen.insert(key).second) continue;
              cublasLtMatmulAlgo_t a = base;
              const int32_t split = 1;
              auto cfg = [&](cublasLtMatmulAlgoConfigAttributes_t attr, const void* v, size_t n) {
                return cublasLtMatmulAlgoConfigSetAttribute(&a, attr, v, n) == CUBLAS_STATUS_SUCCESS;
              };
              ++st.tried;
              if (!cfg(CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile)) ||
                  !cfg(CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof(stage)) ||
                  !cfg(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster)) ||
                  !cfg(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz)) ||
                  !cfg(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof(custom)) ||
                  !cfg(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split))) {
                ++st.unset;
                continue;
              }
              cublasLtMatmulHeuristicResult_t r{};
              const cublasStatus_t cs =
                  cublasLtMatmulAlgoCheck(ctx.handle, desc.d, la.l, lb.l, lc.l, lc.l, &a, &r);
              if (cs != CUBLAS_STATUS_SUCCESS) {
                if (st.first_refusal == 0) st.first_refusal = static_cast<int>(cs);
                continue;
              }
              if (r.workspaceSize > kWorkspaceBytes) continue;
              Fp8AlgoTiming t;
              t.index = static_cast<int>(found.size());
              t.algo_id = id;
              t.tile = static_cast<int>(tile);
              t.stages = static_cast<int>(stage);
              t.cluster = static_cast<int>(cluster);
              t.swizzle = static_cast<int>(swz);
              t.custom = static_cast<int>(custom);
              t.split_k = split;
              found.push_back({a, t});
            }
  }
  st.accepted = static_cast<int>(found.size());
  if (static_cast<int>(found.size()) > max_configs) {
    std::vector<Config> spread;
    if (!bases.empty() && st.heuristic > 0) {
      // The heuristic's own configuration, as it came, leads (its tile and stages as chosen).
      Config own{bases[0], config_of(bases[0])};
      own.t.split_k = 1;
      own.t.index = -1;
      spread.push_back(own);
    }
    const size_t want = static_cast<size_t>(std::max(max_configs, 1));
    for (size_t i = 0; spread.size() < want && i < want; ++i)
      spread.push_back(found[i * found.size() / want]);
    found = std::move(spread);
  }
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  H3_CUDA_CHECK(cudaEventCreate(&e0));
  H3_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<Fp8AlgoTiming> out;
  const float alpha = 1.0f, beta = 0.0f;
  for (Config& f : found) {
    auto run = [&] {
      return cublasLtMatmul(ctx.handle, desc.d, &alpha, w_q, la.l, x_q, lb.l, &beta, c, lc.l, c,
                            lc.l, &f.algo, ctx.workspace, kWorkspaceBytes, current_stream());
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    std::vector<float> ms;
    for (int it = 0; it < iters; ++it) {
      H3_CUDA_CHECK(cudaEventRecord(e0, current_stream()));
      if (run() != CUBLAS_STATUS_SUCCESS) break;
      H3_CUDA_CHECK(cudaEventRecord(e1, current_stream()));
      H3_CUDA_CHECK(cudaEventSynchronize(e1));
      float v = 0.0f;
      H3_CUDA_CHECK(cudaEventElapsedTime(&v, e0, e1));
      ms.push_back(v);
    }
    if (ms.empty()) continue;
    std::sort(ms.begin(), ms.end());
    f.t.ms = ms[ms.size() / 2];
    out.push_back(f.t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(out.begin(), out.end(),
            [](const Fp8AlgoTiming& a, const Fp8AlgoTiming& b) { return a.ms < b.ms; });
  return out;
}

// The dtype both GEMM operands are brought to: the shared half type when they agree, else f32
// (widening is exact; no operand is ever rounded down).
static DType compute_dtype(DType x, DType w) {
  if (x == w && (x == DType::kBF16 || x == DType::kF16 || x == DType::kF32)) return x;
  return DType::kF32;
}

Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& residual) {
  require_cuda(x, "linear_residual", "x");
  require_cuda(w, "linear_residual", "w");
  require_cuda(residual, "linear_residual", "residual");
  require_same_device(x, w, "linear_residual");
  require_same_device(x, residual, "linear_residual");
  H3_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1), ErrorCode::kInvalidArgument,
           "ops::linear_residual: x ", shape_str(x.shape()), " and w ", shape_str(w.shape()),
           " do not match (expected x [..., K] and w [N, K])");
  Shape out_shape = x.shape();
  out_shape.back() = w.size(0);
  H3_CHECK(residual.shape() == out_shape && residual.dtype() == x.dtype(),
           ErrorCode::kInvalidArgument, "ops::linear_residual: residual ", residual.desc(),
           ": expected ", shape_str(out_shape), " in x's dtype ", dtype_name(x.dtype()));
  const DType out_t = x.dtype();
  const DType ct = compute_dtype(x.dtype(), w.dtype());
  // The epilogue adds the residual in float32 before the one rounding; where the operands would
  // first be widened (mixed dtypes), the composition is as fast.
  if (ct != out_t || !fusion_enabled("GEMM_RESIDUAL")) return add(residual, linear(x, w, nullptr));
  set_device_of(x);
  const int64_t N = w.size(0), K = w.size(1);
  const int64_t M = K ? x.numel() / K : 0;
  Tensor out = Tensor::empty(out_shape, out_t, x.device());
  if (out.numel() == 0) return out;
  if (K == 0) return copy(residual);
  const Tensor xc = contiguous(x), wc = contiguous(w), rc = contiguous(residual);
  const GemmOperand A{xc.raw(), ct, K, false, 0};
  const GemmOperand B{wc.raw(), ct, K, true, 0};
  gemm(M, N, K, A, B, out.raw(), out_t, N, 0, 1, nullptr, x.device().index, rc.raw());
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  require_cuda(x, "linear", "x");
  require_cuda(w, "linear", "w");
  require_same_device(x, w, "linear");
  H3_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1), ErrorCode::kInvalidArgument,
           "ops::linear: x ", shape_str(x.shape()), " and w ", shape_str(w.shape()),
           " do not match (expected x [..., K] and w [N, K])");
  const int64_t N = w.size(0), K = w.size(1);
  if (bias) {
    require_cuda(*bias, "linear", "bias");
    H3_CHECK(bias->numel() == N, ErrorCode::kInvalidArgument, "ops::linear: bias ",
             shape_str(bias->shape()), " does not match ", N, " outputs");
  }
  set_device_of(x);
  const DType out_t = x.dtype();
  H3_CHECK(out_t == DType::kF32 || out_t == DType::kBF16 || out_t == DType::kF16,
           ErrorCode::kUnsupported, "ops::linear: x dtype ", dtype_name(out_t), " on CUDA");
  const DType ct = compute_dtype(x.dtype(), w.dtype());
  const Tensor xc = as_dtype(x, ct);
  const Tensor wc = as_dtype(w, ct);
  int64_t M = 1;  // from the leading dimensions: with K = 0 the rows are still there
  for (int d = 0; d + 1 < x.dim(); ++d) M *= x.size(d);
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor out = Tensor::empty(out_shape, out_t, x.device());
  if (out.numel() == 0) return out;
  const GemmOperand A{xc.raw(), ct, K, false, 0};
  const GemmOperand B{wc.raw(), ct, K, true, 0};
  const bool fuse_bias = bias && bias->dtype() == out_t && fusion_enabled("GEMM_BIAS");
  const bool direct = (ct == out_t) && (!bias || fuse_bias);
  if (K == 0) {
    // An empty reduction: zeros plus bias.
    Tensor acc = Tensor::zeros({M, N}, DType::kF32, x.device());
    bias_add_cast(static_cast<const float*>(acc.raw()), N, bias, false, out.raw(), out_t, N, M, N);
    return out;
  }
  if (direct) {
    const Tensor bc = fuse_bias ? contiguous(*bias) : Tensor();
    gemm(M, N, K, A, B, out.raw(), out_t, N, 0, 1, fuse_bias ? bc.raw() : nullptr, x.device().index);
    return out;
  }
  // Float32 result first, then bias and one rounding to the output dtype.
  Tensor acc = Tensor::empty({M, N}, DType::kF32, x.device());
  gemm(M, N, K, A, B, acc.raw(), DType::kF32, N, 0, 1, nullptr, x.device().index);
  bias_add_cast(static_cast<const float*>(acc.raw()), N, bias, false, out.raw(), out_t, N, M, N);
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  require_cuda(a, "matmul", "a");
  require_cuda(b, "matmul", "b");
  require_same_device(a, b, "matmul");
  H3_CHECK((a.dim() == 3 || a.dim() == 2) && (b.dim() == 3 || b.dim() == 2), ErrorCode::kInvalidArgument,
           "ops::matmul: expected a [B, M, K] and b [B, K, N] or [K, N], got ", shape_str(a.shape()),
           " and ", shape_str(b.shape()));
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  const int64_t M = a.size(-2), K = a.size(-1);
  const int64_t N = b.size(-1);
  H3_CHECK(b.size(-2) == K && (b.dim() == 2 || b.size(0) == batch), ErrorCode::kInvalidArgument,
           "ops::matmul: a ", shape_str(a.shape()), " and b ", shape_str(b.shape()), " do not match");
  H3_CHECK(a.dim() == 3 || b.dim() == 2, ErrorCode::kInvalidArgument,
           "ops::matmul: a 2-D a needs a 2-D b, got ", shape_str(b.shape()));
  set_device_of(a);
  const DType out_t = a.dtype();
  const DType ct = compute_dtype(a.dtype(), b.dtype());
  const Tensor ac = as_dtype(a, ct);
  const Tensor bc = as_dtype(b, ct);
  Shape out_shape = a.shape();
  out_shape.back() = N;
  Tensor out = Tensor::empty(out_shape, out_t, a.device());
  if (out.numel() == 0) return out;
  if (K == 0) {
    Tensor z = Tensor::zeros({batch * M, N}, DType::kF32, a.device());
    bias_add_cast(static_cast<const float*>(z.raw()), N, nullptr, false, out.raw(), out_t, N,
                  batch * M, N);
    return out;
  }
  const GemmOperand A{ac.raw(), ct, K, false, M * K};
  const GemmOperand B{bc.raw(), ct, N, false, b.dim() == 3 ? K * N : 0};
  if (ct == out_t) {
    gemm(M, N, K, A, B, out.raw(), out_t, N, M * N, batch, nullptr, a.device().index);
    return out;
  }
  Tensor acc = Tensor::empty({batch * M, N}, DType::kF32, a.device());
  gemm(M, N, K, A, B, acc.raw(), DType::kF32, N, M * N, batch, nullptr, a.device().index);
  bias_add_cast(static_cast<const float*>(acc.raw()), N, nullptr, false, out.raw(), out_t, N,
                batch * M, N);
  return out;
}

}  // namespace h3::ops::cuda
