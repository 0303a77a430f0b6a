// Layer streaming (core/layer_stream.h) where it can be tested without a GPU run:
//   - the slot schedule: for passes of every length, with and without the wrap-around prefetch,
//     each acquired layer is the one its slot holds, a copy never lands in the slot in use, a
//     copy into a slot that ran waits for that work, and layers that stay in a slot are not
//     copied again; calls out of order are refused, an abandoned pass is forgotten by begin();
//   - the packed layer size the planner uses;
//   - pin_layers() lays each layer out in one pinned buffer and converts exactly like Tensor::to,
//     and the pinned bytes go when the last view goes (needs CUDA for pinned memory; refused
//     with kUnsupported without it);
//   - which DiT blocks are resident and which stream (resolve_resident_blocks), and the
//     refusals of the streaming options on a CPU device, by the models and through the engine,
//     naming the option.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/layer_stream.h"
#include "core/receipt.h"
#include "core/status.h"
#include "models/h3_dit/dit_model.h"
#include "models/qwen3_vl/qwen3_vl_model.h"
#include "models/tiny_model.h"
#include "pipeline/engine.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

void expect_error(const std::function<void()>& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    std::printf("refused: %s\n", e.what());
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ---- the slot schedule
// ---------------------------------------------------------------------------

// Replays the schedule's answers on a model of the two slots and checks every invariant the
// stream relies on.
class SlotModel {
 public:
  explicit SlotModel(LayerSlotSchedule& s) : s_(s) {}

  void apply(const std::optional<LayerSlotSchedule::Copy>& c) {
    if (!c) return;
    ASSERT_GE(c->slot, 0);
    ASSERT_LT(c->slot, s_.num_slots()) << "one layer needs one slot, more need two";
    EXPECT_NE(c->slot, in_use_) << "copy of layer " << c->layer << " into the slot in use";
    // A slot whose layer ran must be waited on; one that never ran has nothing to wait for.
    EXPECT_EQ(c->wait_compute, ran_[c->slot]) << "copy of layer " << c->layer;
    content_[c->slot] = c->layer;
    EXPECT_EQ(s_.in_slot(c->slot), c->layer);
    ++copies_;
  }
  void begin(int64_t first) {
    in_use_ = -1;
    apply(s_.begin(first));
  }
  int acquire(int64_t i, int64_t next) {
    const int slot = s_.acquire(i);
    EXPECT_EQ(content_[slot], i) << "layer " << i << " acquired from slot " << slot
                                 << ", which holds layer " << content_[slot];
    in_use_ = slot;
    if (next >= 0) apply(s_.prefetch(next));
    return slot;
  }
  void release(int64_t i) {
    const int slot = s_.release(i);
    EXPECT_EQ(slot, in_use_);
    ran_[slot] = true;
    in_use_ = -1;
  }
  // One pass over every layer; `wrap`: the last layer prefetches layer 0 for the next pass.
  std::vector<int> pass(bool wrap) {
    const int64_t n = s_.num_layers();
    std::vector<int> slots;
    begin(0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t next = i + 1 < n ? i + 1 : (wrap ? 0 : -1);
      slots.push_back(acquire(i, next));
      release(i);
    }
    return slots;
  }
  int64_t copies() const { return copies_; }

 private:
  LayerSlotSchedule& s_;
  int64_t content_[LayerSlotSchedule::kSlots] = {-1, -1};
  bool ran_[LayerSlotSchedule::kSlots] = {false, false};
  int in_use_ = -1;
  int64_t copies_ = 0;
};

TEST(LayerSlotSchedule, PassesOfEveryLengthWithWrapAround) {
  for (int64_t n = 1; n <= 7; ++n) {
    SCOPED_TRACE("layers " + std::to_string(n));
    LayerSlotSchedule s(n);
    EXPECT_EQ(s.num_slots(), n == 1 ? 1 : 2);
    SlotModel m(s);
    std::vector<int64_t> per_pass;
    int64_t before = 0;
    for (int p = 0; p < 4; ++p) {
      const std::vector<int> slots = m.pass(/*wrap=*/true);
      // Consecutive layers run from different slots (the next one is copied while one runs).
      for (size_t i = 1; i < slots.size(); ++i) EXPECT_NE(slots[i], slots[i - 1]) << "layer " << i;
      per_pass.push_back(m.copies() - before);
      before = m.copies();
    }
    EXPECT_EQ(s.copies_issued(), m.copies());
    std::printf("layers %lld: copies per pass %lld %lld %lld %lld\n", static_cast<long long>(n),
                static_cast<long long>(per_pass[0]), static_cast<long long>(per_pass[1]),
                static_cast<long long>(per_pass[2]), static_cast<long long>(per_pass[3]));
    if (n <= 2) {
      // One or two layers never leave their slots: only the first pass copies.
      EXPECT_EQ(per_pass[0], n);
      for (int p = 1; p < 4; ++p) EXPECT_EQ(per_pass[p], 0);
    } else {
      // Every layer once per pass. Layer 0 of the next pass is prefetched by the previous one
      // (counted there), so begin() finds it in place: the first pass copies n + 1.
      EXPECT_EQ(per_pass[0], n + 1);
      for (int p = 1; p < 4; ++p) EXPECT_EQ(per_pass[p], n);
    }
  }
}

TEST(LayerSlotSchedule, WrapPrefetchLeavesTheFirstLayerInPlace) {
  for (int64_t n : {3, 4, 5}) {
    SCOPED_TRACE("layers " + std::to_string(n));
    LayerSlotSchedule s(n);
    SlotModel m(s);
    (void)m.pass(/*wrap=*/true);
    EXPECT_FALSE(s.begin(0).has_value()) << "layer 0 should have been prefetched";
    // Without the wrap-around the next pass starts with a copy.
    LayerSlotSchedule t(n);
    SlotModel mt(t);
    (void)mt.pass(/*wrap=*/false);
    const auto c = t.begin(0);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->layer, 0);
    EXPECT_TRUE(c->wait_compute);
  }
}

