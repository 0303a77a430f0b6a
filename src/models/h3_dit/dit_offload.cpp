#include "models/h3_dit/dit_offload.h"

#include <algorithm>

#include "core/status.h"

namespace h3::dit {
namespace {

// Tensor starts inside a block buffer are aligned so that every view meets the vectorized loads
// of the kernels (16 bytes would do; 256 matches what the device allocator hands out).
constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

std::vector<Tensor*> block_tensor_list(DitBlockWeights& b) {
  std::vector<Tensor*> v = {&b.norm1,       &b.norm2,       &b.attn.to_q,  &b.attn.to_k,
                            &b.attn.to_v,   &b.attn.norm_q, &b.attn.norm_k, &b.attn.to_out,
                            &b.ff.fc_in,    &b.ff.fc_out,   &b.adaln_w,    &b.adaln_b};
  if (b.attn.to_gate.defined()) v.push_back(&b.attn.to_gate);
  return v;
}

void pin_blocks(std::vector<DitBlockWeights>& blocks, DType dtype) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::vector<Tensor*> list = block_tensor_list(blocks[i]);
    std::vector<size_t> offsets;
    size_t total = 0;
    for (const Tensor* t : list) {
      H3_CHECK(t->defined(), ErrorCode::kInvalidArgument, "DiT block ", i,
               ": a weight tensor is missing, cannot place it in host memory");
      total = align_up(total);
      offsets.push_back(total);
      total += static_cast<size_t>(t->numel()) * dtype_size(dtype);
    }
    void* p = cuda_host_alloc(std::max<size_t>(total, 1));
    // The buffer is freed with the last view of any of the block's tensors.
    const std::shared_ptr<void> owner(p, [](void* q) { cuda_host_free(q); });
    for (size_t k = 0; k < list.size(); ++k) {
      Tensor& t = *list[k];
      Tensor dst = Tensor::borrow(static_cast<uint8_t*>(p) + offsets[k], t.shape(), dtype,
                                  Device::cpu(), owner);
      // The source is normally the checkpoint's mmap view: read once, converted on the way.
      dst.copy_from(t.device().is_cpu() ? t : t.to(Device::cpu()));
      t = std::move(dst);
    }
  }
}

DitOffload::DitOffload(const std::vector<DitBlockWeights>& host_blocks, Device device)
    : host_blocks_(host_blocks), device_(device) {
  H3_CHECK(device.is_cuda(), ErrorCode::kUnsupported, "DiT cpu_offload needs a CUDA device, got ",
           device.str());
  for (size_t i = 0; i < host_blocks_.size(); ++i) {
    // pin_blocks() lays a block's tensors out one after the other (aligned) in one pinned buffer,
    // each tensor borrowing it: the block is the span from the first tensor to the end of the
    // last, copied to a slot in one transfer.
    const std::vector<Tensor*> list = block_tensor_list(host_blocks_[i]);
    const auto* base = static_cast<const uint8_t*>(list.front()->raw());
    size_t span = 0, packed = 0;
    for (const Tensor* t : list) {
      const auto* p = static_cast<const uint8_t*>(t->raw());
      H3_CHECK(t->defined() && t->device().is_cpu() && t->is_contiguous() && p >= base,
               ErrorCode::kInternal, "DiT block ", i,
               ": offloaded weights must be laid out in one pinned host buffer per block");
      span = std::max(span, static_cast<size_t>(p - base) + t->nbytes());
      packed = align_up(packed) + t->nbytes();
    }
    H3_CHECK(span == packed, ErrorCode::kInternal, "DiT block ", i, ": offloaded weights span ",
             span, " bytes, expected ", packed, " (one pinned buffer per block)");
    host_.push_back({base, span});
    slot_capacity_ = std::max(slot_capacity_, span);
  }
  // Two slots, allocated once: the pool is ordered on the default stream, and begin() orders the
  // copy stream after these allocations.
  for (auto& s : slots_) s = Storage::allocate(std::max<size_t>(slot_capacity_, 1), device_);
  copy_stream_ = Stream::create(device_.index, /*non_blocking=*/true);
  start_ = Event::create(device_.index, false);
  for (int s = 0; s < 2; ++s) {
    copy_done_[s] = Event::create(device_.index, false);
    compute_done_[s] = Event::create(device_.index, false);
  }
}

DitOffload::~DitOffload() {
  // Copies still in flight read pinned memory and write a slot: let them land before either goes.
  try {
    if (copy_stream_.owned()) copy_stream_.synchronize();
  } catch (...) {
  }
}

void DitOffload::issue_copy(int64_t i) {
  const int slot = static_cast<int>(i % 2);
  // The slot's previous block must be done reading it on the default stream.
  if (used_[slot]) copy_stream_.wait(compute_done_[slot]);
  const HostBlock& h = host_[static_cast<size_t>(i)];
  copy_to_device_async(slots_[slot]->data(), h.base, h.bytes, copy_stream_);
  copy_done_[slot].record(copy_stream_);
  in_slot_[slot] = i;
}

void DitOffload::begin(int64_t first) {
  H3_CHECK(first >= 0 && first < static_cast<int64_t>(host_.size()), ErrorCode::kInvalidArgument,
           "DiT offload: block ", first, " out of range [0, ", host_.size(), ")");
  // Everything queued so far on the default stream (the slots' allocation, the previous pass's
  // blocks) comes before this pass's copies.
  start_.record(default_stream_);
  copy_stream_.wait(start_);
  used_[0] = used_[1] = false;
  in_slot_[0] = in_slot_[1] = -1;
  issue_copy(first);
}

DitBlockWeights DitOffload::acquire(int64_t i, bool prefetch_next) {
  const int slot = static_cast<int>(i % 2);
  H3_CHECK(i >= 0 && i < static_cast<int64_t>(host_.size()) && in_slot_[slot] == i,
           ErrorCode::kInternal, "DiT offload: block ", i, " was not copied to its slot");
  default_stream_.wait(copy_done_[slot]);
  if (prefetch_next && i + 1 < static_cast<int64_t>(host_.size())) issue_copy(i + 1);
  DitBlockWeights w = host_blocks_[static_cast<size_t>(i)];
  const uint8_t* base = host_[static_cast<size_t>(i)].base;
  auto* dev = static_cast<uint8_t*>(slots_[slot]->data());
  for (Tensor* t : block_tensor_list(w)) {
    const size_t off = static_cast<size_t>(static_cast<const uint8_t*>(t->raw()) - base);
    *t = Tensor::borrow(dev + off, t->shape(), t->dtype(), device_, slots_[slot]);
  }
  return w;
}

void DitOffload::release(int64_t i) {
  const int slot = static_cast<int>(i % 2);
  compute_done_[slot].record(default_stream_);
  used_[slot] = true;
}

}  // namespace h3::dit
