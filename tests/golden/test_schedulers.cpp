// Schedulers against the golden `schedulers` cases (sigma/timestep grids for every stored shift
// and point count, step updates, scale_noise) and the schedules and step updates of every `e2e`
// run. Tables must be bit-exact (TOLERANCES.md); step updates are float32 elementwise math done
// exactly as the reference rounds it, so they are checked bit for bit too, with rel_max printed
// against the 1e-5 end-to-end latent bound.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "core/status.h"
#include "pipeline/packing.h"
#include "pipeline/scheduler.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

// "step07_": the e2e per-step tensor prefix.
std::string step_prefix(int64_t k) {
  return std::string("step") + (k < 10 ? "0" : "") + std::to_string(k) + "_";
}

constexpr double kLatentBound = 1e-5;  // TOLERANCES.md: end-to-end latents after every step

Tensor f32_tensor(const std::vector<float>& v) {
  return Tensor::from_f32(v, {static_cast<int64_t>(v.size())});
}

void expect_bits(const std::string& name, const Tensor& got, const Tensor& ref) {
  ASSERT_EQ(got.numel(), ref.numel()) << name;
  std::string first;
  const int64_t bad = test::count_bit_mismatches(got.to(DType::kF32), ref, &first);
  const test::Metrics m = test::compare(got, ref);
  std::printf(
      "  %s: %lld/%lld values differ in bits, rel_max=%.3g (bound: equal bits; latents "
      "bound %.0e)\n",
      name.c_str(), static_cast<long long>(bad), static_cast<long long>(got.numel()), m.rel_max,
      kLatentBound);
  EXPECT_EQ(bad, 0) << name << ": first mismatches:" << first;
  EXPECT_LE(m.rel_max, kLatentBound) << name;
}

TEST(GoldenSchedulers, GridsStepsAndScaleNoise) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "schedulers");
  static const std::regex grid_re(R"(^shift([0-9.]+)_n([0-9]+)_sigmas$)");
  static const std::regex step_re(R"(^step_shift([0-9.]+)_n([0-9]+)_i([0-9]+)$)");
  int grids = 0;
  int steps = 0;
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    for (const io::TensorInfo& t : f->tensors()) {
      std::smatch m;
      if (std::regex_match(t.name, m, grid_re)) {
        const double shift = std::stod(m[1]);
        const int64_t n = std::stoll(m[2]);
        const pipeline::Schedule s = pipeline::Schedule::from_grid(n, shift);
        expect_bits(t.name, f32_tensor(s.sigmas()), f->tensor(t.name));
        const std::string tname = "shift" + m[1].str() + "_n" + m[2].str() + "_timesteps";
        if (f->has(tname)) expect_bits(tname, f32_tensor(s.timesteps()), f->tensor(tname));
        EXPECT_EQ(s.num_steps(), n - 1) << t.name;
        ++grids;
      } else if (std::regex_match(t.name, m, step_re)) {
        const pipeline::Schedule s =
            pipeline::Schedule::from_grid(std::stoll(m[2]), std::stod(m[1]));
        const Tensor out =
            s.step(std::stoll(m[3]), f->tensor("step_model_output"), f->tensor("step_sample"));
        expect_bits(t.name, out, f->tensor(t.name));
        ++steps;
      }
    }
    if (f->has("scale_noise_t0999")) {
      // scale_noise(sample, 0.999, noise = step_model_output).
      const Tensor out = pipeline::scale_noise(
          pipeline::kConditionNoiseLevel, f->tensor("step_sample"), f->tensor("step_model_output"));
      expect_bits("scale_noise_t0999", out, f->tensor("scale_noise_t0999"));
    }
  }
  std::printf("[schedulers] %d grid(s), %d step update(s) checked\n", grids, steps);
  EXPECT_GT(grids + steps, 0);
}

