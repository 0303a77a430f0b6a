// The synthetic clips the trained tiny MiniMax-H3 learns from and is judged on: one specification
// (tools/train_tiny/SPEC.md) with its constants here, and the renderer that turns a clip's
// parameters into frames and a waveform. tools/train_tiny/clips.py is the same renderer in Python
// (it writes the training data); both draw their parameters from the same splitmix64 stream and
// compute in float64 in the same order, so a (seed, index) pair gives the same clip in both
// (tests check the bytes of fixed clips against values the Python self-check asserts too).
//
// A clip: one shape (circle, square, triangle) in one colour (red, green, blue, yellow) on a plain
// grey background, moving left / right / up / down at constant speed or bouncing on the floor; the
// sound is a sine tone whose pitch is set by the colour, plus a click at each floor contact.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace h3::eval {

// ---- geometry: what `h3 generate --height 64 --width 128 --num-frames 39 --allow-any-duration`
// produces on a tiny repository (the tiny canvas is 64 x 128 by default; 39 = 17 * 2 + 5 frames is
// 12 latent frames and, at 24 fps, 1.625 s = 65 audio latents of 800 samples at 32 kHz).
inline constexpr int64_t kTinyHeight = 64;
inline constexpr int64_t kTinyWidth = 128;
inline constexpr int64_t kTinyFrames = 39;
inline constexpr int64_t kTinyFps = 24;
inline constexpr int64_t kTinySampleRate = 32000;
inline constexpr int64_t kTinyAudioChannels = 2;
inline constexpr int64_t kTinyAudioSamples = kTinyFrames * kTinySampleRate / kTinyFps;  // 52000

// ---- attributes -------------------------------------------------------------------------------
enum class Colour : int { kRed = 0, kGreen = 1, kBlue = 2, kYellow = 3 };
enum class ShapeKind : int { kCircle = 0, kSquare = 1, kTriangle = 2 };
enum class Motion : int { kLeft = 0, kRight = 1, kUp = 2, kDown = 3, kBounce = 4 };
inline constexpr int kNumColours = 4;
inline constexpr int kNumShapes = 3;
inline constexpr int kNumMotions = 5;

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

// Object colours and the tone each one sounds: a chain of fifths (ratio 1.5), lowest for the
// longest wavelength (red, yellow, green, blue).
inline constexpr std::array<Rgb, kNumColours> kColourRgb = {Rgb{220, 40, 40}, Rgb{40, 180, 60},
                                                            Rgb{40, 90, 230}, Rgb{230, 200, 30}};
inline constexpr std::array<double, kNumColours> kColourToneHz = {200.0, 480.0, 720.0, 320.0};
// Plain backgrounds, one per clip.
inline constexpr std::array<Rgb, 2> kBackgroundRgb = {Rgb{24, 24, 24}, Rgb{216, 216, 216}};

// Sizes (pixels, float64) and sound.
inline constexpr double kMargin = 3.0;     // the whole shape stays this far inside the frame
inline constexpr double kMinSize = 22.0;   // shape size s: circle diameter, square side,
inline constexpr double kMaxSize = 30.0;   // triangle base and height (apex up)
inline constexpr double kMinMoveX = 40.0;  // total displacement over the clip, left/right
inline constexpr double kMaxMoveX = 80.0;
inline constexpr double kMinMoveY = 20.0;  // up/down
inline constexpr double kMaxMoveY = 28.0;
inline constexpr double kMinBounceHeight = 20.0;  // apex height above the floor contact
inline constexpr double kMaxBounceHeight = 28.0;
inline constexpr double kMinBouncePeriod = 0.5;  // frames between contacts, times (F - 1)
inline constexpr double kMaxBouncePeriod = 0.75;
inline constexpr double kMinEndPhase = 0.2;    // bounce phase (0 = contact) at the first and last
                                               // frames lies in [0.2, 0.8]
inline constexpr double kToneAmplitude = 0.2;  // -14 dBFS
inline constexpr double kToneFadeSeconds = 0.005;  // raised-cosine fade in and out
inline constexpr double kClickAmplitude = 0.4;     // peak of tone + click <= 0.6 (-4.4 dBFS)
inline constexpr double kClickHz = 2500.0;         // a damped sine, above every tone
inline constexpr double kClickDecaySeconds = 0.003;
inline constexpr double kClickSeconds = 0.025;
inline constexpr int kSupersample = 4;  // 4 x 4 coverage samples per pixel

std::string_view colour_name(Colour c);    // "red", ...
std::string_view shape_name(ShapeKind s);  // "circle", ...
std::string_view motion_name(Motion m);    // "left", "right", "up", "down", "bounce"
// "a red circle moves to the left", "a green square moves up", "a blue triangle bounces".
std::string tiny_prompt(Colour c, ShapeKind s, Motion m);

struct ClipAttributes {
  Colour colour = Colour::kRed;
  ShapeKind shape = ShapeKind::kCircle;
  Motion motion = Motion::kLeft;
  bool operator==(const ClipAttributes&) const = default;
};

// The held-out combinations (never in training data, the evaluation's cases): for colour c and
// shape s, the motion (c + 2 s) mod 5. Twelve of the sixty triples; every colour-shape,
// colour-motion and shape-motion pair still occurs in training.
bool is_held_out(const ClipAttributes& a);
// The twelve in the evaluation's order: case k has colour k mod 4 and shape k mod 3.
std::vector<ClipAttributes> held_out_attributes();
// The other 48, the triples the training data draws, as four runs of twelve: run j has every
// colour-shape pair once (in the held-out order), each with the j-th of its four training motions.
// So the first twelve ask for each pair as the held-out twelve do, and every run is balanced.
std::vector<ClipAttributes> training_attributes();

// The parameters that, with the attributes, fix a clip. Positions are shape centres in pixels
// (x right, y down; pixel (i, j) covers [i, i+1) x [j, j+1)); times are in frames.
struct ClipParams {
  ClipAttributes attributes;
  int background = 0;  // index into kBackgroundRgb
  double size = 16.0;
  double x0 = 0, y0 = 0;     // centre at frame 0 (a bounce's x stays fixed)
  double x1 = 0, y1 = 0;     // centre at the last frame (moves)
  double floor_y = 0;        // bounce: centre height at a floor contact
  double bounce_height = 0;  // bounce: apex above floor_y
  double bounce_period = 0;  // bounce: frames between contacts
  double first_contact = 0;  // bounce: the frame time of a contact (may lie before frame 0)
};

// A clip's parameters: attributes and nuisance drawn from the splitmix64 stream of (seed, index).
// Attributes and nuisance come from separate streams, so with `attributes` given the nuisance is
// the same as an undirected draw of that index would have. Undirected (training) draws skip the
// held-out triples.
ClipParams sample_clip_params(uint64_t seed, uint64_t index);
ClipParams sample_clip_params(uint64_t seed, uint64_t index, const ClipAttributes& attributes);

// Centre of the shape at frame time t (frames, float64).
void clip_centre(const ClipParams& p, double t, double* x, double* y);
// Floor-contact times (frames) within [0, F - 1], in order; empty unless bouncing.
std::vector<double> contact_times(const ClipParams& p);

struct TinyClip {
  ClipParams params;
  std::string prompt;
  Tensor frames;  // uint8 [F, H, W, 3]
  Tensor audio;   // float32 [2, S] in [-1, 1], both channels equal
};

TinyClip render_clip(const ClipParams& p);

}  // namespace h3::eval
