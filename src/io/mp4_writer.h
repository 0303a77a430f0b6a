// MP4 output (h3_components_spec.md §4.8): H.264 video in yuv420p at 24 fps plus AAC audio
// (32 kHz stereo), muxed with the FFmpeg libraries in-process (no `ffmpeg` binary).
//
// The file is written beside the destination under a temporary name and renamed only once it is
// complete, so a failure never leaves a partial file at `path`. Encoding is deterministic: the
// same input gives the same bytes (single-threaded encoders, bitexact codec and muxer flags, no
// creation time).
//
// Built without FFmpeg (H3_FFMPEG=OFF) every call throws kUnsupported.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace h3::io {

struct Mp4Options {
  int64_t fps = 24;               // the model's frame rate (h3_dit_spec.md §4.1)
  int64_t sample_rate = 32000;    // the audio VAE's rate
  std::string video_encoder;      // empty: libx264, else libopenh264, else any H.264 encoder
  std::string x264_preset = "ultrafast";  // the reference muxer's preset
  int crf = -1;                   // x264 constant rate factor; -1 keeps the encoder default (23)
  int64_t audio_bitrate = 128000;
};

struct Mp4Result {
  std::string video_encoder;  // the encoder actually used, e.g. "libx264"
  std::string audio_encoder;  // "aac"
  int64_t frames = 0;
  int64_t audio_samples = 0;  // per channel, after trimming to the video's duration
  uint64_t bytes = 0;         // size of the finished file
};

// True when this build can write MP4 files.
bool mp4_writer_available();

// frames: uint8 [F, H, W, 3] RGB on the CPU, H and W even. audio: float32 [2, S] (planar stereo)
// at options.sample_rate, or an undefined tensor for a silent video without an audio stream. Audio
// longer than the video is cut to round(F / fps * sample_rate) samples (the reference muxer's
// `-shortest`). Throws kInvalidArgument for bad shapes, kUnsupported when no encoder is available,
// kIo when the folder cannot be written.
Mp4Result write_mp4(const std::string& path, const Tensor& frames, const Tensor& audio,
                    const Mp4Options& options = {});

// The same file written in pieces: frames arrive in order (add_frames, any number per call) while
// the video is still being decoded, so encoding overlaps decoding. The number of frames and the
// audio are known up front (the audio is decoded first: it is small and fast), which keeps the
// packets and their interleaving, hence the bytes, identical to write_mp4's. Nothing is visible at
// `path` until finish() succeeds; a writer destroyed before that removes its temporary file.
class Mp4Writer {
 public:
  Mp4Writer(const std::string& path, int64_t num_frames, int64_t height, int64_t width,
            const Tensor& audio, const Mp4Options& options = {});
  ~Mp4Writer();
  Mp4Writer(Mp4Writer&&) noexcept;
  Mp4Writer& operator=(Mp4Writer&&) noexcept;
  // frames: uint8 [n, H, W, 3] RGB on the CPU.
  void add_frames(const Tensor& frames);
  int64_t frames_written() const;
  // Flushes the encoders, writes the trailer and renames the file into place.
  Mp4Result finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3::io