// Every e2e run: both schedules, then each step's update of the generated rows from the stored
// rows and velocities. Each step starts from the golden input of that step (step k's input is
// step k-1's stored output), so a mismatch points at one step.
TEST(GoldenSchedulers, EndToEndSchedulesAndStepUpdates) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    const int64_t points = c.entry.at("meta").at("num_inference_steps").get<int64_t>();
    const pipeline::DualSchedule sched = pipeline::make_dual_schedule(points);
    int tables = 0;
    for (const auto& [name, values] :
         {std::pair<const char*, std::vector<float>>{"video_sigmas", sched.video.sigmas()},
          {"video_timesteps", sched.video.timesteps()},
          {"audio_sigmas", sched.audio.sigmas()},
          {"audio_timesteps", sched.audio.timesteps()}}) {
      if (!f->has(name)) continue;
      expect_bits(c.file + " " + name, f32_tensor(values), f->tensor(name));
      ++tables;
    }
    ran += tables > 0;
    if (const std::string missing = test::missing_tensors(
            *f, {"num_condition_video_rows", "num_condition_audio_rows", "step00_video_rows_in",
                 "step00_audio_rows_in", "step00_noise_pred", "step00_audio_noise_pred"});
        !missing.empty()) {
      std::printf("  %s: %d schedule table(s); step updates skipped (lacks %s)\n", c.file.c_str(), tables,
                  missing.c_str());
      continue;
    }
    ran += tables == 0;

    const int64_t ncv = f->tensor("num_condition_video_rows").to_i64_vector().at(0);
    const int64_t nca = f->tensor("num_condition_audio_rows").to_i64_vector().at(0);
    Tensor video_in = f->tensor("step00_video_rows_in");
    Tensor audio_in = f->tensor("step00_audio_rows_in");
    int checked = 0;
    for (int64_t k = 0; k < sched.num_steps(); ++k) {
      const std::string prefix = step_prefix(k);
      if (!test::missing_tensors(*f, {prefix + "video_rows_out", prefix + "audio_rows_out",
                                      prefix + "noise_pred", prefix + "audio_noise_pred"})
               .empty())
        break;
      // Only generated rows are written; condition rows keep their values.
      const Tensor v_pred = f->tensor(prefix + "noise_pred").select(0, 0);
      const Tensor a_pred = f->tensor(prefix + "audio_noise_pred").select(0, 0);
      Tensor video_out = video_in.clone();
      Tensor audio_out = audio_in.clone();
      video_out.slice(0, ncv, video_out.size(0))
          .copy_from(sched.video.step(k, v_pred.slice(0, ncv, v_pred.size(0)),
                                      video_in.slice(0, ncv, video_in.size(0))));
      audio_out.slice(0, nca, audio_out.size(0))
          .copy_from(sched.audio.step(k, a_pred.slice(0, nca, a_pred.size(0)),
                                      audio_in.slice(0, nca, audio_in.size(0))));
      expect_bits(c.file + " " + prefix + "video_rows_out", video_out,
                  f->tensor(prefix + "video_rows_out"));
      expect_bits(c.file + " " + prefix + "audio_rows_out", audio_out,
                  f->tensor(prefix + "audio_rows_out"));
      video_in = f->tensor(prefix + "video_rows_out");
      audio_in = f->tensor(prefix + "audio_rows_out");
      ++checked;
    }
    // Every stored step must be one of ours (a folder may store fewer than the schedule has).
    int stored = 0;
    static const std::regex out_re(R"(^(step[0-9]+_)video_rows_out$)");
    for (const io::TensorInfo& t : f->tensors()) {
      std::smatch m;
      if (!std::regex_match(t.name, m, out_re)) continue;
      const std::string p = m[1];
      stored += test::missing_tensors(*f, {p + "audio_rows_out", p + "noise_pred", p + "audio_noise_pred"}).empty();
    }
    EXPECT_EQ(checked, stored) << c.file << ": stored steps beyond the schedule's " << sched.num_steps();
    std::printf("  %s: %d of %d stored step update(s) checked\n", c.file.c_str(), checked, stored);
  }
  if (ran == 0) GTEST_SKIP() << "no e2e case stores its schedules or step rows";
}

}  // namespace
}  // namespace h3
