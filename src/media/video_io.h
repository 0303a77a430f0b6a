// Reading a video file for a Ref2VA video reference (h3_components_spec.md §4.3 "video"): its RGB
// frames, its average frame rate and its first audio stream (the soundtrack) at the stream's own
// rate, through the FFmpeg libraries. Builds without FFmpeg refuse with kUnsupported.
//
// As the reference does, decoding stops after ceil(15 * fps) + 1 frames (the longest request is
// 15 s, so later frames can never be used). Display rotation metadata is not applied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "media/image_io.h"

namespace h3::media {

struct DecodedVideo {
  std::vector<RgbImage> frames;  // RGB, all of one size
  double fps = 0.0;              // the stream's average frame rate
  Tensor audio;                  // float32 [channels, samples] (1 or 2 channels); undefined: none
  int64_t sample_rate = 0;       // of `audio`
};

// True when this build can decode video files.
bool video_reader_available();

// Decodes `path`. Throws kNotFound for a missing file, kInvalidFile naming the file for one without
// a video stream, an unreadable stream or a soundtrack with more than 2 channels, kUnsupported
// without FFmpeg.
DecodedVideo read_video(const std::string& path);

}  // namespace h3::media
