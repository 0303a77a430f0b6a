// Layer streaming: weights that live in page-locked host memory, one contiguous buffer per layer,
// copied layer by layer into two device-resident slots while a model runs (h3_components_spec.md
// §5: what is resident, streamed or released). Both users, the DiT's blocks (--cpu-offload and
// partial residency, models/h3_dit/) and the Qwen3-VL decoder layers (models/qwen3_vl/), hand it
// lists of tensors per layer; it knows nothing of what the tensors mean.
//
// Double buffering: layer i runs from one slot on the default stream while the copy of the next
// layer into the other slot runs on a separate copy stream. Two event pairs order the streams:
//   - a copy into a slot waits until the default stream has finished the layer that last ran
//     from that slot (`compute_done_[slot]`), and, from the start of each pass, until the default
//     stream has passed everything queued before (the slots come from the stream-ordered pool);
//   - a layer waits on the default stream until its copy has landed (`copy_done_[slot]`).
// Every op stays on the legacy default stream; only the host-to-device copies use the copy stream.
// The slots are allocated once, sized for the largest layer, and reused for every pass.
//
// Slots alternate in the order copies are issued (not by layer parity), so a pass may prefetch
// the first layer of the next pass while its last layer runs ("wrap-around", whatever the number
// of layers), and a layer that still sits in a slot is never copied again: with one or two
// streamed layers nothing moves after the first pass (and a single layer needs one slot only).
//
// The views acquire() returns are valid until release() of the same layer: the slot is
// overwritten afterwards. One pass at a time (the models' forwards are not reentrant).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace h3 {

// Tensor starts inside a layer buffer (host and slot) are aligned to this many bytes, so every
// view meets the kernels' vectorized loads (16 would do; 256 matches the device allocator).
inline constexpr size_t kLayerTensorAlign = 256;

// The bytes one layer occupies in its pinned buffer and in a slot: the tensors one after the
// other in list order, each start aligned to kLayerTensorAlign. A stream's device footprint is
// min(2, layers) x the largest layer's figure (LayerStream::slot_bytes(); the memory planner
// computes it from checkpoint headers).
uint64_t layer_packed_bytes(const std::vector<uint64_t>& tensor_bytes);

// Replaces the tensors of each layer by views into one pinned host buffer per layer (CPU tensors
// over page-locked memory, freed with the last view), converted to `dtype` on the host on the way.
// The sources may be borrowed mmap views of a checkpoint: they are read once, never copied twice,
// by several threads at once (a file that is not in the page cache is read at the disk's speed).
// `what` and `first_index` name a layer in errors (layers[i] is "<what> <first_index + i>").
// Needs CUDA (pinned memory); throws kUnsupported otherwise. Every listed tensor must be defined.
void pin_layers(const std::vector<std::vector<Tensor*>>& layers, DType dtype,
                const std::string& what, int64_t first_index = 0);

// Pinned bytes allocated by pin_layers() and not yet freed, process-wide (tests and receipts:
// release() of a streamed model must bring it back down).
uint64_t pinned_layer_bytes_live();

// The host-side bookkeeping of LayerStream: which layer each of the two slots holds and what each
// step must order. No CUDA here: LayerStream turns the answers into copies and events, and the
// unit tests drive it on its own. Errors: a layer index outside [0, num_layers) is
// kInvalidArgument; a call out of order (acquire of a layer no copy brought, two layers in use
// at once, release of a layer not in use) is kInternal.
class LayerSlotSchedule {
 public:
  static constexpr int kSlots = 2;
  explicit LayerSlotSchedule(int64_t num_layers);

  struct Copy {
    int64_t layer = -1;
    int slot = -1;
    // The slot held a layer that ran: the copy waits for that layer's work (compute_done_).
    bool wait_compute = false;
  };

