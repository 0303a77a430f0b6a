#include "text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/status.h"

namespace h3::text {

void Normalizer::collect(const nlohmann::json& spec, const std::string& label,
                         const std::string& field, int depth, std::vector<Form>* forms) {
  if (spec.is_null()) return;
  H3_CHECK(depth < 16, ErrorCode::kInvalidFile, label, ": ", field, " nests Sequence normalizers too deeply");
  H3_CHECK(spec.is_object() && spec.contains("type") && spec["type"].is_string(),
           ErrorCode::kInvalidFile, label, ": ", field, " must be an object with a string \"type\"");
  const std::string type = spec["type"].get<std::string>();
  if (type == "NFC") {
    forms->push_back(Form::kNFC);
  } else if (type == "NFD") {
    forms->push_back(Form::kNFD);
  } else if (type == "NFKC") {
    forms->push_back(Form::kNFKC);
  } else if (type == "NFKD") {
    forms->push_back(Form::kNFKD);
  } else if (type == "Sequence") {
    H3_CHECK(spec.contains("normalizers") && spec["normalizers"].is_array(), ErrorCode::kInvalidFile,
             label, ": ", field, " of type Sequence needs a \"normalizers\" array");
    const auto& list = spec["normalizers"];
    for (size_t i = 0; i < list.size(); ++i) {
      collect(list[i], label, str_cat(field, ".normalizers[", i, "]"), depth + 1, forms);
    }
  } else {
    fail(ErrorCode::kUnsupported, label, ": ", field, " has type \"", type,
         "\"; supported normalizers are NFC, NFD, NFKC, NFKD and Sequence");
  }
}

Normalizer Normalizer::from_json(const nlohmann::json& spec, const std::string& label) {
  Normalizer n;
  collect(spec, label, "normalizer", 0, &n.forms_);
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  for (const Form f : forms_) {
    if (cur.empty()) break;
    int options = UTF8PROC_STABLE;
    switch (f) {
      case Form::kNFC: options |= UTF8PROC_COMPOSE; break;
      case Form::kNFD: options |= UTF8PROC_DECOMPOSE; break;
      case Form::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
      case Form::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()),
                     static_cast<utf8proc_ssize_t>(cur.size()), &out,
                     static_cast<utf8proc_option_t>(options));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
    if (n < 0) {
      if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
      fail(ErrorCode::kInvalidArgument, "text normalization failed: ", utf8proc_errmsg(n));
    }
    cur.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  }
  return cur;
}

}  // namespace h3::text
