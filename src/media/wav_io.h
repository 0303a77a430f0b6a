// WAV files: reading audio references (PCM 8/16/24/32-bit integer and 32/64-bit float, any
// channel count) and writing float32 WAV (h3_components_spec.md §4.3: audio-bearing references are
// waveforms [C, S] with their own sample rate; §4.8: the generated soundtrack).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace h3::media {

struct Waveform {
  Tensor samples;          // float32 [channels, frames], integer PCM scaled to [-1, 1)
  int64_t sample_rate = 0;
};

// Reads RIFF/WAVE (also WAVE_FORMAT_EXTENSIBLE). Integer PCM is divided by 2^(bits-1) (8-bit is
// unsigned with offset 128). Throws kNotFound for a missing file and kInvalidFile naming the file
// and what is wrong (not RIFF/WAVE, missing fmt/data chunk, unsupported encoding, truncated data,
// a float sample that is NaN, infinite or past float32's range).
Waveform read_wav(const std::string& path);
Waveform decode_wav(const uint8_t* data, size_t size, const std::string& name);

// Writes float32 [channels, frames] as an IEEE-float WAV (format 3, 32-bit), through a temporary
// file renamed when complete. Throws kInvalidArgument for a bad tensor or rate, kIo on write errors.
void write_wav_float(const std::string& path, const Tensor& samples, int64_t sample_rate);

}  // namespace h3::media
