// --cpu-offload for the DiT (issue #6; h3_components_spec.md §5 memory plan, decision cpu-offload):
// the main blocks' weights live in page-locked host memory, one contiguous buffer per block, and
// are copied block by block into two device-resident slots while the model runs.
//
// Double buffering: block i runs from slot i%2 on the default stream while the copy of block i+1
// into slot (i+1)%2 runs on a separate copy stream. Two event pairs order the streams:
//   - the copy into a slot waits until the default stream has finished the block that last used
//     that slot (`compute_done_[slot]`), and, at the start of each pass, until the default stream
//     has passed everything queued before (the slots come from the stream-ordered pool);
//   - a block waits on the default stream until its copy has landed (`copy_done_[slot]`).
// Every op stays on the legacy default stream; only the host-to-device copies use the copy stream.
// The slots are allocated once, sized for the largest block, and reused for every forward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "models/h3_dit/dit_weights.h"

namespace h3::dit {

// The tensors of one block in a fixed order (the compression gate only when defined).
std::vector<Tensor*> block_tensor_list(DitBlockWeights& b);

// Replaces every block's tensors by views into one pinned host buffer per block (CPU tensors over
// page-locked memory, freed with the last view), converted to `dtype` on the host on the way. The
// sources may be borrowed mmap views of the checkpoint: they are read once, never copied twice.
// Needs CUDA (pinned memory); throws kUnsupported otherwise.
void pin_blocks(std::vector<DitBlockWeights>& blocks, DType dtype);

// Asynchronous host-to-device copy of `bytes` on `stream` (CUDA builds; kUnsupported otherwise).
void copy_to_device_async(void* dst, const void* src, size_t bytes, const Stream& stream);

class DitOffload {
 public:
  // `host_blocks` must come from pin_blocks(); `device` is the CUDA device the model runs on.
  DitOffload(const std::vector<DitBlockWeights>& host_blocks, Device device);
  ~DitOffload();
  DitOffload(const DitOffload&) = delete;
  DitOffload& operator=(const DitOffload&) = delete;

  // Starts a pass at block `first`: orders the copy stream after all work queued so far on the
  // default stream and issues the copy of `first` into its slot.
  void begin(int64_t first);
  // Makes the default stream wait for block i's copy, issues the copy of block i+1 when
  // `prefetch_next` (and it exists), and returns block i's weights as views into its slot.
  DitBlockWeights acquire(int64_t i, bool prefetch_next);
  // Marks the end of block i's work on the default stream (its slot may be overwritten after).
  void release(int64_t i);

  // Device bytes held by the two slots.
  uint64_t slot_bytes() const { return 2 * slot_capacity_; }

 private:
  struct HostBlock {
    const uint8_t* base = nullptr;
    size_t bytes = 0;
  };
  void issue_copy(int64_t i);

  std::vector<DitBlockWeights> host_blocks_;  // pinned host tensors (shared handles)
  std::vector<HostBlock> host_;
  Device device_;
  size_t slot_capacity_ = 0;
  std::shared_ptr<Storage> slots_[2];
  Stream copy_stream_;
  Stream default_stream_;  // the legacy default stream (not owned)
  Event start_, copy_done_[2], compute_done_[2];
  bool used_[2] = {false, false};  // whether a block ran from the slot since begin()
  int64_t in_slot_[2] = {-1, -1};  // the block whose copy was last issued into each slot
};

}  // namespace h3::dit
