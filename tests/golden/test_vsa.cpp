// VSA-H3 against the reference's own tensors ($H3_GOLDEN_DIR/vsa, its own manifest):
// tiling metadata and k_vid exact, pooled/scores/branches within TOLERANCES.md, masks equal up to
// near ties: a top-k selection may flip only where two tiles' reference scores are closer than the
// score noise measured on the case (support/vsa_masks.h; TOLERANCES.md demands equal masks where a
// case's topk_min_margin is >= 1e-3, which every shipped case has, and then no flip is possible).
// Where a flip happened, the outputs are compared from a run with the reference's own mask.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "ops/vsa.h"
#include "support/golden.h"
#include "support/vsa_masks.h"

namespace h3 {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using test::vsa_path;

std::vector<int64_t> ints(const json& j) { return j.get<std::vector<int64_t>>(); }

void expect_vec_eq(const std::string& what, const std::vector<int64_t>& got,
                   const std::vector<int64_t>& ref) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (got[i] != ref[i] && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " mismatches, first at " << first << " (got "
                     << got[first] << ", expected " << ref[first] << ")";
}

TEST(GoldenVsa, MetadataMatchesReference) {
  H3_VSA_MANIFEST_OR_SKIP(manifest);
  if (!(*manifest)["cases"].contains("metadata")) GTEST_SKIP() << "the VSA manifest has no cases.metadata";
  const json& meta = (*manifest)["cases"]["metadata"];
  std::ifstream in(vsa_path(meta["file"].get<std::string>()));
  ASSERT_TRUE(in) << "missing " << meta["file"];
  const json cases = json::parse(in);
  const auto small = io::SafetensorsFile::open(vsa_path(meta["tensors"].get<std::string>()));
  const auto large = io::SafetensorsFile::open(vsa_path(meta["large_tensors"].get<std::string>()));
  int checked = 0, with_tensors = 0;
  for (const json& c : cases["cases"]) {
    // Two shapes of entry: per (geometry, tile) with tensors in the small file, or a summary with
    // several tiles (tensors in the large file when stored, checksums otherwise).
    std::vector<std::pair<std::string, json>> per_tile;
    std::string name;
    json summary;
    if (c.contains("summary")) {
      summary = c["summary"];
      name = summary["name"].get<std::string>();
      for (auto& [tile, t] : summary["tiles"].items()) per_tile.emplace_back(tile, t);
    } else {
      name = c["name"].get<std::string>();
      summary = c;
      per_tile.emplace_back(std::to_string(c["tile_size"].get<int>()), c);
    }
    const std::vector<int64_t> raw = ints(summary["raw_latent_shape"]);
    const int64_t grid[3] = {raw[0], raw[1] / 2, raw[2] / 2};  // patch (1,2,2)
    for (const auto& [tile_s, t] : per_tile) {
      const int tile = std::stoi(tile_s);
      SCOPED_TRACE(name + " tile " + tile_s);
      const ops::VsaGeometry g =
          ops::build_vsa_geometry(tile, ints(summary["prefix_segments_arg"]), grid,
                                  t["total_seq_length"].get<int64_t>());
      EXPECT_EQ(g.num_prefix_tiles, t["num_prefix_tiles"].get<int64_t>());
      EXPECT_EQ(g.num_video_tiles, t["num_video_tiles"].get<int64_t>());
      EXPECT_EQ(g.num_tiles(), t["n_tiles"].get<int64_t>());
      EXPECT_EQ(g.padded_length(), t["padded_length"].get<int64_t>());
      const std::vector<int64_t> prefix(g.tile_sizes.begin(), g.tile_sizes.begin() + g.num_prefix_tiles);
      expect_vec_eq("prefix tile sizes", prefix, ints(t["prefix_tile_sizes"]));
      int64_t vmin = INT64_MAX, vmax = 0;
      for (int64_t i = g.num_prefix_tiles; i < g.num_tiles(); ++i) {
        vmin = std::min(vmin, g.tile_sizes[i]);
        vmax = std::max(vmax, g.tile_sizes[i]);
      }
      EXPECT_EQ(vmin, t["min_video_tile"].get<int64_t>());
      EXPECT_EQ(vmax, t["max_video_tile"].get<int64_t>());
      for (auto& [sp, k] : t["k_vid"].items()) {
        EXPECT_EQ(ops::vsa_topk(std::stod(sp), g.num_video_tiles), k.get<int64_t>()) << "sparsity " << sp;
      }
      if (t.contains("checksums")) {
        int64_t s1 = 0, s2 = 0, s3 = 0;
        for (int64_t r = 0; r < g.seq_len; ++r) {
          s1 += g.untile_index[r];
          s2 += g.untile_index[r] * (r % 1009 + 1);
        }
        for (int64_t i = 0; i < g.num_tiles(); ++i) s3 += g.tile_sizes[i] * (i + 1);
        const json& cs = t["checksums"];
        EXPECT_EQ(s1, cs["sum_untile"].get<int64_t>());
        EXPECT_EQ(s2, cs["sum_untile_x_(row%1009+1)"].get<int64_t>());
        EXPECT_EQ(s3, cs["sum_sizes_x_(tile+1)"].get<int64_t>());
      }
      const std::string key = name + ".t" + tile_s;
      for (const auto& file : {small, large}) {
        if (!file->has(key + ".untile_combined_index")) continue;
        ++with_tensors;
        expect_vec_eq("variable_block_sizes", g.tile_sizes,
                      file->tensor(key + ".variable_block_sizes").to_i64_vector());
        expect_vec_eq("untile_combined_index", g.untile_index,
                      file->tensor(key + ".untile_combined_index").to_i64_vector());
        if (file->has(key + ".tile_partition_indices")) {
          expect_vec_eq("tile_partition_indices", g.partition_rows,
                        file->tensor(key + ".tile_partition_indices").to_i64_vector());
        }
      }
      ++checked;
    }
  }
  std::printf("[golden] VSA metadata: %d geometry/tile cases, %d with index tensors, all exact\n",
              checked, with_tensors);
  EXPECT_GT(checked, 0);

  for (auto& [tile, message] : cases["builder_rejects_tile_size"].items()) {
    const int64_t grid[3] = {4, 4, 4};
    EXPECT_THROW(ops::build_vsa_geometry(std::stoi(tile), {}, grid, 64), Error) << "tile " << tile;
  }
  int topk = 0;
  for (auto& [key, value] : cases["compute_topk_examples"].items()) {
    const size_t colon = key.find(':');
    EXPECT_EQ(ops::vsa_topk(std::stod(key.substr(0, colon)), std::stoll(key.substr(colon + 1))),
              value.get<int64_t>())
        << key;
    ++topk;
  }
  std::printf("[golden] VSA compute_topk: %d examples exact\n", topk);
}

// The bf16 per-element bound of TOLERANCES.md: |d| <= 4e-3 + 8e-3 |ref|, mean |d| <= 1e-3.
void expect_bf16_bound(const std::string& name, const Tensor& got, const Tensor& ref) {
  const std::vector<double> a = got.to_f64_vector(), b = ref.to_f64_vector();
  ASSERT_EQ(a.size(), b.size()) << name;
  double worst = 0, sum = 0;
  size_t over = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    sum += d;
    const double ratio = d / (4e-3 + 8e-3 * std::fabs(b[i]));
    worst = std::max(worst, ratio);
    if (ratio > 1.0) ++over;
  }
  const double mean = sum / static_cast<double>(a.size());
  std::printf("  %s: worst |d|/(4e-3+8e-3|ref|)=%.3f (bound 1), mean |d|=%.2e (bound 1e-3)\n",
              name.c_str(), worst, mean);
  EXPECT_EQ(over, 0u) << name << ": " << over << " elements over the per-element bound";
  EXPECT_LE(mean, 1e-3) << name;
}

