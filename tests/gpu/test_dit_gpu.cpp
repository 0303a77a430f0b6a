// The DiT on the GPU against the golden `dit` cases (TOLERANCES.md, "GPU paths"): per tensor,
// rel_l2 <= 3x the rel_l2 that the CPU oracle makes in bf16 emulation on the same case (the floor,
// measured here, not assumed), and <= 2e-2 for each DiT call's outputs. Tensors that both paths
// compute in float32 (the time embedding, RoPE tables) have a floor near 1e-7 that says nothing
// about bf16 noise; for them the bound is the float32 engine bound of the same table, 1e-5.
// Also: the float32 policy on the GPU meets the float32 bound, and repeated runs give identical
// bytes. Skips visibly without a CUDA device or golden data.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "models/h3_dit/dit_model.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

constexpr double kCallBound = 2e-2;   // per DiT call (outputs)
constexpr double kF32Bound = 1e-5;    // float32 engine bound

const dit::DitModel& model(const std::string& partition, Device dev, dit::DitPrecision p,
                           dit::DitRounding r) {
  static std::map<std::string, std::unique_ptr<dit::DitModel>> cache;
  const std::string key = partition + dev.str() + dit::precision_name(p) +
                          (r == dit::DitRounding::kEager ? "e" : "f");
  auto it = cache.find(key);
  if (it == cache.end()) {
    dit::DitOptions o;
    o.device = dev;
    o.precision = p;
    o.rounding = r;
    const std::string dir = test::Golden::get()->checkpoint_dir() + "/" + partition;
    it = cache.emplace(key, std::make_unique<dit::DitModel>(dit::DitModel::load(dir, o))).first;
  }
  return *it->second;
}

Tensor host(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF32); }

std::vector<std::pair<std::string, Tensor>> named(const io::SafetensorsFile& f,
                                                  const dit::DitOutputs& out,
                                                  const dit::DitTrace& tr) {
  std::vector<std::pair<std::string, Tensor>> v;
  auto add = [&](const std::string& n, const Tensor& t) {
    if (f.has(n) && t.defined()) v.emplace_back(n, host(t));
  };
  add("inter.temb", tr.temb);
  add("inter.token_refiner_out", tr.token_refiner_out);
  for (size_t i = 0; i < tr.block_out.size(); ++i) add("inter.block" + std::to_string(i) + "_out", tr.block_out[i]);
  add("inter.norm_out_out", tr.norm_out_out);
  add("out.sample", out.video);
  add("out.audio_sample", out.audio);
  return v;
}

TEST(GpuDitGolden, Bf16WithinThreeTimesEmulationFloor) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    const dit::DitInputs in = test::read_dit_inputs(*f);
    dit::DitTrace cpu_tr, gpu_tr;
    const dit::DitOutputs cpu_out = model(test::dit_partition_of(c), Device::cpu(),
                                          dit::DitPrecision::kBF16, dit::DitRounding::kEager)
                                        .forward(in, &cpu_tr);
    const dit::DitOutputs gpu_out = model(test::dit_partition_of(c), Device::cuda(0),
                                          dit::DitPrecision::kBF16, dit::DitRounding::kFused)
                                        .forward(in, &gpu_tr);
    const auto floors = named(*f, cpu_out, cpu_tr);
    const auto gpus = named(*f, gpu_out, gpu_tr);
    ASSERT_EQ(floors.size(), gpus.size());
    std::printf("[gpu dit bf16] %s\n", c.file.c_str());
    for (size_t i = 0; i < gpus.size(); ++i) {
      const std::string& name = gpus[i].first;
      const Tensor ref = f->tensor(name);
      const test::Metrics floor = test::compare(floors[i].second, ref);
      const test::Metrics got = test::compare(gpus[i].second, ref);
      const bool f32_island = name == "inter.temb";
      double bound = f32_island ? kF32Bound : 3.0 * floor.rel_l2;
      if (name.rfind("out.", 0) == 0) bound = std::min(bound, kCallBound);
      std::printf("  %-24s gpu rel_l2=%.3e  cpu-bf16 floor=%.3e  bound=%.3e\n", name.c_str(),
                  got.rel_l2, floor.rel_l2, bound);
      EXPECT_LE(got.rel_l2, bound) << name;
      EXPECT_EQ(got.nonfinite, 0) << name;
    }
  }
}

TEST(GpuDitGolden, Float32PolicyMeetsFloat32Bound) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    dit::DitTrace tr;
    const dit::DitOutputs out = model(test::dit_partition_of(c), Device::cuda(0),
                                      dit::DitPrecision::kF32, dit::DitRounding::kEager)
                                    .forward(test::read_dit_inputs(*f), &tr);
    std::printf("[gpu dit f32] %s\n", c.file.c_str());
    for (const auto& [name, t] : named(*f, out, tr)) {
      test::expect_close("  " + name, t, f->tensor(name), kF32Bound, kF32Bound);
    }
  }
}

TEST(GpuDitGolden, RepeatedRunsGiveIdenticalBytes) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  const auto f = cases.front().open();
  const dit::DitModel& m = model(test::dit_partition_of(cases.front()), Device::cuda(0),
                                 dit::DitPrecision::kBF16, dit::DitRounding::kFused);
  const Tensor a = host(m.forward(test::read_dit_inputs(*f)).video);
  const Tensor b = host(m.forward(test::read_dit_inputs(*f)).video);
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << "two GPU runs differ";
}

}  // namespace
}  // namespace h3
