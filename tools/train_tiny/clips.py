#!/usr/bin/env python3
"""The synthetic clips the tiny MiniMax-H3 is trained on (tools/train_tiny/SPEC.md).

The same renderer as src/eval/tiny_clips.cpp: the same splitmix64 parameter stream and the same
float64 arithmetic in the same order, so a (seed, index) pair gives the same frames (byte for
byte) and the same waveform (to float32 rounding) in both. numpy only; nothing is downloaded.

    python3 tools/train_tiny/clips.py --out DIR --count N --seed S [--split train|heldout]
    python3 tools/train_tiny/clips.py --self-check

A dataset is DIR/clips-00000.npz, ... (at most --shard clips each) and DIR/manifest.json. Each
shard holds frames uint8 [N, 39, 64, 128, 3], audio float32 [N, 2, 52000], prompt (str [N]),
colour / shape / motion (int [N], indices into COLOURS / SHAPES / MOTIONS), index (the clip's
index in the stream) and params float64 [N, len(PARAM_NAMES)].
"""

import argparse
import hashlib
import json
import math
import os
import sys

# ---- the specification (mirrors src/eval/tiny_clips.h) -------------------------------------
HEIGHT, WIDTH, FRAMES, FPS = 64, 128, 39, 24
SAMPLE_RATE, AUDIO_CHANNELS = 32000, 2
AUDIO_SAMPLES = FRAMES * SAMPLE_RATE // FPS  # 52000 = 65 audio latents of 800 samples

COLOURS = ["red", "green", "blue", "yellow"]
COLOUR_RGB = [(220, 40, 40), (40, 180, 60), (40, 90, 230), (230, 200, 30)]
COLOUR_TONE_HZ = [200.0, 480.0, 720.0, 320.0]  # red, green, blue, yellow; multiples of 40 Hz (SPEC.md)
SHAPES = ["circle", "square", "triangle"]
MOTIONS = ["left", "right", "up", "down", "bounce"]
BACKGROUND_RGB = [(24, 24, 24), (216, 216, 216)]

MARGIN = 3.0
MIN_SIZE, MAX_SIZE = 22.0, 30.0
MIN_MOVE_X, MAX_MOVE_X = 40.0, 80.0
MIN_MOVE_Y, MAX_MOVE_Y = 20.0, 28.0
MIN_BOUNCE_HEIGHT, MAX_BOUNCE_HEIGHT = 20.0, 28.0
MIN_BOUNCE_PERIOD, MAX_BOUNCE_PERIOD = 0.5, 0.75  # times (FRAMES - 1)
MIN_END_PHASE = 0.2
TONE_AMPLITUDE = 0.2
TONE_FADE_SECONDS = 0.005
CLICK_AMPLITUDE = 0.4
CLICK_HZ = 2500.0
CLICK_DECAY_SECONDS = 0.003
CLICK_SECONDS = 0.025
SUPERSAMPLE = 4

PARAM_NAMES = ["background", "size", "x0", "y0", "x1", "y1", "floor_y", "bounce_height",
               "bounce_period", "first_contact"]

LAST_FRAME = float(FRAMES - 1)
MASK64 = (1 << 64) - 1


def prompt(colour, shape, motion):
    """"a red circle moves to the left", "a green square moves up", "a blue triangle bounces"."""
    p = "a %s %s" % (COLOURS[colour], SHAPES[shape])
    m = MOTIONS[motion]
    if m in ("left", "right"):
        return p + " moves to the " + m
    if m in ("up", "down"):
        return p + " moves " + m
    return p + " bounces"


def is_held_out(colour, shape, motion):
    """Held out of training (the evaluation's cases): motion == (colour + 2 shape) mod 5."""
    return motion == (colour + 2 * shape) % len(MOTIONS)


def held_out_attributes():
    """The twelve held-out triples in the evaluation's order: case k = (k mod 4, k mod 3, ...)."""
    out = []
    for k in range(len(COLOURS) * len(SHAPES)):
        c, s = k % len(COLOURS), k % len(SHAPES)
        out.append((c, s, (c + 2 * s) % len(MOTIONS)))
    return out


class SplitMix:
    """splitmix64; stream 0 draws the attributes, stream 1 the nuisance."""

    def __init__(self, seed, index, stream):
        self.state = (seed * 0x9E3779B97F4A7C15 + index * 0xC2B2AE3D27D4EB4F +
                      stream * 0x165667B19E3779F9) & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self, lo=None, hi=None):
        u = float(self.next() >> 11) * (1.0 / 9007199254740992.0)
        return u if lo is None else lo + (hi - lo) * u

    def below(self, n):
        return int(self.uniform() * n)


