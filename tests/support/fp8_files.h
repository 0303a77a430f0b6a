// FP8 checkpoints written for the tests of models/fp8_checkpoint.h: a tiny transformer whose block
// projections are stored as a test chooses (E4M3 weight plus its scale tensors).
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace h3::test {

// Appends the stored form of one projection `name` (its float weight `w`) to `out`.
using Fp8Store = std::function<void(const std::string& name, const Tensor& w,
                                    std::vector<io::NamedTensor>& out)>;

// Whether `name` ends with ".<suffix>" for one of `suffixes`.
bool ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes);
// Whether `name` is a DiT block projection a checkpoint may store in FP8.
bool is_dit_projection(const std::string& name);
// "P.weight" -> "P".
std::string weight_stem(const std::string& weight);
// REPO/transformer rewritten into OUT (config and weights) with every block projection passed
// through `store`; returns OUT.
std::string write_fp8_transformer(const std::string& repo, const std::string& out,
                                  const Fp8Store& store);

}  // namespace h3::test
