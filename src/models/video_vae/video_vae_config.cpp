#include "models/video_vae/video_vae_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/repo.h"

namespace h3::video_vae {
namespace {

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

int64_t positive_mod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

}  // namespace

int64_t VideoVaeConfig::spatial_ratio() const { return product(spatial_downsample_factors); }
int64_t VideoVaeConfig::temporal_ratio() const { return product(temporal_downsample_factors); }

int64_t VideoVaeConfig::decoder_rotary_dim() const {
  // int(attention_head_dim * rope_dim_ratio) in Python: truncation of the double product.
  return static_cast<int64_t>(static_cast<double>(decoder_attention_head_dim) * decoder_rope_dim_ratio);
}

int64_t VideoVaeConfig::frame_pre_padding() const {
  return positive_mod(-clip_length, temporal_ratio());
}
int64_t VideoVaeConfig::tokens_chunk_size() const {
  return (clip_length + temporal_ratio() - 1) / temporal_ratio();
}
int64_t VideoVaeConfig::token_overlap() const {
  return positive_mod(-token_drop, tokens_chunk_size());
}
int64_t VideoVaeConfig::frame_overlap() const {
  return std::max<int64_t>(token_overlap() * temporal_ratio() - frame_pre_padding(), 0);
}

int64_t VideoVaeConfig::clip_latent_frames(int64_t frames) const {
  int64_t t = frames;
  for (int64_t f : temporal_downsample_factors) {
    // Causal conv: 2 zero frames in front, kernel 3, stride f -> floor((t + 2 - 3)/f) + 1.
    if (f > 1) t = (t - 1) / f + 1;
  }
  return t;
}

int64_t VideoVaeConfig::encoded_latent_frames(int64_t frames) const {
  H3_CHECK(frames >= 1, ErrorCode::kInvalidArgument, "video VAE encode: need at least one frame, got ",
           frames);
  if (frames == 1) return clip_latent_frames(1);
  const int64_t clips = (frames + clip_length - 1) / clip_length;
  return clips * clip_latent_frames(clip_length) - token_drop;
}

void VideoVaeConfig::validate(const std::string& label) const {
  const size_t levels = block_out_channels.size();
  H3_CHECK(levels >= 1 && spatial_downsample_factors.size() == levels &&
               temporal_downsample_factors.size() == levels,
           ErrorCode::kInvalidFile, label,
           ": 'block_out_channels', 'spatial_downsample_factors' and 'temporal_downsample_factors' "
           "must be non-empty lists of equal length");
  for (size_t i = 0; i < levels; ++i) {
    const int64_t s = spatial_downsample_factors[i], t = temporal_downsample_factors[i];
    // The downsampler pads right/bottom by one only for a spatial stride of 2 (§2.3); other
    // strides would shrink the frame by the unpadded kernel, which no released model does.
    H3_CHECK((s == 1 || s == 2) && (t == 1 || t == 2) && !(s == 1 && t == 2),
             ErrorCode::kUnsupported, label, ": level ", i, " has downsample factors (spatial ", s,
             ", temporal ", t, "); supported are spatial 1 or 2 and temporal 1 or 2, with a "
             "temporal stride only where the level also halves space");
    H3_CHECK(block_out_channels[i] % norm_num_groups == 0, ErrorCode::kInvalidFile, label,
             ": block_out_channels[", i, "]=", block_out_channels[i],
             " is not divisible by norm_num_groups=", norm_num_groups);
  }
  H3_CHECK(latent_channels >= 1 && in_channels >= 1 && out_channels >= 1, ErrorCode::kInvalidFile,
           label, ": channel counts must be positive");
  const int64_t rot = decoder_rotary_dim();
  H3_CHECK(rot >= 6 && rot % 6 == 0 && rot <= decoder_attention_head_dim, ErrorCode::kInvalidFile,
           label, ": decoder rotary width int(", decoder_attention_head_dim, " * ",
           decoder_rope_dim_ratio, ") = ", rot,
           " must be a positive multiple of 6 (3 axes, cos/sin halves) within the head");
  H3_CHECK(clip_length >= 1 && token_drop >= 0 && token_drop < tokens_chunk_size(),
           ErrorCode::kInvalidFile, label, ": clip_length=", clip_length, " token_drop=", token_drop,
           " must satisfy clip_length >= 1 and 0 <= token_drop < ceil(clip_length/temporal_ratio)");
  H3_CHECK(latents_mean.size() == static_cast<size_t>(latent_channels) &&
               latents_std.size() == static_cast<size_t>(latent_channels),
           ErrorCode::kInvalidFile, label, ": latents_mean and latents_std must have ",
           latent_channels, " entries (latent_channels), got ", latents_mean.size(), " and ",
           latents_std.size());
  for (float s : latents_std) {
    H3_CHECK(s > 0.0f, ErrorCode::kInvalidFile, label, ": latents_std entries must be positive");
  }
}

VideoVaeConfig VideoVaeConfig::from_json(const nlohmann::json& j, const std::string& label) {
  H3_CHECK(j.is_object(), ErrorCode::kInvalidFile, label, ": expected a JSON object");
  if (auto it = j.find("_class_name"); it != j.end()) {
    H3_CHECK(it->is_string() && it->get<std::string>() == "AutoencoderKLMiniMaxH3",
             ErrorCode::kInvalidFile, label,
             ": _class_name must be \"AutoencoderKLMiniMaxH3\", got ", it->dump());
  }
  VideoVaeConfig c;
  c.in_channels =
      io::config_int_in_or(j, "in_channels", label, c.in_channels, 1, io::kMaxConfigSize);
  c.out_channels =
      io::config_int_in_or(j, "out_channels", label, c.out_channels, 1, io::kMaxConfigSize);
  c.latent_channels =
      io::config_int_in_or(j, "latent_channels", label, c.latent_channels, 1, io::kMaxConfigSize);
  c.block_out_channels = io::config_int_list_in_or(j, "block_out_channels", label,
                                                   c.block_out_channels, 1, io::kMaxConfigSize);
  c.layers_per_block =
      io::config_int_in_or(j, "layers_per_block", label, c.layers_per_block, 1, io::kMaxConfigSize);
  c.spatial_downsample_factors = io::config_int_list_in_or(
      j, "spatial_downsample_factors", label, c.spatial_downsample_factors, 1, io::kMaxConfigSize);
  c.temporal_downsample_factors =
      io::config_int_list_in_or(j, "temporal_downsample_factors", label,
                                c.temporal_downsample_factors, 1, io::kMaxConfigSize);
  c.norm_num_groups =
      io::config_int_in_or(j, "norm_num_groups", label, c.norm_num_groups, 1, io::kMaxConfigSize);
  c.norm_eps = io::config_positive_or(j, "norm_eps", label, c.norm_eps);
  if (auto it = j.find("spatial_padding_mode"); it != j.end() && !it->is_null()) {
    const std::string m = it->is_string() ? it->get<std::string>() : std::string();
    if (m == "reflect") {
      c.spatial_padding_mode = ops::PadMode::kReflect;
    } else if (m == "replicate") {
      c.spatial_padding_mode = ops::PadMode::kReplicate;
    } else if (m == "constant" || m == "zeros") {
      c.spatial_padding_mode = ops::PadMode::kZeros;
    } else {
      fail(ErrorCode::kInvalidFile, label, ": spatial_padding_mode must be \"reflect\", "
           "\"replicate\" or \"constant\", got ", it->dump());
    }
  }
  c.decoder_num_layers = io::config_int_in_or(j, "decoder_num_layers", label, c.decoder_num_layers,
                                              0, io::kMaxConfigSize);
  c.decoder_num_attention_heads =
      io::config_int_in_or(j, "decoder_num_attention_heads", label, c.decoder_num_attention_heads,
                           1, io::kMaxConfigSize);
  c.decoder_attention_head_dim = io::config_int_in_or(
      j, "decoder_attention_head_dim", label, c.decoder_attention_head_dim, 1, io::kMaxConfigSize);
  c.decoder_num_register_tokens =
      io::config_int_in_or(j, "decoder_num_register_tokens", label, c.decoder_num_register_tokens,
                           0, io::kMaxConfigSize);
  c.decoder_ffn_mult =
      io::config_int_in_or(j, "decoder_ffn_mult", label, c.decoder_ffn_mult, 1, io::kMaxConfigSize);
  c.decoder_rope_theta =
      io::config_positive_or(j, "decoder_rope_theta", label, c.decoder_rope_theta);
  c.decoder_rope_dim_ratio =
      io::config_positive_or(j, "decoder_rope_dim_ratio", label, c.decoder_rope_dim_ratio);
  c.decoder_norm_eps = io::config_positive_or(j, "decoder_norm_eps", label, c.decoder_norm_eps);
  c.clip_length =
      io::config_int_in_or(j, "clip_length", label, c.clip_length, 1, io::kMaxConfigSize);
  c.token_drop = io::config_int_in_or(j, "token_drop", label, c.token_drop, 0, io::kMaxConfigSize);
  c.latents_mean = io::config_float_list_or(
      j, "latents_mean", label, std::vector<float>(static_cast<size_t>(c.latent_channels), 0.0f));
  c.latents_std = io::config_float_list_or(
      j, "latents_std", label, std::vector<float>(static_cast<size_t>(c.latent_channels), 1.0f));
  c.validate(label);
  return c;
}

VideoVaeConfig VideoVaeConfig::load(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "config.json").string();
  return from_json(io::read_json_file(file), file);
}

