// The DiT model on a small random checkpoint written here: loading rules (names, shapes, variants),
// packed-layout validation, and properties of the forward that must hold whatever the weights:
// the packed row order is irrelevant (one unmasked document), the cached text path equals the
// one-call path, and the bf16 policies stay close to float32 without being equal to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <unistd.h>

#include "core/status.h"
#include "io/safetensors.h"
#include "models/h3_dit/dit_model.h"
#include "support/golden.h"
#include "support/small_dit.h"

namespace h3::dit {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConfig = test::kSmallDitConfig;
using test::random_tensor;

// Writes a checkpoint of the released layout for kConfig; `edit` may change the tensor list.
class TinyDit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("h3_test_dit_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    config_ = DitConfig::from_json(nlohmann::json::parse(kConfig), "config.json");
    std::mt19937 rng(1234);
    tensors_.clear();
    for (const DitTensorSpec& s : dit_tensor_specs(config_)) {
      const bool is_norm = s.name.find("norm") != std::string::npos && s.shape.size() == 1 &&
                           s.name.find("linear") == std::string::npos;
      const bool is_bias = s.name.find(".bias") != std::string::npos;
      const float fan_in = s.shape.size() == 2 ? static_cast<float>(s.shape[1]) : 1.0f;
      const DType dt = s.fp32_island ? DType::kF32 : DType::kBF16;
      if (is_norm) {
        tensors_.push_back({s.name, random_tensor(s.shape, rng, 1.0f, 0.1f, dt)});
      } else if (is_bias) {
        tensors_.push_back({s.name, random_tensor(s.shape, rng, 0.0f, 0.1f, dt)});
      } else {
        tensors_.push_back({s.name, random_tensor(s.shape, rng, 0.0f, 1.0f / std::sqrt(fan_in), dt)});
      }
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write() {
    std::ofstream(dir_ / "config.json") << kConfig;
    io::write_safetensors((dir_ / "diffusion_pytorch_model.safetensors").string(), tensors_);
    return dir_.string();
  }

  // A small packed sequence: 5 text rows, 6 video rows (2 condition), 4 audio rows, three timesteps.
  DitInputs inputs() const {
    std::mt19937 rng(99);
    DitInputs in;
    const int64_t nt = 5, nv = 6, na = 4, s = nt + nv + na;
    in.encoder_hidden_states = random_tensor({1, nt, 8}, rng, 0, 1, DType::kF32);
    in.hidden_states = random_tensor({1, nv, 16}, rng, 0, 1, DType::kF32);
    in.audio_hidden_states = random_tensor({1, na, 6}, rng, 0, 1, DType::kF32);
    in.timestep = Tensor::from_f32({0.25f, 0.5f, 0.999f}, {3});
    std::vector<int64_t> text(nt), video(nv), audio(na), tags(s), ti(s);
    std::iota(text.begin(), text.end(), 0);
    // [text | condition video (2) | audio | target video (4)]
    for (int64_t i = 0; i < 2; ++i) video[i] = nt + i;
    for (int64_t i = 0; i < na; ++i) audio[i] = nt + 2 + i;
    for (int64_t i = 2; i < nv; ++i) video[i] = nt + na + i;
    std::vector<double> pos(static_cast<size_t>(s * 3));
    for (int64_t r = 0; r < s; ++r) {
      pos[r * 3 + 0] = static_cast<double>(r) * 1.5;
      pos[r * 3 + 1] = static_cast<double>(r % 3) - 0.25;
      pos[r * 3 + 2] = static_cast<double>(r % 2) * 3.5;
    }
    for (int64_t r = 0; r < nt; ++r) { tags[r] = 1; ti[r] = 1; }
    for (int64_t i = 0; i < nv; ++i) { tags[video[i]] = 0; ti[video[i]] = i < 2 ? 2 : 1; }
    for (int64_t i = 0; i < na; ++i) { tags[audio[i]] = 2; ti[audio[i]] = 0; }
    in.text_indices = Tensor::from_i64(text, {nt});
    in.video_indices = Tensor::from_i64(video, {nv});
    in.audio_indices = Tensor::from_i64(audio, {na});
    in.token_tags = Tensor::from_i64(tags, {s});
    in.timestep_indices = Tensor::from_i64(ti, {s});
    Tensor p = Tensor::empty({s, 3}, DType::kF64);
    std::copy(pos.begin(), pos.end(), p.data<double>());
    in.position_ids = p;
    return in;
  }

  fs::path dir_;
  DitConfig config_;
  std::vector<io::NamedTensor> tensors_;
};

template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
    std::printf("  error: %s\n", e.what());
  }
}