TEST(GoldenVsa, AttentionCasesMatchReference) {
  H3_VSA_MANIFEST_OR_SKIP(manifest);
  if (!(*manifest)["cases"].contains("attention") || (*manifest)["cases"]["attention"].empty())
    GTEST_SKIP() << "no VSA attention cases";
  const json& list = (*manifest)["cases"]["attention"];
  for (const json& c : list) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    std::printf("[golden] VSA attention case %s\n", name.c_str());
    const auto f = io::SafetensorsFile::open(vsa_path(c["file"].get<std::string>()));
    const Tensor q = f->tensor("q"), k = f->tensor("k"), v = f->tensor("v"), g = f->tensor("g");
    const std::vector<int64_t> seq = ints(c["dit_seq_shape"]);
    const int64_t grid[3] = {seq[0], seq[1], seq[2]};
    const ops::VsaGeometry geo = ops::build_vsa_geometry(
        c["tile_size"].get<int>(), ints(c["prefix_segments"]), grid, c["S"].get<int64_t>());
    expect_vec_eq("variable_block_sizes", geo.tile_sizes, f->tensor("variable_block_sizes").to_i64_vector());
    expect_vec_eq("untile_combined_index", geo.untile_index,
                  f->tensor("untile_combined_index").to_i64_vector());
    const bool fp32 = c["dtype"].get<std::string>() == "fp32";
    const double scale = c["softmax_scale"].get<double>();

    for (const json& combo : c["combos"]) {
      const double sparsity = combo["sparsity"].get<double>();
      const std::string mode_s = combo["mode"].get<std::string>();
      SCOPED_TRACE("sparsity " + std::to_string(sparsity) + " " + mode_s);
      ops::VsaOptions opt;
      opt.sparsity = sparsity;
      opt.mode = ops::parse_vsa_mode(mode_s);
      opt.scale = static_cast<float>(scale);
      const Tensor ref_mask = f->tensor(combo["tensors"]["mask"].get<std::string>());
      const Tensor ref_scores = f->tensor("scores");
      const double margin = combo.value("topk_min_margin", nlohmann::json()).is_number()
                                ? combo["topk_min_margin"].get<double>()
                                : -1.0;
      // The mask from the reference's own scores: only an exact tie (noise 0) may flip.
      const test::MaskFlips from_ref = test::classify_mask_flips(
          ops::vsa_block_mask(ref_scores, geo, sparsity, opt.mode), ref_mask, ref_scores, 0.0);
      std::printf("  mask from reference scores: %s\n", test::describe(from_ref, 0.0).c_str());
      EXPECT_TRUE(from_ref.ok()) << name << " mask from reference scores: " << test::describe(from_ref, 0.0);
      ops::VsaTrace trace;
      Tensor out = ops::vsa_attention(q, k, v, &g, geo, opt, &trace);
      // The mask from our scores: flips only within the noise of our scores against the reference's.
      const double noise = test::max_abs_difference(trace.scores, ref_scores);
      const test::MaskFlips own = test::classify_mask_flips(trace.mask, ref_mask, ref_scores, noise);
      std::printf("  mask from our scores (case topk_min_margin %s): %s\n",
                  margin < 0 ? "-" : str_cat(margin).c_str(), test::describe(own, noise).c_str());
      EXPECT_TRUE(own.ok()) << name << " mask: " << test::describe(own, noise);
      if (margin >= 1e-3) {
        EXPECT_EQ(own.differing, 0) << name << ": a flip despite a margin of " << margin;
      }
      if (own.differing > 0) {
        // A near tie went the other way: the outputs are compared over the reference's selection.
        ops::VsaOptions forced = opt;
        forced.block_mask = &ref_mask;
        trace = ops::VsaTrace();
        out = ops::vsa_attention(q, k, v, &g, geo, forced, &trace);
        std::printf("  outputs below from a run with the reference's mask\n");
      }
      const Tensor ref_fine = f->tensor(combo["tensors"]["fine"].get<std::string>());
      const Tensor ref_out = f->tensor(combo["tensors"]["out"].get<std::string>());
      if (fp32) {
        test::expect_close("fine", trace.fine, ref_fine, -1, 1e-5);
        test::expect_close("out", out, ref_out, -1, 1e-5);
      } else {
        expect_bf16_bound("fine", trace.fine, ref_fine);
        expect_bf16_bound("out", out, ref_out);
      }
      if (combo == c["combos"][0]) {
        const double b = fp32 ? 1e-5 : -1;  // the fp32 case: TOLERANCES rel_l2 1e-5 on all tensors
        test::expect_max_abs("q_pooled", trace.q_pooled, f->tensor("q_pooled"), 2e-6);
        test::expect_max_abs("k_pooled", trace.k_pooled, f->tensor("k_pooled"), 2e-6);
        test::expect_max_abs("v_pooled", trace.v_pooled, f->tensor("v_pooled"), 2e-6);
        test::expect_max_abs("scores", trace.scores, f->tensor("scores"), 2e-6);
        test::expect_max_abs("out_c_f32", trace.out_c_f32, f->tensor("out_c_f32"), 2e-6);
        if (b > 0) test::expect_close("scores (rel)", trace.scores, f->tensor("scores"), -1, b);
      }
    }
  }
}

}  // namespace
}  // namespace h3
