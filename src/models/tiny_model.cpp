#include "models/tiny_model.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <set>

#include "core/status.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/schema.h"

namespace h3::models {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr const char* kDiffusersVersion = "0.40.0.dev0";
constexpr const char* kTransformersVersion = "5.17.0";
// Hugging Face's default shard limit ("5GB"), which reproduces the release's shard counts.
constexpr uint64_t kReleasedShardBytes = 5'000'000'000ull;
// Tiny BPE: 256 byte tokens + 768 merges; embeddings padded to a multiple of 64 (as the golden).
constexpr int kTinyBpeVocab = 1024;
constexpr int64_t kTinyTextVocab = 1088;
// Qwen's BPE vocabulary ends at 151642; its added tokens start at 151643 (h3_components_spec §1.2).
constexpr int64_t kQwenAddedBase = 151643;

// ---- deterministic random numbers --------------------------------------------------------------

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

// One stream per (seed, key): tensors do not depend on the order they are generated in.
class Rng {
 public:
  Rng(uint64_t seed, const std::string& key) : state_(fnv1a(key) ^ (seed * 0x9e3779b97f4a7c15ull)) {
    splitmix64(state_);
  }
  double uniform() {  // [0, 1)
    return static_cast<double>(splitmix64(state_) >> 11) * (1.0 / 9007199254740992.0);
  }
  double normal() {  // Box-Muller, both halves used
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// ---- weight initialization ---------------------------------------------------------------------

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

double bessel_i0(double x) {
  double sum = 1.0, term = 1.0;
  for (int k = 1; k < 64; ++k) {
    term *= (x / (2.0 * k)) * (x / (2.0 * k));
    sum += term;
    if (term < 1e-17 * sum) break;
  }
  return sum;
}

// The anti-aliasing low-pass of the audio decoder's activations (h3_components_spec.md §3.4):
// Kaiser-windowed sinc, cutoff 0.25, half-width 0.3, 12 taps, normalized to sum 1.
std::vector<float> kaiser_sinc_filter(int64_t taps) {
  const double cutoff = 0.25, half_width = 0.3;
  const int64_t half = taps / 2;
  const double a =
      2.285 * static_cast<double>(half - 1) * std::numbers::pi * 4.0 * half_width + 7.95;
  const double beta = a > 50.0    ? 0.1102 * (a - 8.7)
                      : a >= 21.0 ? 0.5842 * std::pow(a - 21.0, 0.4) + 0.07886 * (a - 21.0)
                                  : 0.0;
  std::vector<double> h(static_cast<size_t>(taps));
  double sum = 0.0;
  const double m = static_cast<double>(taps - 1) / 2.0;
  for (int64_t n = 0; n < taps; ++n) {
    const double r = (static_cast<double>(n) - m) / m;
    const double w = bessel_i0(beta * std::sqrt(std::max(0.0, 1.0 - r * r))) / bessel_i0(beta);
    const double t = static_cast<double>(n - half) + 0.5;
    const double x = 2.0 * cutoff * t;
    const double sinc = x == 0.0 ? 1.0 : std::sin(std::numbers::pi * x) / (std::numbers::pi * x);
    h[static_cast<size_t>(n)] = 2.0 * cutoff * w * sinc;
    sum += h[static_cast<size_t>(n)];
  }
  std::vector<float> out;
  for (double v : h) out.push_back(static_cast<float>(v / sum));
  return out;
}

std::vector<float> init_values(const TensorSpec& t, uint64_t seed, const std::string& component) {
  const int64_t n = t.numel();
  std::vector<float> v(static_cast<size_t>(n));
  const std::string& name = t.name;
  if (ends_with(name, "filter")) {
    const std::vector<float> f = kaiser_sinc_filter(n);
    std::copy(f.begin(), f.end(), v.begin());
    return v;
  }
  if (ends_with(name, "zero_k_bias")) return v;  // a constant zero buffer in the release
  Rng rng(seed, component + "/" + name);
  auto fill = [&](auto fn) {
    for (auto& x : v) x = static_cast<float>(fn());
  };
  if (ends_with(name, "weight_g")) {
    fill([&] { return 0.5 + rng.uniform(); });
  } else if (ends_with(name, "act.alpha") || ends_with(name, "act.beta")) {
    fill([&] { return 0.1 * rng.normal(); });  // SnakeBeta parameters are log-scale
  } else if (ends_with(name, ".alpha")) {
    fill([&] { return 1.0 + 0.1 * rng.normal(); });  // Snake1d alpha is stored raw
  } else if (ends_with(name, "scale1") || ends_with(name, "scale2")) {
    fill([&] { return 0.5 * (1.0 + 0.1 * rng.normal()); });  // LayerScale
  } else if (ends_with(name, "register_tokens")) {
    fill([&] { return 0.5 * rng.normal(); });
  } else if (t.shape.size() == 1 && ends_with(name, ".weight")) {
    fill([&] { return 1.0 + 0.1 * rng.normal(); });  // every 1-D weight here is a norm's
  } else if (t.shape.size() == 1) {
    fill([&] { return 0.02 * rng.normal(); });  // biases
  } else {
    const double fan_in = static_cast<double>(n / std::max<int64_t>(1, t.shape[0]));
    const double std = 1.0 / std::sqrt(std::max(1.0, fan_in));
    fill([&] { return std * rng.normal(); });
  }
  return v;
}

// ---- configs -----------------------------------------------------------------------------------

json latents_stats(uint64_t seed, const std::string& key, int64_t n, bool mean, bool released) {
  json out = json::array();
  Rng rng(seed, key);
  for (int64_t i = 0; i < n; ++i) {
    // The release's statistics are not part of the specs: released-shape repos use 0 / 1.
    double x = released ? (mean ? 0.0 : 1.0) : mean ? 0.1 * rng.normal() : 0.5 + rng.uniform();
    out.push_back(std::round(x * 1e6) / 1e6);
  }
  return out;
}

json transformer_config(bool released) {
  json c;
  c["_class_name"] = "MiniMaxH3Transformer3DModel";
  c["_diffusers_version"] = kDiffusersVersion;
  c["num_attention_heads"] = released ? 56 : 4;
  c["attention_head_dim"] = released ? 128 : 32;
  c["hidden_size"] = released ? 5376 : 96;
  c["num_layers"] = released ? 50 : 3;
  c["num_refiner_layers"] = 2;
  c["ffn_dim"] = released ? 14336 : 256;
  c["in_channels"] = 24;
  c["audio_in_channels"] = 32;
  c["patch_size"] = {1, 2, 2};
  c["text_dim"] = released ? 5120 : 32;
  c["freq_dim"] = 256;
  c["time_embed_hidden_dim"] = released ? 5376 : 128;
  c["time_embed_dim"] = released ? 2688 : 64;
  c["rope_freq_dim"] = released ? 16 : 4;
  c["rope_theta"] = 10000.0;
  c["norm_eps"] = 1e-5;
  c["qk_norm_eps"] = 1e-5;
  c["final_norm_eps"] = 1e-5;
  return c;
}

json text_encoder_config(bool released) {
  const int64_t base = released ? kQwenAddedBase : kTinyBpeVocab;
  json t;
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["bos_token_id"] = base;
  t["eos_token_id"] = base + 2;
  t["head_dim"] = released ? 128 : 16;
  t["hidden_act"] = "silu";
  t["hidden_size"] = released ? 5120 : 32;
  t["initializer_range"] = 0.02;
  t["intermediate_size"] = released ? 25600 : 64;
  t["max_position_embeddings"] = 262144;
  t["model_type"] = "qwen3_vl_text";
  t["num_attention_heads"] = released ? 64 : 4;
  t["num_hidden_layers"] = released ? 64 : 51;
  t["num_key_value_heads"] = released ? 8 : 2;
  t["pad_token_id"] = nullptr;
  t["rms_norm_eps"] = 1e-6;
  t["rope_parameters"] = {{"mrope_interleaved", true},
                          {"mrope_section", released ? json{24, 20, 20} : json{4, 2, 2}},
                          {"rope_theta", 5000000.0},
                          {"rope_type", "default"}};
  t["tie_word_embeddings"] = false;
  t["use_cache"] = true;
  t["vocab_size"] = released ? 151936 : kTinyTextVocab;
  json v;
  v["deepstack_visual_indexes"] = released ? json{8, 16, 24} : json{1, 2, 3};
  v["depth"] = released ? 27 : 4;
  v["hidden_act"] = "gelu_pytorch_tanh";
  v["hidden_size"] = released ? 1152 : 32;
  v["in_channels"] = 3;
  v["initializer_range"] = 0.02;
  v["intermediate_size"] = released ? 4304 : 64;
  v["model_type"] = "qwen3_vl_vision";
  v["num_heads"] = released ? 16 : 2;
  v["num_position_embeddings"] = released ? 2304 : 64;
  v["out_hidden_size"] = released ? 5120 : 32;
  v["patch_size"] = 16;
  v["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "axial"}};
  v["spatial_merge_size"] = 2;
  v["temporal_patch_size"] = 2;
  json c;
  c["architectures"] = {"Qwen3VLForConditionalGeneration"};
  c["dtype"] = "bfloat16";
  c["image_token_id"] = base + 12;
  c["model_type"] = "qwen3_vl";
  c["text_config"] = t;
  c["tie_word_embeddings"] = false;
  c["transformers_version"] = kTransformersVersion;
  c["video_token_id"] = base + 13;
  c["vision_config"] = v;
  c["vision_end_token_id"] = base + 10;
  c["vision_start_token_id"] = base + 9;
  return c;
}

json vae_config(bool released, uint64_t seed) {
  json c;
  c["_class_name"] = "AutoencoderKLMiniMaxH3";
  c["_diffusers_version"] = kDiffusersVersion;
  c["block_out_channels"] =
      released ? json{128, 256, 256, 512, 512, 1024} : json{8, 16, 16, 32, 32, 32};
  c["clip_length"] = 17;
  c["decoder_attention_head_dim"] = released ? 64 : 32;
  c["decoder_ffn_mult"] = 4;
  c["decoder_norm_eps"] = 1e-5;
  c["decoder_num_attention_heads"] = released ? 32 : 2;
  c["decoder_num_layers"] = released ? 36 : 2;
  c["decoder_num_register_tokens"] = 4;
  c["decoder_rope_dim_ratio"] = 0.75;
  c["decoder_rope_theta"] = 100.0;
  c["in_channels"] = 3;
  c["latent_channels"] = 24;
  c["latents_mean"] = latents_stats(seed, "vae/latents_mean", 24, true, released);
  c["latents_std"] = latents_stats(seed, "vae/latents_std", 24, false, released);
  c["layers_per_block"] = released ? 2 : 1;
  c["norm_eps"] = 1e-6;
  c["norm_num_groups"] = released ? 32 : 8;
  c["out_channels"] = 3;
  c["spatial_downsample_factors"] = {2, 2, 2, 2, 1, 1};
  c["spatial_padding_mode"] = "reflect";
  c["temporal_downsample_factors"] = {1, 2, 2, 1, 1, 1};
  c["token_drop"] = 3;
  return c;
}

json audio_vae_config(bool released, uint64_t seed) {
  json c;
  c["_class_name"] = "AutoencoderKLMiniMaxH3Audio";
  c["_diffusers_version"] = kDiffusersVersion;
  c["decoder_dim"] = released ? 1024 : 128;
  c["decoder_kernel_sizes"] = {9, 9, 4, 4, 4, 4, 4};
  c["decoder_rates"] = {5, 5, 2, 2, 2, 2, 2};
  c["encoder_dim"] = released ? 64 : 2;
  c["encoder_rates"] = {2, 4, 4, 5, 5};
  c["latent_channels"] = 32;
  c["latent_dim"] = released ? 2048 : 64;
  c["latents_mean"] = latents_stats(seed, "audio_vae/latents_mean", 32, true, released);
  c["latents_std"] = latents_stats(seed, "audio_vae/latents_std", 32, false, released);
  c["num_attention_heads"] = released ? 8 : 1;
  c["resblock_dilation_sizes"] = {{1, 3, 5}, {1, 3, 5}, {1, 3, 5}};
  c["resblock_kernel_sizes"] = {3, 7, 11};
  c["sampling_rate"] = 32000;
  return c;
}

json processor_config(bool released) {
  json ip;
  ip["do_convert_rgb"] = true;
  ip["do_normalize"] = true;
  ip["do_rescale"] = true;
  ip["do_resize"] = true;
  ip["image_mean"] = {0.5, 0.5, 0.5};
  ip["image_processor_type"] = "Qwen2VLImageProcessor";
  ip["image_std"] = {0.5, 0.5, 0.5};
  ip["merge_size"] = 2;
  ip["patch_size"] = 16;
  ip["resample"] = 3;
  ip["rescale_factor"] = 1.0 / 255.0;
  // Tiny canvases are below the stock 65536-pixel floor; the tiny floor keeps them unresized.
  ip["size"] = {{"longest_edge", 16777216}, {"shortest_edge", released ? 65536 : 1024}};
  ip["temporal_patch_size"] = 2;
  json vp = ip;
  vp.erase("image_processor_type");
  vp["do_sample_frames"] = true;
  vp["fps"] = 2;
  vp["max_frames"] = 768;
  vp["max_video_tokens"] = 768;
  vp["min_frames"] = 4;
  vp["return_metadata"] = false;
  vp["size"] = {{"longest_edge", 25165824}, {"shortest_edge", 4096}};
  vp["video_processor_type"] = "Qwen3VLVideoProcessor";
  json c;
  c["image_processor"] = ip;
  c["processor_class"] = "Qwen3VLProcessor";
  c["video_processor"] = vp;
  return c;
}

json scheduler_config(double shift) {
  json c;
  c["_class_name"] = "MiniMaxH3Scheduler";
  c["_diffusers_version"] = kDiffusersVersion;
  c["shift"] = shift;
  return c;
}

// Qwen's added tokens in id order; the first 14 are special (h3_components_spec.md §1.3).
const std::vector<std::string>& qwen_added_tokens() {
  static const std::vector<std::string> t = {"<|endoftext|>",
                                             "<|im_start|>",
                                             "<|im_end|>",
                                             "<|object_ref_start|>",
                                             "<|object_ref_end|>",
                                             "<|box_start|>",
                                             "<|box_end|>",
                                             "<|quad_start|>",
                                             "<|quad_end|>",
                                             "<|vision_start|>",
                                             "<|vision_end|>",
                                             "<|vision_pad|>",
                                             "<|image_pad|>",
                                             "<|video_pad|>",
                                             "<tool_call>",
                                             "</tool_call>",
                                             "<|fim_prefix|>",
                                             "<|fim_middle|>",
                                             "<|fim_suffix|>",
                                             "<|fim_pad|>",
                                             "<|repo_name|>",
                                             "<|file_sep|>",
                                             "<tool_response>",
                                             "</tool_response>",
                                             "<think>",
                                             "</think>"};
  return t;
}
constexpr size_t kQwenSpecialCount = 14;

json tokenizer_config(bool for_processor) {
  json c;
  c["add_prefix_space"] = false;
  c["backend"] = "tokenizers";
  c["bos_token"] = nullptr;
  c["clean_up_tokenization_spaces"] = false;
  c["eos_token"] = "<|im_end|>";
  c["errors"] = "replace";
  json extra = json::array();
  for (size_t i = 1; i < kQwenSpecialCount; ++i) extra.push_back(qwen_added_tokens()[i]);
  c["extra_special_tokens"] = extra;
  c["model_max_length"] = 262144;
  c["pad_token"] = "<|endoftext|>";
  if (for_processor) c["processor_class"] = "Qwen3VLProcessor";
  c["split_special_tokens"] = false;
  c["tokenizer_class"] = "Qwen2Tokenizer";
  c["unk_token"] = nullptr;
  return c;
}

// A minimal ChatML template. The pipeline never applies it (h3_components_spec.md §1.3); it is
// there because the release's tokenizer folder has one.
constexpr const char* kChatTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// ---- byte-level BPE training -------------------------------------------------------------------

// A small English text about scenes, light, sound and motion: the kind of words prompts use.
constexpr const char* kCorpus =
    "A red fox crosses fresh snow at sunrise, its breath rising in small white clouds. "
    "The camera follows slowly from the left while wind moves through the tall pine trees. "
    "Soft orange light falls across the valley and the river below shines like polished metal. "
    "In the distance a church bell rings three times, and a dog barks somewhere in the village. "
    "A young woman in a blue coat walks along the harbor, holding a paper cup of coffee. "
    "Seagulls call over the water; the boats knock gently against the wooden pier. "
    "She stops, turns toward the camera and smiles, then looks out at the grey sea. "
    "Close-up of hands kneading bread on a floured table in a warm kitchen. "
    "The oven door opens with a metallic creak and steam drifts into the morning light. "
    "An old man plays a slow melody on an acoustic guitar while rain taps on the window. "
    "Children laugh and run through a field of yellow flowers under a bright summer sky. "
    "A train moves across a stone bridge at night, its windows glowing like a line of lanterns. "
    "The city street is wet after the storm; neon signs reflect in the puddles and cars pass by. "
    "Thunder rumbles far away, and the sound of traffic fills the background. "
    "A cat sleeps on a windowsill beside a green plant, its tail moving slightly in the sun. "
    "Waves crash against black rocks, throwing white spray high into the cold air. "
    "The drummer counts four beats and the band starts to play a fast, loud song. "
    "Slow motion shot of a hummingbird drinking from a red flower, its wings a blur. "
    "Two friends sit by a campfire in the forest, talking quietly as sparks rise into the dark. "
    "The narrator says: \"Every journey begins with a single step, and this one starts today.\" "
    "A chef slices onions quickly with a sharp knife; the blade clicks against the board. "
    "Wide aerial view of mountains covered in snow, with clouds moving over the peaks. "
    "A little girl blows out the candles on her birthday cake while her family sings. "
    "The crowd cheers as the runner crosses the finish line with both arms raised. "
    "Leaves fall from the old oak tree and the wind carries them along the empty road. "
    "A violin plays a sad note as the sun sets behind the hills and the sky turns purple. "
    "The robot raises its metal arm, its eyes glowing blue, and speaks in a calm voice. "
    "Rain begins to fall on the quiet lake, making thousands of small circles on the surface. "
    "He opens the letter, reads the first line, and his expression changes from doubt to joy. "
    "Bees buzz around the lavender in the garden while a clock ticks inside the house. "
    "The horse gallops along the beach at dawn, hooves splashing through the shallow water. "
    "Fireworks explode over the river in red, gold and green, and the people below applaud. "
    "A scientist looks through a microscope in a bright laboratory full of glass bottles. "
    "The old car engine starts with a cough, then settles into a steady, low hum. "
    "Snow covers the roofs of the small town and smoke rises from every chimney. "
    "She whispers: \"Listen, can you hear the ocean?\" and he shakes his head and laughs. "
    "Time-lapse of clouds racing across a blue sky above a field of golden wheat. "
    "The puppy chases a ball across the kitchen floor and slides into the cupboard door. "
    "A jazz trio performs in a dim club; the saxophone solo rises above the bass and drums. "
    "Morning fog lifts from the forest and birds begin to sing one after another. "
    "The astronaut floats inside the station, turning slowly as the Earth moves past the window. "
    "Water drips from the edge of the roof into a metal bucket with a clear ringing sound. "
    "Street musicians play accordion and violin while tourists walk past the fountain. "
    "A candle flickers on the table, and shadows dance across the old stone walls. "
    "Heavy boots crunch through the gravel as the soldier walks toward the gate at dusk. "
    "The children build a sandcastle and the tide slowly washes its towers away. "
    "In 1969 the first steps on the moon were watched by 600 million people around the world. "
    "At 7:30 the alarm rings; he groans, turns over and pulls the blanket over his head. "
    "The painter mixes blue and white on the palette, then adds a single stroke of light. "
    "A waterfall pours over the cliff into a deep green pool surrounded by ferns and moss. ";

// GPT-2's reversible byte -> printable code point map: printable Latin-1 bytes map to themselves,
// the rest to 256, 257, ... in byte order.
std::vector<uint32_t> byte_to_codepoint() {
  std::vector<uint32_t> map(256, 0);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable =
        (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map[b] = printable ? b : next++;
  }
  return map;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// ASCII approximation of the Qwen2 split regex, good enough to choose training words:
// contractions, [optional non-letter] + letters, single digits, [space] + punctuation, spaces.
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  auto is_letter = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    if (text[i] == '\'' && i + 1 < text.size() && is_letter(text[i + 1])) {
      i += 2;  // 's 't 'd 'm
    } else if (is_letter(text[i]) || (!is_digit(text[i]) && text[i] != '\n' &&
                                      i + 1 < text.size() && is_letter(text[i + 1]))) {
      ++i;
      while (i < text.size() && is_letter(text[i])) ++i;
    } else if (is_digit(text[i])) {
      ++i;
    } else if (is_space(text[i])) {
      ++i;
      while (i < text.size() && is_space(text[i]) &&
             !(i + 1 < text.size() && !is_space(text[i + 1])))
        ++i;
    } else {
      while (i < text.size() && !is_space(text[i]) && !is_letter(text[i]) && !is_digit(text[i]))
        ++i;
    }
    out.push_back(text.substr(start, i - start));
  }
  return out;
}

}  // namespace

std::string make_byte_level_bpe_tokenizer_json(int num_merges, int64_t added_base_id) {
  const std::vector<uint32_t> b2c = byte_to_codepoint();
  // Base vocabulary: the 256 byte characters in code-point order.
  std::vector<uint32_t> cps(b2c.begin(), b2c.end());
  std::sort(cps.begin(), cps.end());
  ordered_json vocab = ordered_json::object();
  std::set<std::string> known;
  for (uint32_t cp : cps) {
    vocab[utf8(cp)] = static_cast<int64_t>(vocab.size());
    known.insert(utf8(cp));
  }

  // Words as symbol sequences, with counts.
  std::map<std::string, int64_t> counts;
  for (const auto& w : split_words(kCorpus)) ++counts[w];
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, n] : counts) {
    std::vector<std::string> syms;
    for (unsigned char ch : w) syms.push_back(utf8(b2c[ch]));
    words.emplace_back(std::move(syms), n);
  }

