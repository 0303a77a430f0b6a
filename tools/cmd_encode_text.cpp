// h3 encode-text: the conditioner's features of prompts, as the DiT receives them
// (`encoder_hidden_states`, [L, text_dim]: the t2va presentation of the prompt through the
// tokenizer and the conditioner to its read-out layer), written to one safetensors file. Training
// and analysis tools read the engine's own features instead of re-implementing the conditioner.
// Runs the generation's first two stages (prepare, encode) per prompt: the same path as
// `h3 generate`.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "core/device.h"
#include "core/status.h"
#include "io/repo.h"
#include "io/safetensors.h"
#include "io/sha256.h"
#include "pipeline/engine.h"
#include "pipeline/generate.h"

namespace {

using h3::ErrorCode;
namespace pl = h3::pipeline;

void print_help() {
  std::printf(
      "usage: h3 encode-text --model DIR (--prompt TEXT ... | --prompts FILE.json) --out FILE\n"
      "                      [--device D]\n\n"
      "Writes the conditioner's features of each prompt as the DiT receives them in t2va\n"
      "(encoder_hidden_states [L, text_dim], float32) to a safetensors file: tensors\n"
      "`prompt.<i>.embeds` and `prompt.<i>.input_ids` (int64, the presented token ids) for the\n"
      "i-th prompt, the prompts themselves as a JSON list in the metadata entry `prompts`, and\n"
      "`text_encoder_sha256`, the SHA-256 of text_encoder/model.safetensors.\n\n"
      "  --prompt TEXT     a prompt (repeatable)\n"
      "  --prompts FILE    a JSON list of prompts\n"
      "  --device D        cpu (default) or cuda[:N]\n");
}

int run_encode_text(const std::vector<std::string>& args) {
  std::string model, out, device = "cpu";
  std::vector<std::string> prompts;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
    H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, a,
             " needs a value (see h3 encode-text --help)");
    const std::string& v = args[++i];
    if (a == "--model") {
      model = v;
    } else if (a == "--out") {
      out = v;
    } else if (a == "--device") {
      device = v;
    } else if (a == "--prompt") {
      prompts.push_back(v);
    } else if (a == "--prompts") {
      const nlohmann::json j = h3::io::read_json_file(v);
      H3_CHECK(j.is_array(), ErrorCode::kInvalidFile, v, ": expected a JSON list of prompts");
      for (const nlohmann::json& p : j) {
        H3_CHECK(p.is_string(), ErrorCode::kInvalidFile, v, ": every entry must be a string, got ",
                 p.dump());
        prompts.push_back(p.get<std::string>());
      }
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", a, "' (see h3 encode-text --help)");
    }
  }
  H3_CHECK(!model.empty(), ErrorCode::kInvalidArgument, "missing --model DIR");
  H3_CHECK(!out.empty(), ErrorCode::kInvalidArgument, "missing --out FILE");
  H3_CHECK(!prompts.empty(), ErrorCode::kInvalidArgument, "missing --prompt or --prompts");
  pl::EngineOptions eo;
  eo.device = h3::parse_device(device);
  pl::Engine engine(model, eo);
  std::vector<h3::io::NamedTensor> tensors;
  for (size_t i = 0; i < prompts.size(); ++i) {
    pl::GenerateRequest req;
    req.prompt = prompts[i];
    req.workflow = "t2va";
    // The features do not depend on the canvas: the smallest one keeps the packing and draws of
    // the encode stage cheap.
    req.height = 32;
    req.width = 32;
    req.num_frames = 5;
    req.allow_any_duration = true;
    req.num_inference_steps = 2;
    pl::GenerateOptions opt;
    pl::Generation g(engine, req, opt);
    g.prepare();
    g.encode();
    const pl::GenerateResult& r = g.result();
    const std::string p = "prompt." + std::to_string(i) + ".";
    tensors.push_back({p + "embeds", r.prompt_embeds});
    tensors.push_back(
        {p + "input_ids",
         h3::Tensor::from_i64(r.input_ids, {static_cast<int64_t>(r.input_ids.size())})});
  }
  std::map<std::string, std::string> meta = {{"prompts", nlohmann::json(prompts).dump()}};
  // The features belong to these conditioner weights: the digest lets a consumer (the tiny
  // model's training) refuse features of another text encoder. A sharded one has no single file.
  const std::filesystem::path te =
      std::filesystem::path(model) / "text_encoder" / "model.safetensors";
  if (std::filesystem::is_regular_file(te))
    meta["text_encoder_sha256"] = h3::io::sha256_file_hex(te.string());
  h3::io::write_safetensors(out, tensors, meta);
  std::printf("wrote %s: %zu prompt(s)\n", out.c_str(), prompts.size());
  return 0;
}

}  // namespace

H3_COMMAND("encode-text", "the conditioner's features of prompts, as the DiT receives them",
           run_encode_text);
