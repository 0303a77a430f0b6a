// DiT block streaming (core/layer_stream.h) against the resident model on the golden `dit`
// cases: the same kernels run on the same weight bytes, only the weights' home differs (pinned
// host memory streamed into two device slots), so the outputs must be bit-identical.
//   - --cpu-offload (issue #6, every block streamed): also on a second run that reuses the
//     slots, and with less device memory than the full model's weights;
//   - partial residency (DitOptions::resident_blocks = 0, 1, num_layers - 1, num_layers): the
//     right blocks on the device, the slot and pinned figures the planner's formula gives, and
//     three rounds of forwards over every case in a row (each forward's last streamed block
//     prefetches the first streamed block of the next: the wrap-around);
//   - dropping a streamed model gives its pinned host memory and device memory back.
// Skips visibly without a CUDA device or golden data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "core/layer_stream.h"
#include "models/h3_dit/dit_model.h"
#include "support/device_memory.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

dit::DitModel load(const std::string& partition, bool offload, dit::DitPrecision p,
                   std::optional<int64_t> resident_blocks = std::nullopt) {
  dit::DitOptions o;
  o.device = Device::cuda(0);
  o.precision = p;
  o.rounding = dit::DitRounding::kFused;
  o.cpu_offload = offload;
  o.resident_blocks = resident_blocks;
  return dit::DitModel::load(test::Golden::get()->checkpoint_dir() + "/" + partition, o);
}

// Bytes of every weight tensor of the model and the part of them that lives on the device.
struct WeightBytes {
  uint64_t all = 0;
  uint64_t on_device = 0;
};
WeightBytes weight_bytes(const dit::DitWeights& w) {
  WeightBytes b;
  auto add = [&](const Tensor& t) {
    if (!t.defined()) return;
    b.all += t.nbytes();
    if (t.device().is_cuda()) b.on_device += t.nbytes();
  };
  auto attn = [&](const dit::DitAttentionWeights& a) {
    for (const Tensor* t : {&a.to_q, &a.to_k, &a.to_v, &a.norm_q, &a.norm_k, &a.to_out, &a.to_gate})
      add(*t);
  };
  for (const Tensor* t : {&w.proj_in_w, &w.proj_in_b, &w.audio_proj_in_w, &w.audio_proj_in_b,
                          &w.time_1_w, &w.time_1_b, &w.time_2_w, &w.time_2_b, &w.proj_out_w,
                          &w.proj_out_b, &w.audio_proj_out_w, &w.audio_proj_out_b, &w.context_w,
                          &w.context_b, &w.refiner_final_norm, &w.norm_out_norm, &w.norm_out_w,
                          &w.norm_out_b})
    add(*t);
  for (const auto& r : w.refiner) {
    add(r.norm1);
    add(r.norm2);
    attn(r.attn);
    add(r.ff.fc_in);
    add(r.ff.fc_out);
  }
  for (const auto& k : w.blocks) {
    add(k.norm1);
    add(k.norm2);
    attn(k.attn);
    add(k.ff.fc_in);
    add(k.ff.fc_out);
    add(k.adaln_w);
    add(k.adaln_b);
  }
  return b;
}

using test::pool_used_bytes;

Tensor host_bytes(const Tensor& t) { return t.to(Device::cpu()); }

void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const Tensor ha = host_bytes(a), hb = host_bytes(b);
  size_t differing = 0;
  const auto* pa = static_cast<const uint8_t*>(ha.raw());
  const auto* pb = static_cast<const uint8_t*>(hb.raw());
  for (size_t i = 0; i < ha.nbytes(); ++i) differing += pa[i] != pb[i];
  std::printf("  %-28s %zu bytes, %zu differ\n", what.c_str(), ha.nbytes(), differing);
  EXPECT_EQ(differing, 0u) << what << ": offloaded and resident outputs differ";
}

