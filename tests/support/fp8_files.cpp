#include "support/fp8_files.h"

#include <filesystem>

namespace h3::test {

bool ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes) {
  for (const char* s : suffixes) {
    const std::string suffix = std::string(".") + s;
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

bool is_dit_projection(const std::string& name) {
  return ends_with_any(
      name, {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.0.weight",
             "ff.net.0.proj.weight", "ff.net.2.weight", "adaln_proj.linear.weight"});
}

std::string weight_stem(const std::string& weight) {
  return weight.substr(0, weight.size() - std::string(".weight").size());
}

std::string write_fp8_transformer(const std::string& repo, const std::string& out,
                                  const Fp8Store& store) {
  namespace fs = std::filesystem;
  const std::string src = repo + "/transformer";
  fs::create_directories(out);
  fs::copy_file(src + "/config.json", out + "/config.json", fs::copy_options::overwrite_existing);
  const io::Checkpoint ckpt = io::Checkpoint::open(src + "/diffusion_pytorch_model.safetensors");
  std::vector<io::NamedTensor> ts;
  for (const std::string& name : ckpt.names()) {
    const Tensor t = ckpt.tensor(name).to(ckpt.info(name).dtype);  // an owned copy
    if (is_dit_projection(name))
      store(name, t, ts);
    else
      ts.push_back({name, t});
  }
  io::write_safetensors(out + "/diffusion_pytorch_model.safetensors", ts);
  return out;
}

}  // namespace h3::test
