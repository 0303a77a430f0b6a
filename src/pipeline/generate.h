// Video+audio generation end to end for the three workflows (h3_components_spec.md §4.1-4.7,
// h3_dit_spec.md §3-4; golden README "Pipeline facts" 1-9 and "Reference media"):
//
//   t2va:   text only.
//   fl2va:  a first and/or last keyframe (the image at index 0 stretched onto the canvas, a second
//           one cover-cropped), each a condition frame of the target.
//   ref2va: ordered image / video / audio references on the transformer_ref/ partition.
//
//   media preparation (CPU, before any weight) -> presentation -> conditioner (with vision)
//   -> release conditioner -> VAE encodes of the conditions (seed-42 posterior, fp16 round trip)
//   -> draws (condition noise, video noise, audio rows; one generator, reference order)
//   -> DiT denoise loop (condition rows noised once and held, reference audio clean, only
//   generated rows written) -> unpack -> video VAE decode -> audio VAE decode.
//
// A generation runs as four named stages (class Generation): prepare (request contract, canvas,
// media; no weight read), encode (conditioner, condition encodes, packing, draws), denoise (the
// DiT step loop) and decode (audio and video VAEs, frames streamed to a sink such as the MP4
// muxer). `h3 generate`, `h3 bench e2e` and a server all drive this one path; hooks in
// GenerateOptions report progress and per-step previews and cancel at stage and step boundaries.
//
// Components come from an Engine (loaded on demand, released per its memory plan), so a second
// generation in one process reuses or reloads them. Each stage is timed in a Receipt (top-level
// entries "prepare", "encode", "denoise", "decode", with component loads as "load <name>"
// entries: the conditioner's inside "encode", the transformer's and the VAEs' just before the
// stage that needs them). Tests can inject the prompt embeddings and the random draws to check
// every stage against the golden run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/receipt.h"
#include "core/tensor.h"
#include "media/image_io.h"
#include "pipeline/geometry.h"
#include "pipeline/packing.h"

namespace h3::io {
class Repository;
}

