// make-tiny: writes a MiniMax-H3 repository in the released layout (all nine components, the
// diffusers index, configs, tokenizer, processor) with deterministic random weights.
//
// Two sizes:
//  - tiny: the dimensions of the golden tiny-h3 checkpoint (see its config.json files), real data,
//    a few MB. Weights come from a seeded generator keyed by (seed, tensor name): matrices
//    N(0, 1/sqrt(fan_in)), norm weights 1 + 0.1 N, biases 0.02 N, weight-norm gains U(0.5, 1.5),
//    LayerScales about 0.5, the audio anti-aliasing filters as the release computes them; dtypes as
//    the release stores them (bf16 DiT with fp32 islands, bf16 text encoder, fp32 VAEs).
//  - released shapes: the full-size configs of the specs (h3_dit_spec.md §1.2,
//  h3_components_spec.md
//    §1.2, §2.1, §3.1), exact headers over sparse data (holes), sharded like the release (5 GB
//    shards `<stem>-0000i-of-0000N.safetensors` + `<stem>.safetensors.index.json`): ~133 GB of
//    logical size, a few MB on disk.
//
// Everything is written into a temporary sibling folder renamed onto `dir` at the end, so `dir`
// either does not exist or holds a complete repository.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3::models {

struct MakeTinyOptions {
  uint64_t seed = 0;
  bool released_shapes = false;
  // Also write the FastH3 student's VSA gates (`attn.to_gate_compress` of every main block of
  // transformer/), so that the engine runs the repository as FastH3 with gates.
  bool fasth3 = false;
  // Replace an existing folder, but only one that holds a MiniMax-H3 repository (it has a
  // modular_model_index.json), so a typo cannot wipe an unrelated folder.
  bool force = false;
  // The video VAE's spatial compression: 0 keeps the release's 16; 8 drops the fourth stage's
  // halving (its factors become 2, 2, 2, 1, 1, 1: the temporal strides stay on halving stages, as
  // the engine requires); 4 keeps two halvings and moves both temporal strides onto them (2, 2,
  // 1, 1, 1, 1 for both). The reference builds the same VAE from these config fields; the canvas
  // multiple becomes 2 x the ratio. Tiny only.
  int64_t vae_spatial_ratio = 0;
  // The video VAE's latent channels: 0 keeps the release's 24. The DiT's (and the reference DiT's)
  // in_channels follow, as the reference pairs them. Tiny only.
  int64_t vae_latent_channels = 0;
  // Multiplies the conditioner's attention output projections (every language-model layer's
  // `self_attn.o_proj.weight`). Fifty random causal attention layers mix each text row with the
  // rows before it until context outweighs the token itself (a word's row is closer to another
  // word's in the same prompt than to its own in another prompt); a trained text encoder keeps a
  // word's features mostly its own. 0 makes every row a function of its own token. The trained
  // tiny model is built on such a conditioner. Tiny only; 1 keeps the random weights as they are.
  float text_context_scale = 1.0f;
  // Trained weights in place of the random ones (tools/train_tiny/parts): a folder whose `dit/`,
  // `vae/` and `audio_vae/` each hold `config.json` and `model.safetensors`. transformer/, vae/
  // and audio_vae/ take those files as they are, once they pass the checks the engine makes at
  // load (every tensor the part's config implies, in its shape) and hold each tensor in the dtype
  // make-tiny writes for it; the other components stay make-tiny's, so the options above must be
  // those the parts were trained on (the text encoder their prompt features came from). Tiny only.
  std::string trained_parts{};
  // The request the index declares as the checkpoint's own (`default_height`, `default_width`,
  // `default_num_frames`, read by the pipeline when a request names none), written when positive:
  // the geometry the trained model learnt.
  int64_t default_height = 0;
  int64_t default_width = 0;
  int64_t default_num_frames = 0;
};

// `dir` must not exist or be an empty folder. Throws h3::Error naming the path on failure (and
// leaves nothing behind).
void make_tiny(const std::string& dir, const MakeTinyOptions& options = {});

// The config.json (scheduler_config.json, processor_config.json) each component gets. `component`
// is an index name: transformer, transformer_ref, text_encoder, vae, audio_vae, scheduler,
// audio_scheduler, processor. Tiny VAE latent statistics depend on `seed`.
nlohmann::json make_tiny_config(const std::string& component, bool released_shapes,
                                uint64_t seed = 0);

// The nine component names in the order they are written.
const std::vector<std::string>& make_tiny_components();

// A Hugging Face `tokenizer.json` for a byte-level BPE: 256 byte tokens (ids in code-point order of
// their byte-level characters), up to `num_merges` merges learned from a small built-in English
// text, then Qwen's 26 added tokens at ids `added_base_id`.. (Qwen order: <|endoftext|>,
// <|im_start|>, <|im_end|>, ...), the Qwen2 split regex, NFC normalizer and ByteLevel decoder.
std::string make_byte_level_bpe_tokenizer_json(int num_merges, int64_t added_base_id);

// The shard plan of the released layout: tensors are packed in order into shards of at most
// `max_shard_bytes` (a tensor larger than that gets a shard of its own). Returns, per tensor,
// the shard index.
std::vector<int> plan_shards(const std::vector<uint64_t>& tensor_bytes, uint64_t max_shard_bytes);

}  // namespace h3::models