  // Greedy BPE: merge the most frequent adjacent pair (ties: the smallest pair) until the
  // vocabulary holds 256 + num_merges tokens or every word is one token.
  ordered_json merges = ordered_json::array();
  const size_t target = 256 + static_cast<size_t>(std::max(0, num_merges));
  while (vocab.size() < target) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [syms, n] : words) {
      for (size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += n;
    }
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    const auto [a, b] = best->first;
    const std::string merged = a + b;
    merges.push_back({a, b});
    if (known.insert(merged).second) vocab[merged] = static_cast<int64_t>(vocab.size());
    for (auto& [syms, n] : words) {
      std::vector<std::string> next;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(syms[i]);
        }
      }
      syms = std::move(next);
    }
  }

  ordered_json added = ordered_json::array();
  const auto& names = qwen_added_tokens();
  for (size_t i = 0; i < names.size(); ++i) {
    ordered_json t;
    t["id"] = added_base_id + static_cast<int64_t>(i);
    t["content"] = names[i];
    t["single_word"] = false;
    t["lstrip"] = false;
    t["rstrip"] = false;
    t["normalized"] = false;
    t["special"] = i < kQwenSpecialCount;
    added.push_back(t);
  }
  ordered_json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  tok["normalizer"] = {{"type", "NFC"}};
  const char* split =
      R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
  ordered_json split_step;
  split_step["type"] = "Split";
  split_step["pattern"] = {{"Regex", split}};
  split_step["behavior"] = "Isolated";
  split_step["invert"] = false;
  ordered_json byte_step;
  byte_step["type"] = "ByteLevel";
  byte_step["add_prefix_space"] = false;
  byte_step["trim_offsets"] = true;
  byte_step["use_regex"] = false;
  ordered_json pre;
  pre["type"] = "Sequence";
  pre["pretokenizers"] = {split_step, byte_step};
  tok["pre_tokenizer"] = pre;
  ordered_json post;
  post["type"] = "ByteLevel";
  post["add_prefix_space"] = false;
  post["trim_offsets"] = false;
  post["use_regex"] = false;
  tok["post_processor"] = post;
  ordered_json dec;
  dec["type"] = "ByteLevel";
  dec["add_prefix_space"] = true;
  dec["trim_offsets"] = true;
  dec["use_regex"] = true;
  tok["decoder"] = dec;
  ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = "";
  model["end_of_word_suffix"] = "";
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  model["vocab"] = vocab;
  model["merges"] = merges;
  tok["model"] = model;
  return tok.dump(2, ' ', false);
}

