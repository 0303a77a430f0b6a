// Parity of h3::TorchGenerator with torch's CPU generator on every `rng` case of the manifest.
//
// Tensor names describe the draw: `randn_seed{S}_shape{AxB}_{dtype}` (fresh generator),
// `rand_seed{S}_shape{N}_{dtype}`, and `seq_seed{S}_draw{k}_shape{..}_float32` (draws k = 0, 1, ...
// from ONE generator, in order). TOLERANCES.md: float32 randn with >= 16 elements must match in
// every bit (required, including the >= 16 draws of a sequence, which also check that the stream
// continues); the other cases are optional and only reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "core/status.h"
#include "pipeline/torch_generator.h"
#include "support/golden.h"

namespace h3 {
namespace {

struct Draw {
  std::string name;
  std::string op;  // randn, rand, seq
  uint64_t seed = 0;
  int draw = -1;  // sequence position for seq
  std::string dtype_name;
};

DType dtype_of(const std::string& name) {
  if (name == "float32") return DType::kF32;
  if (name == "float64") return DType::kF64;
  if (name == "float16") return DType::kF16;
  if (name == "bfloat16") return DType::kBF16;
  fail(ErrorCode::kInvalidArgument, "unknown dtype '", name, "' in an rng case name");
}

struct Tally {
  int match = 0;
  int total = 0;
};

TEST(GoldenRng, TorchCpuGeneratorParity) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "rng");
  const std::regex pattern(
      "(randn|rand|seq)_seed([0-9]+)_(?:draw([0-9]+)_)?shape([0-9x]+)_(float32|float64|float16|"
      "bfloat16)");
  int required_total = 0, required_match = 0;
  std::map<std::string, Tally> optional;  // by category
  int unrecognized = 0;

  for (const auto& c : cases) {
    const auto file = c.open();
    std::vector<Draw> fresh;
    std::map<uint64_t, std::vector<Draw>> sequences;
    for (const auto& info : file->tensors()) {
      std::smatch m;
      if (!std::regex_match(info.name, m, pattern)) {
        std::printf("[rng] %s: unrecognized case name, not run\n", info.name.c_str());
        ++unrecognized;
        continue;
      }
      Draw d;
      d.name = info.name;
      d.op = m[1];
      d.seed = std::stoull(m[2]);
      d.draw = m[3].matched ? std::stoi(m[3]) : -1;
      d.dtype_name = m[5];
      if (d.op == "seq") {
        sequences[d.seed].push_back(d);
      } else {
        fresh.push_back(d);
      }
    }
    for (auto& [seed, draws] : sequences) {
      std::sort(draws.begin(), draws.end(),
                [](const Draw& a, const Draw& b) { return a.draw < b.draw; });
      for (size_t k = 0; k < draws.size(); ++k) {
        ASSERT_EQ(draws[k].draw, static_cast<int>(k))
            << "sequence of seed " << seed << " has a gap";
      }
    }

    auto check = [&](const Draw& d, TorchGenerator& gen) {
      const Tensor ref = file->tensor(d.name);
      const DType dt = dtype_of(d.dtype_name);
      ASSERT_EQ(ref.dtype(), dt) << d.name;
      const Tensor got = d.op == "rand" ? gen.rand(ref.shape(), dt) : gen.randn(ref.shape(), dt);
      std::string first;
      const int64_t bad = test::count_bit_mismatches(got, ref, &first);
      const bool required = d.op != "rand" && dt == DType::kF32 && ref.numel() >= 16;
      if (required) {
        ++required_total;
        required_match += bad == 0;
        EXPECT_EQ(bad, 0) << d.name << ": " << bad << " of " << ref.numel()
                          << " values differ:" << first;
        if (bad)
          std::printf("[rng] REQUIRED %s: %lld of %lld differ\n", d.name.c_str(),
                      static_cast<long long>(bad), static_cast<long long>(ref.numel()));
      } else {
        std::string category = d.op == "rand"     ? "rand " + d.dtype_name
                               : ref.numel() < 16 ? "randn n<16 " + d.dtype_name
                                                  : "randn n>=16 " + d.dtype_name;
        if (d.op == "seq") category = "seq " + category.substr(6);
        Tally& t = optional[category];
        ++t.total;
        t.match += bad == 0;
        std::printf(
            "[rng] optional %-40s %s\n", d.name.c_str(),
            bad == 0 ? "match" : str_cat("DIFFERS (", bad, " of ", ref.numel(), ")").c_str());
      }
    };

    for (const Draw& d : fresh) {
      TorchGenerator gen(d.seed);
      check(d, gen);
    }
    for (const auto& [seed, draws] : sequences) {
      TorchGenerator gen(seed);  // one generator for the whole sequence
      for (const Draw& d : draws) check(d, gen);
    }
  }

  std::printf("[rng] required (float32 randn, >= 16 elements): %d of %d exact\n", required_match,
              required_total);
  for (const auto& [category, t] : optional) {
    std::printf("[rng] optional %-24s %d of %d match\n", category.c_str(), t.match, t.total);
  }
  if (unrecognized)
    std::printf("[rng] %d tensor(s) with unrecognized names were not run\n", unrecognized);
  EXPECT_GT(required_total, 0) << "the rng cases hold no float32 randn draw of >= 16 elements";
}

}  // namespace
}  // namespace h3
