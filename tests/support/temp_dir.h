// A fresh, empty folder under the system temp folder, removed with everything in it when the
// object goes. Names carry the process id and a counter, so parallel ctest processes never meet.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace h3::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "h3_test") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace h3::test
