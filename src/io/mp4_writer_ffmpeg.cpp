// MP4 output through libavformat/libavcodec/libswscale (h3_components_spec.md §4.8). Video frames
// are converted RGB24 -> yuv420p (BT.601, limited range, as ffmpeg's default conversion) and
// encoded with H.264; audio is encoded with FFmpeg's native AAC encoder from float planar frames
// of the encoder's frame size. Packets are interleaved in time order as they are produced.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "core/status.h"
#include "io/mp4_writer.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

namespace h3::io {

namespace {

std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

struct CodecCtxFree {
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
using CodecCtxPtr = std::unique_ptr<AVCodecContext, CodecCtxFree>;
using FramePtr = std::unique_ptr<AVFrame, FrameFree>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFree>;
using SwsPtr = std::unique_ptr<SwsContext, SwsFree>;

// Owns the output context and its file; on destruction without commit() the temporary is removed.
class OutputFile {
 public:
  OutputFile(const std::string& tmp_path) : tmp_path_(tmp_path) {}
  ~OutputFile() {
    close();
    if (!committed_) {
      std::error_code ec;
      std::filesystem::remove(tmp_path_, ec);
    }
  }
  AVFormatContext* ctx = nullptr;
  void close() {
    if (!ctx) return;
    if (ctx->pb && !(ctx->oformat->flags & AVFMT_NOFILE)) avio_closep(&ctx->pb);
    avformat_free_context(ctx);
    ctx = nullptr;
  }
  void commit() { committed_ = true; }

 private:
  std::string tmp_path_;
  bool committed_ = false;
};

void check_av(int err, const std::string& path, const char* what) {
  if (err < 0) fail(ErrorCode::kIo, path, ": ", what, " failed (", av_error(err), ")");
}

const AVCodec* find_video_encoder(const std::string& requested, const std::string& path) {
  if (!requested.empty()) {
    const AVCodec* c = avcodec_find_encoder_by_name(requested.c_str());
    H3_CHECK(c != nullptr && c->type == AVMEDIA_TYPE_VIDEO && c->id == AV_CODEC_ID_H264,
             ErrorCode::kUnsupported, path, ": H.264 encoder '", requested,
             "' is not available in this FFmpeg build");
    return c;
  }
  for (const char* name : {"libx264", "libopenh264"}) {
    if (const AVCodec* c = avcodec_find_encoder_by_name(name)) return c;
  }
  const AVCodec* c = avcodec_find_encoder(AV_CODEC_ID_H264);
  H3_CHECK(c != nullptr, ErrorCode::kUnsupported, path,
           ": this FFmpeg build has no H.264 encoder (install libx264 support)");
  return c;
}

// Sends `frame` (nullptr flushes) and writes every packet the encoder returns.
void encode_and_write(AVCodecContext* enc, AVFrame* frame, AVStream* stream, AVFormatContext* fmt,
                      AVPacket* pkt, const std::string& path) {
  check_av(avcodec_send_frame(enc, frame), path, "sending a frame to the encoder");
  while (true) {
    const int ret = avcodec_receive_packet(enc, pkt);
    if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return;
    check_av(ret, path, "encoding");
    av_packet_rescale_ts(pkt, enc->time_base, stream->time_base);
    pkt->stream_index = stream->index;
    check_av(av_interleaved_write_frame(fmt, pkt), path, "writing a packet");
  }
}

std::string temporary_path(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::random_device rd;
  const unsigned tag = rd();
  char name[32];
  std::snprintf(name, sizeof(name), "%08x.partial", tag);
  const std::string file = str_cat('.', p.filename().string(), '.', name);
  return (p.parent_path() / file).string();
}

}  // namespace

bool mp4_writer_available() { return true; }

// Everything one file needs, in the order write_mp4 used to create it; the frames arrive in
// pieces (add_frames), so the same calls happen in the same order whether a video comes whole or
// streamed, and the bytes are the same.
struct Mp4Writer::Impl {
  std::string path;
  std::string tmp;
  OutputFile out;
  Mp4Options options;
  int64_t num_frames = 0, height = 0, width = 0;
  bool has_audio = false;
  Mp4Result result;
  CodecCtxPtr venc, aenc;
  AVStream* vstream = nullptr;
  AVStream* astream = nullptr;
  PacketPtr pkt;
  FramePtr vframe, aframe;
  SwsPtr sws;
  Tensor audio_c;
  const float* audio_data = nullptr;
  int64_t audio_pos = 0, audio_total = 0, row_stride = 0;
  int frame_size = 1024;
  bool small_last = false;
  int64_t next_frame = 0;
  bool finished = false;

