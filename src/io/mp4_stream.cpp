#include "io/mp4_stream.h"

#include <utility>

#include "core/status.h"

namespace h3::io {

Mp4StreamWriter::Mp4StreamWriter(std::string path, Mp4Options options)
    : path_(std::move(path)), options_(std::move(options)) {}

Mp4StreamWriter::~Mp4StreamWriter() { stop(); }

void Mp4StreamWriter::start(int64_t num_frames, int64_t height, int64_t width,
                            const Tensor& audio) {
  H3_CHECK(!writer_.has_value(), ErrorCode::kInternal, path_, ": the MP4 stream started twice");
  writer_.emplace(path_, num_frames, height, width, audio, options_);
  worker_ = std::thread([this] { run(); });
}

void Mp4StreamWriter::push(const Tensor& frames) {
  std::unique_lock<std::mutex> lock(mu_);
  rethrow_locked();
  H3_CHECK(writer_.has_value(), ErrorCode::kInternal, path_, ": frames pushed before start()");
  cv_.wait(lock, [&] { return queue_.size() < 2 || error_; });
  rethrow_locked();
  queue_.push_back(frames);
  cv_.notify_all();
}

Mp4Result Mp4StreamWriter::finish() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  rethrow_locked();
  H3_CHECK(writer_.has_value(), ErrorCode::kInternal, path_, ": no frames were streamed");
  return writer_->finish();
}

void Mp4StreamWriter::run() {
  while (true) {
    Tensor next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || done_; });
      if (queue_.empty()) return;
      next = queue_.front();
      queue_.pop_front();
      cv_.notify_all();
    }
    try {
      writer_->add_frames(next);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
  }
}

void Mp4StreamWriter::rethrow_locked() {
  if (error_) std::rethrow_exception(error_);
}

void Mp4StreamWriter::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    queue_.clear();
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

}  // namespace h3::io
