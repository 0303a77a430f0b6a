// Qwen3-VL config parsing and validation (h3_components_spec.md §1.2): the released and tiny
// configs parse; bad ones are refused with errors naming the file and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "models/qwen3_vl/qwen3_vl_config.h"
#include "models/qwen3_vl/qwen3_vl_model.h"

namespace h3::qwen3_vl {
namespace {

nlohmann::json tiny_config() {
  return nlohmann::json::parse(R"({
    "image_token_id": 1036, "video_token_id": 1037, "vision_start_token_id": 1033,
    "vision_end_token_id": 1034,
    "text_config": {"attention_bias": false, "head_dim": 16, "hidden_act": "silu", "hidden_size": 32,
      "intermediate_size": 64, "num_attention_heads": 4, "num_hidden_layers": 51,
      "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "vocab_size": 1088,
      "rope_parameters": {"mrope_interleaved": true, "mrope_section": [4, 2, 2],
                          "rope_theta": 5000000.0, "rope_type": "default"}},
    "vision_config": {"deepstack_visual_indexes": [1, 2, 3], "depth": 4,
      "hidden_act": "gelu_pytorch_tanh", "hidden_size": 32, "in_channels": 3,
      "intermediate_size": 64, "num_heads": 2, "num_position_embeddings": 64,
      "out_hidden_size": 32, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}
  })");
}

void expect_error(const nlohmann::json& j, ErrorCode code, const std::string& needle) {
  try {
    (void)Qwen3VlConfig::from_json(j, "config.json");
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
    std::printf("  error: %s\n", e.what());
  }
}

TEST(QwenConfig, ParsesTinyConfig) {
  const Qwen3VlConfig c = Qwen3VlConfig::from_json(tiny_config(), "config.json");
  EXPECT_EQ(c.text.hidden_size, 32);
  EXPECT_EQ(c.text.num_hidden_layers, 51);
  EXPECT_EQ(c.tap_layers, 50);
  EXPECT_EQ(c.text.mrope_section[0], 4);
  EXPECT_DOUBLE_EQ(c.text.rope_theta, 5e6);
  EXPECT_EQ(c.vision.deepstack_visual_indexes.size(), 3u);
  EXPECT_EQ(c.image_token_id, 1036);
}

TEST(QwenConfig, RefusesBadConfigs) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    ErrorCode code;
    std::string needle;
  };
  const Case cases[] = {
      {[](nlohmann::json& j) { j["text_config"]["num_hidden_layers"] = 49; },
       ErrorCode::kInvalidFile, "num_hidden_layers"},
      {[](nlohmann::json& j) { j["text_config"]["num_key_value_heads"] = 3; },
       ErrorCode::kInvalidFile, "num_key_value_heads"},
      {[](nlohmann::json& j) {
         j["text_config"]["rope_parameters"]["mrope_section"] = {4, 2};
       },
       ErrorCode::kInvalidFile, "mrope_section"},
      {[](nlohmann::json& j) {
         j["text_config"]["rope_parameters"]["mrope_section"] = {4, 2, 3};
       },
       ErrorCode::kInvalidFile, "head_dim/2"},
      {[](nlohmann::json& j) { j["text_config"]["rope_parameters"]["mrope_interleaved"] = false; },
       ErrorCode::kUnsupported, "mrope_interleaved"},
      {[](nlohmann::json& j) { j["vision_config"]["out_hidden_size"] = 64; },
       ErrorCode::kInvalidFile, "out_hidden_size"},
      {[](nlohmann::json& j) {
         j["vision_config"]["deepstack_visual_indexes"] = {1, 4};
       },
       ErrorCode::kInvalidFile, "deepstack_visual_indexes"},
      {[](nlohmann::json& j) { j["vision_config"]["num_position_embeddings"] = 60; },
       ErrorCode::kInvalidFile, "num_position_embeddings"},
      {[](nlohmann::json& j) { j["text_config"]["hidden_act"] = "gelu"; }, ErrorCode::kUnsupported,
       "hidden_act"},
      {[](nlohmann::json& j) { j["text_config"].erase("hidden_size"); }, ErrorCode::kInvalidFile,
       "hidden_size"},
      {[](nlohmann::json& j) { j.erase("vision_config"); }, ErrorCode::kInvalidFile,
       "vision_config"},
      {[](nlohmann::json& j) { j["text_config"]["attention_bias"] = true; },
       ErrorCode::kUnsupported, "attention_bias"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = tiny_config();
    c.edit(j);
    expect_error(j, c.code, c.needle);
  }
}

TEST(QwenConfig, MropeTablesInterleaveAxes) {
  const Qwen3VlConfig c = Qwen3VlConfig::from_json(tiny_config(), "config.json");
  // One token at (t, h, w) = (1, 2, 3): frequency j uses axis h for j = 1, 4, axis w for j = 2, 5,
  // and t for j = 0, 3, 6, 7 (sections [4, 2, 2] over 8 frequencies).
  const Tensor pos = Tensor::from_i64({1, 2, 3}, {3, 1});
  Tensor cos, sin;
  mrope_tables(c.text, pos, &cos, &sin);
  ASSERT_EQ(cos.shape(), (Shape{1, 16}));
  const int axis_of[8] = {0, 1, 2, 0, 1, 2, 0, 0};
  const std::vector<float> cv = cos.to_f32_vector();
  for (int j = 0; j < 8; ++j) {
    const float inv = 1.0f / std::pow(5e6f, static_cast<float>(2 * j) / 16.0f);
    const float angle = static_cast<float>(axis_of[j] + 1) * inv;
    EXPECT_FLOAT_EQ(cv[static_cast<size_t>(j)], std::cos(angle)) << "frequency " << j;
    EXPECT_FLOAT_EQ(cv[static_cast<size_t>(j + 8)], std::cos(angle)) << "frequency " << j;
  }
}

}  // namespace
}  // namespace h3::qwen3_vl
