// h3 info PATH [--json]: lists a MiniMax-H3 repository's components with their classes, parameter
// counts and bytes by dtype, after validating every weight file's header and checking each
// checkpoint against its tensor schema. Exit 0 when everything is usable, 1 otherwise.
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "core/status.h"
#include "models/schema.h"

namespace {

constexpr size_t kMaxListed = 12;  // problems printed per component in text mode

std::string with_commas(int64_t n) {
  // Built front to back (GCC 12 misreports std::string::insert here under -Wrestrict).
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string s = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string human_params(int64_t n) {
  char buf[32];
  if (n >= 1'000'000'000) {
    std::snprintf(buf, sizeof(buf), "%.2f B", static_cast<double>(n) / 1e9);
  } else if (n >= 1'000'000) {
    std::snprintf(buf, sizeof(buf), "%.2f M", static_cast<double>(n) / 1e6);
  } else if (n >= 1'000) {
    std::snprintf(buf, sizeof(buf), "%.1f K", static_cast<double>(n) / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(n));
  }
  return buf;
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(n));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void print_list(const char* label, const std::vector<std::string>& items) {
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) {
    std::printf("    %s: %s\n", label, items[i].c_str());
  }
  if (items.size() > kMaxListed) {
    std::printf("    ... and %zu more %s(s)\n", items.size() - kMaxListed, label);
  }
}

void print_text(const h3::models::RepositoryReport& r) {
  std::printf("MiniMax-H3 repository %s\n", r.root.c_str());
  if (!r.index_file.empty()) {
    std::printf("  index: %s (%s)\n", file_name(r.index_file).c_str(),
                r.pipeline_class.empty() ? "no _class_name" : r.pipeline_class.c_str());
    std::string cfg;
    for (const auto& [k, v] : r.pipeline_config.items()) {
      if (!k.empty() && k[0] == '_') continue;
      cfg += (cfg.empty() ? "" : ", ") + k + "=" + v.dump();
    }
    if (!cfg.empty()) std::printf("  pipeline config: %s\n", cfg.c_str());
  }
  std::printf("\n");
  for (const auto& c : r.components) {
    std::printf("%-16s %-32s", c.name.c_str(), c.class_name.c_str());
    if (!c.weights.empty()) {
      std::printf(" %s params, %s\n", with_commas(c.params).c_str(), human_bytes(c.bytes).c_str());
      std::string dts;
      for (const auto& t : c.by_dtype) {
        dts += (dts.empty() ? "" : ", ") + std::string(h3::dtype_name(t.dtype)) + " " +
               human_params(t.params) + " (" + human_bytes(t.bytes) + ")";
      }
      std::printf("    weights: %s, %lld file(s) %s, %lld tensors%s%s\n",
                  file_name(c.weights).c_str(), static_cast<long long>(c.files),
                  human_bytes(c.file_bytes).c_str(), static_cast<long long>(c.tensors),
                  dts.empty() ? "" : ": ", dts.c_str());
      if (c.check) {
        const auto& k = *c.check;
        if (k.ok()) {
          std::printf("    schema: ok, %lld/%lld tensors", static_cast<long long>(k.matched),
                      static_cast<long long>(c.schema_tensors));
        } else {
          std::printf("    schema: %zu missing, %zu unexpected, %zu misshapen, %zu wrong dtype",
                      k.missing.size(), k.unexpected.size(), k.misshapen.size(),
                      k.bad_dtype.size());
        }
        if (k.fp8_weights > 0) {
          std::printf(" (%lld projections in FP8 with their scales)",
                      static_cast<long long>(k.fp8_weights));
        }
        if (k.skipped > 0) {
          std::printf(" (%lld stored but not loaded; the engine uses %s params)",
                      static_cast<long long>(k.skipped), human_params(c.used_params).c_str());
        }
        std::printf("\n");
      }
    } else {
      std::printf(" %s\n", c.summary.c_str());
    }
    print_list("error", c.errors);
    print_list("warning", c.warnings);
  }
  for (const auto& e : r.errors) std::printf("error: %s\n", e.c_str());
  std::printf("\ntotal: %s params, %s in %zu components\n", with_commas(r.total_params()).c_str(),
              human_bytes(r.total_bytes()).c_str(), r.components.size());
}

}  // namespace

namespace h3::cli {
int run_info_vsa(const std::vector<std::string>& args);
int run_info_plan(const std::vector<std::string>& args);
int run_info_lora(const std::vector<std::string>& args);
}  // namespace h3::cli

namespace {

int run_info(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--vsa") return h3::cli::run_info_vsa(args);
    if (a == "--plan") return h3::cli::run_info_plan(args);
    if (a == "--lora") return h3::cli::run_info_lora(args);
  }
  std::string path;
  bool as_json = false;
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: h3 info PATH [--json]\n"
          "       h3 info --vsa [...]   (VSA-H3 tiling of a request; h3 info --vsa --help)\n"
          "       h3 info --plan PATH [...]   (memory plan of a request; h3 info --plan --help)\n"
          "       h3 info --lora FILE [...]   (what a LoRA adapter changes; h3 info --lora "
          "--help)\n\n"
          "Checks a MiniMax-H3 repository: the index, every component's config, every weight\n"
          "file's header and each checkpoint against its tensor schema. Prints components,\n"
          "parameter counts and bytes by dtype. Exit status 0 when no error was found.\n\n"
          "  --json   print the report as JSON\n");
      return 0;
    }
    if (a == "--json") {
      as_json = true;
    } else if (!a.empty() && a[0] == '-') {
      h3::fail(h3::ErrorCode::kInvalidArgument, "unknown option '", a, "' (see h3 info --help)");
    } else {
      H3_CHECK(path.empty(), h3::ErrorCode::kInvalidArgument, "expected one repository path, got '",
               path, "' and '", a, "'");
      path = a;
    }
  }
  H3_CHECK(!path.empty(), h3::ErrorCode::kInvalidArgument,
           "missing repository path (usage: h3 info PATH [--json])");

  const h3::models::RepositoryReport report = h3::models::inspect_repository(path);
  if (as_json) {
    std::printf("%s\n", report.to_json().dump(2).c_str());
  } else {
    print_text(report);
  }
  if (report.ok()) {
    if (!as_json) std::printf("ok: no errors\n");
    return 0;
  }
  // The first problem on stderr too, so that scripts see what failed without parsing the listing.
  std::vector<std::string> all = report.errors;
  for (const auto& c : report.components) {
    all.insert(all.end(), c.errors.begin(), c.errors.end());  // each names its file
  }
  std::fprintf(stderr, "h3 info: error: %s", all.front().c_str());
  if (all.size() > 1) std::fprintf(stderr, " (and %zu more)", all.size() - 1);
  std::fprintf(stderr, "\n");
  return 1;
}

}  // namespace

H3_COMMAND("info", "check a MiniMax-H3 repository and list its components", run_info);
