#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/status.h"
#include "media/video_io.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/imgutils.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

namespace h3::media {
namespace {

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof(buf));
  return buf;
}

void check_av(int code, const std::string& path, const char* what) {
  H3_CHECK(code >= 0, ErrorCode::kInvalidFile, "cannot read video '", path, "': ", what, " (",
           av_error(code), ")");
}

struct FormatCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecCloser {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFree {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsFree {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
struct SwrFree {
  void operator()(SwrContext* s) const { swr_free(&s); }
};

using CodecPtr = std::unique_ptr<AVCodecContext, CodecCloser>;

CodecPtr open_decoder(AVStream* st, const std::string& path) {
  const AVCodec* dec = avcodec_find_decoder(st->codecpar->codec_id);
  H3_CHECK(dec != nullptr, ErrorCode::kInvalidFile, "cannot read video '", path,
           "': no decoder for codec '", avcodec_get_name(st->codecpar->codec_id), "'");
  CodecPtr ctx(avcodec_alloc_context3(dec));
  H3_CHECK(ctx != nullptr, ErrorCode::kOutOfMemory, "cannot allocate a decoder for '", path, "'");
  check_av(avcodec_parameters_to_context(ctx.get(), st->codecpar), path, "decoder parameters");
  check_av(avcodec_open2(ctx.get(), dec, nullptr), path, "opening the decoder");
  return ctx;
}

// The video state: RGB conversion of each decoded frame.
struct VideoSink {
  std::string path;
  int64_t max_frames = 0;
  std::unique_ptr<SwsContext, SwsFree> sws;
  std::vector<RgbImage>* frames = nullptr;

  void take(const AVFrame* f) {
    if (static_cast<int64_t>(frames->size()) >= max_frames) return;
    H3_CHECK(f->width > 0 && f->height > 0, ErrorCode::kInvalidFile, "cannot read video '", path,
             "': a frame has no pixels");
    if (!frames->empty()) {
      H3_CHECK(frames->front().width == f->width && frames->front().height == f->height,
               ErrorCode::kInvalidFile, "cannot read video '", path,
               "': the frame size changes within the stream");
    }
    sws.reset(sws_getCachedContext(sws.release(), f->width, f->height,
                                   static_cast<AVPixelFormat>(f->format), f->width, f->height,
                                   AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr));
    H3_CHECK(sws != nullptr, ErrorCode::kInvalidFile, "cannot read video '", path,
             "': unsupported pixel format");
    RgbImage img(f->width, f->height);
    uint8_t* dst[4] = {img.pixels.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {static_cast<int>(f->width * 3), 0, 0, 0};
    sws_scale(sws.get(), f->data, f->linesize, 0, f->height, dst, dst_stride);
    frames->push_back(std::move(img));
  }
};

// The audio state: planar float at the stream's own rate and channel count.
struct AudioSink {
  std::string path;
  std::unique_ptr<SwrContext, SwrFree> swr;
  int channels = 0;
  std::vector<std::vector<float>> planes;