namespace h3::pipeline {

class Engine;

// A repository's canvas settings: the canvas_* entries of its index (the release's where absent)
// and the canvas multiple its VAE's spatial ratio implies (canvas_config_for_vae).
CanvasConfig repository_canvas_config(const io::Repository& repo);

// A waveform at its own rate: [channels, samples] float (1 or 2 channels).
struct AudioClip {
  Tensor waveform;
  int64_t sample_rate = 0;
};

// Decoded video frames at their own rate, optionally with a soundtrack.
struct VideoClip {
  std::vector<media::RgbImage> frames;  // equal sizes
  double fps = 24.0;
  std::optional<AudioClip> soundtrack;
};

// One Ref2VA reference, in request order.
struct Reference {
  ReferenceKind kind = ReferenceKind::kImage;
  media::RgbImage image;  // kImage
  VideoClip video;        // kVideo
  AudioClip audio;        // kAudio
  static Reference from_image(media::RgbImage image);
  static Reference from_video(VideoClip video);
  static Reference from_audio(AudioClip audio);
};

struct GenerateRequest {
  std::string workflow;  // "t2va", "fl2va", "ref2va"; empty: inferred from the media given
  std::string prompt;
  std::optional<int64_t> height;     // both or neither; default: 16:9 (t2va, ref2va) or the aspect
  std::optional<int64_t> width;      // of the first keyframe (fl2va)
  int64_t num_frames = 124;          // snapped up to 17n + 5 (§4.3)
  int64_t num_inference_steps = 50;  // sigma-grid points (N points = N - 1 model calls, §4.2)
  uint64_t seed = 0;
  bool allow_any_duration = false;  // skip the 5-15 s check (tiny canvases use 22 frames)
  // fl2va keyframes (at least one).
  std::optional<media::RgbImage> first_image;
  std::optional<media::RgbImage> last_image;
  // ref2va references in order (1..12; at most 9 images, 3 videos, 3 audios; not audio only).
  std::vector<Reference> references;
};

// What a request leaves open, from its workflow and the checkpoint (§4.2-§4.3): 124 frames (192
// for fl2va) and the canvas of the canvas settings. A checkpoint trained at one geometry declares
// its own in its index (`default_num_frames`, `default_height` and `default_width`: the trained
// tiny model's 64x128x39); its length is the checkpoint's, so the released 5-15 s check does not
// apply to it.
struct RequestDefaults {
  int64_t num_frames = 124;
  bool frames_from_checkpoint = false;
  std::optional<int64_t> height, width;  // both or neither
};
RequestDefaults request_defaults(const io::Repository& repo, const std::string& workflow);
// Fills what `request` leaves open (the caller says whether frames were given: num_frames always
// holds a value) from request_defaults.
void apply_request_defaults(const io::Repository& repo, bool frames_given,
                            GenerateRequest& request);

// The workflow a request names or, when empty, the one its media imply (references -> ref2va,
// keyframes -> fl2va, neither -> t2va). Throws kInvalidArgument for media the workflow does not
// take (keyframes with references, references in fl2va, ...) and for an unknown name.
std::string resolve_workflow(const GenerateRequest& request);

// Values a test may inject instead of computing them (golden parity of each stage).
struct GenerateInjection {
  Tensor prompt_embeds;            // [L, text_dim] or [1, L, text_dim]: skips the conditioner
  std::vector<int64_t> input_ids;  // with prompt_embeds: the ids; required for fl2va / ref2va
  std::vector<int64_t> text_tags;  // with prompt_embeds: per-token tags (default: from the media)
  // Per visual condition (packed order), the clean normalized latent [1, 24, T, h, w]: replaces
  // its VAE encode (whose float16 rounding of the posterior sample can flip an ulp, see
  // tests/golden/test_e2e_common.h).
  std::vector<Tensor> condition_latents;
  std::vector<Tensor> condition_noise;  // per visual condition, its latent's shape
  // Per audio-bearing reference (packed order), its rows [2N, 32]: replaces the audio VAE encode.
  std::vector<Tensor> audio_condition_rows;
  Tensor video_noise;       // [1, 24, T, h, w] float32: replaces the video draw
  Tensor audio_noise_rows;  // [2N, 32] float32: replaces the audio draw
};

struct GenerateOptions {
  const GenerateInjection* inject = nullptr;
  // Called after every denoising step with the step index, all video rows (condition rows first,
  // CPU float32 [N_vrows, 96]), all audio rows ([N_arows, 32], reference rows first) and the
  // video model output of that step (every video row).
  std::function<void(int64_t step, const Tensor& video_rows, const Tensor& audio_rows,
                     const Tensor& noise_pred)>
      on_step;
  // Called when a stage starts ("prepare", "encode prompt", "encode conditions", "denoise",
  // "decode video", "decode audio") and after every step, for progress displays.
  std::function<void(const std::string& stage, int64_t step, int64_t steps)> on_progress;
  // Called after every denoising step with the step's prediction of the clean video latents,
  // x0 = x + (1 - t) v, normalized, CPU float32 [1, 24, T, h, w] (generated rows only): what a
  // preview shows. Costs a host pass over the latents, so only computed when set.
  std::function<void(int64_t step, int64_t steps, const Tensor& predicted_latents)> on_preview;
  // Polled at every stage boundary and before every denoising step; returning true stops the
  // generation with ErrorCode::kCancelled (no output is produced; loaded components stay).
  std::function<bool()> cancelled;
  // Streaming output (both set, or neither): the audio is decoded first and handed to on_audio
  // with the output geometry (float32 [2, S] on the CPU), then the video is decoded window by window and every run of
  // finished frames goes to on_frames (uint8 [n, H, W, 3] on the CPU, in order, starting at
  // first_frame) while later windows still decode, so a muxer can encode as the decoder goes. The
  // frames are the same bytes as the whole decode's. result.frames and frames_float are filled
  // only with keep_frames.
  std::function<void(const TargetGeometry& geometry, const Tensor& audio)> on_audio;
  std::function<void(int64_t first_frame, const Tensor& frames)> on_frames;
  bool keep_frames = true;
};

struct GenerateResult {
  std::string workflow;
  TargetGeometry geometry;
  std::string frames_note;                // non-empty when num_frames was snapped
  std::vector<int64_t> input_ids;         // the presented prompt
  Tensor prompt_embeds;                   // [L, text_dim] float32
  std::vector<Tensor> condition_latents;  // per visual condition: clean normalized latent
  Tensor condition_rows;        // [N_cond_vrows, 96] noised condition rows (may be undefined)
  Tensor audio_condition_rows;  // [N_cond_arows, 32] clean reference rows (may be undefined)
  Tensor latents;               // [1, 24, T, h, w] normalized, float32
  Tensor audio_latents;         // [2, 32, N] normalized, float32
  Tensor frames_float;          // [F, H, W, 3] in [0, 1], float32
  Tensor frames;                // [F, H, W, 3] uint8
  Tensor audio;                 // [2, S] float32 in [-1, 1] at 32 kHz
};

// One generation, stage by stage. Each stage must follow the previous one (kInternal otherwise);
// a stage that throws leaves the generation unusable, the engine usable.
class Generation {
 public:
  static constexpr int kNumStages = 4;
  // "prepare", "encode", "denoise", "decode".
  static const char* stage_name(int index);

  // The engine, request, options and receipt must outlive the Generation.
  Generation(Engine& engine, const GenerateRequest& request, const GenerateOptions& options,
             Receipt* receipt = nullptr);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // The request contract, canvas and frame count, media preparation: host work, no weight read.
  void prepare();
  // Prompt through the conditioner (or injected embeddings), VAE encodes of the conditions, the
  // packed layout and the random draws in the reference's order.
  void encode();
  // The DiT step loop (progress, previews, cancellation at step boundaries); fills the latents.
  void denoise();
  // Audio then video decode; frames to on_audio/on_frames when streaming, else into the result.
  void decode();
  // The four stages in order.
  GenerateResult run();

  int stages_done() const;
  const GenerateResult& result() const;
  GenerateResult take_result();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Runs one generation with the engine's components (Generation::run). Throws h3::Error for bad requests (unknown
// workflow, media the workflow does not take, impossible canvas or frame count, fewer than 2
// steps, empty prompt, unusable media) before any weight is loaded, and for a repository without
// a component the workflow needs.
GenerateResult generate(Engine& engine, const GenerateRequest& request,
                        const GenerateOptions& options, Receipt* receipt = nullptr);

// One generation on a fresh CPU/`device` engine over `model_dir` (tests and simple callers).
GenerateResult generate_t2va(const std::string& model_dir, const GenerateRequest& request,
                             const GenerateOptions& options, Receipt* receipt = nullptr,
                             Device device = Device::cpu());

}  // namespace h3::pipeline