TEST(LayerSlotSchedule, SingleLayerPassesBetweenFullPasses) {
  // The DiT's run_block() on a streamed block: a pass of length one, no prefetch. It must not
  // disturb a layer 0 that the previous full pass prefetched, nor hand out a stale slot.
  LayerSlotSchedule s(4);
  SlotModel m(s);
  (void)m.pass(true);
  for (int64_t k : {2, 2, 0, 3, 1}) {
    m.begin(k);
    (void)m.acquire(k, -1);
    m.release(k);
  }
  (void)m.pass(true);
  (void)m.pass(true);
  // A block picked right after a pass keeps the prefetched layer 0 in the other slot.
  LayerSlotSchedule t(4);
  SlotModel mt(t);
  (void)mt.pass(true);
  mt.begin(2);
  (void)mt.acquire(2, -1);
  mt.release(2);
  EXPECT_FALSE(t.begin(0).has_value());
}

TEST(LayerSlotSchedule, RefusesCallsOutOfOrder) {
  expect_error([] { LayerSlotSchedule s(0); }, ErrorCode::kInvalidArgument, "0 layers");
  LayerSlotSchedule s(3);
  expect_error([&] { (void)s.begin(3); }, ErrorCode::kInvalidArgument, "outside [0, 3)");
  expect_error([&] { (void)s.begin(-1); }, ErrorCode::kInvalidArgument, "outside [0, 3)");
  (void)s.begin(0);
  expect_error([&] { (void)s.acquire(1); }, ErrorCode::kInternal, "was not copied to a slot");
  expect_error([&] { (void)s.prefetch(1); }, ErrorCode::kInternal, "outside a pass");
  expect_error([&] { (void)s.release(0); }, ErrorCode::kInternal, "not in use");
  const int slot0 = s.acquire(0);
  (void)s.prefetch(1);
  expect_error([&] { (void)s.acquire(1); }, ErrorCode::kInternal, "still in use");
  EXPECT_EQ(s.in_use_slot(), slot0);
  // An abandoned pass (an exception between acquire and release): begin() forgets it.
  (void)s.begin(0);
  EXPECT_EQ(s.in_use_slot(), -1);
  EXPECT_EQ(s.acquire(0), slot0);
  (void)s.prefetch(1);
  s.release(0);
  EXPECT_NE(s.acquire(1), slot0);
  s.release(1);
}

TEST(LayerStream, PackedLayerBytes) {
  EXPECT_EQ(layer_packed_bytes({}), 0u);
  EXPECT_EQ(layer_packed_bytes({10}), 10u);
  // 10 -> next start 256 -> 556 -> next start 768 -> 769.
  EXPECT_EQ(layer_packed_bytes({10, 300, 1}), 769u);
  EXPECT_EQ(layer_packed_bytes({256, 256}), 512u);
}

