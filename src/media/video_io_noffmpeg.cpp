#include "core/status.h"
#include "media/video_io.h"

namespace h3::media {

bool video_reader_available() { return false; }

DecodedVideo read_video(const std::string& path) {
  fail(ErrorCode::kUnsupported, "cannot read video '", path,
       "': this build has no video decoder (configure with -DH3_FFMPEG=ON)");
}

}  // namespace h3::media
