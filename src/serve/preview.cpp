#include "serve/preview.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace h3::serve {

RgbBytes frame_image(const Tensor& frames, int64_t index) {
  H3_CHECK(frames.dim() == 4 && frames.shape()[3] == 3 && frames.dtype() == DType::kU8,
           ErrorCode::kInternal, "frame_image expects uint8 [n, H, W, 3], got ", frames.desc());
  const Tensor f = frames.select(0, index).contiguous();
  RgbBytes out;
  out.height = f.shape()[0];
  out.width = f.shape()[1];
  const uint8_t* p = f.data<uint8_t>();
  out.data.assign(p, p + out.height * out.width * 3);
  return out;
}

std::string encode_jpeg(const RgbBytes& image, int quality) {
  tjhandle tj = tjInitCompress();
  H3_CHECK(tj != nullptr, ErrorCode::kInternal, "TurboJPEG: ", tjGetErrorStr2(nullptr));
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, image.data.data(), static_cast<int>(image.width), 0,
                             static_cast<int>(image.height), TJPF_RGB, &buf, &size, TJSAMP_420,
                             quality, TJFLAG_FASTDCT);
  std::string out;
  std::string err;
  if (rc == 0) {
    out.assign(reinterpret_cast<const char*>(buf), size);
  } else {
    err = tjGetErrorStr2(tj);
  }
  tjFree(buf);
  tjDestroy(tj);
  H3_CHECK(rc == 0, ErrorCode::kInternal, "TurboJPEG: ", err);
  return out;
}

std::string base64_encode(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) |
                       (static_cast<uint8_t>(in[i + 1]) << 8) | static_cast<uint8_t>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace h3::serve