const std::vector<std::string>& make_tiny_components() {
  static const std::vector<std::string> names = {
      "text_encoder",    "tokenizer", "processor",      "vae", "audio_vae", "transformer",
      "transformer_ref", "scheduler", "audio_scheduler"};
  return names;
}

json make_tiny_config(const std::string& component, bool released, uint64_t seed) {
  if (component == "transformer" || component == "transformer_ref")
    return transformer_config(released);
  if (component == "text_encoder") return text_encoder_config(released);
  if (component == "vae") return vae_config(released, seed);
  if (component == "audio_vae") return audio_vae_config(released, seed);
  if (component == "processor") return processor_config(released);
  if (component == "scheduler") return scheduler_config(12.0);
  if (component == "audio_scheduler") return scheduler_config(3.0);
  fail(ErrorCode::kInvalidArgument, "make-tiny: no config for component '", component, "'");
}

std::vector<int> plan_shards(const std::vector<uint64_t>& bytes, uint64_t max_shard) {
  std::vector<int> shard(bytes.size(), 0);
  int cur = 0;
  uint64_t size = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (size > 0 && size + bytes[i] > max_shard) {
      ++cur;
      size = 0;
    }
    shard[i] = cur;
    size += bytes[i];
  }
  return shard;
}

namespace {

struct ComponentInfo {
  const char* name;
  const char* library;
  const char* class_name;
};

const std::vector<ComponentInfo>& component_infos() {
  static const std::vector<ComponentInfo> v = {
      {"text_encoder", "transformers", "Qwen3VLForConditionalGeneration"},
      {"tokenizer", "transformers", "Qwen2TokenizerFast"},
      {"processor", "transformers", "Qwen3VLProcessor"},
      {"vae", "diffusers", "AutoencoderKLMiniMaxH3"},
      {"audio_vae", "diffusers", "AutoencoderKLMiniMaxH3Audio"},
      {"transformer", "diffusers", "MiniMaxH3Transformer3DModel"},
      {"transformer_ref", "diffusers", "MiniMaxH3Transformer3DModel"},
      {"scheduler", "diffusers", "MiniMaxH3Scheduler"},
      {"audio_scheduler", "diffusers", "MiniMaxH3Scheduler"}};
  return v;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  H3_CHECK(out.good(), ErrorCode::kIo, path.string(), ": cannot open for writing");
  out << text;
  out.close();
  H3_CHECK(!out.fail(), ErrorCode::kIo, path.string(), ": write failed");
}

void write_json(const fs::path& path, const json& j) { write_text(path, j.dump(2) + "\n"); }

void make_dir(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  H3_CHECK(!ec, ErrorCode::kIo, p.string(), ": cannot create folder (", ec.message(), ")");
}

Schema schema_of(const std::string& component, const json& config) {
  if (component == "text_encoder") return qwen3_vl_schema(config);
  if (component == "vae") return video_vae_schema(config);
  if (component == "audio_vae") return audio_vae_schema(config);
  return dit_schema(config);
}

void write_weights(const fs::path& folder, const std::string& component, const json& config,
                   const MakeTinyOptions& opt) {
  const Schema schema = schema_of(component, config);
  const std::string stem = component == "text_encoder" ? "model" : "diffusion_pytorch_model";
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  std::vector<const TensorSpec*> specs;
  // The only optional tensors are the FastH3 gates of the main blocks (dit_schema.cpp).
  const bool with_gates = opt.fasth3 && component == "transformer";
  for (const auto& t : schema.tensors) {
    if (!t.optional || with_gates) specs.push_back(&t);
  }
  if (!opt.released_shapes) {
    std::vector<io::NamedTensor> tensors;
    for (const TensorSpec* t : specs) {
      std::vector<float> v = init_values(*t, opt.seed, component);
      if (component == "text_encoder" && opt.text_context_scale != 1.0f &&
          t->name.find(".self_attn.o_proj.weight") != std::string::npos)
        for (float& x : v) x *= opt.text_context_scale;
      tensors.push_back({t->name, Tensor::from_f32(v, t->shape, t->dtype)});
    }
    io::write_safetensors((folder / (stem + ".safetensors")).string(), tensors, meta);
    return;
  }
  std::vector<uint64_t> bytes;
  uint64_t total = 0;
  for (const TensorSpec* t : specs) {
    bytes.push_back(t->nbytes());
    total += t->nbytes();
  }
  const std::vector<int> shard = plan_shards(bytes, kReleasedShardBytes);
  const int n = specs.empty() ? 0 : shard.back() + 1;
  if (n <= 1) {
    std::vector<io::TensorInfo> infos;
    for (const TensorSpec* t : specs)
      infos.push_back({t->name, t->dtype, t->shape, 0, t->nbytes()});
    io::write_safetensors_sparse((folder / (stem + ".safetensors")).string(), infos, meta);
    return;
  }
  json weight_map = json::object();
  for (int s = 0; s < n; ++s) {
    char name[128];
    std::snprintf(name, sizeof(name), "%s-%05d-of-%05d.safetensors", stem.c_str(), s + 1, n);
    std::vector<io::TensorInfo> infos;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (shard[i] != s) continue;
      infos.push_back({specs[i]->name, specs[i]->dtype, specs[i]->shape, 0, specs[i]->nbytes()});
      weight_map[specs[i]->name] = name;
    }
    io::write_safetensors_sparse((folder / name).string(), infos, meta);
  }
  json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = weight_map;
  write_json(folder / (stem + ".safetensors.index.json"), index);
}

