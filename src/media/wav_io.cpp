#include "media/wav_io.h"

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/status.h"

namespace h3::media {

namespace {

constexpr uint16_t kFormatPcm = 1;
constexpr uint16_t kFormatFloat = 3;
constexpr uint16_t kFormatExtensible = 0xFFFE;

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v));
  b.push_back(static_cast<uint8_t>(v >> 8));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

Waveform decode_wav(const uint8_t* data, size_t size, const std::string& name) {
  H3_CHECK(size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WAVE", 4) == 0,
           ErrorCode::kInvalidFile, name, ": not a RIFF/WAVE file");
  uint16_t format = 0, channels = 0, bits = 0, block_align = 0;
  uint32_t rate = 0;
  bool have_fmt = false;
  const uint8_t* pcm = nullptr;
  size_t pcm_bytes = 0;
  size_t pos = 12;
  while (pos + 8 <= size) {
    const uint8_t* chunk = data + pos;
    const uint32_t len = le32(chunk + 4);
    const size_t body = pos + 8;
    const size_t avail = size - body;
    if (std::memcmp(chunk, "fmt ", 4) == 0) {
      H3_CHECK(len >= 16 && avail >= 16, ErrorCode::kInvalidFile, name,
               ": fmt chunk is truncated (", len, " bytes)");
      const uint8_t* f = data + body;
      format = le16(f);
      channels = le16(f + 2);
      rate = le32(f + 4);
      block_align = le16(f + 12);
      bits = le16(f + 14);
      if (format == kFormatExtensible) {
        H3_CHECK(len >= 40 && avail >= 40, ErrorCode::kInvalidFile, name,
                 ": WAVE_FORMAT_EXTENSIBLE fmt chunk is truncated");
        format = le16(f + 24);  // first two bytes of the sub-format GUID
      }
      have_fmt = true;
    } else if (std::memcmp(chunk, "data", 4) == 0) {
      H3_CHECK(have_fmt, ErrorCode::kInvalidFile, name, ": data chunk comes before the fmt chunk");
      pcm = data + body;
      // A streaming writer may leave 0 or 0xFFFFFFFF: take what the file holds.
      pcm_bytes = (len == 0 || len > avail) ? avail : len;
      H3_CHECK(len == 0 || len == 0xFFFFFFFFu || len <= avail, ErrorCode::kInvalidFile, name,
               ": data chunk declares ", len, " bytes but only ", avail, " follow (truncated file)");
      break;
    }
    pos = body + len + (len & 1);  // chunks are padded to even sizes
  }
  H3_CHECK(have_fmt, ErrorCode::kInvalidFile, name, ": no fmt chunk");
  H3_CHECK(pcm != nullptr, ErrorCode::kInvalidFile, name, ": no data chunk");
  H3_CHECK(channels >= 1 && channels <= 64, ErrorCode::kInvalidFile, name, ": ", channels,
           " channels (expected 1..64)");
  H3_CHECK(rate >= 1 && rate <= 1000000, ErrorCode::kInvalidFile, name, ": sample rate ", rate,
           " Hz is out of range");
  const bool is_int = format == kFormatPcm && (bits == 8 || bits == 16 || bits == 24 || bits == 32);
  const bool is_float = format == kFormatFloat && (bits == 32 || bits == 64);
  H3_CHECK(is_int || is_float, ErrorCode::kInvalidFile, name, ": unsupported encoding (format ",
           format, ", ", bits, " bits); expected PCM 8/16/24/32-bit or IEEE float 32/64-bit");
  const size_t bytes_per_sample = bits / 8;
  H3_CHECK(block_align == bytes_per_sample * channels, ErrorCode::kInvalidFile, name,
           ": block align ", block_align, " does not match ", channels, " channels of ", bits,
           " bits");
  const int64_t frames = static_cast<int64_t>(pcm_bytes / block_align);
  H3_CHECK(frames > 0, ErrorCode::kInvalidFile, name, ": the data chunk holds no samples");

  Waveform w;
  w.sample_rate = rate;
  w.samples = Tensor::empty({channels, frames}, DType::kF32);
  float* out = w.samples.data<float>();
  for (int64_t i = 0; i < frames; ++i) {
    for (int64_t c = 0; c < channels; ++c) {
      const uint8_t* p = pcm + (static_cast<size_t>(i) * channels + c) * bytes_per_sample;
      double v = 0;
      if (is_float) {
        if (bits == 32) {
          float f;
          std::memcpy(&f, p, 4);
          v = f;
        } else {
          double d;
          std::memcpy(&d, p, 8);
          v = d;
        }
      } else if (bits == 8) {
        v = (static_cast<int>(p[0]) - 128) / 128.0;
      } else if (bits == 16) {
        v = static_cast<int16_t>(le16(p)) / 32768.0;
      } else if (bits == 24) {
        int32_t s = static_cast<int32_t>(le32(std::array<uint8_t, 4>{0, p[0], p[1], p[2]}.data()));
        v = (s >> 8) / 8388608.0;
      } else {
        v = static_cast<int32_t>(le32(p)) / 2147483648.0;
      }
      const float f = static_cast<float>(v);
      // A NaN or an infinity (also a float64 sample past float32's range) would pass through the
      // resampler and the audio encoder into every row of the conditioning.
      H3_CHECK(std::isfinite(f), ErrorCode::kInvalidFile, name, ": sample ", i, " of channel ", c,
               " is not a finite float32 (", v, ")");
      out[c * frames + i] = f;
    }
  }
  return w;
}

