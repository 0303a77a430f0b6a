// libFuzzer target for the WAV reader (src/media/wav_io.h), which reads audio references supplied
// by users and by the server's uploads.
//
// The reader may reject anything with h3::Error; any other exception, a sanitizer report, or an
// accepted file that breaks what the reader promises (a float32 [channels, frames] tensor
// with 1..64 channels and at least one frame, a rate in 1..1e6 Hz, every sample finite, integer PCM
// in [-1, 1]; 32-bit PCM's largest value, 2^31 - 1 over 2^31, rounds to 1 in float32) is a finding.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/status.h"
#include "media/wav_io.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken on an accepted WAV: %s\n", what);
    std::abort();
  }
}

// The format tag of the last fmt chunk before the data chunk, as the reader takes it (1: integer
// PCM), or 0 when this scan finds none.
uint16_t format_tag(const uint8_t* data, size_t size) {
  uint16_t tag = 0;
  for (size_t pos = 12; pos + 8 <= size;) {
    uint32_t len = 0;
    std::memcpy(&len, data + pos + 4, 4);
    if (std::memcmp(data + pos, "data", 4) == 0) break;
    if (std::memcmp(data + pos, "fmt ", 4) == 0 && pos + 10 <= size) {
      tag = static_cast<uint16_t>(data[pos + 8] | (data[pos + 9] << 8));
      if (tag == 0xFFFE && pos + 34 <= size)
        tag = static_cast<uint16_t>(data[pos + 32] | (data[pos + 33] << 8));
    }
    pos += 8 + static_cast<size_t>(len) + (len & 1);
  }
  return tag;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  h3::media::Waveform w;
  try {
    w = h3::media::decode_wav(data, size, "fuzz.wav");
  } catch (const h3::Error&) {
    return 0;
  }
  check(w.samples.defined() && w.samples.dtype() == h3::DType::kF32 && w.samples.dim() == 2,
        "samples are not a float32 matrix");
  const int64_t channels = w.samples.size(0), frames = w.samples.size(1);
  check(channels >= 1 && channels <= 64, "channel count outside 1..64");
  check(frames >= 1, "no frames");
  check(w.sample_rate >= 1 && w.sample_rate <= 1000000, "sample rate outside 1..1e6");
  const bool integer_pcm = format_tag(data, size) == 1;
  const float* s = w.samples.data<float>();
  for (int64_t i = 0; i < channels * frames; ++i) {
    check(std::isfinite(s[i]), "a sample is not finite");
    if (integer_pcm) check(s[i] >= -1.0f && s[i] <= 1.0f, "integer PCM outside [-1, 1]");
  }
  return 0;
}
