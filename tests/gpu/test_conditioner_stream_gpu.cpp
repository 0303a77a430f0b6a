// The Qwen3-VL conditioner with its decoder layers streamed from pinned host memory
// (Qwen3VlLoadOptions::stream_layers, core/layer_stream.h) against the resident model on the
// tiny golden checkpoint: the same kernels run on the same weight bytes, only the layers' home
// differs, so every hidden state must be bit-identical, in bfloat16 and in float32, for text
// prompts and for prompts with images / videos (DeepStack), over two rounds of encodes in a row
// (each forward's last layer prefetches layer 0 of the next: the wrap-around). Also: the slot and
// pinned figures follow the planner's formula, and release() gives back the pinned host memory
// and the device memory. Skips visibly without a CUDA device or golden data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/layer_stream.h"
#include "io/safetensors.h"
#include "models/qwen3_vl/qwen3_vl_model.h"
#include "support/device_memory.h"
#include "support/golden.h"

namespace h3 {
namespace {

using qwen3_vl::GridThw;
using qwen3_vl::Qwen3VlModel;

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

std::string encoder_dir() { return test::Golden::get()->checkpoint_dir() + "/text_encoder"; }

Qwen3VlModel load(DType dtype, bool stream) {
  qwen3_vl::Qwen3VlLoadOptions o;
  o.stream_layers = stream;
  return Qwen3VlModel::load(encoder_dir(), dtype, Device::cuda(0), o);
}

std::vector<GridThw> grids(const io::SafetensorsFile& f, const std::string& name) {
  std::vector<GridThw> out;
  if (!f.has(name)) return out;
  const std::vector<int64_t> v = f.tensor(name).to_i64_vector();
  for (size_t i = 0; i + 2 < v.size(); i += 3) out.push_back({v[i], v[i + 1], v[i + 2]});
  return out;
}

// Identical bits, element by element; prints the count of differing elements.
void expect_same_bits(const Tensor& got, const Tensor& ref, const std::string& what) {
  ASSERT_TRUE(got.device().is_cuda()) << what;
  ASSERT_EQ(got.dtype(), ref.dtype()) << what;
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  std::string first;
  const int64_t n =
      test::count_bit_mismatches(got.to(Device::cpu()), ref.to(Device::cpu()), &first);
  if (n)
    std::printf("  %-36s %lld elements differ: %s\n", what.c_str(), static_cast<long long>(n),
                first.c_str());
  EXPECT_EQ(n, 0) << what << ": streamed and resident outputs differ";
}

void expect_same_states(const std::vector<Tensor>& got, const std::vector<Tensor>& ref,
                        const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    expect_same_bits(got[i], ref[i], what + " hidden_states[" + std::to_string(i) + "]");
  }
  std::printf("  %s: %zu hidden states compared\n", what.c_str(), got.size());
}

// The packed bytes of one decoder layer in `dtype` (the planner's figure, from the config).
uint64_t packed_layer_bytes(const qwen3_vl::TextConfig& t, DType dtype) {
  const uint64_t hid = static_cast<uint64_t>(t.hidden_size), hd = static_cast<uint64_t>(t.head_dim);
  const uint64_t q = static_cast<uint64_t>(t.num_attention_heads) * hd;
  const uint64_t kv = static_cast<uint64_t>(t.num_key_value_heads) * hd;
  const uint64_t inter = static_cast<uint64_t>(t.intermediate_size);
  const uint64_t e = dtype_size(dtype);
  // layer_tensor_list order: input_norm, q, k, v, o, q_norm, k_norm, post_norm, gate, up, down.
  return layer_packed_bytes({hid * e, q * hid * e, kv * hid * e, kv * hid * e, hid * q * e, hd * e,
                             hd * e, hid * e, inter * hid * e, inter * hid * e, hid * inter * e});
}

void check_figures(const Qwen3VlModel& streamed, const Qwen3VlModel& resident, DType dtype) {
  EXPECT_TRUE(streamed.streams_layers());
  EXPECT_FALSE(resident.streams_layers());
  const uint64_t layer = packed_layer_bytes(streamed.config().text, dtype);
  const uint64_t taps = static_cast<uint64_t>(streamed.config().tap_layers);
  EXPECT_EQ(streamed.stream_slot_bytes(), 2 * layer);
  EXPECT_EQ(streamed.stream_host_bytes(), taps * layer);
  EXPECT_EQ(streamed.weight_bytes(), resident.weight_bytes());
  EXPECT_EQ(resident.stream_slot_bytes(), 0u);
  // On the device: embeddings + vision tower + two slots, against every layer when resident.
  EXPECT_LT(streamed.device_bytes(), resident.device_bytes());
  std::printf(
      "[conditioner stream %s] %llu layers of %llu B pinned; device %llu B streamed "
      "(slots %llu B) vs %llu B resident\n",
      dtype_name(dtype), static_cast<unsigned long long>(taps),
      static_cast<unsigned long long>(layer),
      static_cast<unsigned long long>(streamed.device_bytes()),
      static_cast<unsigned long long>(streamed.stream_slot_bytes()),
      static_cast<unsigned long long>(resident.device_bytes()));
}

TEST(GpuConditionerStream, TextBitIdenticalToResident) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_text");
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Qwen3VlModel resident = load(dtype, false);
    const Qwen3VlModel streamed = load(dtype, true);
    check_figures(streamed, resident, dtype);
    for (int round = 0; round < 2; ++round) {
      for (const test::GoldenCase& c : cases) {
        const std::vector<int64_t> ids = c.open()->tensor("input_ids").to_i64_vector();
        const std::string tag =
            std::string(dtype_name(dtype)) + " round " + std::to_string(round) + " " + c.file;
        std::vector<Tensor> hs_ref, hs_got;
        const Tensor ref = resident.encode_text(ids, &hs_ref);
        const Tensor got = streamed.encode_text(ids, &hs_got);
        expect_same_bits(got, ref, tag + " output");
        expect_same_states(hs_got, hs_ref, tag);
      }
    }
  }
}