Waveform read_wav(const std::string& path) {
  std::error_code ec;
  H3_CHECK(std::filesystem::is_regular_file(path, ec), ErrorCode::kNotFound, path,
           ": audio file not found");
  std::ifstream in(path, std::ios::binary);
  H3_CHECK(in.good(), ErrorCode::kIo, path, ": cannot open audio file for reading");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  H3_CHECK(!in.bad(), ErrorCode::kIo, path, ": read error");
  return decode_wav(bytes.data(), bytes.size(), path);
}

void write_wav_float(const std::string& path, const Tensor& samples, int64_t sample_rate) {
  H3_CHECK(samples.defined() && samples.dtype() == DType::kF32 && samples.dim() == 2 &&
               samples.device().is_cpu() && samples.shape()[0] >= 1 && samples.shape()[0] <= 64,
           ErrorCode::kInvalidArgument, path,
           ": expected a float32 CPU waveform [channels, frames] with 1..64 channels, got ",
           samples.defined() ? samples.desc() : std::string("an empty tensor"));
  H3_CHECK(sample_rate >= 1 && sample_rate <= 1000000, ErrorCode::kInvalidArgument, path,
           ": sample rate ", sample_rate, " Hz is out of range");
  const Tensor s = samples.contiguous();
  const int64_t channels = s.shape()[0], frames = s.shape()[1];
  const uint64_t data_bytes = static_cast<uint64_t>(channels * frames) * 4;
  H3_CHECK(data_bytes + 36 <= 0xFFFFFFFFull, ErrorCode::kInvalidArgument, path,
           ": waveform too long for a WAV file (", data_bytes, " bytes)");
  std::vector<uint8_t> b;
  b.reserve(static_cast<size_t>(data_bytes) + 44);
  b.insert(b.end(), {'R', 'I', 'F', 'F'});
  put32(b, static_cast<uint32_t>(36 + data_bytes));
  b.insert(b.end(), {'W', 'A', 'V', 'E', 'f', 'm', 't', ' '});
  put32(b, 16);
  put16(b, kFormatFloat);
  put16(b, static_cast<uint16_t>(channels));
  put32(b, static_cast<uint32_t>(sample_rate));
  put32(b, static_cast<uint32_t>(sample_rate * channels * 4));
  put16(b, static_cast<uint16_t>(channels * 4));
  put16(b, 32);
  b.insert(b.end(), {'d', 'a', 't', 'a'});
  put32(b, static_cast<uint32_t>(data_bytes));
  const float* src = s.data<float>();
  for (int64_t i = 0; i < frames; ++i) {
    for (int64_t c = 0; c < channels; ++c) {
      uint32_t u;
      std::memcpy(&u, &src[c * frames + i], 4);
      put32(b, u);
    }
  }
  const std::string tmp = path + ".partial";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    H3_CHECK(out.good(), ErrorCode::kIo, path, ": cannot create ", tmp);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    out.close();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      fail(ErrorCode::kIo, path, ": write error");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(ErrorCode::kIo, path, ": cannot move the finished file into place");
  }
}

}  // namespace h3::media