void check_partition(const std::string& partition, const std::vector<test::GoldenCase>& cases,
                     dit::DitPrecision precision) {
  std::printf("[dit offload %s] %s\n", dit::precision_name(precision), partition.c_str());
  const uint64_t before_full = pool_used_bytes();
  const dit::DitModel resident = load(partition, false, precision);
  const uint64_t after_full = pool_used_bytes();
  const uint64_t measured_full = after_full > before_full ? after_full - before_full : 0;
  const WeightBytes full = weight_bytes(resident.weights());

  // Measured with the resident model loaded and run once, so that lazily loaded kernels and
  // library handles are already in place and only the new model's allocations count.
  const auto f0 = cases.front().open();
  (void)resident.forward(test::read_dit_inputs(*f0));
  const uint64_t before = pool_used_bytes();
  const dit::DitModel offloaded = load(partition, true, precision);
  const uint64_t after = pool_used_bytes();
  const uint64_t measured = after > before ? after - before : 0;
  const WeightBytes off = weight_bytes(offloaded.weights());
  const uint64_t planned = off.on_device + offloaded.stream_slot_bytes();
  std::printf(
      "  full weights %llu B; offload: %llu B on the device (%llu B non-block + %llu B "
      "slots); pool use measured: offload %llu B, resident %llu B\n",
      static_cast<unsigned long long>(full.all), static_cast<unsigned long long>(planned),
      static_cast<unsigned long long>(off.on_device),
      static_cast<unsigned long long>(offloaded.stream_slot_bytes()),
      static_cast<unsigned long long>(measured), static_cast<unsigned long long>(measured_full));
  EXPECT_EQ(full.on_device, full.all) << "the resident model keeps every weight on the device";
  EXPECT_GT(offloaded.stream_slot_bytes(), 0u);
  for (const auto& b : offloaded.weights().blocks) {
    EXPECT_TRUE(b.adaln_w.device().is_cpu()) << "offloaded block weights must stay on the host";
  }
  EXPECT_LT(planned, full.all);
  // Measured through the pool: allocation rounding applies to both models alike (the offloaded
  // one makes fewer, larger allocations), so the comparison is against the resident model measured
  // the same way. With the pool off (H3_CUDA_POOL=0) there is nothing to measure.
  if (measured_full > 0) {
    EXPECT_LT(measured, measured_full) << "device memory in use with offload";
  } else {
    std::printf("  pool not in use: measured comparison skipped\n");
  }

  for (const test::GoldenCase& c : cases) {
    if (test::dit_partition_of(c) != partition) continue;
    SCOPED_TRACE(c.file);
    std::printf(" %s\n", c.file.c_str());
    const auto f = c.open();
    const dit::DitInputs in = test::read_dit_inputs(*f);
    const dit::DitOutputs ref = resident.forward(in);
    for (int run = 0; run < 2; ++run) {  // the second run reuses the slots
      const dit::DitOutputs got = offloaded.forward(in);
      expect_same_bytes(got.video, ref.video, "run " + std::to_string(run) + " video");
      expect_same_bytes(got.audio, ref.audio, "run " + std::to_string(run) + " audio");
    }
  }
}

TEST(GpuDitOffload, Bf16BitIdenticalToResidentAndSmaller) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  std::set<std::string> partitions;
  for (const test::GoldenCase& c : cases) partitions.insert(test::dit_partition_of(c));
  for (const std::string& p : partitions) check_partition(p, cases, dit::DitPrecision::kBF16);
}

TEST(GpuDitOffload, F32BitIdenticalToResident) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  check_partition(test::dit_partition_of(cases.front()), cases, dit::DitPrecision::kF32);
}

// The packed bytes of each main block in the run dtype: what a block occupies pinned and in a slot.
std::vector<uint64_t> packed_block_bytes(const dit::DitWeights& w) {
  std::vector<uint64_t> out;
  for (const auto& b : w.blocks) {
    dit::DitBlockWeights copy = b;
    std::vector<uint64_t> sizes;
    for (const Tensor* t : dit::block_tensor_list(copy)) sizes.push_back(t->nbytes());
    out.push_back(layer_packed_bytes(sizes));
  }
  return out;
}