  explicit Impl(const std::string& tmp_path) : tmp(tmp_path), out(tmp_path) {}

  // Encodes audio frames until `until` samples (per channel) have been sent.
  void push_audio(int64_t until) {
    until = std::min(until, audio_total);
    while (audio_pos < until) {
      const int64_t n = std::min<int64_t>(frame_size, audio_total - audio_pos);
      av_frame_unref(aframe.get());
      aframe->format = AV_SAMPLE_FMT_FLTP;
      aframe->sample_rate = static_cast<int>(options.sample_rate);
      check_av(av_channel_layout_copy(&aframe->ch_layout, &aenc->ch_layout), path,
               "setting the channel layout");
      // The encoder takes a short final frame only if it says so; otherwise pad it with silence.
      aframe->nb_samples = (n < frame_size && !small_last) ? frame_size : static_cast<int>(n);
      check_av(av_frame_get_buffer(aframe.get(), 0), path, "allocating an audio frame");
      for (int ch = 0; ch < 2; ++ch) {
        float* dst = reinterpret_cast<float*>(aframe->extended_data[ch]);
        // The reference's PCM step before its AAC encoder (h3_components_spec.md §4.8): clip to
        // [-1, 1], int16 = trunc(x * 32767), read back as int16 / 32768. NaN becomes silence.
        const float* src = audio_data + ch * row_stride + audio_pos;
        for (int64_t i = 0; i < n; ++i) {
          const float x = std::isnan(src[i]) ? 0.0f : std::clamp(src[i], -1.0f, 1.0f);
          dst[i] = static_cast<float>(static_cast<int16_t>(x * 32767.0f)) / 32768.0f;
        }
        std::fill(dst + n, dst + aframe->nb_samples, 0.0f);
      }
      aframe->pts = audio_pos;
      encode_and_write(aenc.get(), aframe.get(), astream, out.ctx, pkt.get(), path);
      audio_pos += n;
    }
  }
};

Mp4Writer::Mp4Writer(const std::string& path, int64_t num_frames, int64_t height, int64_t width,
                     const Tensor& audio, const Mp4Options& options) {
  namespace fs = std::filesystem;
  H3_CHECK(!path.empty(), ErrorCode::kInvalidArgument, "output path is empty");
  H3_CHECK(num_frames > 0 && height > 0 && width > 0 && height % 2 == 0 && width % 2 == 0,
           ErrorCode::kInvalidArgument, path, ": need at least one frame of even size for yuv420p, got ",
           num_frames, " frames of ", width, "x", height);
  H3_CHECK(width <= 16384 && height <= 16384, ErrorCode::kInvalidArgument, path, ": frame size ",
           width, "x", height, " exceeds 16384");
  H3_CHECK(options.fps > 0 && options.fps <= 1000 && options.sample_rate > 0 &&
               options.sample_rate <= 384000,
           ErrorCode::kInvalidArgument, path, ": fps (", options.fps, ") and sample rate (",
           options.sample_rate, ") must be positive");
  const bool has_audio = audio.defined();
  if (has_audio) {
    H3_CHECK(audio.dtype() == DType::kF32 && audio.dim() == 2 && audio.shape()[0] == 2 &&
                 audio.shape()[1] > 0 && audio.device().is_cpu(),
             ErrorCode::kInvalidArgument, path,
             ": audio must be a float32 CPU tensor [2, samples] (planar stereo), got ", audio.desc());
  }
  const fs::path out_path(path);
  const fs::path dir = out_path.has_parent_path() ? out_path.parent_path() : fs::path(".");
  std::error_code ec;
  H3_CHECK(fs::is_directory(dir, ec), ErrorCode::kIo, path, ": output folder ", dir.string(),
           " does not exist");
  H3_CHECK(!fs::is_directory(out_path, ec), ErrorCode::kInvalidArgument, path,
           ": is a folder, expected an .mp4 file path");

  av_log_set_level(AV_LOG_ERROR);
  impl_ = std::make_unique<Impl>(temporary_path(path));
  Impl& m = *impl_;
  m.path = path;
  m.options = options;
  m.num_frames = num_frames;
  m.height = height;
  m.width = width;
  m.has_audio = has_audio;
  OutputFile& out = m.out;
  const std::string& tmp = m.tmp;
  check_av(avformat_alloc_output_context2(&out.ctx, nullptr, "mp4", tmp.c_str()), path,
           "creating the MP4 muxer");
  out.ctx->flags |= AVFMT_FLAG_BITEXACT;  // no encoder version or creation time in the header

  // ---- video stream ----
  const AVCodec* vcodec = find_video_encoder(options.video_encoder, path);
  m.result.video_encoder = vcodec->name;
  m.venc.reset(avcodec_alloc_context3(vcodec));
  AVCodecContext* venc = m.venc.get();
  H3_CHECK(venc != nullptr, ErrorCode::kOutOfMemory, path, ": cannot allocate the video encoder");
  venc->width = static_cast<int>(width);
  venc->height = static_cast<int>(height);
  venc->pix_fmt = AV_PIX_FMT_YUV420P;
  venc->time_base = AVRational{1, static_cast<int>(options.fps)};
  venc->framerate = AVRational{static_cast<int>(options.fps), 1};
  venc->color_range = AVCOL_RANGE_MPEG;
  venc->thread_count = 1;  // deterministic bytes
  venc->flags |= AV_CODEC_FLAG_BITEXACT;
  if (out.ctx->oformat->flags & AVFMT_GLOBALHEADER) venc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* vopts = nullptr;
  if (std::string(vcodec->name) == "libx264") {
    av_dict_set(&vopts, "preset", options.x264_preset.c_str(), 0);
    if (options.crf >= 0) av_dict_set_int(&vopts, "crf", options.crf, 0);
    av_dict_set(&vopts, "threads", "1", 0);
  }
  int err = avcodec_open2(venc, vcodec, &vopts);
  av_dict_free(&vopts);
  if (err < 0) {
    fail(ErrorCode::kUnsupported, path, ": cannot open H.264 encoder ", vcodec->name, " (",
         av_error(err), ")");
  }
  m.vstream = avformat_new_stream(out.ctx, nullptr);
  H3_CHECK(m.vstream != nullptr, ErrorCode::kOutOfMemory, path, ": cannot add the video stream");
  m.vstream->time_base = venc->time_base;
  m.vstream->avg_frame_rate = venc->framerate;
  check_av(avcodec_parameters_from_context(m.vstream->codecpar, venc), path,
           "copying video parameters");

  // ---- audio stream ----
  int64_t audio_samples = 0;
  if (has_audio) {
    const AVCodec* acodec = avcodec_find_encoder(AV_CODEC_ID_AAC);
    H3_CHECK(acodec != nullptr, ErrorCode::kUnsupported, path,
             ": this FFmpeg build has no AAC encoder");
    m.result.audio_encoder = acodec->name;
    m.aenc.reset(avcodec_alloc_context3(acodec));
    AVCodecContext* aenc = m.aenc.get();
    H3_CHECK(aenc != nullptr, ErrorCode::kOutOfMemory, path, ": cannot allocate the AAC encoder");
    aenc->sample_fmt = AV_SAMPLE_FMT_FLTP;
    aenc->sample_rate = static_cast<int>(options.sample_rate);
    av_channel_layout_default(&aenc->ch_layout, 2);
    aenc->bit_rate = options.audio_bitrate;
    aenc->time_base = AVRational{1, static_cast<int>(options.sample_rate)};
    aenc->thread_count = 1;
    aenc->flags |= AV_CODEC_FLAG_BITEXACT;
    if (out.ctx->oformat->flags & AVFMT_GLOBALHEADER) aenc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    err = avcodec_open2(aenc, acodec, nullptr);
    if (err < 0) {
      fail(ErrorCode::kUnsupported, path, ": cannot open AAC encoder (", av_error(err), ")");
    }
    m.astream = avformat_new_stream(out.ctx, nullptr);
    H3_CHECK(m.astream != nullptr, ErrorCode::kOutOfMemory, path, ": cannot add the audio stream");
    m.astream->time_base = aenc->time_base;
    check_av(avcodec_parameters_from_context(m.astream->codecpar, aenc), path,
             "copying audio parameters");
    // -shortest: audio beyond the last video frame is dropped.
    const int64_t video_samples = static_cast<int64_t>(
        std::llround(static_cast<double>(num_frames) * static_cast<double>(options.sample_rate) /
                     static_cast<double>(options.fps)));
    audio_samples = std::min(audio.shape()[1], video_samples);
  }

  err = avio_open(&out.ctx->pb, tmp.c_str(), AVIO_FLAG_WRITE);
  if (err < 0) {
    fail(ErrorCode::kIo, path, ": cannot create ", tmp, " (", av_error(err), ")");
  }
  AVDictionary* mopts = nullptr;
  av_dict_set(&mopts, "movflags", "+faststart", 0);
  err = avformat_write_header(out.ctx, &mopts);
  av_dict_free(&mopts);
  check_av(err, path, "writing the MP4 header");

  // ---- encoders' buffers ----
  m.pkt.reset(av_packet_alloc());
  m.vframe.reset(av_frame_alloc());
  H3_CHECK(m.pkt && m.vframe, ErrorCode::kOutOfMemory, path, ": cannot allocate frames");
  m.vframe->format = AV_PIX_FMT_YUV420P;
  m.vframe->width = static_cast<int>(width);
  m.vframe->height = static_cast<int>(height);
  check_av(av_frame_get_buffer(m.vframe.get(), 0), path, "allocating a video frame");
  m.sws.reset(sws_getContext(static_cast<int>(width), static_cast<int>(height), AV_PIX_FMT_RGB24,
                             static_cast<int>(width), static_cast<int>(height), AV_PIX_FMT_YUV420P,
                             SWS_BICUBIC | SWS_ACCURATE_RND | SWS_BITEXACT, nullptr, nullptr,
                             nullptr));
  H3_CHECK(m.sws != nullptr, ErrorCode::kUnsupported, path,
           ": cannot set up the RGB -> yuv420p conversion");
  if (has_audio) {
    m.audio_c = audio.contiguous();
    m.audio_data = m.audio_c.data<float>();
    m.aframe.reset(av_frame_alloc());
    H3_CHECK(m.aframe != nullptr, ErrorCode::kOutOfMemory, path, ": cannot allocate audio frames");
    m.row_stride = m.audio_c.shape()[1];
    m.frame_size = m.aenc->frame_size > 0 ? m.aenc->frame_size : 1024;
    m.small_last = (m.aenc->codec->capabilities & AV_CODEC_CAP_SMALL_LAST_FRAME) != 0;
  }
  m.audio_total = audio_samples;
  m.result.audio_samples = audio_samples;
}

Mp4Writer::~Mp4Writer() = default;
Mp4Writer::Mp4Writer(Mp4Writer&&) noexcept = default;
Mp4Writer& Mp4Writer::operator=(Mp4Writer&&) noexcept = default;

int64_t Mp4Writer::frames_written() const { return impl_ ? impl_->next_frame : 0; }

void Mp4Writer::add_frames(const Tensor& frames) {
  H3_CHECK(impl_ && !impl_->finished, ErrorCode::kInvalidArgument,
           "MP4 writer: add_frames after finish()");
  Impl& m = *impl_;
  const std::string& path = m.path;
  H3_CHECK(frames.defined() && frames.dtype() == DType::kU8 && frames.dim() == 4 &&
               frames.shape()[3] == 3 && frames.device().is_cpu() &&
               frames.shape()[1] == m.height && frames.shape()[2] == m.width,
           ErrorCode::kInvalidArgument, path, ": video frames must be a uint8 CPU tensor [n, ",
           m.height, ", ", m.width, ", 3], got ",
           frames.defined() ? frames.desc() : std::string("an empty tensor"));
  H3_CHECK(m.next_frame + frames.shape()[0] <= m.num_frames, ErrorCode::kInvalidArgument, path,
           ": more frames than the ", m.num_frames, " announced");
  const Tensor rgb = frames.contiguous();
  const uint8_t* rgb_data = rgb.data<uint8_t>();
  const size_t frame_bytes = static_cast<size_t>(m.width * m.height * 3);
  for (int64_t i = 0; i < rgb.shape()[0]; ++i) {
    const int64_t f = m.next_frame;
    check_av(av_frame_make_writable(m.vframe.get()), path, "making a video frame writable");
    const uint8_t* src[1] = {rgb_data + static_cast<size_t>(i) * frame_bytes};
    const int src_stride[1] = {static_cast<int>(m.width * 3)};
    sws_scale(m.sws.get(), src, src_stride, 0, static_cast<int>(m.height), m.vframe->data,
              m.vframe->linesize);
    m.vframe->pts = f;
    encode_and_write(m.venc.get(), m.vframe.get(), m.vstream, m.out.ctx, m.pkt.get(), path);
    if (m.has_audio) {
      m.push_audio(static_cast<int64_t>(
          std::llround(static_cast<double>(f + 1) * static_cast<double>(m.options.sample_rate) /
                       static_cast<double>(m.options.fps))));
    }
    ++m.next_frame;
  }
}

Mp4Result Mp4Writer::finish() {
  namespace fs = std::filesystem;
  H3_CHECK(impl_ && !impl_->finished, ErrorCode::kInvalidArgument,
           "MP4 writer: finish() called twice");
  Impl& m = *impl_;
  const std::string& path = m.path;
  H3_CHECK(m.next_frame == m.num_frames, ErrorCode::kInvalidArgument, path, ": ", m.next_frame,
           " frames written of the ", m.num_frames, " announced");
  m.finished = true;
  encode_and_write(m.venc.get(), nullptr, m.vstream, m.out.ctx, m.pkt.get(), path);
  if (m.has_audio) {
    m.push_audio(m.audio_total);
    encode_and_write(m.aenc.get(), nullptr, m.astream, m.out.ctx, m.pkt.get(), path);
  }
  check_av(av_write_trailer(m.out.ctx), path, "finishing the MP4 file");
  const int close_err = avio_closep(&m.out.ctx->pb);
  check_av(close_err, path, "closing the temporary file");
  m.out.close();

  const fs::path out_path(path);
  std::error_code ec;
  fs::rename(m.tmp, out_path, ec);
  if (ec) fail(ErrorCode::kIo, path, ": cannot move the finished file into place (", ec.message(), ")");
  m.out.commit();
  m.result.frames = m.num_frames;
  m.result.bytes = static_cast<uint64_t>(fs::file_size(out_path, ec));
  return m.result;
}

Mp4Result write_mp4(const std::string& path, const Tensor& frames, const Tensor& audio,
                    const Mp4Options& options) {
  H3_CHECK(frames.defined() && frames.dtype() == DType::kU8 && frames.dim() == 4 &&
               frames.shape()[3] == 3 && frames.device().is_cpu(),
           ErrorCode::kInvalidArgument, path,
           ": video frames must be a uint8 CPU tensor [F, H, W, 3], got ",
           frames.defined() ? frames.desc() : std::string("an empty tensor"));
  Mp4Writer w(path, frames.shape()[0], frames.shape()[1], frames.shape()[2], audio, options);
  w.add_frames(frames);
  return w.finish();
}

}  // namespace h3::io
