// DiT config parsing/validation (h3_dit_spec.md §1.2) and the host tables of §2.6 and §2.8.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "models/h3_dit/dit_config.h"
#include "models/h3_dit/dit_tables.h"

namespace h3::dit {
namespace {

nlohmann::json released_config() {
  return nlohmann::json::parse(R"({
    "_class_name": "MiniMaxH3Transformer3DModel", "_diffusers_version": "0.40.0.dev0",
    "num_attention_heads": 56, "attention_head_dim": 128, "hidden_size": 5376, "num_layers": 50,
    "num_refiner_layers": 2, "ffn_dim": 14336, "in_channels": 24, "audio_in_channels": 32,
    "patch_size": [1, 2, 2], "text_dim": 5120, "freq_dim": 256, "time_embed_hidden_dim": 5376,
    "time_embed_dim": 2688, "rope_freq_dim": 16, "rope_theta": 10000.0, "norm_eps": 1e-05,
    "qk_norm_eps": 1e-05, "final_norm_eps": 1e-05})");
}

// Expects `fn` to throw h3::Error with `code` and a message containing `needle`.
template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
    std::printf("  error: %s\n", e.what());
  }
}

TEST(DitConfig, ParsesReleasedConfig) {
  const DitConfig c = DitConfig::from_json(released_config(), "config.json");
  EXPECT_EQ(c.hidden_size, 5376);
  EXPECT_EQ(c.inner_dim(), 7168);
  EXPECT_EQ(c.rotary_dim(), 96);
  EXPECT_EQ(c.video_patch_dim(), 96);
  EXPECT_EQ(c.adaln_width(), 96768);  // §1.3: adaln_proj.linear [96768, 2688]
  EXPECT_EQ(c.num_layers, 50);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
}

TEST(DitConfig, RejectsBadFields) {
  auto with = [](const char* key, const nlohmann::json& v) {
    nlohmann::json j = released_config();
    j[key] = v;
    return j;
  };
  auto without = [](const char* key) {
    nlohmann::json j = released_config();
    j.erase(key);
    return j;
  };
  expect_error([&] { DitConfig::from_json(without("hidden_size"), "cfg.json"); },
               ErrorCode::kInvalidFile, "'hidden_size'");
  expect_error([&] { DitConfig::from_json(with("num_layers", "50"), "cfg.json"); },
               ErrorCode::kInvalidFile, "'num_layers' must be an integer");
  expect_error([&] { DitConfig::from_json(with("ffn_dim", 0), "cfg.json"); },
               ErrorCode::kInvalidFile, "'ffn_dim'");
  expect_error([&] { DitConfig::from_json(with("patch_size", {1, 2}), "cfg.json"); },
               ErrorCode::kInvalidFile, "'patch_size'");
  expect_error([&] { DitConfig::from_json(with("rope_freq_dim", 22), "cfg.json"); },
               ErrorCode::kInvalidFile, "rotary width");
  expect_error([&] { DitConfig::from_json(with("norm_eps", -1.0), "cfg.json"); },
               ErrorCode::kInvalidFile, "'norm_eps'");
  expect_error([&] { DitConfig::from_json(with("adaln_rank", 16), "cfg.json"); },
               ErrorCode::kUnsupported, "adaln_rank");
  expect_error([&] { DitConfig::from_json(with("_class_name", "WanTransformer3DModel"), "cfg.json"); },
               ErrorCode::kInvalidFile, "_class_name");
  expect_error([&] { DitConfig::from_json(nlohmann::json::array(), "cfg.json"); },
               ErrorCode::kInvalidFile, "cfg.json");
  expect_error([&] { DitConfig::load("/nonexistent/transformer"); }, ErrorCode::kNotFound,
               "/nonexistent/transformer");
}

TEST(DitTables, InvFreqMatchesReferenceBits) {
  // §2.8: the 16 released frequencies, bit for bit.
  const uint32_t expected[16] = {0x3F800000, 0x3F0FF59A, 0x3EA1E89B, 0x3E361887, 0x3DCCCCCD, 0x3D6655C2,
                                 0x3D0186E3, 0x3C91AD39, 0x3C23D70A, 0x3BB8449C, 0x3B4F3E38, 0x3AE91528,
                                 0x3A83126F, 0x3A136A16, 0x39A5CB60, 0x393A7753};
  const std::vector<float> inv = rope_inv_freq(16, 10000.0);
  ASSERT_EQ(inv.size(), 16u);
  int equal = 0;
  for (int k = 0; k < 16; ++k) {
    equal += f32_bits(inv[k]) == expected[k];
    EXPECT_EQ(f32_bits(inv[k]), expected[k]) << "k=" << k;
  }
  std::printf("inv_freq: %d/16 bit-equal to the reference\n", equal);
}

TEST(DitTables, SinusoidIsCosineFirst) {
  const Tensor e = timestep_sinusoid({0.0f, 0.5f}, 8);
  ASSERT_EQ(e.shape(), (Shape{2, 8}));
  const std::vector<float> v = e.to_f32_vector();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(v[i], 1.0f);      // cos(0)
    EXPECT_EQ(v[4 + i], 0.0f);  // sin(0)
  }
  // Row 1, frequency i = 1: e_1 = exp(-ln(1e4) / 4) = 0.1, a = 0.05.
  EXPECT_NEAR(v[8 + 1], std::cos(0.05), 1e-7);
  EXPECT_NEAR(v[8 + 4 + 1], std::sin(0.05), 1e-7);
  EXPECT_NEAR(v[8 + 0], std::cos(0.5), 1e-7);
}

TEST(DitTables, RopeTablesLayout) {
  // One row at (t, h, w) = (3, 5, 7), F = 2: phi = [3*inv | 5*inv | 7*inv], duplicated.
  const RopeTables t = rope_tables({3.0, 5.0, 7.0}, 2, 10000.0);
  ASSERT_EQ(t.cos.shape(), (Shape{1, 12}));
  const std::vector<float> c = t.cos.to_f32_vector(), s = t.sin.to_f32_vector();
  const std::vector<float> inv = rope_inv_freq(2, 10000.0);  // {1, 0.01}
  const double p[3] = {3, 5, 7};
  for (int axis = 0; axis < 3; ++axis) {
    for (int k = 0; k < 2; ++k) {
      const float phi = static_cast<float>(p[axis]) * inv[k];
      for (int half = 0; half < 2; ++half) {
        EXPECT_EQ(c[half * 6 + axis * 2 + k], std::cos(phi)) << axis << "," << k << "," << half;
        EXPECT_EQ(s[half * 6 + axis * 2 + k], std::sin(phi)) << axis << "," << k << "," << half;
      }
    }
  }
  expect_error([] { rope_tables({1.0, 2.0}, 2, 1e4); }, ErrorCode::kInvalidArgument, "triples");
}

}  // namespace
}  // namespace h3::dit