void check_partial(const std::string& partition, const std::vector<test::GoldenCase>& cases,
                   dit::DitPrecision precision) {
  const dit::DitModel resident = load(partition, false, precision);
  const int64_t num = resident.config().num_layers;
  const std::vector<uint64_t> packed = packed_block_bytes(resident.weights());
  std::vector<const test::GoldenCase*> mine;
  for (const test::GoldenCase& c : cases) {
    if (test::dit_partition_of(c) == partition) mine.push_back(&c);
  }
  ASSERT_FALSE(mine.empty());
  std::vector<dit::DitInputs> in;
  std::vector<dit::DitOutputs> ref;
  for (const test::GoldenCase* c : mine) {
    const auto f = c->open();
    in.push_back(test::read_dit_inputs(*f));
    ref.push_back(resident.forward(in.back()));
  }
  std::set<int64_t> counts = {0, 1, num - 1, num};
  for (const int64_t n : counts) {
    if (n < 0 || n > num) continue;
    SCOPED_TRACE("resident_blocks " + std::to_string(n));
    const dit::DitModel m = load(partition, false, precision, n);
    EXPECT_EQ(m.resident_blocks(), n);
    EXPECT_EQ(m.streamed_blocks(), num - n);
    uint64_t largest = 0, host = 0;
    for (int64_t i = 0; i < num; ++i) {
      const bool on_device = m.weights().blocks[static_cast<size_t>(i)].adaln_w.device().is_cuda();
      EXPECT_EQ(on_device, i < n) << "block " << i;
      if (i >= n) {
        largest = std::max(largest, packed[static_cast<size_t>(i)]);
        host += packed[static_cast<size_t>(i)];
      }
    }
    // The planner's formula: two slots of the largest streamed block (one when a single block
    // streams); every streamed block pinned.
    EXPECT_EQ(m.stream_slot_bytes(),
              static_cast<uint64_t>(std::min<int64_t>(2, num - n)) * largest);
    EXPECT_EQ(m.stream_host_bytes(), host);
    std::printf("[dit stream %s] %s resident_blocks=%lld: slots %llu B, pinned %llu B\n",
                dit::precision_name(precision), partition.c_str(), static_cast<long long>(n),
                static_cast<unsigned long long>(m.stream_slot_bytes()),
                static_cast<unsigned long long>(m.stream_host_bytes()));
    // Three rounds over every case, forwards back to back: each one starts from the block the
    // previous one prefetched.
    for (int round = 0; round < 3; ++round) {
      for (size_t k = 0; k < in.size(); ++k) {
        const dit::DitOutputs got = m.forward(in[k]);
        const std::string tag = "round " + std::to_string(round) + " " + mine[k]->file;
        expect_same_bytes(got.video, ref[k].video, tag + " video");
        expect_same_bytes(got.audio, ref[k].audio, tag + " audio");
      }
    }
  }
}

TEST(GpuDitStream, PartialResidencyBf16BitIdenticalToResident) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  std::set<std::string> partitions;
  for (const test::GoldenCase& c : cases) partitions.insert(test::dit_partition_of(c));
  for (const std::string& p : partitions) check_partial(p, cases, dit::DitPrecision::kBF16);
}

TEST(GpuDitStream, PartialResidencyF32BitIdenticalToResident) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  check_partial(test::dit_partition_of(cases.front()), cases, dit::DitPrecision::kF32);
}

// Dropping a streamed model gives back its pinned host memory and its device memory (blocks,
// slots), also after forwards that left a prefetch in flight.
TEST(GpuDitStream, DroppingTheModelFreesPinnedAndDeviceMemory) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  const std::string partition = test::dit_partition_of(cases.front());
  const auto f = cases.front().open();
  const dit::DitInputs in = test::read_dit_inputs(*f);
  {
    // Library handles and lazily loaded kernels first, so that only the model's memory counts.
    const dit::DitModel warm = load(partition, false, dit::DitPrecision::kBF16);
    (void)warm.forward(in);
  }
  const uint64_t pinned0 = pinned_layer_bytes_live();
  const uint64_t used0 = pool_used_bytes();
  for (int cycle = 0; cycle < 3; ++cycle) {
    uint64_t host = 0, used_loaded = 0;
    {
      const dit::DitModel m = load(partition, false, dit::DitPrecision::kBF16, 1);
      host = m.stream_host_bytes();
      EXPECT_GT(host, 0u);
      EXPECT_EQ(pinned_layer_bytes_live() - pinned0, host);
      (void)m.forward(in);
      (void)m.forward(in);
      used_loaded = pool_used_bytes();
    }
    const uint64_t used = pool_used_bytes();
    std::printf("  cycle %d: pinned %llu B while loaded; pool %llu -> %llu -> %llu B\n", cycle,
                static_cast<unsigned long long>(host), static_cast<unsigned long long>(used0),
                static_cast<unsigned long long>(used_loaded),
                static_cast<unsigned long long>(used));
    EXPECT_EQ(pinned_layer_bytes_live(), pinned0) << "pinned blocks outlived the model";
    EXPECT_LE(used, used0) << "device memory outlived the model";
  }
}

}  // namespace
}  // namespace h3
