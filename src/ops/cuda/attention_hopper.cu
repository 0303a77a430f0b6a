// ops::attention's entry to the Hopper kernel (attention_hopper_kernel.cuh): eligibility, the
// per-device check that the sm_90a kernel is present, tile lists for block-diagonal batches.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ops/cuda/attention_hopper.cuh"
#include "ops/cuda/attention_hopper_kernel.cuh"
#include "ops/cuda/attention_hopper_plan.h"
#include "ops/cuda/cuda_util.h"

namespace h3::ops::cuda {

namespace {

constexpr int kMaxDevices = 64;

// Streaming multiprocessors of a device, read once per device.
int sm_count(int device) {
  static std::once_flag once[kMaxDevices];
  static int n[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return 1;
  std::call_once(once[device], [device] {
    if (cudaDeviceGetAttribute(&n[device], cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      n[device] = 1;
    }
  });
  return std::max(n[device], 1);
}

}  // namespace

bool hopper_kernels_available(int device) {
  static std::once_flag once[kMaxDevices];
  static int ok[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return false;
  std::call_once(once[device], [device] {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
        major != 9 || minor != 0) {
      return;
    }
    int prev = 0;
    H3_CUDA_CHECK(cudaGetDevice(&prev));
    H3_CUDA_CHECK(cudaSetDevice(device));
    int* flag = nullptr;
    int host = 0;
    H3_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
    hopper::attention_hopper_probe<<<1, 1>>>(flag);
    const cudaError_t launched = cudaGetLastError();
    if (launched == cudaSuccess) H3_CUDA_CHECK(cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost));
    H3_CUDA_CHECK(cudaFree(flag));
    H3_CUDA_CHECK(cudaSetDevice(prev));
    ok[device] = launched == cudaSuccess && host == 1;
  });
  return ok[device] == 1;
}

namespace {

bool strides_fit(const Tensor& t) {
  return hopper::strides_ok(t.raw(), t.stride(0), t.stride(1)) && t.stride(2) == 1;
}

}  // namespace

bool hopper_attention_available(int index) { return hopper_kernels_available(index); }

bool hopper_attention_fits(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* mask) {
  (void)causal;  // both kinds run
  const DType dt = q.dtype();
  if (mask || (dt != DType::kBF16 && dt != DType::kF16)) return false;
  if (k.dtype() != dt || v.dtype() != dt || q.dim() != 3 || k.dim() != 3 || v.dim() != 3) return false;
  const int64_t d = q.size(2);
  if ((d != 64 && d != 128) || k.size(2) != d || v.size(2) != d) return false;
  if (!strides_fit(q) || !strides_fit(k) || !strides_fit(v)) return false;
  // A tensor map needs every dimension non-empty; the caller handles an empty q.
  if (k.size(0) == 0 || k.size(1) == 0 || q.size(0) == 0) return false;
  return hopper_kernels_available(q.device().index);
}

bool hopper_attention_eligible(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* mask) {
  const char* env = std::getenv("H3_ATTN_HOPPER");
  if (env && std::strcmp(env, "0") == 0) return false;
  return hopper_attention_fits(q, k, v, causal, mask);
}

void hopper_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, float scale,
                      const std::vector<int64_t>& cu_seqlens, bool causal) {
  hopper::Problem pb{};
  pb.q = q.raw();
  pb.k = k.raw();
  pb.v = v.raw();
  pb.o = out.raw();
  pb.q_row = q.stride(0);
  pb.q_head = q.stride(1);
  pb.k_row = k.stride(0);
  pb.k_head = k.stride(1);
  pb.v_row = v.stride(0);
  pb.v_head = v.stride(1);
  pb.o_row = out.stride(0);
  pb.o_head = out.stride(1);
  pb.s_q = static_cast<int>(q.size(0));
  pb.s_kv = static_cast<int>(k.size(0));
  pb.hq = static_cast<int>(q.size(1));
  pb.hkv = static_cast<int>(k.size(1));
  pb.scale_log2 = scale * 1.4426950408889634f;
  pb.f16 = q.dtype() == DType::kF16;
  pb.head_dim = static_cast<int>(q.size(2));
  pb.causal = causal;
  // Head dim 64 (the video VAE's decoder): two or three consumer warpgroups by the grid's size.
  if (pb.head_dim == 64) {
    const char* wg = std::getenv("H3_ATTN_HOPPER_D64_WARPGROUPS");
    pb.consumers = hopper::d64_consumers(pb.s_q, cu_seqlens, pb.hq, sm_count(q.device().index),
                                         wg ? std::atoi(wg) : 0);
  }
  // Block-diagonal batches: tiles of 128 query rows that never straddle a segment boundary.
  Tensor tiles;
  if (!cu_seqlens.empty()) {
    std::vector<hopper::TileDesc> list;
    for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
      const int lo = static_cast<int>(cu_seqlens[s]), hi = static_cast<int>(cu_seqlens[s + 1]);
      const int rows = hopper::rows_per_cta(pb);
      for (int r = lo; r < hi; r += rows) {
        list.push_back(hopper::TileDesc{r, std::min(r + rows, hi), lo, hi});
      }
    }
    if (list.empty()) return;
    tiles = Tensor::empty({static_cast<int64_t>(list.size() * 4)}, DType::kI32, q.device());
    H3_CUDA_CHECK(cudaMemcpyAsync(tiles.raw(), list.data(), list.size() * sizeof(hopper::TileDesc),
                                  cudaMemcpyHostToDevice, current_stream()));
    pb.tiles = static_cast<const hopper::TileDesc*>(tiles.raw());
    pb.n_tiles = static_cast<int>(list.size());
  }
  if (const char* err = hopper::launch(pb, current_stream())) {
    fail(ErrorCode::kInternal, "ops::attention (Hopper kernel): ", err, " (q ", shape_str(q.shape()), ")");
  }
  check_launch("attention_hopper");
}

}  // namespace h3::ops::cuda
