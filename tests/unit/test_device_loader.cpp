// The chunked reader of io/device_loader.h on the CPU (the same code that feeds the CUDA staging
// ring): bytes delivered equal the file's across ring-buffer boundaries, tensors read in file
// order whatever the request order, and the errors (missing tensor, file truncated after opening).
// cuFile (io/cufile.h): a missing library is reported, not fatal, and H3_CUFILE does not change
// CPU loads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/status.h"
#include "io/cufile.h"
#include "io/device_loader.h"
#include "io/safetensors.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace h3::io {
namespace {

// Tensors of mixed dtypes and odd byte sizes, so that spans start and end at every kind of offset
// relative to a (small) staging buffer.
std::vector<NamedTensor> mixed_tensors(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  const DType kinds[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kU8, DType::kI64};
  std::vector<NamedTensor> out;
  for (int i = 0; i < count; ++i) {
    const DType dt = kinds[static_cast<size_t>(i) % 5];
    const int64_t n = 1 + static_cast<int64_t>(rng() % 9000);
    Tensor t = Tensor::empty({n}, dt);
    auto* p = static_cast<uint8_t*>(t.raw());
    for (size_t b = 0; b < t.nbytes(); ++b) p[b] = static_cast<uint8_t>(rng());
    if (dt == DType::kBF16) {  // finite values (no NaN), so conversions compare as numbers
      auto* h = reinterpret_cast<uint16_t*>(p);
      for (int64_t k = 0; k < n; ++k) h[k] &= 0xBFFF;
    }
    std::string name = "t";  // built by appending: GCC 12 warns (-Wrestrict) on "x" + string
    name += std::to_string(i);
    name += '.';
    name += dtype_name(dt);
    out.push_back({name, t});
  }
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(DeviceLoader, HostCopyRoundTripAcrossRingBoundaries) {
  test::TempDir dir("h3_devload");
  const std::string path = (dir.path() / "mixed.safetensors").string();
  const auto tensors = mixed_tensors(97, 7);
  write_safetensors(path, tensors);
  const Checkpoint ck = Checkpoint::open(path);
  // Request in reverse order (the loader sorts by file offset) with a 3 x 4 KiB ring, so nearly
  // every tensor crosses a buffer boundary and every buffer is reused many times.
  std::vector<LoadItem> items;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) items.push_back({it->name, {}});
  for (const uint64_t gap : {uint64_t{0}, uint64_t{1} << 20}) {
    DeviceLoaderOptions o;
    o.host_copy = true;
    o.staging_bytes = 4096;
    o.staging_buffers = 3;
    o.merge_gap = gap;
    DeviceLoader loader(Device::cpu(), o);
    const std::vector<Tensor> got = loader.load(ck, items);
    ASSERT_EQ(got.size(), items.size());
    int mismatches = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const Tensor ref = ck.tensor(items[i].name);
      EXPECT_TRUE(got[i].storage()->owned());
      EXPECT_EQ(got[i].dtype(), ref.dtype());
      if (!same_bytes(got[i], ref)) ++mismatches;
    }
    std::printf("merge_gap=%llu: %zu tensors, %s, mismatches=%d\n",
                static_cast<unsigned long long>(gap), items.size(), loader.stats().str().c_str(),
                mismatches);
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(loader.stats().method, LoadMethod::kPreadHost);
  }
}

// LoadLayout::kPacked: one allocation for the whole request, every tensor 16-byte aligned in it
// (odd sizes break the file's alignment, so most tensors start runs of their own at 256-byte
// boundaries), the same bytes as separate tensors, and the allocation alive while any tensor is.
TEST(DeviceLoader, PackedLayoutSharesOneAllocation) {
  test::TempDir dir("h3_devload");
  const std::string path = (dir.path() / "mixed.safetensors").string();
  const auto tensors = mixed_tensors(61, 5);
  write_safetensors(path, tensors);
  const Checkpoint ck = Checkpoint::open(path);
  DeviceLoaderOptions o;
  o.host_copy = true;
  o.staging_bytes = 4096;
  o.staging_buffers = 2;
  DeviceLoader loader(Device::cpu(), o);
  std::vector<LoadItem> items;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) items.push_back({it->name, {}});
  std::vector<Tensor> got = loader.load(ck, items, LoadLayout::kPacked);
  ASSERT_EQ(got.size(), items.size());
  const std::shared_ptr<Storage> pack = got[0].storage();
  uint64_t padded = 0, at_256 = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Tensor ref = ck.tensor(items[i].name);
    EXPECT_EQ(got[i].storage(), pack) << items[i].name;
    EXPECT_TRUE(got[i].is_contiguous());
    EXPECT_EQ(got[i].shape(), ref.shape());
    const auto offset = static_cast<uint8_t*>(got[i].raw()) - static_cast<uint8_t*>(pack->data());
    EXPECT_EQ(offset % 16, 0) << items[i].name;
    if (offset % 256 == 0) ++at_256;
    EXPECT_TRUE(same_bytes(got[i], ref)) << items[i].name;
    padded += (ref.nbytes() + 255) / 256 * 256;
  }
  EXPECT_GE(at_256, items.size() / 2);  // sizes of 1-9,000 elements: few keep 16-byte offsets
  EXPECT_TRUE(pack->owned());
  EXPECT_LE(pack->bytes(), padded);
  EXPECT_GE(loader.stats().read_seconds, 0.0);
  // The last tensor standing keeps the allocation (and its bytes) alive.
  const Tensor last = got.back();
  const Tensor ref = ck.tensor(items.back().name);
  got.clear();
  EXPECT_EQ(pack.use_count(), 2);  // `pack` and `last`
  EXPECT_TRUE(same_bytes(last, ref));
}

