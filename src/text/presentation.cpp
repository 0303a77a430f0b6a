#include "text/presentation.h"

#include <charconv>
#include <cmath>

#include "core/status.h"
#include "text/utf8.h"

namespace h3::text {
namespace {

// A sanity bound on the sequence length: far above any real request (a 2048-px reference image is
// 7,296 tokens) and low enough that a corrupt grid cannot make us allocate gigabytes.
constexpr int64_t kMaxPresentationTokens = int64_t{1} << 22;

const char* kind_name(MediaKind k) {
  switch (k) {
    case MediaKind::kImage: return "image";
    case MediaKind::kVideo: return "video";
    case MediaKind::kAudio: return "audio";
  }
  return "?";
}

}  // namespace

PresentedMedia PresentedMedia::image(VisionGrid grid) {
  PresentedMedia m;
  m.kind = MediaKind::kImage;
  m.grid = grid;
  return m;
}

PresentedMedia PresentedMedia::video(VisionGrid grid, std::vector<double> block_timestamps,
                                     bool has_soundtrack) {
  PresentedMedia m;
  m.kind = MediaKind::kVideo;
  m.grid = grid;
  m.block_timestamps = std::move(block_timestamps);
  m.has_soundtrack = has_soundtrack;
  return m;
}

PresentedMedia PresentedMedia::audio() {
  PresentedMedia m;
  m.kind = MediaKind::kAudio;
  return m;
}

VisionTokenIds VisionTokenIds::from(const Tokenizer& tokenizer) {
  VisionTokenIds v;
  v.vision_start = tokenizer.require_token_id("<|vision_start|>");
  v.vision_end = tokenizer.require_token_id("<|vision_end|>");
  v.image_pad = tokenizer.require_token_id("<|image_pad|>");
  v.video_pad = tokenizer.require_token_id("<|video_pad|>");
  return v;
}

std::string format_block_timestamp(double seconds) {
  H3_CHECK(std::isfinite(seconds) && seconds >= 0, ErrorCode::kInvalidArgument,
           "video block timestamp must be a finite number of seconds >= 0, got ", seconds);
  // std::to_chars gives the exactly rounded decimal of the binary value (ties to even), which is
  // what Python's "%.1f" prints.
  char buf[400];
  const auto r = std::to_chars(buf, buf + sizeof(buf), seconds, std::chars_format::fixed, 1);
  H3_ASSERT(r.ec == std::errc());
  return str_cat("<", std::string_view(buf, static_cast<size_t>(r.ptr - buf)), " seconds>");
}

PromptPresenter::PromptPresenter(Tokenizer tokenizer, int64_t merge_size)
    : tokenizer_(std::move(tokenizer)), ids_(VisionTokenIds::from(tokenizer_)), merge_size_(merge_size) {
  H3_CHECK(merge_size >= 1 && merge_size <= 64, ErrorCode::kInvalidArgument,
           "processor merge_size must be in [1, 64], got ", merge_size);
}

void PromptPresenter::append_text(Presentation* out, std::string_view text) const {
  for (const int32_t id : tokenizer_.encode(text)) {
    out->input_ids.push_back(id);
    out->text_token_tags.push_back(kTagText);
    out->mm_token_type_ids.push_back(kTokenTypeText);
  }
}

void PromptPresenter::append_vision(Presentation* out, int32_t pad, int64_t token_type, int64_t count) const {
  H3_CHECK(static_cast<int64_t>(out->size()) + count + 2 <= kMaxPresentationTokens,
           ErrorCode::kInvalidArgument, "prompt presentation would exceed ", kMaxPresentationTokens,
           " tokens; the vision grids are implausibly large");
  out->input_ids.push_back(ids_.vision_start);
  out->text_token_tags.push_back(kTagVideo);
  out->mm_token_type_ids.push_back(kTokenTypeText);
  out->input_ids.insert(out->input_ids.end(), static_cast<size_t>(count), pad);
  out->text_token_tags.insert(out->text_token_tags.end(), static_cast<size_t>(count), kTagVideo);
  out->mm_token_type_ids.insert(out->mm_token_type_ids.end(), static_cast<size_t>(count), token_type);
  out->input_ids.push_back(ids_.vision_end);
  out->text_token_tags.push_back(kTagVideo);
  out->mm_token_type_ids.push_back(kTokenTypeText);
}

Presentation PromptPresenter::present(Workflow workflow, std::string_view prompt,
                                      const std::vector<PresentedMedia>& media) const {
  // Validates a grid and returns its merged token count per temporal slot (h*w/merge^2).
  auto tokens_per_slot = [&](const PresentedMedia& m, size_t index) -> int64_t {
    const VisionGrid& g = m.grid;
    const int64_t limit = kMaxPresentationTokens;
    H3_CHECK(g.t >= 1 && g.h >= 1 && g.w >= 1 && g.t <= limit && g.h <= limit && g.w <= limit,
             ErrorCode::kInvalidArgument, kind_name(m.kind), " ", index, " has Qwen grid (", g.t, ", ", g.h,
             ", ", g.w, "); every extent must be in [1, ", limit, "]");
    H3_CHECK(g.h % merge_size_ == 0 && g.w % merge_size_ == 0, ErrorCode::kInvalidArgument,
             kind_name(m.kind), " ", index, " has Qwen grid (", g.t, ", ", g.h, ", ", g.w,
             "); h and w must be multiples of the merge size ", merge_size_);
    H3_CHECK(g.h / merge_size_ <= limit / (g.w / merge_size_), ErrorCode::kInvalidArgument,
             kind_name(m.kind), " ", index, " has an implausibly large Qwen grid (", g.t, ", ", g.h, ", ", g.w, ")");
    return (g.h / merge_size_) * (g.w / merge_size_);
  };

  switch (workflow) {
    case Workflow::kT2VA:
      H3_CHECK(media.empty(), ErrorCode::kInvalidArgument, "t2va takes no keyframes or references, got ",
               media.size());
      break;
    case Workflow::kFL2VA:
      H3_CHECK(media.size() == 1 || media.size() == 2, ErrorCode::kInvalidArgument,
               "fl2va takes 1 or 2 keyframes (first, then last), got ", media.size());
      for (size_t i = 0; i < media.size(); ++i) {
        H3_CHECK(media[i].kind == MediaKind::kImage, ErrorCode::kInvalidArgument, "fl2va keyframe ", i,
                 " must be an image, got ", kind_name(media[i].kind));
      }
      break;
    case Workflow::kRef2VA:
      break;
  }

  check_utf8(prompt, "prompt");
  Presentation out;
  int64_t n_audio = 0, n_picture = 0, n_video = 0;
  for (size_t i = 0; i < media.size(); ++i) {
    const PresentedMedia& m = media[i];
    switch (m.kind) {
      case MediaKind::kAudio:
        append_text(&out, str_cat("<Audio ", ++n_audio, ">: "));
        break;
      case MediaKind::kImage: {
        const int64_t per_slot = tokens_per_slot(m, i);
        H3_CHECK(per_slot <= kMaxPresentationTokens / m.grid.t, ErrorCode::kInvalidArgument, "image ", i,
                 " has an implausibly large Qwen grid");
        append_text(&out, str_cat("<Picture ", ++n_picture, ">: "));
        append_vision(&out, ids_.image_pad, kTokenTypeImage, per_slot * m.grid.t);
        break;
      }
      case MediaKind::kVideo: {
        const int64_t per_slot = tokens_per_slot(m, i);
        H3_CHECK(static_cast<int64_t>(m.block_timestamps.size()) == m.grid.t, ErrorCode::kInvalidArgument,
                 "video ", i, " has ", m.block_timestamps.size(), " block timestamps but grid_t = ", m.grid.t,
                 "; there must be one per temporal block");
        if (m.has_soundtrack) append_text(&out, str_cat("<Audio ", ++n_audio, ">: "));
        append_text(&out, str_cat("<Video ", ++n_video, ">: "));
        for (const double ts : m.block_timestamps) {
          append_text(&out, format_block_timestamp(ts));
          append_vision(&out, ids_.video_pad, kTokenTypeVideo, per_slot);
        }
        break;
      }
    }
  }
  append_text(&out, prompt);
  return out;
}

}  // namespace h3::text
