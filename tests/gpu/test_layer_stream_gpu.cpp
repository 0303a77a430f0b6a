// core/layer_stream.h on the GPU with synthetic layers (no model): every layer a pass acquires
// holds exactly its pinned bytes, for 1, 2, 3 and 5 layers of different sizes, over several
// passes with the wrap-around prefetch and single-layer passes in between. Each layer is also
// read by device work queued on the default stream before release() (a device-to-device copy
// of several MB), and those reads are checked after the pass: a prefetch that overwrote a slot
// before the work reading it had finished would show up there. Dropping the stream and the
// layers gives the pinned memory back. Skips visibly without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/layer_stream.h"
#include "ops/ops.h"

namespace h3 {
namespace {

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

Tensor random_f32(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_f32(v, shape);
}

// Layer i: a large tensor (so that copies take long enough to race with compute) and two small
// ones of layer-dependent sizes (so that layers differ in size and alignment padding matters).
std::vector<std::vector<Tensor>> make_layers(int64_t n, std::mt19937& rng) {
  std::vector<std::vector<Tensor>> layers;
  for (int64_t i = 0; i < n; ++i) {
    layers.push_back({random_f32({1 + i}, rng), random_f32({1024, 1024 + 64 * i}, rng),
                      random_f32({3, 7 + i}, rng)});
  }
  return layers;
}

bool same_bytes(const Tensor& device_view, const Tensor& host) {
  const Tensor h = device_view.to(Device::cpu());
  return h.nbytes() == host.nbytes() && std::memcmp(h.raw(), host.raw(), h.nbytes()) == 0;
}

TEST(GpuLayerStream, EveryAcquiredLayerHoldsItsBytes) {
  H3_REQUIRE_CUDA();
  std::mt19937 rng(3);
  const uint64_t pinned0 = pinned_layer_bytes_live();
  for (const int64_t n : {1, 2, 3, 5}) {
    SCOPED_TRACE("layers " + std::to_string(n));
    std::vector<std::vector<Tensor>> layers = make_layers(n, rng);
    std::vector<std::vector<Tensor*>> lists;
    for (auto& l : layers) {
      lists.emplace_back();
      for (Tensor& t : l) lists.back().push_back(&t);
    }
    pin_layers(lists, DType::kF32, "test layer");
    uint64_t largest = 0;
    for (const auto& l : layers) {
      std::vector<uint64_t> sizes;
      for (const Tensor& t : l) sizes.push_back(t.nbytes());
      largest = std::max(largest, layer_packed_bytes(sizes));
    }
    {
      LayerStream s(layers, Device::cuda(0), "test layer");
      EXPECT_EQ(s.slot_bytes(), static_cast<uint64_t>(std::min<int64_t>(2, n)) * largest);
      int64_t checked = 0, wrong = 0;
      auto run = [&](int64_t i, int64_t next, std::vector<Tensor>& reads) {
        const std::vector<Tensor> views = s.acquire(i, next);
        ASSERT_EQ(views.size(), layers[static_cast<size_t>(i)].size());
        // Device work on the default stream reads the slot; its result is checked later.
        for (const Tensor& v : views) {
          EXPECT_TRUE(v.device().is_cuda());
          reads.push_back(ops::copy(v));
        }
        s.release(i);
      };
      auto verify = [&](int64_t i, const std::vector<Tensor>& reads) {
        const auto& host = layers[static_cast<size_t>(i)];
        for (size_t k = 0; k < host.size(); ++k) {
          ++checked;
          if (!same_bytes(reads[k], host[k])) {
            ++wrong;
            ADD_FAILURE() << "layer " << i << " tensor " << k << ": wrong bytes in the slot";
          }
        }
      };
      for (int pass = 0; pass < 4; ++pass) {
        s.begin(0);
        std::vector<std::vector<Tensor>> reads(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) run(i, (i + 1) % n, reads[static_cast<size_t>(i)]);
        for (int64_t i = 0; i < n; ++i) verify(i, reads[static_cast<size_t>(i)]);
        // A single-layer pass in between (the DiT's run_block), then full passes resume.
        const int64_t k = (pass * 2 + 1) % n;
        std::vector<Tensor> one;
        s.begin(k);
        run(k, -1, one);
        verify(k, one);
      }
      std::printf("layers %lld: %lld tensors checked, %lld wrong, %lld copies, slots %llu B\n",
                  static_cast<long long>(n), static_cast<long long>(checked),
                  static_cast<long long>(wrong),
                  static_cast<long long>(s.schedule().copies_issued()),
                  static_cast<unsigned long long>(s.slot_bytes()));
    }
    layers.clear();
    lists.clear();
    EXPECT_EQ(pinned_layer_bytes_live(), pinned0) << "pinned layers outlived the stream";
  }
}

}  // namespace
}  // namespace h3