TEST(GpuConditionerStream, VisionPromptsBitIdenticalToResident) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_presentation");
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Qwen3VlModel resident = load(dtype, false);
    const Qwen3VlModel streamed = load(dtype, true);
    for (int round = 0; round < 2; ++round) {
      for (const test::GoldenCase& c : cases) {
        const auto f = c.open();
        const Tensor pv = f->has("pixel_values") ? f->tensor("pixel_values") : Tensor();
        const Tensor pvv =
            f->has("pixel_values_videos") ? f->tensor("pixel_values_videos") : Tensor();
        const auto ig = grids(*f, "image_grid_thw");
        const auto vg = grids(*f, "video_grid_thw");
        const std::vector<int64_t> ids = f->tensor("input_ids").to_i64_vector();
        const std::string tag =
            std::string(dtype_name(dtype)) + " round " + std::to_string(round) + " " + c.file;
        std::vector<Tensor> hs_ref, hs_got;
        const Tensor ref = resident.encode(ids, pv, ig, pvv, vg, &hs_ref);
        const Tensor got = streamed.encode(ids, pv, ig, pvv, vg, &hs_got);
        expect_same_bits(got, ref, tag + " output");
        expect_same_states(hs_got, hs_ref, tag);
      }
    }
  }
}

// release() gives back the pinned layers and the device memory (embeddings, vision tower,
// slots), also right after an encode whose last layer left a prefetch in flight; repeated
// cycles lose nothing.
TEST(GpuConditionerStream, ReleaseFreesPinnedAndDeviceMemory) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_text");
  const std::vector<int64_t> ids = cases.front().open()->tensor("input_ids").to_i64_vector();
  {
    // Library handles and lazily loaded kernels first, so that only the model's memory counts.
    Qwen3VlModel warm = load(DType::kBF16, false);
    (void)warm.encode_text(ids).to(Device::cpu());
    warm.release();
  }
  const uint64_t pinned0 = pinned_layer_bytes_live();
  const uint64_t used0 = test::pool_used_bytes();
  for (int cycle = 0; cycle < 3; ++cycle) {
    Qwen3VlModel m = load(DType::kBF16, true);
    const uint64_t host = m.stream_host_bytes();
    EXPECT_GT(host, 0u);
    EXPECT_EQ(pinned_layer_bytes_live() - pinned0, host);
    (void)m.encode_text(ids);
    (void)m.encode_text(ids);  // the output is dropped: the prefetch of layer 0 may be in flight
    const uint64_t used_loaded = test::pool_used_bytes();
    m.release();
    EXPECT_FALSE(m.loaded());
    EXPECT_FALSE(m.streams_layers());
    EXPECT_EQ(m.weight_bytes(), 0u);
    EXPECT_EQ(m.stream_slot_bytes(), 0u);
    EXPECT_EQ(m.device_bytes(), 0u);
    const uint64_t used = test::pool_used_bytes();
    std::printf(
        "  cycle %d: pinned %llu B while loaded, %llu B after release; pool %llu -> %llu "
        "-> %llu B\n",
        cycle, static_cast<unsigned long long>(host),
        static_cast<unsigned long long>(pinned_layer_bytes_live() - pinned0),
        static_cast<unsigned long long>(used0), static_cast<unsigned long long>(used_loaded),
        static_cast<unsigned long long>(used));
    EXPECT_EQ(pinned_layer_bytes_live(), pinned0) << "pinned layers outlived release()";
    EXPECT_LE(used, used0) << "device memory outlived release()";
    EXPECT_GT(used_loaded, used) << "the loaded model held no device memory";
  }
}

}  // namespace
}  // namespace h3
