// Qwen3-VL image / video preprocessing (h3_components_spec.md §1.4): smart_resize sizing,
// rescale and normalize, temporal patching and merge-block-major patch flattening, producing the
// vision tower's pixel values [patches, C*tp*p*p] and the (t, h, w) patch grid.
//
// An input whose smart_resize size differs from its own is resized first with the bicubic
// antialiased uint8 resize of the reference processors (media/bicubic_resize.h). H3 normally
// hands the processor inputs that are already valid (keyframes at the canvas size, references
// resized to multiples of 32, golden README); the golden data does not cover the processors' own
// resizes (golden README "Not covered"), the unit tests do.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"
#include "models/qwen3_vl/qwen3_vl_config.h"
#include "models/qwen3_vl/qwen3_vl_positions.h"

namespace h3::media {

struct QwenProcessorConfig {
  int64_t patch_size = 16;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  int64_t min_pixels = 65536;     // size.shortest_edge
  int64_t max_pixels = 16777216;  // size.longest_edge
  double rescale_factor = 1.0 / 255.0;
  std::array<double, 3> mean{0.5, 0.5, 0.5};
  std::array<double, 3> std{0.5, 0.5, 0.5};
  // `section` is "image_processor" or "video_processor" of processor_config.json, or "" for a
  // file that holds one processor's fields at the top level (preprocessor_config.json,
  // video_preprocessor_config.json). Missing fields, wrong types, non-positive sizes,
  // shortest_edge > longest_edge, std <= 0 and a resample other than bicubic (3) are refused
  // with kInvalidFile naming the file and field.
  static QwenProcessorConfig from_json(const nlohmann::json& j, const std::string& section,
                                       const std::string& file);
};

// The processor's patch_size, temporal_patch_size and merge_size must equal the vision tower's
// (patch_size, temporal_patch_size, spatial_merge_size of text_encoder/config.json), otherwise
// the pixel values would not fit the patch embedding: kInvalidFile naming `file`.
void check_processor_matches_vision(const QwenProcessorConfig& processor,
                                    const qwen3_vl::VisionConfig& vision,
                                    const std::string& file, const std::string& section);

// Qwen smart_resize: (height, width) rounded to multiples of `factor`, scaled into
// [min_pixels, max_pixels]. Throws kInvalidArgument for sizes below `factor` or aspect > 200.
std::array<int64_t, 2> qwen_smart_resize(int64_t height, int64_t width, int64_t factor,
                                         int64_t min_pixels, int64_t max_pixels);

// Qwen3-VL video smart_resize: as the image one, but the budget counts every frame, with the
// frame count rounded up to a multiple of `temporal_factor` (transformers 5.x
// video_processing_qwen3_vl.smart_resize).
std::array<int64_t, 2> qwen_smart_resize_video(int64_t num_frames, int64_t height, int64_t width,
                                               int64_t temporal_factor, int64_t factor,
                                               int64_t min_pixels, int64_t max_pixels);

struct QwenPixels {
  Tensor pixel_values;  // float32 [grid_t*grid_h*grid_w, C*tp*p*p]
  qwen3_vl::GridThw grid;
};

// One image, uint8 [H, W, 3]: resized to its smart_resize size when needed, repeated to
// temporal_patch_size frames (grid_t = 1).
QwenPixels qwen_process_image(const Tensor& hwc_uint8, const QwenProcessorConfig& config);
// One video, uint8 [T, H, W, 3]: every frame resized to the video smart_resize size when needed,
// then padded to a multiple of temporal_patch_size by repeating the last frame. (The pixel
// budget of the video processor applies to T*H*W, §1.4.)
QwenPixels qwen_process_video(const Tensor& thwc_uint8, const QwenProcessorConfig& config);

}  // namespace h3::media