bool all_finite(const Tensor& t) {
  for (float v : t.to_f32_vector()) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

TEST_F(TinyDit, ForwardShapesAndPrecisions) {
  const std::string dir = write();
  const DitModel m32 = DitModel::load(dir, {Device::cpu(), DitPrecision::kF32, DitRounding::kEager});
  EXPECT_EQ(m32.weights().blocks.size(), 2u);
  EXPECT_EQ(m32.weights().blocks[0].adaln_w.dtype(), DType::kF32);  // widened
  const DitInputs in = inputs();
  const DitOutputs o32 = m32.forward(in);
  EXPECT_EQ(o32.video.shape(), (Shape{6, 16}));
  EXPECT_EQ(o32.audio.shape(), (Shape{4, 6}));
  EXPECT_EQ(o32.video.dtype(), DType::kF32);
  EXPECT_TRUE(all_finite(o32.video) && all_finite(o32.audio));

  const DitModel mbf = DitModel::load(dir, {Device::cpu(), DitPrecision::kBF16, DitRounding::kEager});
  EXPECT_EQ(mbf.weights().blocks[0].adaln_w.dtype(), DType::kBF16);
  EXPECT_EQ(mbf.weights().proj_in_w.dtype(), DType::kF32);  // fp32 island
  const DitOutputs obf = mbf.forward(in);
  EXPECT_EQ(obf.video.dtype(), DType::kF32);
  // bf16 activations must change the result (the emulation really rounds) but stay close.
  const test::Metrics mv = test::compare(obf.video, o32.video);
  const test::Metrics ma = test::compare(obf.audio, o32.audio);
  std::printf("bf16 eager vs f32: video %s | audio %s\n", test::format_metrics(mv).c_str(),
              test::format_metrics(ma).c_str());
  EXPECT_GT(mv.rel_l2, 1e-6);
  EXPECT_LT(mv.rel_l2, 5e-2);
  EXPECT_LT(ma.rel_l2, 5e-2);

  const DitModel mfu = DitModel::load(dir, {Device::cpu(), DitPrecision::kBF16, DitRounding::kFused});
  const DitOutputs ofu = mfu.forward(in);
  const test::Metrics mf = test::compare(ofu.video, obf.video);
  std::printf("bf16 fused vs eager: video %s\n", test::format_metrics(mf).c_str());
  EXPECT_LT(mf.rel_l2, 2e-2);
}

TEST_F(TinyDit, CachedTextEqualsOneCall) {
  const DitModel m = DitModel::load(write(), {});
  const DitInputs in = inputs();
  const DitOutputs once = m.forward(in);
  const DitTextContext text = m.encode_text(in.encoder_hidden_states);
  const DitLayout layout =
      m.make_layout(in.position_ids, in.token_tags, in.video_indices, in.audio_indices, in.text_indices);
  // Two steps with the same cached text and layout give the same bits as the one-call form.
  for (int step = 0; step < 2; ++step) {
    const DitOutputs o = m.forward(text, layout, in.hidden_states, in.audio_hidden_states,
                                   in.timestep, in.timestep_indices);
    EXPECT_EQ(o.video.to_f32_vector(), once.video.to_f32_vector());
    EXPECT_EQ(o.audio.to_f32_vector(), once.audio.to_f32_vector());
  }
  // A different timestep must change the output (the AdaLN path is live).
  const DitOutputs other = m.forward(text, layout, in.hidden_states, in.audio_hidden_states,
                                     Tensor::from_f32({0.1f, 0.5f, 0.999f}, {3}), in.timestep_indices);
  EXPECT_GT(test::compare(other.audio, once.audio).rel_l2, 1e-4);
}

// One unmasked document: permuting the packed rows (with their positions, tags and timestep
// indices, and the index tensors pointing at the new places) must not change any velocity.
TEST_F(TinyDit, PackedRowOrderIsIrrelevant) {
  const DitModel m = DitModel::load(write(), {});
  const DitInputs in = inputs();
  const DitOutputs ref = m.forward(in);

  const int64_t s = in.token_tags.numel();
  std::vector<int64_t> perm(static_cast<size_t>(s));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(perm.begin(), perm.end(), rng);  // old row r goes to perm[r]
  auto remap = [&](const Tensor& idx) {
    std::vector<int64_t> v = idx.to_i64_vector();
    for (int64_t& x : v) x = perm[static_cast<size_t>(x)];
    return Tensor::from_i64(v, {static_cast<int64_t>(v.size())});
  };
  auto move_rows = [&](const Tensor& t) {
    Tensor out = t.clone();
    const int64_t w = t.numel() / s;
    const size_t es = dtype_size(t.dtype());
    for (int64_t r = 0; r < s; ++r) {
      std::memcpy(static_cast<uint8_t*>(out.raw()) + perm[r] * w * es,
                  static_cast<const uint8_t*>(t.raw()) + r * w * es, w * es);
    }
    return out;
  };
  DitInputs p = in;
  p.text_indices = remap(in.text_indices);
  p.video_indices = remap(in.video_indices);
  p.audio_indices = remap(in.audio_indices);
  p.token_tags = move_rows(in.token_tags);
  p.timestep_indices = move_rows(in.timestep_indices);
  p.position_ids = move_rows(in.position_ids);
  const DitOutputs got = m.forward(p);
  const test::Metrics mv = test::compare(got.video, ref.video);
  const test::Metrics ma = test::compare(got.audio, ref.audio);
  std::printf("permuted rows: video %s | audio %s\n", test::format_metrics(mv).c_str(),
              test::format_metrics(ma).c_str());
  EXPECT_LT(mv.rel_max, 1e-5);
  EXPECT_LT(ma.rel_max, 1e-5);

  // Swapping the tags of two rows (video <-> audio AdaLN rows) must be visible: the check above
  // is not blind to the per-row tables.
  DitInputs q = in;
  std::vector<int64_t> tags = in.token_tags.to_i64_vector();
  for (int64_t& t : tags) t = t == 0 ? 2 : (t == 2 ? 0 : t);
  q.token_tags = Tensor::from_i64(tags, {s});
  EXPECT_GT(test::compare(m.forward(q).video, ref.video).rel_l2, 1e-4);
}

TEST_F(TinyDit, RejectsBadCheckpoints) {
  auto edit_and_load = [&](auto edit) {
    SetUp();
    edit(tensors_);
    return DitModel::load(write(), {});
  };
  expect_error([&] {
    edit_and_load([](std::vector<io::NamedTensor>& t) {
      t.erase(std::remove_if(t.begin(), t.end(),
                             [](const io::NamedTensor& n) { return n.name == "transformer_blocks.1.norm2.weight"; }),
              t.end());
    });
  }, ErrorCode::kNotFound, "transformer_blocks.1.norm2.weight");
  expect_error([&] {
    edit_and_load([](std::vector<io::NamedTensor>& t) {
      for (auto& n : t) {
        if (n.name == "proj_in.weight") n.tensor = Tensor::zeros({24, 12}, DType::kF32);
      }
    });
  }, ErrorCode::kInvalidFile, "proj_in.weight");
  expect_error([&] {
    edit_and_load([](std::vector<io::NamedTensor>& t) {
      t.push_back({"transformer_blocks.2.norm1.weight", Tensor::zeros({24}, DType::kBF16)});
    });
  }, ErrorCode::kInvalidFile, "transformer_blocks.2.norm1.weight");
  expect_error([&] {
    edit_and_load([](std::vector<io::NamedTensor>& t) {
      t.push_back({"transformer_blocks.0.attn.to_gate_compress.weight",
                   Tensor::zeros({32, 24}, DType::kBF16)});
    });
  }, ErrorCode::kUnsupported, "to_gate_compress");
  expect_error([&] {
    edit_and_load([](std::vector<io::NamedTensor>& t) {
      for (auto& n : t) {
        if (n.name == "norm_out.norm.weight") n.tensor = Tensor::zeros({24}, DType::kI32);
      }
    });
  }, ErrorCode::kInvalidFile, "norm_out.norm.weight");
  expect_error([&] { DitModel::load((dir_ / "missing").string(), {}); }, ErrorCode::kNotFound,
               "missing");
}

TEST_F(TinyDit, RejectsBadInputs) {
  const DitModel m = DitModel::load(write(), {});
  const DitInputs good = inputs();
  auto run = [&](auto edit) {
    DitInputs in = good;
    edit(in);
    m.forward(in);
  };
  expect_error([&] { run([](DitInputs& in) { in.video_indices = Tensor::from_i64({5, 6, 6, 17, 18, 19}, {6}); }); },
               ErrorCode::kInvalidArgument, "already claimed");
  expect_error([&] { run([](DitInputs& in) { in.video_indices = Tensor::from_i64({5, 6, 11, 12, 13, 99}, {6}); }); },
               ErrorCode::kInvalidArgument, "outside the packed sequence");
  expect_error([&] { run([](DitInputs& in) { in.audio_indices = Tensor::from_i64({7, 8, 9}, {3}); }); },
               ErrorCode::kInvalidArgument, "none of");
  expect_error([&] { run([](DitInputs& in) { in.audio_hidden_states = Tensor::zeros({4, 5}, DType::kF32); }); },
               ErrorCode::kInvalidArgument, "audio_hidden_states");
  expect_error([&] {
    run([](DitInputs& in) {
      std::vector<int64_t> t = in.token_tags.to_i64_vector();
      t[3] = 5;
      in.token_tags = Tensor::from_i64(t, {static_cast<int64_t>(t.size())});
    });
  }, ErrorCode::kInvalidArgument, "token_tags");
  expect_error([&] {
    run([](DitInputs& in) {
      std::vector<int64_t> t = in.timestep_indices.to_i64_vector();
      t[0] = 3;
      in.timestep_indices = Tensor::from_i64(t, {static_cast<int64_t>(t.size())});
    });
  }, ErrorCode::kInvalidArgument, "timestep_indices");
  expect_error([&] { run([](DitInputs& in) { in.hidden_states = Tensor::zeros({6, 15}, DType::kF32); }); },
               ErrorCode::kInvalidArgument, "hidden_states");
  expect_error([&] { run([](DitInputs& in) { in.encoder_hidden_states = Tensor::zeros({2, 5, 8}, DType::kF32); }); },
               ErrorCode::kUnsupported, "batch 1");
  expect_error([&] { run([](DitInputs& in) { in.position_ids = Tensor::zeros({15, 2}, DType::kF64); }); },
               ErrorCode::kInvalidArgument, "position_ids");
  expect_error([&] { run([](DitInputs& in) { in.timestep_indices = Tensor::zeros({15}, DType::kF32); }); },
               ErrorCode::kInvalidArgument, "integer");
}

}  // namespace
}  // namespace h3::dit