// Replaces make-tiny's random transformer/, vae/ and audio_vae/ under `root` by the trained parts
// in `parts`. The part's own files are checked (not only the copies) so that an error names what
// the user can fix.
void install_trained_parts(const fs::path& root, const fs::path& parts) {
  static constexpr std::pair<const char*, const char*> kParts[] = {
      {"dit", "transformer"}, {"vae", "vae"}, {"audio_vae", "audio_vae"}};
  std::error_code ec;
  H3_CHECK(fs::is_directory(parts, ec), ErrorCode::kNotFound, parts.string(),
           ": no such folder of trained parts (expected dit/, vae/ and audio_vae/, as "
           "tools/train_tiny/parts holds them)");
  for (const auto& [part, component] : kParts) {
    const fs::path dir = parts / part;
    const fs::path weights = dir / "model.safetensors";
    const fs::path config_file = dir / "config.json";
    for (const fs::path& f : {config_file, weights})
      H3_CHECK(fs::is_regular_file(f, ec), ErrorCode::kNotFound, f.string(),
               ": missing (a trained part is a folder with config.json and model.safetensors)");
    const json config = io::read_json_file(config_file.string());
    const Schema schema = [&] {
      try {
        return schema_of(component, config);
      } catch (const Error& e) {
        fail(e.code(), config_file.string(), ": not a ", component, " config: ", e.message());
      }
    }();
    const io::Checkpoint trained = io::Checkpoint::open(weights.string());
    const SchemaCheck check = check_schema(schema, trained);
    if (!check.ok()) {
      std::string why;
      for (const std::string& e : check.errors()) why += "\n  " + e;
      fail(ErrorCode::kInvalidArgument, weights.string(), ": does not match ", config_file.string(),
           why);
    }
    // The schema holds the release's dtypes (bf16 with float32 islands, float32 VAEs): the engine
    // would load another float dtype, but what ships must be what the release stores.
    for (const TensorMismatch& m : check.dtype_warnings)
      fail(ErrorCode::kInvalidArgument, weights.string(), ": tensor '", m.name, "' is ",
           dtype_name(m.actual_dtype), "; the release stores it as ", dtype_name(m.expected_dtype));
    const fs::path folder = root / component;
    const fs::path target = folder / "diffusion_pytorch_model.safetensors";
    fs::copy_file(weights, target, fs::copy_options::overwrite_existing, ec);
    H3_CHECK(!ec, ErrorCode::kIo, target.string(), ": cannot copy ", weights.string(), " (",
             ec.message(), ")");
    write_json(folder / "config.json", config);
  }
}

