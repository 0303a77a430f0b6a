#include "core/device.h"

#include "core/status.h"

namespace h3 {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    int idx = 0;
    for (size_t i = 5; i < text.size(); ++i) {
      const char c = text[i];
      H3_CHECK(c >= '0' && c <= '9' && idx < 100000, ErrorCode::kInvalidArgument, "device '", text,
               "': expected cpu, cuda or cuda:N");
      idx = idx * 10 + (c - '0');
    }
    return Device::cuda(idx);
  }
  fail(ErrorCode::kInvalidArgument, "device '", text, "': expected cpu, cuda or cuda:N");
}

}  // namespace h3