TEST(LayerStream, RefusesANonCudaDevice) {
  std::vector<std::vector<Tensor>> layers(1);
  layers[0].push_back(Tensor::zeros({4}, DType::kF32));
  expect_error([&] { LayerStream s(std::move(layers), Device::cpu(), "test layer"); },
               ErrorCode::kUnsupported, "CUDA");
}

Tensor random_f32(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_f32(v, shape);
}

TEST(LayerStream, PinLayersPacksConvertsAndFrees) {
  std::mt19937 rng(11);
  std::vector<std::vector<Tensor>> owned = {
      {random_f32({3, 5}, rng), random_f32({7}, rng), random_f32({2, 2, 2}, rng)},
      // 4.2M values: pieces of 8 MiB (bf16), copied by several threads.
      {random_f32({1}, rng), random_f32({65, 3}, rng), random_f32({3, 1400001}, rng)}};
  const std::vector<std::vector<Tensor>> original = owned;
  std::vector<std::vector<Tensor*>> lists;
  for (auto& l : owned) {
    lists.emplace_back();
    for (Tensor& t : l) lists.back().push_back(&t);
  }
  if (!cuda_available()) {
    // No pinned memory without a GPU (the message comes from core/device.h).
    expect_error([&] { pin_layers(lists, DType::kBF16, "test layer"); }, ErrorCode::kUnsupported,
                 "");
    return;
  }
  const uint64_t live0 = pinned_layer_bytes_live();
  pin_layers(lists, DType::kBF16, "test layer");
  uint64_t expected_bytes = 0;
  for (size_t i = 0; i < owned.size(); ++i) {
    const auto* base = static_cast<const uint8_t*>(owned[i].front().raw());
    std::vector<uint64_t> sizes;
    size_t packed = 0, mismatched = 0;
    for (size_t k = 0; k < owned[i].size(); ++k) {
      const Tensor& t = owned[i][k];
      EXPECT_TRUE(t.device().is_cpu());
      EXPECT_EQ(t.dtype(), DType::kBF16);
      packed = (packed + kLayerTensorAlign - 1) / kLayerTensorAlign * kLayerTensorAlign;
      EXPECT_EQ(static_cast<const uint8_t*>(t.raw()), base + packed)
          << "layer " << i << " tensor " << k;
      packed += t.nbytes();
      sizes.push_back(t.nbytes());
      const Tensor want = original[i][k].to(DType::kBF16);
      mismatched += std::memcmp(want.raw(), t.raw(), want.nbytes()) != 0;
    }
    EXPECT_EQ(layer_packed_bytes(sizes), packed);
    expected_bytes += packed;
    EXPECT_EQ(mismatched, 0u) << "layer " << i;
  }
  EXPECT_EQ(pinned_layer_bytes_live() - live0, expected_bytes);
  owned.clear();  // the last views go: the pinned buffers with them
  lists.clear();
  EXPECT_EQ(pinned_layer_bytes_live(), live0);
}

// ---- which DiT blocks stream
// -----------------------------------------------------------------------

TEST(DitResidency, ResolveResidentBlocks) {
  dit::DitOptions o;
  o.device = Device::cuda(0);                          // resolve makes no CUDA call
  EXPECT_EQ(dit::resolve_resident_blocks(o, 50), 50);  // default: all resident
  o.cpu_offload = true;
  EXPECT_EQ(dit::resolve_resident_blocks(o, 50), 0);  // --cpu-offload: none
  o.resident_blocks = 0;
  EXPECT_EQ(dit::resolve_resident_blocks(o, 50), 0);  // agreeing
  o.resident_blocks = 7;
  expect_error([&] { (void)dit::resolve_resident_blocks(o, 50); }, ErrorCode::kInvalidArgument,
               "contradict");
  o.cpu_offload = false;
  for (int64_t n : {0, 1, 7, 49, 50}) {
    o.resident_blocks = n;
    EXPECT_EQ(dit::resolve_resident_blocks(o, 50), n);
  }
  for (int64_t n : {-1, 51}) {
    o.resident_blocks = n;
    expect_error([&] { (void)dit::resolve_resident_blocks(o, 50); }, ErrorCode::kInvalidArgument,
                 "resident_blocks");
  }
  // On the CPU only "everything resident" is accepted.
  o.device = Device::cpu();
  o.resident_blocks = 50;
  EXPECT_EQ(dit::resolve_resident_blocks(o, 50), 50);
  o.resident_blocks = 49;
  expect_error([&] { (void)dit::resolve_resident_blocks(o, 50); }, ErrorCode::kUnsupported,
               "resident_blocks = 49");
  o.resident_blocks.reset();
  o.cpu_offload = true;
  expect_error([&] { (void)dit::resolve_resident_blocks(o, 50); }, ErrorCode::kUnsupported,
               "cpu_offload");
}

class StreamOptionsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_layer_stream");
    repo_ = (dir_->path() / "tiny").string();
    models::make_tiny(repo_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static std::unique_ptr<test::TempDir> dir_;
  static std::string repo_;
};
std::unique_ptr<test::TempDir> StreamOptionsTest::dir_;
std::string StreamOptionsTest::repo_;

TEST_F(StreamOptionsTest, DitModelOnCpu) {
  dit::DitOptions o;
  o.device = Device::cpu();
  const dit::DitModel all = dit::DitModel::load(repo_ + "/transformer", o);
  const int64_t n = all.config().num_layers;
  ASSERT_GE(n, 2);
  EXPECT_EQ(all.resident_blocks(), n);
  EXPECT_EQ(all.streamed_blocks(), 0);
  EXPECT_EQ(all.stream_slot_bytes(), 0u);
  o.resident_blocks = n;  // explicit "all" is fine on the CPU
  EXPECT_EQ(dit::DitModel::load(repo_ + "/transformer", o).resident_blocks(), n);
  o.resident_blocks = 1;
  expect_error([&] { (void)dit::DitModel::load(repo_ + "/transformer", o); },
               ErrorCode::kUnsupported, "resident_blocks");
  o.resident_blocks = n + 1;
  expect_error([&] { (void)dit::DitModel::load(repo_ + "/transformer", o); },
               ErrorCode::kInvalidArgument, "resident_blocks");
}

TEST_F(StreamOptionsTest, QwenStreamLayersRefusedOnCpu) {
  qwen3_vl::Qwen3VlLoadOptions lo;
  lo.stream_layers = true;
  expect_error(
      [&] {
        (void)qwen3_vl::Qwen3VlModel::load(repo_ + "/text_encoder", DType::kF32, Device::cpu(), lo);
      },
      ErrorCode::kUnsupported, "stream_layers");
  // The other overload (config + checkpoint) refuses the same way.
  const auto config = qwen3_vl::Qwen3VlConfig::from_file(repo_ + "/text_encoder/config.json");
  const io::Checkpoint ckpt = io::Checkpoint::open(repo_ + "/text_encoder");
  expect_error(
      [&] { (void)qwen3_vl::Qwen3VlModel::load(config, ckpt, DType::kF32, Device::cpu(), lo); },
      ErrorCode::kUnsupported, "stream_layers");
  // Without the option the same folder loads, and nothing streams.
  const qwen3_vl::Qwen3VlModel m =
      qwen3_vl::Qwen3VlModel::load(repo_ + "/text_encoder", DType::kF32, Device::cpu());
  EXPECT_FALSE(m.streams_layers());
  EXPECT_EQ(m.stream_slot_bytes(), 0u);
  EXPECT_EQ(m.stream_host_bytes(), 0u);
  EXPECT_EQ(m.device_bytes(), 0u);
  EXPECT_GT(m.weight_bytes(), 0u);
}

TEST_F(StreamOptionsTest, EnginePassesTheOptionsToTheLoaders) {
  // On a CPU engine the loaders refuse the options by name: the engine passes them through
  // rather than dropping them.
  pipeline::EngineOptions o;
  o.device = Device::cpu();
  o.stream_conditioner = true;
  {
    pipeline::Engine e(repo_, o);
    Receipt rc;
    expect_error([&] { (void)e.conditioner(rc); }, ErrorCode::kUnsupported, "stream_layers");
  }
  o.stream_conditioner = false;
  o.dit_resident_blocks = 1;
  {
    pipeline::Engine e(repo_, o);
    Receipt rc;
    expect_error([&] { (void)e.transformer(rc); }, ErrorCode::kUnsupported, "resident_blocks");
  }
}

}  // namespace
}  // namespace h3