void write_repository(const fs::path& root, const std::string& repo_name,
                      const MakeTinyOptions& opt) {
  const bool released = opt.released_shapes;
  ordered_json index;
  index["_class_name"] = "MiniMaxH3ModularPipeline";
  index["_diffusers_version"] = kDiffusersVersion;
  index["_blocks_class_name"] = "MiniMaxH3Blocks";
  for (const auto& c : component_infos()) {
    ordered_json spec;
    spec["type_hint"] = {c.library, c.class_name};
    spec["pretrained_model_name_or_path"] = repo_name;
    spec["subfolder"] = c.name;
    spec["variant"] = nullptr;
    spec["revision"] = nullptr;
    index[c.name] = {c.library, c.class_name, spec};
  }
  // Pipeline canvas settings: released values, or the golden tiny-h3's shrunk ones.
  index["canvas_short_edge"] = released ? 768 : 64;
  index["canvas_max_pixels"] = released ? 768 * 1344 : 8192;
  index["reference_image_short_edge"] = released ? 2048 : 64;
  if (opt.default_height > 0) {
    index["default_height"] = opt.default_height;
    index["default_width"] = opt.default_width;
    index["default_num_frames"] = opt.default_num_frames;
  }
  write_text(root / "modular_model_index.json", index.dump(2) + "\n");

  const std::string tokenizer = make_byte_level_bpe_tokenizer_json(
      kTinyBpeVocab - 256, released ? kQwenAddedBase : kTinyBpeVocab);
  for (const auto& c : component_infos()) {
    const std::string name = c.name;
    const fs::path folder = root / name;
    make_dir(folder);
    if (name == "tokenizer" || name == "processor") {
      write_text(folder / "tokenizer.json", tokenizer + "\n");
      write_json(folder / "tokenizer_config.json", tokenizer_config(name == "processor"));
      write_text(folder / "chat_template.jinja", kChatTemplate);
      if (name == "processor")
        write_json(folder / "processor_config.json", processor_config(released));
      continue;
    }
    json config = make_tiny_config(name, released, opt.seed);
    if (name == "vae" && opt.vae_spatial_ratio > 0) {
      // Factors of 2 in the first stages, 1 after: log2(ratio) halvings.
      json f = json::array();
      for (int64_t i = 0, r = opt.vae_spatial_ratio; i < 6; ++i, r /= 2) f.push_back(r > 1 ? 2 : 1);
      config["spatial_downsample_factors"] = f;
      // A stage that halves time must halve space too (its strided convolution pads space only
      // for a spatial stride of 2), so with two spatial halvings the two temporal ones move onto
      // them.
      if (opt.vae_spatial_ratio == 4) config["temporal_downsample_factors"] = {2, 2, 1, 1, 1, 1};
    }
    if (opt.vae_latent_channels > 0) {
      const int64_t n = opt.vae_latent_channels;
      if (name == "vae") {
        config["latent_channels"] = n;
        config["latents_mean"] = latents_stats(opt.seed, "vae/latents_mean", n, true, released);
        config["latents_std"] = latents_stats(opt.seed, "vae/latents_std", n, false, released);
      } else if (name == "transformer" || name == "transformer_ref") {
        config["in_channels"] = n;
      }
    }
    if (name == "scheduler" || name == "audio_scheduler") {
      write_json(folder / "scheduler_config.json", config);
      continue;
    }
    write_json(folder / "config.json", config);
    if (name == "text_encoder") {
      json gen;
      gen["_from_model_config"] = true;
      gen["bos_token_id"] = config["text_config"]["bos_token_id"];
      gen["eos_token_id"] = config["text_config"]["eos_token_id"];
      gen["transformers_version"] = kTransformersVersion;
      gen["use_cache"] = true;
      write_json(folder / "generation_config.json", gen);
    }
    write_weights(folder, name, config, opt);
  }
  if (!opt.trained_parts.empty()) install_trained_parts(root, opt.trained_parts);
}

}  // namespace

