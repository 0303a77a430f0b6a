// MP4 output in a build without the FFmpeg libraries: a clear error instead of a file.
#include "core/status.h"
#include "io/mp4_writer.h"

namespace h3::io {

bool mp4_writer_available() { return false; }

Mp4Result write_mp4(const std::string& path, const Tensor& /*frames*/, const Tensor& /*audio*/,
                    const Mp4Options& /*options*/) {
  fail(ErrorCode::kUnsupported, path,
       ": cannot write MP4, this build has no FFmpeg libraries (configure with -DH3_FFMPEG=ON and "
       "the libavformat/libavcodec/libswscale development packages)");
}

}  // namespace h3::io