  // Start of a pass at `first`. Forgets a pass that was abandoned between acquire and release
  // (an exception): begin() orders every later copy after all work queued so far, so nothing of
  // it can still read a slot by then. Returns the copy that brings `first` into a slot, or none
  // when a slot already holds it (the previous pass prefetched it, or it never left).
  std::optional<Copy> begin(int64_t first);
  // The slot holding layer i, marked in use. Layer i must have been brought in by begin() or a
  // prefetch, and no other layer may be in use.
  int acquire(int64_t i);
  // While a layer is in use: the copy that brings `next` into the other slot, or none when a
  // slot already holds it.
  std::optional<Copy> prefetch(int64_t next);
  // End of layer i's work; returns its slot (where compute_done_ is recorded).
  int release(int64_t i);

  int64_t num_layers() const { return num_layers_; }
  // Slots the schedule uses: 2, or 1 for a single layer (it never leaves its slot).
  int num_slots() const { return num_layers_ < kSlots ? static_cast<int>(num_layers_) : kSlots; }
  int64_t in_slot(int slot) const { return slots_[slot].layer; }  // -1: empty
  int in_use_slot() const;                                        // -1: none
  int64_t copies_issued() const { return copies_; }

 private:
  struct Slot {
    int64_t layer = -1;
    bool in_use = false;
    bool ran = false;  // some layer was released from it: its compute_done_ event is recorded
  };
  void check_layer(int64_t i, const char* what) const;
  int slot_of(int64_t layer) const;  // -1 when no slot holds it
  std::optional<Copy> bring(int64_t layer, int avoid_slot);

  int64_t num_layers_ = 0;
  Slot slots_[kSlots];
  int last_copied_ = kSlots - 1;  // the first copy goes to slot 0
  int64_t copies_ = 0;
};

// Asynchronous host-to-device copy of `bytes` on `stream` (CUDA builds; kUnsupported otherwise).
void copy_to_device_async(void* dst, const void* src, size_t bytes, const Stream& stream);

class LayerStream {
 public:
  // `layers[i]`: the tensors of streamed layer i in a fixed order, CPU tensors laid out by
  // pin_layers() (one pinned buffer per layer). `device`: the CUDA device the model runs on
  // (anything else is kUnsupported). `what` names a layer in errors ("Qwen3-VL layer").
  LayerStream(std::vector<std::vector<Tensor>> layers, Device device, std::string what);
  ~LayerStream();
  LayerStream(const LayerStream&) = delete;
  LayerStream& operator=(const LayerStream&) = delete;

  int64_t num_layers() const { return schedule_.num_layers(); }
  // Starts a pass at layer `first`: orders the copy stream after all work queued so far on the
  // default stream and brings `first` into a slot unless it is there already.
  void begin(int64_t first);
  // Makes the default stream wait for layer i's copy, issues the copy of layer `next` (none when
  // next < 0; next may wrap to the next pass's first layer), and returns layer i's tensors as
  // device views into its slot, in list order.
  std::vector<Tensor> acquire(int64_t i, int64_t next);
  // Marks the end of layer i's work on the default stream (its slot may be overwritten after).
  void release(int64_t i);

  // Device bytes held by the slots: min(2, num_layers()) x the largest layer's packed bytes.
  uint64_t slot_bytes() const {
    return static_cast<uint64_t>(schedule_.num_slots()) * slot_capacity_;
  }
  // Pinned host bytes of the streamed layers.
  uint64_t host_bytes() const { return host_bytes_; }
  const LayerSlotSchedule& schedule() const { return schedule_; }

 private:
  struct HostLayer {
    const uint8_t* base = nullptr;
    size_t bytes = 0;
  };
  void issue(const LayerSlotSchedule::Copy& c);

  std::vector<std::vector<Tensor>> layers_;  // pinned host tensors (shared handles)
  std::vector<HostLayer> host_;
  std::string what_;
  Device device_;
  LayerSlotSchedule schedule_;
  size_t slot_capacity_ = 0;
  uint64_t host_bytes_ = 0;
  std::shared_ptr<Storage> slots_[LayerSlotSchedule::kSlots];
  Stream copy_stream_;
  Stream default_stream_;  // the legacy default stream (not owned)
  Event start_;
  Event copy_done_[LayerSlotSchedule::kSlots];
  Event compute_done_[LayerSlotSchedule::kSlots];
};

}  // namespace h3