def _lift(phase):
    return 4.0 * phase * (1.0 - phase)


def clip_centre(p, t):
    """Centre (x, y) of the shape at frame time t (float frames)."""
    if MOTIONS[p["motion"]] == "bounce":
        u = (t - p["first_contact"]) / p["bounce_period"]
        return p["x0"], p["floor_y"] - p["bounce_height"] * _lift(u - math.floor(u))
    f = t / LAST_FRAME
    return p["x0"] + (p["x1"] - p["x0"]) * f, p["y0"] + (p["y1"] - p["y0"]) * f


def contact_times(p):
    """Floor-contact times (frames) within [0, FRAMES - 1]."""
    out = []
    if MOTIONS[p["motion"]] != "bounce":
        return out
    k = float(math.ceil(-p["first_contact"] / p["bounce_period"]))
    while True:
        t = p["first_contact"] + k * p["bounce_period"]
        if t > LAST_FRAME:
            return out
        if t >= 0.0:
            out.append(t)
        k += 1.0


def sample_params(seed, index, attributes=None):
    """A clip's attributes (training draws skip held-out triples) and nuisance parameters."""
    if attributes is None:
        rng = SplitMix(seed, index, 0)
        while True:
            a = (rng.below(len(COLOURS)), rng.below(len(SHAPES)), rng.below(len(MOTIONS)))
            if not is_held_out(*a):
                break
    else:
        a = tuple(attributes)
    rng = SplitMix(seed, index, 1)
    p = {"colour": a[0], "shape": a[1], "motion": a[2]}
    for k in PARAM_NAMES:
        p[k] = 0.0
    p["background"] = rng.below(len(BACKGROUND_RGB))
    p["size"] = rng.uniform(MIN_SIZE, MAX_SIZE)
    half = p["size"] / 2.0
    lo_x, hi_x = MARGIN + half, float(WIDTH) - MARGIN - half
    lo_y, hi_y = MARGIN + half, float(HEIGHT) - MARGIN - half
    m = MOTIONS[a[2]]
    if m in ("left", "right"):
        d = rng.uniform(MIN_MOVE_X, MAX_MOVE_X)
        xa = rng.uniform(lo_x, hi_x - d)
        y = rng.uniform(lo_y, hi_y)
        p["x0"], p["x1"] = (xa, xa + d) if m == "right" else (xa + d, xa)
        p["y0"] = p["y1"] = y
    elif m in ("up", "down"):
        d = rng.uniform(MIN_MOVE_Y, MAX_MOVE_Y)
        ya = rng.uniform(lo_y, hi_y - d)
        x = rng.uniform(lo_x, hi_x)
        p["y0"], p["y1"] = (ya, ya + d) if m == "down" else (ya + d, ya)
        p["x0"] = p["x1"] = x
    else:
        p["x0"] = p["x1"] = rng.uniform(lo_x, hi_x)
        p["floor_y"] = hi_y
        p["bounce_height"] = rng.uniform(MIN_BOUNCE_HEIGHT, min(MAX_BOUNCE_HEIGHT, hi_y - lo_y))
        p["bounce_period"] = LAST_FRAME * rng.uniform(MIN_BOUNCE_PERIOD, MAX_BOUNCE_PERIOD)
        for _ in range(1000):
            phase0 = rng.uniform(MIN_END_PHASE, 1.0 - MIN_END_PHASE)
            end = phase0 + LAST_FRAME / p["bounce_period"]
            phase1 = end - math.floor(end)
            if MIN_END_PHASE <= phase1 <= 1.0 - MIN_END_PHASE:
                p["first_contact"] = -phase0 * p["bounce_period"]
                break
        else:
            raise RuntimeError("bounce phase draw did not settle")
        p["x0"], p["y0"] = clip_centre(p, 0.0)
        p["x1"], p["y1"] = clip_centre(p, LAST_FRAME)
    return p


