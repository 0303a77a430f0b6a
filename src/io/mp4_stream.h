// An Mp4Writer fed from another thread: the video decoder pushes runs of frames as windows finish
// and goes on decoding while this writer's worker encodes them, in order (h3 generate, h3 bench
// e2e). An error on the worker is rethrown by the next push() or by finish(); a writer destroyed
// before finish() drops its temporary file (Mp4Writer), so a failed run leaves no output.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/tensor.h"
#include "io/mp4_writer.h"

namespace h3::io {

class Mp4StreamWriter {
 public:
  explicit Mp4StreamWriter(std::string path, Mp4Options options = {});
  ~Mp4StreamWriter();
  Mp4StreamWriter(const Mp4StreamWriter&) = delete;
  Mp4StreamWriter& operator=(const Mp4StreamWriter&) = delete;

  // Opens the file once the frame count, size and the (already decoded) audio are known.
  void start(int64_t num_frames, int64_t height, int64_t width, const Tensor& audio);
  // uint8 [n, H, W, 3] on the CPU. Blocks while two runs already wait, so the decoder never gets
  // far ahead of the encoder's memory.
  void push(const Tensor& frames);
  // Waits for the worker, then flushes and renames the file into place.
  Mp4Result finish();

 private:
  void run();
  void rethrow_locked();
  void stop();

  std::string path_;
  Mp4Options options_;
  std::optional<Mp4Writer> writer_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Tensor> queue_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace h3::io
