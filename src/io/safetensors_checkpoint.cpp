// Checkpoint: one safetensors file or the shards named by a `*.safetensors.index.json`.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/status.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "io/weight_fill.h"
#include "io/strict_json.h"

namespace h3::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexSuffix = ".safetensors.index.json";
constexpr const char* kFileSuffix = ".safetensors";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The one checkpoint entry point in a folder: its index if it has exactly one, else its only
// .safetensors file. Anything else is ambiguous and named in the error.
std::string pick_in_folder(const std::string& dir) {
  std::vector<std::string> indexes, files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (ends_with(name, kIndexSuffix)) indexes.push_back(name);
    if (ends_with(name, kFileSuffix)) files.push_back(name);
  }
  H3_CHECK(!ec, ErrorCode::kIo, dir, ": cannot list folder: ", ec.message());
  std::sort(indexes.begin(), indexes.end());
  std::sort(files.begin(), files.end());
  const auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
  };
  H3_CHECK(indexes.size() <= 1, ErrorCode::kInvalidFile, dir, ": ", indexes.size(),
           " shard indexes (", join(indexes), "), expected at most one");
  if (indexes.size() == 1) return (fs::path(dir) / indexes[0]).string();
  H3_CHECK(!files.empty(), ErrorCode::kNotFound, dir,
           ": no *.safetensors or *.safetensors.index.json file in this folder");
  H3_CHECK(files.size() == 1, ErrorCode::kInvalidFile, dir, ": ", files.size(),
           " .safetensors files (", join(files), ") and no index naming the shards, expected one");
  return (fs::path(dir) / files[0]).string();
}

// Shard names come from a file we do not trust: keep them inside the index's folder.
void check_shard_name(const std::string& index_path, const std::string& tensor,
                      const std::string& shard) {
  const fs::path p(shard);
  bool ok = !shard.empty() && p.is_relative();
  for (const auto& part : p) ok = ok && part != "..";
  H3_CHECK(ok, ErrorCode::kInvalidFile, index_path, ": weight_map entry '", tensor,
           "' names shard '", shard,
           "' (expected a file name relative to the index's folder, without '..')");
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path) {
  struct stat st {};
  H3_CHECK(::stat(path.c_str(), &st) == 0, ErrorCode::kNotFound, path,
           ": checkpoint not found (expected a .safetensors file, an index or a folder)");
  const std::string entry = S_ISDIR(st.st_mode) ? pick_in_folder(path) : path;

  Checkpoint ck;
  ck.source_ = entry;
  if (!ends_with(entry, ".index.json")) {
    ck.files_.push_back(SafetensorsFile::open(entry));
    ck.owner_.reserve(ck.files_[0]->tensors().size());
    for (const TensorInfo& t : ck.files_[0]->tensors()) ck.owner_.emplace(t.name, 0);
    return ck;
  }

  // Sharded: {"metadata": {...}, "weight_map": {tensor: shard file}}. The metadata (total_size,
  // ...) is informational and not checked: writers disagree on what it counts.
  const auto index_file = MappedFile::open(entry);
  const nlohmann::json root =
      parse_strict_json(index_file->data(), index_file->size(), entry, "index", 8);
  H3_CHECK(root.is_object(), ErrorCode::kInvalidFile, entry,
           ": index must be a JSON object with \"weight_map\", found ", json_type_name(root));
  const auto wm = root.find("weight_map");
  H3_CHECK(wm != root.end() && wm->is_object(), ErrorCode::kInvalidFile, entry,
           ": index needs a \"weight_map\" object of tensor name -> shard file");
  std::map<std::string, std::string> shard_of;
  std::map<std::string, std::vector<std::string>> tensors_of;  // shard -> names, sorted map order
  for (const auto& [name, shard] : wm->items()) {
    H3_CHECK(shard.is_string(), ErrorCode::kInvalidFile, entry, ": weight_map entry '", name,
             "' is ", json_type_name(shard), " (expected a shard file name)");
    const std::string& s = shard.get_ref<const std::string&>();
    check_shard_name(entry, name, s);
    shard_of.emplace(name, s);
    tensors_of[s].push_back(name);
  }
  const fs::path dir = fs::path(entry).parent_path();
  std::map<std::string, size_t> file_index;
  for (const auto& [shard, names] : tensors_of) {
    const std::string shard_path = (dir / shard).string();
    H3_CHECK(fs::exists(shard_path), ErrorCode::kNotFound, entry, ": shard '", shard, "' (holding ",
             names.size(), " tensors, e.g. '", names.front(), "') not found at ", shard_path);
    file_index.emplace(shard, ck.files_.size());
    ck.files_.push_back(SafetensorsFile::open(shard_path));
  }
  // The map and the shards must describe the same set of tensors, each in exactly one place.
  for (const auto& [name, shard] : shard_of) {
    const size_t fi = file_index.at(shard);
    H3_CHECK(ck.files_[fi]->has(name), ErrorCode::kInvalidFile, entry, ": tensor '", name,
             "' is listed in weight_map for shard '", shard, "' but ", ck.files_[fi]->path(),
             " does not hold it");
    ck.owner_.emplace(ck.files_[fi]->info(name).name, fi);
  }
  for (const auto& [shard, fi] : file_index) {
    for (const TensorInfo& t : ck.files_[fi]->tensors()) {
      const auto it = shard_of.find(t.name);
      H3_CHECK(it != shard_of.end(), ErrorCode::kInvalidFile, entry, ": tensor '", t.name,
               "' in shard ", ck.files_[fi]->path(), " is not listed in weight_map");
      H3_CHECK(it->second == shard, ErrorCode::kInvalidFile, entry, ": tensor '", t.name,
               "' is held by shard '", shard, "' but weight_map assigns it to '", it->second,
               "' (a name must live in one shard)");
    }
  }
  return ck;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(owner_.size());
  for (const auto& kv : owner_) out.emplace_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

bool Checkpoint::has(const std::string& name) const { return owner_.count(name) != 0; }

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  const auto it = owner_.find(name);
  H3_CHECK(it != owner_.end(), ErrorCode::kNotFound, source_, ": no tensor named '", name,
           "' in the checkpoint (", owner_.size(), " tensors)");
  return *files_[it->second];
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  return file_of(name).info(name);
}

Tensor Checkpoint::tensor(const std::string& name) const {
  Tensor t = file_of(name).tensor(name);
  return weight_fill() ? apply_weight_fill(source_, name, std::move(t)) : t;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& f : files_) {
    for (const TensorInfo& t : f->tensors()) total += t.nbytes;
  }
  return total;
}

}  // namespace h3::io