  void take(const AVFrame* f) {
    if (!swr) {
      channels = f->ch_layout.nb_channels;
      H3_CHECK(channels == 1 || channels == 2, ErrorCode::kInvalidFile, "cannot read video '", path,
               "': the soundtrack has ", channels, " channels, expected mono or stereo");
      SwrContext* s = nullptr;
      // FFmpeg 5 takes the layouts as non-const pointers: pass a local copy.
      AVChannelLayout layout{};
      check_av(av_channel_layout_copy(&layout, &f->ch_layout), path, "audio channel layout");
      const int r =
          swr_alloc_set_opts2(&s, &layout, AV_SAMPLE_FMT_FLTP, f->sample_rate, &layout,
                              static_cast<AVSampleFormat>(f->format), f->sample_rate, 0, nullptr);
      av_channel_layout_uninit(&layout);
      check_av(r, path, "audio conversion");
      swr.reset(s);
      check_av(swr_init(swr.get()), path, "audio conversion");
      planes.resize(static_cast<size_t>(channels));
    }
    const int n = f->nb_samples;
    if (n <= 0) return;
    std::vector<std::vector<float>> tmp(static_cast<size_t>(channels),
                                        std::vector<float>(static_cast<size_t>(n) + 64));
    std::vector<uint8_t*> out(static_cast<size_t>(channels));
    for (int c = 0; c < channels; ++c)
      out[static_cast<size_t>(c)] = reinterpret_cast<uint8_t*>(tmp[static_cast<size_t>(c)].data());
    const int got = swr_convert(swr.get(), out.data(), n + 64,
                                const_cast<const uint8_t**>(f->extended_data), n);
    check_av(got, path, "audio conversion");
    for (int c = 0; c < channels; ++c)
      planes[static_cast<size_t>(c)].insert(planes[static_cast<size_t>(c)].end(),
                                            tmp[static_cast<size_t>(c)].begin(),
                                            tmp[static_cast<size_t>(c)].begin() + got);
  }
};

template <typename Sink>
void drain(AVCodecContext* ctx, AVFrame* frame, Sink& sink, const std::string& path) {
  while (true) {
    const int r = avcodec_receive_frame(ctx, frame);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
    check_av(r, path, "decoding");
    sink.take(frame);
    av_frame_unref(frame);
  }
}

}  // namespace

bool video_reader_available() { return true; }

DecodedVideo read_video(const std::string& path) {
  H3_CHECK(std::filesystem::is_regular_file(path), ErrorCode::kNotFound, "video file '", path,
           "' does not exist");
  AVFormatContext* raw = nullptr;
  check_av(avformat_open_input(&raw, path.c_str(), nullptr, nullptr), path, "opening the file");
  std::unique_ptr<AVFormatContext, FormatCloser> fmt(raw);
  check_av(avformat_find_stream_info(fmt.get(), nullptr), path, "reading the stream info");
  const int vi = av_find_best_stream(fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  H3_CHECK(vi >= 0, ErrorCode::kInvalidFile, "cannot read video '", path,
           "': it has no video stream");
  // The soundtrack is the first audio stream (§4.3).
  int ai = -1;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    if (fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_AUDIO) {
      ai = static_cast<int>(i);
      break;
    }
  }
  AVStream* vs = fmt->streams[vi];
  DecodedVideo out;
  AVRational rate = vs->avg_frame_rate;
  if (rate.num <= 0 || rate.den <= 0) rate = vs->r_frame_rate;
  H3_CHECK(rate.num > 0 && rate.den > 0, ErrorCode::kInvalidFile, "cannot read video '", path,
           "': the stream has no frame rate");
  out.fps = av_q2d(rate);
  H3_CHECK(std::isfinite(out.fps) && out.fps > 0, ErrorCode::kInvalidFile, "cannot read video '",
           path, "': invalid frame rate");

  CodecPtr vdec = open_decoder(vs, path);
  CodecPtr adec;
  if (ai >= 0) adec = open_decoder(fmt->streams[ai], path);
  VideoSink vsink;
  vsink.path = path;
  vsink.max_frames = static_cast<int64_t>(std::ceil(15.0 * out.fps)) + 1;
  vsink.frames = &out.frames;
  AudioSink asink;
  asink.path = path;

  std::unique_ptr<AVPacket, PacketFree> pkt(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameFree> frame(av_frame_alloc());
  H3_CHECK(pkt && frame, ErrorCode::kOutOfMemory, "cannot allocate decoder buffers for '", path,
           "'");
  while (true) {
    const int r = av_read_frame(fmt.get(), pkt.get());
    if (r == AVERROR_EOF) break;
    check_av(r, path, "reading a packet");
    if (pkt->stream_index == vi) {
      if (static_cast<int64_t>(out.frames.size()) < vsink.max_frames) {
        check_av(avcodec_send_packet(vdec.get(), pkt.get()), path, "decoding video");
        drain(vdec.get(), frame.get(), vsink, path);
      }
    } else if (pkt->stream_index == ai) {
      check_av(avcodec_send_packet(adec.get(), pkt.get()), path, "decoding audio");
      drain(adec.get(), frame.get(), asink, path);
    }
    av_packet_unref(pkt.get());
  }
  avcodec_send_packet(vdec.get(), nullptr);
  drain(vdec.get(), frame.get(), vsink, path);
  if (adec) {
    avcodec_send_packet(adec.get(), nullptr);
    drain(adec.get(), frame.get(), asink, path);
  }
  H3_CHECK(!out.frames.empty(), ErrorCode::kInvalidFile, "cannot read video '", path,
           "': no frame could be decoded");
  if (adec && asink.channels > 0 && !asink.planes[0].empty()) {
    const int64_t n = static_cast<int64_t>(asink.planes[0].size());
    std::vector<float> flat;
    for (const auto& p : asink.planes) flat.insert(flat.end(), p.begin(), p.begin() + n);
    out.audio = Tensor::from_f32(flat, {asink.channels, n});
    out.sample_rate = adec->sample_rate;
  }
  return out;
}

}  // namespace h3::media
