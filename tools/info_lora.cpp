// `h3 info --lora FILE`: what a LoRA adapter changes in the transformer and which of its tensors
// match nothing, from the file alone (against the released transformer's shapes, or a
// repository's with --model). Nothing is loaded onto a device.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/repo.h"
#include "models/h3_dit/dit_config.h"
#include "models/h3_dit/dit_lora.h"
#include "models/tiny_model.h"

namespace h3::cli {

int run_info_lora(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  std::string model;
  bool as_json = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--lora") {
      H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, "--lora needs a FILE");
      files.push_back(args[++i]);
    } else if (a == "--model") {
      H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, "--model needs a folder");
      model = args[++i];
    } else if (a == "--json") {
      as_json = true;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: h3 info --lora FILE [--lora FILE ...] [--model DIR] [--json]\n\n"
          "Reads LoRA adapters as `h3 generate --lora` does and lists what each changes: its\n"
          "layout, the transformer tensors it updates (low-rank, diff or set) by module family\n"
          "with ranks and alphas, and the tensors that match no module (which generate refuses\n"
          "unless --lora-allow-unmatched). Shapes are checked against the released transformer,\n"
          "or against DIR's transformer with --model. Exit status 1 when a file is refused or\n"
          "has unmatched tensors.\n");
      return 0;
    } else {
      fail(ErrorCode::kInvalidArgument, "unexpected argument '", a,
           "' (see h3 info --lora --help)");
    }
  }
  H3_CHECK(!files.empty(), ErrorCode::kInvalidArgument,
           "missing adapter (usage: h3 info --lora FILE [--model DIR])");
  dit::DitConfig config;
  std::string against = "the released transformer";
  if (!model.empty()) {
    const io::Repository repo = io::Repository::open(model);
    const std::string component = repo.has("transformer") ? "transformer" : "transformer_ref";
    H3_CHECK(repo.has(component), ErrorCode::kNotFound, model, ": no transformer component");
    config = dit::DitConfig::load(repo.component(component).folder);
    against = repo.component(component).folder;
  } else {
    config = dit::DitConfig::from_json(models::make_tiny_config("transformer", true),
                                       "released transformer config");
  }
  dit::LoraReadOptions ro;
  ro.allow_unmatched = true;  // listed, not refused: this command is how one finds them
  nlohmann::json out = nlohmann::json::array();
  bool clean = true;
  for (const std::string& file : files) {
    const dit::LoraAdapter a = dit::read_lora(file, config, ro);
    clean &= a.unmatched.empty();
    if (!as_json) {
      std::printf("%s", dit::describe_lora(a).c_str());
      std::printf("  checked against: %s\n", against.c_str());
      continue;
    }
    nlohmann::json j;
    j["file"] = a.file;
    j["layout"] = a.layout;
    j["sets_vsa_gates"] = a.sets_vsa_gates;
    j["unmatched"] = a.unmatched;
    nlohmann::json updates = nlohmann::json::array();
    for (const dit::LoraUpdate& u : a.updates) {
      nlohmann::json e = {
          {"target", u.target}, {"kind", dit::lora_update_kind_name(u.kind)}, {"source", u.source}};
      if (u.kind == dit::LoraUpdateKind::kLowRank) {
        e["rank"] = u.rank;
        e["alpha"] = u.alpha;
      }
      if (!u.partition.empty()) e["partition"] = u.partition;
      updates.push_back(std::move(e));
    }
    j["updates"] = std::move(updates);
    out.push_back(std::move(j));
  }
  if (as_json) std::printf("%s\n", out.dump(2).c_str());
  return clean ? 0 : 1;
}

}  // namespace h3::cli