void make_tiny(const std::string& dir, const MakeTinyOptions& opt) {
  H3_CHECK(!dir.empty(), ErrorCode::kInvalidArgument, "make-tiny: empty output folder");
  const int64_t r = opt.vae_spatial_ratio;
  H3_CHECK(r == 0 || r == 4 || r == 8 || r == 16, ErrorCode::kInvalidArgument,
           "make-tiny: the VAE's spatial ratio must be 4, 8 or 16, got ", r);
  H3_CHECK(r == 0 || !opt.released_shapes, ErrorCode::kInvalidArgument,
           "make-tiny: a VAE spatial ratio is for tiny repositories, not --released-shapes");
  const int64_t lc = opt.vae_latent_channels;
  H3_CHECK(lc >= 0 && lc <= 256, ErrorCode::kInvalidArgument,
           "make-tiny: the VAE's latent channels must be in [1, 256], got ", lc);
  H3_CHECK(lc == 0 || !opt.released_shapes, ErrorCode::kInvalidArgument,
           "make-tiny: VAE latent channels are for tiny repositories, not --released-shapes");
  H3_CHECK(opt.text_context_scale >= 0.0f && opt.text_context_scale <= 1.0f,
           ErrorCode::kInvalidArgument, "make-tiny: the text context scale must be in [0, 1], got ",
           opt.text_context_scale);
  H3_CHECK(opt.text_context_scale == 1.0f || !opt.released_shapes, ErrorCode::kInvalidArgument,
           "make-tiny: a text context scale is for tiny repositories, not --released-shapes");
  H3_CHECK(opt.trained_parts.empty() || !opt.released_shapes, ErrorCode::kInvalidArgument,
           "make-tiny: trained parts are for tiny repositories, not --released-shapes");
  H3_CHECK((opt.default_height > 0) == (opt.default_width > 0) &&
               (opt.default_height > 0) == (opt.default_num_frames > 0) &&
               opt.default_height >= 0 && opt.default_width >= 0 && opt.default_num_frames >= 0,
           ErrorCode::kInvalidArgument,
           "make-tiny: a default request needs a positive height, width and frame count, got ",
           opt.default_height, " x ", opt.default_width, " x ", opt.default_num_frames);
  std::error_code ec;
  fs::path target = fs::absolute(dir, ec).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // trailing slash
  bool replace = false;
  if (fs::exists(target, ec) && !(fs::is_directory(target, ec) && fs::is_empty(target, ec))) {
    H3_CHECK(opt.force, ErrorCode::kInvalidArgument, target.string(),
             ": already exists and is not an empty folder (pass --force to replace a previous "
             "make-tiny repository)");
    H3_CHECK(fs::is_regular_file(target / "modular_model_index.json", ec),
             ErrorCode::kInvalidArgument, target.string(),
             ": --force replaces only a MiniMax-H3 repository, and this folder has no "
             "modular_model_index.json");
    replace = true;
  }
  // Parent folders are made as `mkdir -p` would (the README writes models/h3-tiny in a fresh
  // checkout); a parent that cannot be made, or is a file, is an error naming it.
  const fs::path parent = target.parent_path();
  fs::create_directories(parent, ec);
  H3_CHECK(fs::is_directory(parent, ec), ErrorCode::kNotFound, parent.string(),
           ": cannot make the parent folder (", ec ? ec.message() : std::string("not a folder"),
           ")");
  std::string tmp_name = ".";
  tmp_name += target.filename().string();
  tmp_name += ".tmp-";
  tmp_name += std::to_string(::getpid());
  const fs::path tmp = parent / tmp_name;
  fs::remove_all(tmp, ec);
  try {
    make_dir(tmp);
    write_repository(tmp, target.filename().string(), opt);
    // The old folder goes only once the new repository is complete.
    if (replace) {
      fs::remove_all(target, ec);
    } else if (fs::exists(target, ec)) {
      fs::remove(target, ec);  // the empty folder checked above
    }
    fs::rename(tmp, target, ec);
    H3_CHECK(!ec, ErrorCode::kIo, target.string(),
             ": cannot move the finished repository into "
             "place (",
             ec.message(), ")");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace h3::models