// A file whose tensors keep 16-byte offsets (float32 of multiples of 4 values, as a released
// audio VAE's are): a packed load mirrors it, tensors at their file distances, so that the copies
// out of a staging buffer cover several tensors and the bytes between them (one copy per run and
// chunk). Every other tensor is requested: the unread ones leave holes of their own size, which
// the copies fill with the file's bytes and no tensor uses. A tensor asked for twice and one of
// an odd size start new runs.
TEST(DeviceLoader, PackedLayoutMirrorsAnAlignedFile) {
  test::TempDir dir("h3_devload");
  const std::string path = (dir.path() / "aligned.safetensors").string();
  std::mt19937 rng(3);
  std::vector<NamedTensor> tensors;
  for (int i = 0; i < 40; ++i) {
    const int64_t n = i == 31 ? 3 : 4 * (1 + static_cast<int64_t>(rng() % 700));
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(rng() % 1000) - 500.0f;
    std::string name = "w";  // appended: GCC 12 warns (-Wrestrict) on "w" + string
    name += std::to_string(100 + i);
    tensors.push_back({name, Tensor::from_f32(v, {n})});
  }
  write_safetensors(path, tensors);
  const Checkpoint ck = Checkpoint::open(path);
  std::vector<LoadItem> items;
  for (size_t i = 0; i < tensors.size(); i += 2) items.push_back({tensors[i].name, {}});
  items.push_back({tensors[6].name, {}});  // twice
  for (const uint64_t staging : {uint64_t{4096}, uint64_t{1} << 20}) {
    DeviceLoaderOptions o;
    o.host_copy = true;
    o.staging_bytes = staging;
    o.staging_buffers = 2;
    DeviceLoader loader(Device::cpu(), o);
    const std::vector<Tensor> got = loader.load(ck, items, LoadLayout::kPacked);
    ASSERT_EQ(got.size(), items.size());
    const auto* base = static_cast<const uint8_t*>(got[0].storage()->data());
    auto at = [&](size_t i) { return static_cast<const uint8_t*>(got[i].raw()) - base; };
    for (size_t i = 0; i < items.size(); ++i) {
      EXPECT_TRUE(same_bytes(got[i], ck.tensor(items[i].name))) << items[i].name;
      EXPECT_EQ(at(i) % 16, 0) << items[i].name;
    }
    // Tensors 0, 2, ..., 30 are one run: the file's distances, from a 256-byte start.
    EXPECT_EQ(at(0) % 256, 0);
    for (size_t i = 1; i <= 15; ++i)
      EXPECT_EQ(at(i) - at(0), static_cast<std::ptrdiff_t>(ck.info(items[i].name).begin -
                                                           ck.info(items[0].name).begin))
          << items[i].name;
    // Tensor 31 (3 values) was not requested, but after it the offsets are 4 bytes off: tensor
    // 32 starts a run, and so does the second copy of tensor 6, both at 256-byte boundaries.
    EXPECT_EQ(at(16) % 256, 0);
    EXPECT_NE(at(16) - at(0), static_cast<std::ptrdiff_t>(ck.info(items[16].name).begin -
                                                          ck.info(items[0].name).begin));
    EXPECT_EQ(at(items.size() - 1) % 256, 0);
    EXPECT_NE(at(items.size() - 1), at(3));
  }
}

TEST(DeviceLoader, SubsetWithGapsAndConversion) {
  test::TempDir dir("h3_devload");
  const std::string path = (dir.path() / "mixed.safetensors").string();
  const auto tensors = mixed_tensors(40, 11);
  write_safetensors(path, tensors);
  const Checkpoint ck = Checkpoint::open(path);
  DeviceLoaderOptions o;
  o.host_copy = true;
  o.staging_bytes = 8192;
  o.staging_buffers = 2;
  o.merge_gap = 0;  // every third tensor: separate ranges
  DeviceLoader loader(Device::cpu(), o);
  std::vector<LoadItem> items;
  for (size_t i = 0; i < tensors.size(); i += 3) items.push_back({tensors[i].name, {}});
  const auto got = loader.load(ck, items);
  for (size_t i = 0; i < items.size(); ++i)
    EXPECT_TRUE(same_bytes(got[i], ck.tensor(items[i].name))) << items[i].name;
  // A bf16 tensor widened to float32 equals the CPU conversion.
  const std::string bf = tensors[1].name;
  const Tensor wide = loader.load_one(ck, bf, DType::kF32);
  EXPECT_EQ(wide.dtype(), DType::kF32);
  EXPECT_EQ(wide.to_f32_vector(), ck.tensor(bf).to_f32_vector());
}

