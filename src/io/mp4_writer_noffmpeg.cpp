// MP4 output in a build without the FFmpeg libraries: a clear error instead of a file.
#include "core/status.h"
#include "io/mp4_writer.h"

namespace h3::io {

bool mp4_writer_available() { return false; }

namespace {
[[noreturn]] void no_ffmpeg(const std::string& path) {
  fail(ErrorCode::kUnsupported, path,
       ": cannot write MP4, this build has no FFmpeg libraries (configure with -DH3_FFMPEG=ON and "
       "the libavformat/libavcodec/libswscale development packages)");
}
}  // namespace

Mp4Result write_mp4(const std::string& path, const Tensor& /*frames*/, const Tensor& /*audio*/,
                    const Mp4Options& /*options*/) {
  no_ffmpeg(path);
}

struct Mp4Writer::Impl {};

Mp4Writer::Mp4Writer(const std::string& path, int64_t, int64_t, int64_t, const Tensor&,
                     const Mp4Options&) {
  no_ffmpeg(path);
}
Mp4Writer::~Mp4Writer() = default;
Mp4Writer::Mp4Writer(Mp4Writer&&) noexcept = default;
Mp4Writer& Mp4Writer::operator=(Mp4Writer&&) noexcept = default;
void Mp4Writer::add_frames(const Tensor&) { no_ffmpeg(""); }
int64_t Mp4Writer::frames_written() const { return 0; }
Mp4Result Mp4Writer::finish() { no_ffmpeg(""); }

}  // namespace h3::io
