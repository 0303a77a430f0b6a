// Prompt presentation: the token sequence the Qwen3-VL conditioner reads for a request
// (components spec §1.3; golden README "Pipeline facts" 1).
//
//   t2va    tok(prompt)
//   fl2va   per keyframe i = 1..k: tok("<Picture i>: ") + vision(<|image_pad|> x t*h*w/merge^2);
//           then tok(prompt)
//   ref2va  per reference in request order: an audio-bearing one (audio, or a video with its
//           soundtrack) first emits tok("<Audio a>: "); an image tok("<Picture p>: ") + vision block;
//           a video tok("<Video v>: ") and, per temporal block j, tok("<{t_j:.1f} seconds>") +
//           vision(<|video_pad|> x h*w/merge^2); the prompt last. Counters are 1-based, per modality.
//
// vision(pad, n) = <|vision_start|> pad x n <|vision_end|>. Every piece is tokenized on its own
// (no special tokens, no chat template) and the ids are concatenated, so "<Picture 1>: " ends in
// its own space token and never merges with what follows. Tags (`text_token_tags`): text 1, every
// token of a vision block 0. `mm_token_type_ids`: 0 text (including vision start/end), 1 image pad,
// 2 video pad. The prompt is used as given; stripping surrounding whitespace belongs to the request
// layer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace h3::text {

enum class Workflow { kT2VA, kFL2VA, kRef2VA };

// Qwen processor grid (grid_t, grid_h, grid_w) in 16-px patches, before the 2x2 merge.
struct VisionGrid {
  int64_t t = 0;
  int64_t h = 0;
  int64_t w = 0;
};

enum class MediaKind { kImage, kVideo, kAudio };

// One keyframe (fl2va) or reference (ref2va) as the presentation sees it.
struct PresentedMedia {
  MediaKind kind = MediaKind::kImage;
  VisionGrid grid;                       // image and video
  std::vector<double> block_timestamps;  // video: one per temporal block (grid.t values), seconds
  bool has_soundtrack = false;           // video: it carries audio and gets an "<Audio a>: " label

  static PresentedMedia image(VisionGrid grid);
  static PresentedMedia video(VisionGrid grid, std::vector<double> block_timestamps, bool has_soundtrack);
  static PresentedMedia audio();
};

// Modality tags and Qwen token types (spec §1.3 / §1.6).
inline constexpr int64_t kTagVideo = 0;
inline constexpr int64_t kTagText = 1;
inline constexpr int64_t kTokenTypeText = 0;
inline constexpr int64_t kTokenTypeImage = 1;
inline constexpr int64_t kTokenTypeVideo = 2;

struct Presentation {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> text_token_tags;
  std::vector<int64_t> mm_token_type_ids;
  size_t size() const { return input_ids.size(); }
};

// The ids of the vision tokens, looked up by string (spec §1.3).
struct VisionTokenIds {
  int32_t vision_start = 0;
  int32_t vision_end = 0;
  int32_t image_pad = 0;
  int32_t video_pad = 0;
  static VisionTokenIds from(const Tokenizer& tokenizer);  // throws kNotFound naming a missing token
};

// Python's "%.1f" of a timestamp inside "<... seconds>": the binary value rounded correctly to one
// decimal, ties to even (0.25 -> "<0.2 seconds>", 1.25 -> "<1.2 seconds>", 0.35 -> "<0.3 seconds>"
// because 0.35 is stored slightly below). Throws kInvalidArgument for non-finite or negative values.
std::string format_block_timestamp(double seconds);

class PromptPresenter {
 public:
  // `merge_size` is the Qwen processor's spatial merge (processor config `merge_size`, 2).
  explicit PromptPresenter(Tokenizer tokenizer, int64_t merge_size = 2);

  // Throws kInvalidArgument for a request the grammar does not allow (media in t2va, other than 1
  // or 2 images in fl2va, audio outside ref2va, grids not divisible by the merge, a video whose
  // timestamp count differs from grid_t, invalid UTF-8 in the prompt).
  Presentation present(Workflow workflow, std::string_view prompt,
                       const std::vector<PresentedMedia>& media) const;

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const VisionTokenIds& vision_ids() const { return ids_; }
  int64_t merge_size() const { return merge_size_; }

 private:
  void append_text(Presentation* out, std::string_view text) const;
  void append_vision(Presentation* out, int32_t pad, int64_t token_type, int64_t count) const;

  Tokenizer tokenizer_;
  VisionTokenIds ids_;
  int64_t merge_size_;
};

}  // namespace h3::text