TEST(DeviceLoader, CpuDefaultBorrowsTheMapping) {
  test::TempDir dir("h3_devload");
  const std::string path = (dir.path() / "m.safetensors").string();
  write_safetensors(path, mixed_tensors(5, 3));
  const Checkpoint ck = Checkpoint::open(path);
  const LoadStats before = device_load_totals();
  const Tensor t = load_tensor_to(ck, "t0.f32", Device::cpu());
  EXPECT_FALSE(t.storage()->owned());  // the mmap view, no copy
  EXPECT_EQ(device_load_totals().bytes - before.bytes, t.nbytes());
  EXPECT_EQ(device_load_totals().method, LoadMethod::kMmap);
}

TEST(DeviceLoader, MissingTensorIsNamed) {
  test::TempDir dir("h3_devload");
  const std::string path = (dir.path() / "m.safetensors").string();
  write_safetensors(path, mixed_tensors(5, 3));
  const Checkpoint ck = Checkpoint::open(path);
  DeviceLoaderOptions o;
  o.host_copy = true;
  DeviceLoader loader(Device::cpu(), o);
  try {
    loader.load(ck, {{"t0.f32", {}}, {"no.such.weight", {}}});
    FAIL() << "expected kNotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("no.such.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.safetensors"), std::string::npos) << e.what();
  }
}

TEST(DeviceLoader, FileTruncatedAfterOpeningIsAnIoError) {
  test::TempDir dir("h3_devload");
  const std::string path = (dir.path() / "m.safetensors").string();
  const auto tensors = mixed_tensors(30, 5);
  write_safetensors(path, tensors);
  const Checkpoint ck = Checkpoint::open(path);  // header validated against the full size
  const uint64_t size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  DeviceLoaderOptions o;
  o.host_copy = true;
  o.staging_bytes = 4096;
  DeviceLoader loader(Device::cpu(), o);
  std::vector<LoadItem> items;
  for (const auto& t : tensors) items.push_back({t.name, {}});
  try {
    loader.load(ck, items);
    FAIL() << "expected kIo";
  } catch (const Error& e) {
    std::printf("message: %s\n", e.what());
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(DeviceLoader, CudaTargetWithoutCudaIsUnsupported) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a CUDA device";
  test::TempDir dir("h3_devload");
  const std::string path = (dir.path() / "m.safetensors").string();
  write_safetensors(path, mixed_tensors(2, 3));
  const Checkpoint ck = Checkpoint::open(path);
  try {
    load_tensor_to(ck, "t0.f32", Device::cuda(0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
}

using ::h3::test::ScopedEnv;

TEST(DeviceLoader, MissingCufileLibraryIsReportedNotFatal) {
  const std::string missing = "/nonexistent/h3-test/libcufile.so.0";
  ScopedEnv lib("H3_CUFILE_LIBRARY", missing.c_str());
  const CufileInfo& info = cufile_probe(0);
  std::printf("probe: available=%d reason: %s\n", info.available ? 1 : 0, info.reason.c_str());
  EXPECT_FALSE(info.available);
  EXPECT_FALSE(info.reason.empty());
  // CUDA builds name the library they could not load; CPU builds say there is no CUDA.
  EXPECT_TRUE(info.reason.find(missing) != std::string::npos ||
              info.reason.find("CUDA") != std::string::npos)
      << info.reason;
  EXPECT_THROW(cufile_read_spans("/nonexistent/x.safetensors", {}, 0, 1), Error);
  EXPECT_STREQ(load_method_name(LoadMethod::kCufile), "cufile");
  EXPECT_STREQ(load_method_name(LoadMethod::kCufileCompat), "cufile-compat");
}

TEST(DeviceLoader, CufileSettingDoesNotAffectCpuLoads) {
  ScopedEnv force("H3_CUFILE", "1");
  ScopedEnv lib("H3_CUFILE_LIBRARY", "/nonexistent/h3-test/libcufile.so.0");
  test::TempDir dir("h3_devload_cufile");
  const std::string path = (dir.path() / "c.safetensors").string();
  const auto tensors = mixed_tensors(20, 3);
  write_safetensors(path, tensors);
  const Checkpoint ck = Checkpoint::open(path);
  DeviceLoaderOptions o;
  o.host_copy = true;
  o.staging_bytes = 8192;
  DeviceLoader loader(Device::cpu(), o);
  const Tensor t = loader.load_one(ck, tensors[7].name);
  EXPECT_EQ(loader.stats().method, LoadMethod::kPreadHost);
  ASSERT_EQ(t.nbytes(), tensors[7].tensor.nbytes());
  EXPECT_EQ(std::memcmp(t.raw(), tensors[7].tensor.raw(), t.nbytes()), 0);
}

}  // namespace
}  // namespace h3::io