def render(p):
    """Frames uint8 [F, H, W, 3], waveform float32 [2, S], prompt."""
    import numpy as np

    bg = np.array(BACKGROUND_RGB[p["background"]], dtype=np.int64)
    fg = np.array(COLOUR_RGB[p["colour"]], dtype=np.int64)
    n_sub = SUPERSAMPLE * SUPERSAMPLE
    half = p["size"] / 2.0
    # Sub-sample coordinates (SUPERSAMPLE * x + s + 0.5) / SUPERSAMPLE, exact in float64.
    py = (np.arange(HEIGHT * SUPERSAMPLE, dtype=np.float64) + 0.5) / SUPERSAMPLE
    px = (np.arange(WIDTH * SUPERSAMPLE, dtype=np.float64) + 0.5) / SUPERSAMPLE
    frames = np.empty((FRAMES, HEIGHT, WIDTH, 3), dtype=np.uint8)
    shape = SHAPES[p["shape"]]
    for i in range(FRAMES):
        cx, cy = clip_centre(p, float(i))
        dx = (px - cx)[None, :]
        dy = (py - cy)[:, None]
        if shape == "circle":
            inside = dx * dx + dy * dy <= half * half
        elif shape == "square":
            inside = (np.abs(dx) <= half) & (np.abs(dy) <= half)
        else:  # apex up: base y = cy + s/2, apex y = cy - s/2
            inside = (dy <= half) & (np.abs(dx) <= (dy + half) / 2.0)
        n = inside.reshape(HEIGHT, SUPERSAMPLE, WIDTH, SUPERSAMPLE).sum(axis=(1, 3))
        n = n.astype(np.int64)[:, :, None]
        frames[i] = ((bg * (n_sub - n) + fg * n + n_sub // 2) // n_sub).astype(np.uint8)

    rate = float(SAMPLE_RATE)
    length = float(AUDIO_SAMPLES) / rate
    t = np.arange(AUDIO_SAMPLES, dtype=np.float64) / rate
    two_pi = 2.0 * math.pi

    def fade(x):
        return np.where(x < TONE_FADE_SECONDS,
                        0.5 - 0.5 * np.cos(math.pi * x / TONE_FADE_SECONDS), 1.0)

    v = TONE_AMPLITUDE * np.sin(two_pi * COLOUR_TONE_HZ[p["colour"]] * t) * \
        np.minimum(fade(t), fade(length - t))
    for c in contact_times(p):
        d = t - c / float(FPS)
        on = (d >= 0.0) & (d < CLICK_SECONDS)
        v = v + np.where(on, CLICK_AMPLITUDE * np.exp(-d / CLICK_DECAY_SECONDS) *
                         np.sin(two_pi * CLICK_HZ * d), 0.0)
    audio = np.stack([v, v]).astype(np.float32)
    return frames, audio, prompt(p["colour"], p["shape"], p["motion"])


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return h


def clip_digest(seed, index, attributes=None):
    """What the C++ tests assert too: FNV-1a 64 of the frame bytes, the waveform's sum and sum
    of squares (rounded to 1e-6), and the prompt."""
    frames, audio, text = render(sample_params(seed, index, attributes))
    a = audio.astype("float64")
    return fnv1a64(frames.tobytes()), round(float(a.sum()), 6), round(float((a * a).sum()), 6), text


# Fixed clips whose digests tests/unit/test_tiny_eval.cpp asserts as well.
REFERENCE_CLIPS = [(7, 0, None), (7, 1, (2, 2, 4)), (7, 2, (3, 1, 2))]


def self_check():
    """Checks that need no numpy first (stream, prompts, held-out set, parameter ranges), then
    the rendered clips' properties and the digests shared with the C++ tests."""
    rng = SplitMix(0, 0, 0)
    first = [rng.next() for _ in range(2)]
    assert first == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4], [hex(x) for x in first]
    assert prompt(0, 0, 0) == "a red circle moves to the left"
    assert prompt(1, 1, 2) == "a green square moves up"
    assert prompt(2, 2, 4) == "a blue triangle bounces"
    held = held_out_attributes()
    assert len(set(held)) == 12 and all(is_held_out(*a) for a in held)
    for c in range(4):
        for s in range(3):
            assert sum(not is_held_out(c, s, m) for m in range(5)) == 4
    for index in range(400):
        p = sample_params(3, index)
        assert not is_held_out(p["colour"], p["shape"], p["motion"])
        half = p["size"] / 2.0
        for t in range(FRAMES):
            x, y = clip_centre(p, float(t))
            assert MARGIN + half - 1e-9 <= x <= WIDTH - MARGIN - half + 1e-9, (index, t, x)
            assert MARGIN + half - 1e-9 <= y <= HEIGHT - MARGIN - half + 1e-9, (index, t, y)
        if MOTIONS[p["motion"]] == "bounce":
            assert 1 <= len(contact_times(p)) <= 2, p
    try:
        import numpy as np
    except ImportError:
        print("clips.py self-check: numpy is not installed; skipped the rendering checks")
        return 77
    frames, audio, text = render(sample_params(7, 0))
    assert frames.shape == (FRAMES, HEIGHT, WIDTH, 3) and frames.dtype == np.uint8
    assert audio.shape == (AUDIO_CHANNELS, AUDIO_SAMPLES) and audio.dtype == np.float32
    assert float(np.abs(audio).max()) <= 0.6 + 1e-6
    assert len(EXPECTED_DIGESTS) == len(REFERENCE_CLIPS)
    for args, want in zip(REFERENCE_CLIPS, EXPECTED_DIGESTS):
        got = clip_digest(*args)
        print("clip %s: %016x %.6f %.6f %r" % ((args,) + got))
        assert got[0] == want[0] and got[3] == want[3], (got, want)
        assert abs(got[1] - want[1]) < 1e-4 and abs(got[2] - want[2]) < 1e-4, (got, want)
    print("clips.py self-check: ok")
    return 0


# (frame FNV-1a 64, audio sum, audio sum of squares, prompt) of REFERENCE_CLIPS, as the C++
# renderer computes them too (tests/unit/test_tiny_eval.cpp).
EXPECTED_DIGESTS = [
    (0x94421CDE3FA68697, 3.270065, 2087.742998, "a yellow circle bounces"),
    (0xBCB22637179CD3FC, 1.627906, 2080.371345, "a blue triangle bounces"),
    (0x7E27ADD974F57611, -0.000000, 2071.984221, "a yellow square moves up"),
]


def write_dataset(out, count, seed, split, shard):
    import numpy as np

    os.makedirs(out, exist_ok=True)
    held = held_out_attributes()
    shards = []
    for start in range(0, count, shard):
        n = min(shard, count - start)
        frames = np.empty((n, FRAMES, HEIGHT, WIDTH, 3), dtype=np.uint8)
        audio = np.empty((n, AUDIO_CHANNELS, AUDIO_SAMPLES), dtype=np.float32)
        attrs = np.empty((n, 3), dtype=np.int64)
        params = np.empty((n, len(PARAM_NAMES)), dtype=np.float64)
        prompts = []
        for j in range(n):
            index = start + j
            a = held[index % len(held)] if split == "heldout" else None
            p = sample_params(seed, index, a)
            frames[j], audio[j], text = render(p)
            attrs[j] = (p["colour"], p["shape"], p["motion"])
            params[j] = [p[k] for k in PARAM_NAMES]
            prompts.append(text)
        name = "clips-%05d.npz" % (start // shard)
        np.savez_compressed(os.path.join(out, name), frames=frames, audio=audio,
                            prompt=np.array(prompts), colour=attrs[:, 0], shape=attrs[:, 1],
                            motion=attrs[:, 2], index=np.arange(start, start + n),
                            params=params)
        shards.append({"file": name, "count": n})
        print("wrote %s (%d clips)" % (os.path.join(out, name), n), flush=True)
    manifest = {
        "spec": "tools/train_tiny/SPEC.md", "seed": seed, "split": split, "count": count,
        "height": HEIGHT, "width": WIDTH, "frames": FRAMES, "fps": FPS,
        "sample_rate": SAMPLE_RATE, "audio_channels": AUDIO_CHANNELS,
        "audio_samples": AUDIO_SAMPLES, "colours": COLOURS, "shapes": SHAPES, "motions": MOTIONS,
        "params": PARAM_NAMES, "shards": shards,
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="dataset folder")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=["train", "heldout"], default="train",
                    help="train: random attributes, held-out triples skipped; heldout: the "
                         "held-out triples in the evaluation's order")
    ap.add_argument("--shard", type=int, default=256, help="clips per .npz file")
    ap.add_argument("--self-check", action="store_true")
    args = ap.parse_args(argv)
    if args.self_check:
        return self_check()
    if not args.out or args.count < 1 or args.shard < 1 or args.seed < 0:
        ap.error("--out DIR, --count >= 1, --shard >= 1 and --seed >= 0 are required")
    write_dataset(args.out, args.count, args.seed, args.split, args.shard)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