nlohmann::json VideoVaeConfig::to_json() const {
  nlohmann::json j;
  j["_class_name"] = "AutoencoderKLMiniMaxH3";
  j["in_channels"] = in_channels;
  j["out_channels"] = out_channels;
  j["latent_channels"] = latent_channels;
  j["block_out_channels"] = block_out_channels;
  j["layers_per_block"] = layers_per_block;
  j["spatial_downsample_factors"] = spatial_downsample_factors;
  j["temporal_downsample_factors"] = temporal_downsample_factors;
  j["norm_num_groups"] = norm_num_groups;
  j["norm_eps"] = norm_eps;
  j["spatial_padding_mode"] = spatial_padding_mode == ops::PadMode::kReflect     ? "reflect"
                              : spatial_padding_mode == ops::PadMode::kReplicate ? "replicate"
                                                                                 : "constant";
  j["decoder_num_layers"] = decoder_num_layers;
  j["decoder_num_attention_heads"] = decoder_num_attention_heads;
  j["decoder_attention_head_dim"] = decoder_attention_head_dim;
  j["decoder_num_register_tokens"] = decoder_num_register_tokens;
  j["decoder_ffn_mult"] = decoder_ffn_mult;
  j["decoder_rope_theta"] = decoder_rope_theta;
  j["decoder_rope_dim_ratio"] = decoder_rope_dim_ratio;
  j["decoder_norm_eps"] = decoder_norm_eps;
  j["clip_length"] = clip_length;
  j["token_drop"] = token_drop;
  j["latents_mean"] = latents_mean;
  j["latents_std"] = latents_std;
  return j;
}

}  // namespace h3::video_vae
