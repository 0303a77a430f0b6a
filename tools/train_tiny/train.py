#!/usr/bin/env python3
"""Trains the tiny MiniMax-H3 on the synthetic clips of tools/train_tiny/SPEC.md.

Runs on the GPU machine (PyTorch; the reference's module definitions from the anchor's packed
diffusers sources; no network), one part per call, each a few minutes:

    python3 tools/train_tiny/train.py data      --data DIR [--count N] [--heldout M] [--seed S]
    python3 tools/train_tiny/train.py vae       --repo TINY --data DIR --out WORK --steps N --seed S [--smoke]
    python3 tools/train_tiny/train.py audio_vae --repo TINY --data DIR --out WORK --steps N --seed S [--smoke]
    python3 tools/train_tiny/train.py dit       --repo TINY --data DIR --out WORK --steps N --seed S [--smoke]
    python3 tools/train_tiny/train.py export    --repo TINY --out WORK
    python3 tools/train_tiny/train.py prompts   --out-file prompts.json     (numpy-free; run anywhere)
    python3 tools/train_tiny/train.py self-check                            (numpy only; run anywhere)

`--device cpu` with `--smoke` checks a part on a machine without a GPU (cpu_check/run.sh runs them all).

TINY is a repository written by `h3 make-tiny`: its tokenizer, processor, schedulers, text encoder
(random, frozen; `h3 make-tiny --text-context-scale 0` for the kept parts, README.md "The
conditioner") and transformer_ref are kept as they are. The trained parts go to WORK/parts/<part>/
(config.json, model.safetensors in float32, log.json); `export` assembles WORK/repo, the released
layout with the release's dtypes, and WORK/PROVENANCE.md. README.md beside this file has the recipe,
the prompt-feature contract and the device commands.
"""

import argparse
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import clips  # noqa: E402  (the clip renderer: SPEC.md)

PARTS = ("vae", "audio_vae", "dit")

# ---- geometry (SPEC.md, "Geometry") ------------------------------------------------------------
FRAMES, HEIGHT, WIDTH = clips.FRAMES, clips.HEIGHT, clips.WIDTH
AUDIO_SAMPLES, SAMPLE_RATE = clips.AUDIO_SAMPLES, clips.SAMPLE_RATE
AUDIO_CHANNELS = 2
# The pipeline's modality tags (they index the DiT's AdaLN table) and pixel convention.
VIDEO_TAG, TEXT_TAG, AUDIO_TAG = 0, 1, 2
PIXEL_MEAN = (0.485, 0.456, 0.406)
PIXEL_STD = (0.229, 0.224, 0.225)
VIDEO_SHIFT, AUDIO_SHIFT = 12.0, 3.0
KEYFRAME_NOISE_AUG = 0.999
# Rotary time of the packed layout (h3_components_spec / h3_dit_spec §4): one latent frame spans
# 5/3 * (1, 4, 4, 4, 4) units; spatial axes are centred and scaled by 32 / sqrt(latent area).
ROPE_FRAME_RESCALE = 5.0 / 3.0
ROPE_FRAMES_PER_LATENT = (1, 4, 4, 4, 4)
ROPE_SPATIAL_SCALE = 32

# ---- sizes -------------------------------------------------------------------------------------
# `make-tiny` keeps the configs `h3 make-tiny` writes. `train` (the default) widens what limits
# quality at this geometry: the video VAE's ViT decoder maps each latent token to a 4x16x16 pixel
# block with one linear layer, so its width bounds how sharp a shape's edge can be; the DiT gets
# more width, depth and rotary frequencies (heads of 64, below) to learn 48 prompt combinations.
# The decoder's and the audio VAE's head widths stay make-tiny's (32, 64). Shipped total stays
# under 40 MB.
SIZES = {
    "make-tiny": {"vae": {}, "audio_vae": {}, "dit": {}},
    "train": {
        # Spatial ratio 4 (two 2x stages, not the release's four), 16 latent channels (the DiT's
        # patch width, below). At 16 a shape
        # was one latent token and the reconstructions never kept it (0.29-0.46 of held-out clips,
        # chance 0.33). At 8 the decoder drew every 8 x 8 token as a 2 x 2 mosaic of 4 px squares
        # whatever the latent width (24 or 64 channels), precision, rate or loss weights, and kept
        # the shape in 0.58. At 4 (4 x 4 px tokens, a 22-30 px shape spans six or seven) the same
        # 370 s keep it in 0.83 at 26.1 dB. A stage that halves time must halve space too (see
        # vae_overrides), so both temporal strides sit on the two spatial stages. The reference
        # derives the decoder's patch and the pipeline's latent grid from these factors, so the
        # engine runs it unchanged; the DiT gets 1,536 video rows per clip instead of 384.
        "vae": {"block_out_channels": [16, 32, 64, 96, 96, 96], "decoder_num_attention_heads": 6,
                "decoder_num_layers": 3, "spatial_downsample_factors": [2, 2, 1, 1, 1, 1],
                "temporal_downsample_factors": [2, 2, 1, 1, 1, 1], "latent_channels": 16},
        # Seven 2x-halving upsamplers from make-tiny's 128 channels leave 1 channel at 32 kHz, and
        # a first run with them learned silence (held-out SNR 0 dB). Four stages (x10, x8, x5, x2)
        # end at 8 channels for about the same parameter count.
        "audio_vae": {"encoder_dim": 4, "decoder_rates": [10, 8, 5, 2], "decoder_kernel_sizes": [20, 16, 11, 4]},
        # The samples of a 192-wide DiT on 32 latent channels came out as latent-pixel fragments,
        # decided at high noise while one-step denoising was accurate: each latent pixel chose
        # object or background nearly on its own (README.md, "Where the fragments come from").
        # Two suspects, both changed here (untested on the GPU):
        # - Position. make-tiny's 4 rotary frequencies per axis (1, 0.1, 0.01, 0.001 at theta 1e4)
        #   meet a token spacing of 2.83 position units at this 8 x 16 token grid (the pipeline
        #   spreads any grid over the same span; the release's 24 x 42 grid is spaced 1.0), so a
        #   token turns 2.83, 0.28, 0.03 and 0.003 rad per neighbour: one usable frequency, and
        #   attention cannot single out a token's neighbours. Heads of 64 with 10 frequencies
        #   (theta 1e4, rotary 60 of 64) turn 2.83, 1.13, 0.45, 0.18, 0.07, ... rad per token.
        # - Width. A velocity target makes each token's output carry its input's noise back out,
        #   4 x latent_channels values per 2 x 2 patch: 128 in a 192-wide model, where noise and
        #   velocity prediction are reported to fail. Now 16 latent channels (64 values) and 256.
        "dit": {"num_attention_heads": 4, "attention_head_dim": 64, "hidden_size": 256, "num_layers": 4,
                "ffn_dim": 704, "rope_freq_dim": 10, "time_embed_hidden_dim": 256, "time_embed_dim": 128},
    },
}
# Fields a size preset may change; everything else of a component's config is make-tiny's.
RESIZABLE = {
    "vae": {"block_out_channels", "decoder_num_attention_heads", "decoder_num_layers", "spatial_downsample_factors",
            "temporal_downsample_factors",
            "decoder_attention_head_dim", "layers_per_block", "norm_num_groups", "latent_channels"},
    "audio_vae": {"encoder_dim", "decoder_dim", "latent_dim", "num_attention_heads", "decoder_rates",
                  "decoder_kernel_sizes"},
    "dit": {"in_channels", "num_attention_heads", "attention_head_dim", "hidden_size", "num_layers",
            "num_refiner_layers", "ffn_dim", "time_embed_hidden_dim", "time_embed_dim",
            "rope_freq_dim"},
}
# DiT tensors the release stores in float32 (h3_dit_spec.md §1.3); everything else is bf16.
DIT_FP32_PREFIXES = ("proj_in.", "audio_proj_in.", "time_embedder.", "proj_out.", "audio_proj_out.")
COMPONENT_FILE = {"vae": "diffusion_pytorch_model.safetensors",
                  "audio_vae": "diffusion_pytorch_model.safetensors",
                  "transformer": "diffusion_pytorch_model.safetensors",
                  "text_encoder": "model.safetensors"}
PART_COMPONENT = {"vae": "vae", "audio_vae": "audio_vae", "dit": "transformer"}


# =================================================================================================
# numpy-free / numpy-only helpers (checked by `self-check` on any machine)
# =================================================================================================

def all_prompts():
    """prompts.json: every colour x shape x motion prompt, index (c * 3 + s) * 5 + m, the held-out
    ones included (their features serve validation and samples, never DiT training)."""
    out = []
    for c in range(len(clips.COLOURS)):
        for s in range(len(clips.SHAPES)):
            for m in range(len(clips.MOTIONS)):
                out.append(clips.prompt(c, s, m))
    return out


def latent_geometry(spatial_ratio=16, clip_length=17, latents_per_chunk=5):
    """(latent frames, latent height, latent width, audio latents) of the SPEC geometry, with the
    pipeline's formulas: 17 n + 5 frames -> 5 n + 2 latents; round(frames / 24 * 40) audio."""
    assert FRAMES % clip_length == latents_per_chunk
    frames = (FRAMES - latents_per_chunk) // clip_length * latents_per_chunk + 2
    audio = int(round(FRAMES / clips.FPS * 40))
    return frames, HEIGHT // spatial_ratio, WIDTH // spatial_ratio, audio


def shifted_sigma(u, shift):
    """The schedulers' exponential shift, s u / (1 + (s - 1) u), on a base sigma u in [0, 1]."""
    return shift * u / (1.0 + (shift - 1.0) * u)


def unshifted_sigma(sigma, shift):
    """The base sigma u whose shifted sigma is `sigma` (the inverse of shifted_sigma)."""
    return sigma / (shift - (shift - 1.0) * sigma)


def t2va_layout(num_text, num_frames, lat_h, lat_w, num_audio, patch=(1, 2, 2),
                audio_channels=AUDIO_CHANNELS):
    """The t2va packed layout [text | target audio | target video] (numpy, float64 positions):
    our reading of h3_components_spec.md / the pipeline's layout step, used when the reference's
    modular pipeline cannot be imported and checked against it when it can. Returns positions
    [S, 3], tags [S], video, audio and text row indices."""
    import numpy as np

    _, ph, pw = patch
    rows_per_frame = (lat_h // ph) * (lat_w // pw)
    n_audio = num_audio * audio_channels
    n_video = num_frames * rows_per_frame
    seq = num_text + n_audio + n_video
    audio_start, video_start = num_text, num_text + n_audio
    pos = np.zeros((seq, 3), dtype=np.float64)
    pos[:num_text, 0] = np.arange(num_text, dtype=np.float64)
    sqrt_area = np.sqrt(lat_h * lat_w)

    def axis(dim, p):
        ratio = dim / sqrt_area
        left = (1.0 - ratio) / 2.0
        return np.linspace(left, left + ratio, dim // p, endpoint=False) * ROPE_SPATIAL_SCALE

    hg, wg = axis(lat_h, ph), axis(lat_w, pw)
    t_audio = float(num_text) + np.arange(num_audio, dtype=np.float64)
    pos[audio_start:video_start, 0] = np.tile(t_audio, audio_channels)
    pos[audio_start:video_start, 2] = np.concatenate(
        [np.full(num_audio, wg[0]), np.full(n_audio - num_audio, wg[-1])])
    spans = np.array([ROPE_FRAME_RESCALE * ROPE_FRAMES_PER_LATENT[i % len(ROPE_FRAMES_PER_LATENT)]
                      for i in range(num_frames)], dtype=np.float64)
    t_video = float(num_text) + np.concatenate([[0.0], np.cumsum(spans[:-1])])
    hh, ww = np.meshgrid(hg, wg, indexing="ij")
    vp = np.zeros((num_frames, rows_per_frame, 3), dtype=np.float64)
    vp[:, :, 0] = t_video[:, None]
    vp[:, :, 1] = hh.reshape(-1)[None]
    vp[:, :, 2] = ww.reshape(-1)[None]
    pos[video_start:] = vp.reshape(-1, 3)
    video_idx = np.arange(video_start, seq)
    audio_idx = np.arange(audio_start, video_start)
    text_idx = np.arange(num_text)
    tags = np.empty(seq, dtype=np.int64)
    tags[text_idx] = TEXT_TAG
    tags[audio_idx] = AUDIO_TAG
    tags[video_idx] = VIDEO_TAG
    return pos, tags, video_idx, audio_idx, text_idx


def t2va_row_timesteps(seq, audio_idx, video_t, audio_t):
    """Distinct timesteps (sorted, float32) and each row's index into them: text and video rows at
    the video timestep, audio rows at the audio one (t2va has no condition rows)."""
    import numpy as np

    rows = np.full(seq, np.float32(video_t), dtype=np.float32)
    rows[audio_idx] = np.float32(audio_t)
    return np.unique(rows, return_inverse=True)


def patchify_np(lat, patch=(1, 2, 2)):
    """[B, C, F, H, W] -> [B, rows, C*pt*ph*pw], rows frame-major then row-major, channel-major
    patch vectors (the pipeline's patchify, batch kept)."""
    b, c, f, h, w = lat.shape
    pt, ph, pw = patch
    x = lat.reshape(b, c, f // pt, pt, h // ph, ph, w // pw, pw).transpose(0, 2, 4, 6, 1, 3, 5, 7)
    return x.reshape(b, -1, c * pt * ph * pw)


def unpatchify_np(rows, channels, f, h, w, patch=(1, 2, 2)):
    b = rows.shape[0]
    pt, ph, pw = patch
    x = rows.reshape(b, f // pt, h // ph, w // pw, channels, pt, ph, pw).transpose(0, 4, 1, 5, 2, 6, 3, 7)
    return x.reshape(b, channels, f, h, w)


def read_safetensors_header(path):
    """{name: (dtype, shape)} and the metadata of a safetensors file (header only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {}) or {}
    return {k: (v["dtype"], tuple(v["shape"])) for k, v in header.items()}, meta


def name_pattern(name):
    """A tensor name with its layer indices replaced, to compare inventories across depths."""
    return re.sub(r"\.\d+(?=\.)", ".#", name)


def release_dtype(component, name):
    if component == "transformer":
        return "F32" if name.startswith(DIT_FP32_PREFIXES) else "BF16"
    return "F32"  # both VAEs are float32 in the release


def png_bytes(rgb):
    """A uint8 [H, W, 3] array as PNG bytes (no imaging library needed)."""
    import numpy as np

    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + np.ascontiguousarray(rgb[y]).tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def probe_clip(frames, audio):
    """A rough attribute probe of a decoded clip (colour, shape, motion, pitch indices; -1 when no
    object stands out), for the training log only: `h3 eval tiny` is the evaluation. Object pixels
    are those far from the border median; colour is their median's nearest palette entry; shape
    from the medians of the top and bottom thirds' width ratio and of the bounding box's fill
    (split as SPEC.md's estimator); motion from the centroid
    track; pitch from the Hann-windowed spectrum's peak in 150-1200 Hz."""
    import numpy as np

    f = frames.astype(np.float64)
    fills, tapers, cx, cy, cols = [], [], [], [], []
    for fr in f:
        border = np.concatenate([fr[0], fr[-1], fr[:, 0], fr[:, -1]])
        bg = np.median(border, axis=0)
        d = np.sqrt(((fr - bg) ** 2).sum(-1))
        m = d > 60.0
        if m.sum() < 8:
            continue
        ys, xs = np.nonzero(m)
        box = (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)
        fills.append(m.sum() / box)
        widths = m[ys.min():ys.max() + 1].sum(1)
        third = len(widths) // 3
        if third:
            top, bottom = float(widths[:third].sum()), float(widths[-third:].sum())
            tapers.append(min(top, bottom) / max(top, bottom, 1.0))
        cy.append(ys.mean())
        cx.append(xs.mean())
        cols.append(np.median(fr[m], axis=0))
    spec = np.abs(np.fft.rfft(audio.astype(np.float64).mean(0) * np.hanning(audio.shape[-1])))
    freqs = np.fft.rfftfreq(audio.shape[-1], 1.0 / SAMPLE_RATE)
    band = (freqs >= 150.0) & (freqs <= 1200.0)
    peak = freqs[band][np.argmax(spec[band])]
    pitch = int(np.argmin([abs(math.log(peak / hz)) for hz in clips.COLOUR_TONE_HZ]))
    if len(fills) < FRAMES // 2:
        return -1, -1, -1, pitch
    col = np.median(np.array(cols), axis=0)
    colour = int(np.argmin([((col - np.array(c)) ** 2).sum() for c in clips.COLOUR_RGB]))
    fill = float(np.median(fills))
    taper = float(np.median(tapers)) if tapers else 1.0
    shape = 2 if taper < 0.54 else (1 if fill > 0.86 else 0)
    cx, cy = np.array(cx), np.array(cy)

    turn = 0.1 * HEIGHT  # the track goes beyond both of its ends (the floor contact): a bounce
    if cy.max() > max(cy[0], cy[-1]) + turn or cy.min() < min(cy[0], cy[-1]) - turn:
        motion = 4
    elif abs(cx[-1] - cx[0]) >= abs(cy[-1] - cy[0]):
        motion = 1 if cx[-1] > cx[0] else 0
    else:
        motion = 3 if cy[-1] > cy[0] else 2
    return colour, shape, motion, pitch


def self_check():
    """numpy-only checks of the helpers: prompt table, geometry, layout invariants, patchify round
    trip, timestep rows, PNG writer, the probe on clean clips. Exit 77 (a skip to ctest) without
    numpy."""
    try:
        import numpy as np
    except ImportError:
        print("train.py self-check: skipped (numpy is not installed)")
        return 77

    p = all_prompts()
    assert len(p) == 60 and len(set(p)) == 60 and p[0] == "a red circle moves to the left"
    assert p[(2 * 3 + 2) * 5 + 4] == "a blue triangle bounces"
    assert latent_geometry() == (12, 4, 8, 65)
    L = 7
    pos, tags, vi, ai, ti = t2va_layout(L, 12, 4, 8, 65)
    assert pos.shape == (L + 130 + 96, 3) and len(vi) == 96 and len(ai) == 130
    assert (tags[:L] == 1).all() and (tags[ai] == 2).all() and (tags[vi] == 0).all()
    # Text on the time axis at its index; audio and video clocks start where text ends.
    assert (pos[:L, 0] == np.arange(L)).all() and pos[ai[0], 0] == L and pos[vi[0], 0] == L
    assert pos[ai[64], 0] == L + 64 and pos[ai[65], 0] == L  # channel-major stereo blocks
    # Frame times: 5/3 * (0, 1, 5, 9, 13, 17, 18, ...).
    ft = pos[vi[::8], 0] - L
    want = np.cumsum([0.0] + [ROPE_FRAME_RESCALE * ROPE_FRAMES_PER_LATENT[i % 5] for i in range(11)])
    assert np.allclose(ft, want), (ft, want)
    # Spatial grid: 2 x 4 patches, centred, scaled by 32 / sqrt(4 * 8).
    hvals, wvals = np.unique(pos[vi, 1]), np.unique(pos[vi, 2])
    assert len(hvals) == 2 and len(wvals) == 4
    assert abs(hvals.mean() - (0.5 - (4 / math.sqrt(32)) / 4) * 32) < 1e-9, hvals
    assert pos[ai[0], 2] == wvals.min() and pos[ai[-1], 2] == wvals.max() and (pos[ai, 1] == 0).all()
    u, inv = t2va_row_timesteps(len(pos), ai, 0.25, 0.5)
    assert list(u) == [np.float32(0.25), np.float32(0.5)] and (inv[ai] == 1).all() and inv[0] == 0
    u, inv = t2va_row_timesteps(len(pos), ai, 0.0, 0.0)
    assert len(u) == 1 and (inv == 0).all()
    lat = np.random.RandomState(0).randn(2, 24, 12, 4, 8)
    rows = patchify_np(lat)
    assert rows.shape == (2, 96, 96)
    assert rows[1, 8 + 3, 5 * 4 + 1 * 2 + 0] == lat[1, 5, 1, 1, 6]  # frame 1, patch (0, 3), c5 dy1 dx0
    assert np.array_equal(unpatchify_np(rows, 24, 12, 4, 8), lat)
    assert abs(shifted_sigma(0.5, 12.0) - 12 / 13) < 1e-12 and shifted_sigma(1.0, 3.0) == 1.0
    assert all(abs(shifted_sigma(unshifted_sigma(x, 12.0), 12.0) - x) < 1e-12 for x in (0.0, 0.3, 0.9, 1.0))
    png = png_bytes(np.zeros((2, 3, 3), dtype=np.uint8))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    ok = 0
    for index in range(12):
        prm = clips.sample_params(11, index)
        frames, audio, _ = clips.render(prm)
        got = probe_clip(frames, audio)
        want = (prm["colour"], prm["shape"], prm["motion"], prm["colour"])
        ok += got == want
        assert got[0] == want[0] and got[3] == want[3], (index, got, want)
    assert ok >= 10, ok
    print("train.py self-check: ok (probe %d/12 exact on clean clips)" % ok)
    return 0


# =================================================================================================
# the GPU side
# =================================================================================================

def setup_reference(anchor):
    """Makes the reference's diffusers importable the way the anchor's bench_ref.py does: the packed
    sources unpacked once into /tmp/h3-ref, refenv.py stubbing the optional media modules."""
    if not os.environ.get("H3_REF_DIR"):
        dst = "/tmp/h3-ref"
        if not os.path.isdir(os.path.join(dst, "dmin", "diffusers")):
            import tarfile

            os.makedirs(dst, exist_ok=True)
            tarfile.open(os.path.join(anchor, "dmin.tar.xz")).extractall(dst)
        os.environ["H3_REF_DIR"] = os.path.join(dst, "dmin")
    if anchor and os.path.isfile(os.path.join(anchor, "refenv.py")):
        sys.path.insert(0, anchor)
        import refenv  # noqa: F401
    elif os.environ["H3_REF_DIR"] not in sys.path:
        sys.path.insert(0, os.environ["H3_REF_DIR"])


class Ref:
    """The reference classes and functions this script uses (filled by `load_reference`)."""


def load_reference(anchor, log):
    setup_reference(anchor)
    from diffusers.models.autoencoders.autoencoder_kl_minimax_h3 import AutoencoderKLMiniMaxH3
    from diffusers.models.autoencoders.autoencoder_kl_minimax_h3_audio import AutoencoderKLMiniMaxH3Audio
    from diffusers.models.transformers.transformer_minimax_h3 import MiniMaxH3Transformer3DModel
    from diffusers.schedulers.scheduling_minimax_h3 import MiniMaxH3Scheduler

    Ref.VideoVAE, Ref.AudioVAE = AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio
    Ref.DiT, Ref.Scheduler = MiniMaxH3Transformer3DModel, MiniMaxH3Scheduler
    Ref.layout = Ref.row_timesteps = Ref.patchify = None
    try:
        from diffusers.modular_pipelines.minimax_h3 import before_denoise, modular_pipeline

        Ref.layout = before_denoise.MiniMaxH3PrepareLayoutStep.build_packed_sequence
        Ref.row_timesteps = before_denoise.MiniMaxH3SetTimestepsStep.build_row_timesteps
        Ref.patchify = before_denoise.patchify_video_latents
        Ref.video_latent_num_frames = modular_pipeline.video_latent_num_frames
        Ref.audio_latent_num_frames = modular_pipeline.audio_latent_num_frames
        assert (modular_pipeline.MINIMAX_H3_VIDEO_TAG, modular_pipeline.MINIMAX_H3_TEXT_TAG,
                modular_pipeline.MINIMAX_H3_AUDIO_TAG) == (VIDEO_TAG, TEXT_TAG, AUDIO_TAG)
        log("reference: packing from diffusers.modular_pipelines.minimax_h3.before_denoise")
    except Exception as e:  # the modular pipeline pulls in optional packages (requests, PIL, ...)
        log("reference: modular pipeline not importable (%s: %s); packing from this script's "
            "layout (h3_components_spec.md)" % (type(e).__name__, e))


def part_dir(out, part):
    return os.path.join(out, "parts", part)


def component_config(repo, component, size, overrides=None):
    with open(os.path.join(repo, component, "config.json")) as f:
        cfg = json.load(f)
    part = {"vae": "vae", "audio_vae": "audio_vae", "transformer": "dit"}[component]
    for k, v in list(SIZES[size][part].items()) + list((overrides or {}).items()):
        if k not in RESIZABLE[part]:
            raise SystemExit("size preset changes %s.%s, which is not resizable" % (component, k))
        cfg[k] = v
    return cfg


def build(cls, cfg):
    """A reference module from a component config (diffusers ConfigMixin: private keys ignored)."""
    return cls.from_config({k: v for k, v in cfg.items() if not k.startswith("_")})


def save_part(out, part, model, cfg, log_record):
    from safetensors.torch import save_file

    d = part_dir(out, part)
    os.makedirs(d, exist_ok=True)
    sd = {k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # A resumed part keeps the record of the runs it continues, so the provenance counts every step.
    prev_path = os.path.join(d, "log.json")
    if (log_record.get("resumed") or log_record.get("decoder_only")) and os.path.isfile(prev_path):
        with open(prev_path) as f:
            prev = json.load(f)
        earlier = prev.pop("earlier_runs", [])
        prev.pop("env", None)
        log_record["earlier_runs"] = earlier + [prev]
    with open(prev_path, "w") as f:
        json.dump(log_record, f, indent=1)


def vae_overrides(args):
    """The video VAE's shape flags over the size preset (--vae-spatial-ratio, --vae-latent-channels),
    for runs that compare ratios or widths against the preset's."""
    out = {}
    if args.vae_spatial_ratio:
        stages = {4: 2, 8: 3, 16: 4}[args.vae_spatial_ratio]
        out["spatial_downsample_factors"] = [2] * stages + [1] * (6 - stages)
        # A stage that halves time but not space shrinks each frame by two pixels (its strided
        # convolution pads space only for a spatial stride of 2; the engine refuses such a stage),
        # so at ratio 4 the two temporal halvings move onto the two spatial ones.
        out["temporal_downsample_factors"] = [2, 2, 1, 1, 1, 1] if stages == 2 else [1, 2, 2, 1, 1, 1]
    if args.vae_latent_channels:
        out["latent_channels"] = args.vae_latent_channels
    return out


def part_model(args, part, cls, device, overrides=None):
    """The part's model: built fresh from the size preset, or its saved weights with --resume."""
    if args.resume:
        return load_part(args.out, part, cls, device)
    cfg = component_config(args.repo, PART_COMPONENT[part], args.size, overrides)
    return build(cls, cfg).to(device), cfg


def load_part(out, part, cls, device):
    from safetensors.torch import load_file

    d = part_dir(out, part)
    if not os.path.isfile(os.path.join(d, "model.safetensors")):
        raise SystemExit("%s: no trained %s (run that part first)" % (d, part))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    model = build(cls, cfg)
    missing, unexpected = model.load_state_dict(load_file(os.path.join(d, "model.safetensors")), strict=True)
    assert not missing and not unexpected
    return model.to(device), cfg


class Logger:
    def __init__(self, path=None):
        self.path, self.t0 = path, time.time()

    def __call__(self, msg):
        line = "[%7.1fs] %s" % (time.time() - self.t0, msg)
        print(line, flush=True)


def load_clips(data, split, limit=None):
    """All shards of DATA/<split> (written by `data` or clips.py): frames uint8 [N, F, H, W, 3],
    audio float32 [N, 2, S], attributes [N, 3], prompts, background index [N]."""
    import numpy as np

    d = os.path.join(data, split)
    with open(os.path.join(d, "manifest.json")) as f:
        man = json.load(f)
    assert (man["height"], man["width"], man["frames"], man["audio_samples"]) == \
        (HEIGHT, WIDTH, FRAMES, AUDIO_SAMPLES), "dataset geometry differs from SPEC.md"
    parts = {k: [] for k in ("frames", "audio", "attrs", "prompt", "bg")}
    n = 0
    for sh in man["shards"]:
        z = np.load(os.path.join(d, sh["file"]))
        take = sh["count"] if limit is None else min(sh["count"], limit - n)
        parts["frames"].append(z["frames"][:take])
        parts["audio"].append(z["audio"][:take])
        parts["attrs"].append(np.stack([z["colour"], z["shape"], z["motion"]], 1)[:take])
        parts["prompt"].extend(str(p) for p in z["prompt"][:take])
        parts["bg"].append(z["params"][:take, clips.PARAM_NAMES.index("background")].astype(np.int64))
        n += take
        if limit is not None and n >= limit:
            break
    out = {k: (np.concatenate(v) if k != "prompt" else v) for k, v in parts.items()}
    out["seed"] = man["seed"]
    return out


class Budget:
    """Ends a part's loop at `steps` or after `seconds` (0: no limit), whichever comes first.

    The learning rate follows the further along of the two clocks, so a run cut short by the time
    limit still ends its cosine decay instead of stopping at a high rate. Such a run is not
    reproducible step for step on another machine; the log records where it stopped, and
    `--steps` that count with no limit repeats it."""

    def __init__(self, steps, seconds, limit_file=None):
        self.steps, self.seconds, self.t0 = steps, seconds, time.time()
        self.stopped_by_time = False
        # A lease can turn out shorter than planned once the run has started: a number written to
        # limit_file replaces `seconds` (read every few seconds), so the run still ends with its
        # learning rate decayed and its weights exported instead of being cut off mid-decay.
        self.limit_file, self.checked = limit_file, 0.0

    def _reread(self):
        if not self.limit_file or time.time() - self.checked < 5.0:
            return
        self.checked = time.time()
        try:
            with open(self.limit_file) as f:
                text = f.read().strip()
        except OSError:
            return
        try:
            seconds = float(text)
        except ValueError:
            print("time limit file %s: expected a number of seconds, got %r; ignored" % (self.limit_file, text),
                  file=sys.stderr)
            return
        if seconds > 0 and seconds != self.seconds:
            print("time limit now %g s (from %s)" % (seconds, self.limit_file), file=sys.stderr)
            self.seconds = seconds

    def progress(self, step):
        self._reread()
        p = step / max(1, self.steps)
        if self.seconds > 0:
            p = max(p, (time.time() - self.t0) / self.seconds)
        return min(1.0, p)

    def more(self, step):
        if step >= self.steps:
            return False
        if self.seconds > 0 and time.time() - self.t0 >= self.seconds:
            self.stopped_by_time = True
            return False
        return True

    def last(self, step):
        return step == self.steps - 1 or (self.seconds > 0 and time.time() - self.t0 >= self.seconds)


def lr_at(step, budget, lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    w = warmup / max(1, budget.steps)
    p = (budget.progress(step) - w) / max(1e-9, 1.0 - w)
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, p))))


def seed_all(seed):
    import numpy as np
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def env_record():
    import torch

    rec = {"torch": torch.__version__, "python": sys.version.split()[0],
           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
           "script_sha256": hashlib.sha256(open(__file__, "rb").read()).hexdigest(),
           "clips_sha256": hashlib.sha256(open(clips.__file__, "rb").read()).hexdigest()}
    try:
        rec["git_commit"] = subprocess.check_output(["git", "-C", ROOT, "rev-parse", "HEAD"],
                                                    stderr=subprocess.DEVNULL).decode().strip()
    except Exception:
        pass
    return rec


# ---- part: data ----------------------------------------------------------------------------------

def _render_range(job):
    import numpy as np

    seed, split, start, n = job
    held = clips.held_out_attributes()
    frames = np.empty((n, FRAMES, HEIGHT, WIDTH, 3), dtype=np.uint8)
    audio = np.empty((n, AUDIO_CHANNELS, AUDIO_SAMPLES), dtype=np.float32)
    attrs = np.empty((n, 3), dtype=np.int64)
    params = np.empty((n, len(clips.PARAM_NAMES)), dtype=np.float64)
    prompts = []
    for j in range(n):
        index = start + j
        a = held[index % len(held)] if split == "heldout" else None
        p = clips.sample_params(seed, index, a)
        frames[j], audio[j], text = clips.render(p)
        attrs[j] = (p["colour"], p["shape"], p["motion"])
        params[j] = [p[k] for k in clips.PARAM_NAMES]
        prompts.append(text)
    return frames, audio, attrs, params, prompts


def write_split(out, count, seed, split, shard, workers):
    """The same files as `clips.py --out OUT --count N --seed S --split SPLIT --shard K` (same
    renderer, same clip indices), rendered by a process pool."""
    import multiprocessing as mp

    import numpy as np

    os.makedirs(out, exist_ok=True)
    jobs = [(seed, split, s, min(shard, count - s)) for s in range(0, count, shard)]
    shards = []
    with mp.get_context("fork").Pool(workers) as pool:
        for k, (fr, au, at, pa, pr) in enumerate(pool.imap(_render_range, jobs)):
            name = "clips-%05d.npz" % k
            start = jobs[k][2]
            np.savez(os.path.join(out, name), frames=fr, audio=au, prompt=np.array(pr),
                     colour=at[:, 0], shape=at[:, 1], motion=at[:, 2],
                     index=np.arange(start, start + len(pr)), params=pa)
            shards.append({"file": name, "count": len(pr)})
    manifest = {"spec": "tools/train_tiny/SPEC.md", "seed": seed, "split": split, "count": count,
                "height": HEIGHT, "width": WIDTH, "frames": FRAMES, "fps": clips.FPS,
                "sample_rate": SAMPLE_RATE, "audio_channels": AUDIO_CHANNELS,
                "audio_samples": AUDIO_SAMPLES, "colours": clips.COLOURS, "shapes": clips.SHAPES,
                "motions": clips.MOTIONS, "params": clips.PARAM_NAMES, "shards": shards}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def part_data(args, log):
    workers = max(1, min(32, (os.cpu_count() or 2)))
    # Small shards keep the pool busy; the shard size does not change the clips.
    # The held-out clips keep their own seed: with the training clips' seed they would change with
    # every resumed run's fresh clips, and validation losses could not be compared across runs.
    for split, count, seed in (("train", args.count, args.data_seed), ("heldout", args.heldout, args.heldout_seed)):
        d = os.path.join(args.data, split)
        if os.path.isfile(os.path.join(d, "manifest.json")):
            with open(os.path.join(d, "manifest.json")) as f:
                m = json.load(f)
            if m["count"] == count and m["seed"] == seed:
                log("data: %s already has %d clips (seed %d)" % (d, count, seed))
                continue
            shutil.rmtree(d)
        t = time.time()
        write_split(d, count, seed, split, 64, workers)
        log("data: wrote %d %s clips to %s in %.1fs" % (count, split, d, time.time() - t))
    return 0


# ---- part: vae ---------------------------------------------------------------------------------

def to_pixels(frames_u8, device):
    """uint8 [B, F, H, W, 3] (GPU) -> the VAE's input: ImageNet-normalized [B, 3, F, H, W] float32."""
    import torch

    x = frames_u8.permute(0, 4, 1, 2, 3).float().div(255.0)
    mean = torch.tensor(PIXEL_MEAN, device=device).view(1, 3, 1, 1, 1)
    std = torch.tensor(PIXEL_STD, device=device).view(1, 3, 1, 1, 1)
    return (x - mean) / std, x


def from_pixels(y, device):
    import torch

    mean = torch.tensor(PIXEL_MEAN, device=device).view(1, 3, 1, 1, 1)
    std = torch.tensor(PIXEL_STD, device=device).view(1, 3, 1, 1, 1)
    return y.float() * std + mean


def video_psnr(vae, frames_gpu, device, batch=8):
    import torch

    vals = []
    with torch.no_grad():
        for s in range(0, frames_gpu.shape[0], batch):
            x, x01 = to_pixels(frames_gpu[s:s + batch], device)
            z = vae.encode(x).latent_dist.mode()
            y01 = from_pixels(vae.decode(z).sample, device).clamp(0, 1)
            mse = ((y01 - x01) ** 2).flatten(1).mean(1)
            vals.append(10.0 * torch.log10(1.0 / mse.clamp_min(1e-10)))
    return float(torch.cat(vals).mean())


def video_probe(vae, held, device, batch=8, sheet=None, sheet_clips=12):
    """Share of held-out clips whose reconstruction (posterior mode) keeps the colour, shape and
    motion that probe_clip reads: the DiT cannot draw what the decoder cannot, so this bounds
    what `h3 eval tiny` can reach with these VAE weights. With `sheet`, also writes a PNG of the
    first `sheet_clips` clips, each clip's frames above their reconstruction: what the probe's
    numbers cannot say (faint, blurred or displaced objects, border artifacts)."""
    import numpy as np
    import torch

    frames = torch.from_numpy(held["frames"]).to(device)
    hits = np.zeros(3)
    recs = []
    with torch.no_grad():
        for s in range(0, frames.shape[0], batch):
            x, _ = to_pixels(frames[s:s + batch], device)
            y01 = from_pixels(vae.decode(vae.encode(x).latent_dist.mode()).sample, device).clamp(0, 1)
            rec = (y01 * 255.0).round().to(torch.uint8).permute(0, 2, 3, 4, 1).cpu().numpy()
            for k in range(rec.shape[0]):
                got = probe_clip(rec[k], held["audio"][s + k])[:3]
                hits += np.array(got) == held["attrs"][s + k]
                if len(recs) < sheet_clips:
                    recs.append(rec[k])
    if sheet is not None and recs:
        pairs = [c for k, r in enumerate(recs) for c in (held["frames"][k], r)]
        with open(sheet, "wb") as f:
            f.write(png_bytes(contact_sheet(pairs)))
    n = frames.shape[0]
    return {name: float(h / n) for name, h in zip(("colour", "shape", "motion"), hits)}


def clips_probe(held):
    """Share of held-out clips whose own frames probe_clip reads right: the probe's ceiling."""
    import numpy as np

    hits = np.zeros(3)
    for k in range(held["frames"].shape[0]):
        hits += np.array(probe_clip(held["frames"][k], held["audio"][k])[:3]) == held["attrs"][k]
    n = held["frames"].shape[0]
    return {name: float(h / n) for name, h in zip(("colour", "shape", "motion"), hits)}


def edge_loss(y, x):
    """L1 between the spatial finite differences of y and x ([B, C, F, H, W]): what tells a
    square's corner from a circle's arc, which a per-pixel loss lets blur away cheaply."""
    dy = (y[..., 1:, :] - y[..., :-1, :]) - (x[..., 1:, :] - x[..., :-1, :])
    dx = (y[..., :, 1:] - y[..., :, :-1]) - (x[..., :, 1:] - x[..., :, :-1])
    return dy.abs().mean() + dx.abs().mean()


def optimizer_step(opt, model, loss, lr):
    """One step at `lr` with the gradient norm clipped at 1; returns the norm before clipping."""
    import torch

    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return gn


def set_latent_stats(cfg, record, latents):
    """The pipeline's per-channel `latents_mean` / `latents_std`, over the training clips'
    posterior modes (`latents` yields [B, C, ...] batches), into the config and the log."""
    import torch

    s1 = s2 = None
    cnt = 0
    with torch.no_grad():
        for z in latents:
            zs = z.double().transpose(0, 1).reshape(z.shape[1], -1)
            s1 = zs.sum(1) if s1 is None else s1 + zs.sum(1)
            s2 = (zs * zs).sum(1) if s2 is None else s2 + (zs * zs).sum(1)
            cnt += zs.shape[1]
    mean = s1 / cnt
    std = (s2 / cnt - mean * mean).clamp_min(1e-12).sqrt()
    # A channel the encoder left (nearly) unused has a near-zero spread; dividing by it would hand
    # the DiT amplified noise to model. Floor the spread at a tenth of the median channel's.
    floor = 0.1 * float(std.median())
    record["latent_channels_floored"] = int((std < floor).sum())
    std = std.clamp_min(floor)
    cfg["latents_mean"] = [round(float(v), 6) for v in mean]
    cfg["latents_std"] = [max(1e-6, round(float(v), 6)) for v in std]
    record["latents_mean"], record["latents_std"] = cfg["latents_mean"], cfg["latents_std"]


def decoder_only_model(args, device, log):
    """--decoder-only: the trained VAE's encoder, quant_conv and post_quant_conv, frozen except
    post_quant_conv, under a fresh ViT decoder at the size preset's width and depth. The latent
    space stays the one the DiT already learned, so a wider decoder can be tried (and the DiT kept)
    at the cost of a decoder-only run. Returns the model, its config and what was kept."""
    import torch

    old, old_cfg = load_part(args.out, "vae", Ref.VideoVAE, "cpu")
    cfg = dict(old_cfg)
    preset = {k: v for k, v in SIZES[args.size]["vae"].items() if k.startswith("decoder_")}
    cfg.update(preset)
    vae = build(Ref.VideoVAE, cfg)
    kept = sorted({k.split(".")[0] for k in old.state_dict() if not k.startswith("decoder.")})
    # With --resume the trained decoder goes on training too (same width and depth), instead of a
    # fresh one: the encoder and with it the DiT's latents stay as they are either way.
    keep_decoder = bool(args.resume) and all(cfg[k] == old_cfg.get(k) for k in preset)
    if args.resume and not keep_decoder:
        raise SystemExit("vae --decoder-only --resume: the size preset's decoder %s differs from the trained one's" % preset)
    if keep_decoder:
        kept.append("decoder")
    state = {k: v for k, v in old.state_dict().items() if keep_decoder or not k.startswith("decoder.")}
    missing, unexpected = vae.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("decoder.") for k in missing), (missing, unexpected)
    for name, p in vae.named_parameters():
        p.requires_grad = name.startswith("decoder.") or name.startswith("post_quant_conv.")
    log("vae: decoder only: kept %s of the trained VAE%s" % (
        kept, "" if keep_decoder else ", a fresh decoder with %s" % preset))
    del old
    torch.cuda.empty_cache()
    return vae.to(device), cfg, kept


def part_vae(args, log):
    import numpy as np
    import torch

    device = args.device
    seed_all(args.seed)
    if args.decoder_only:
        vae, cfg, kept = decoder_only_model(args, device, log)
    else:
        vae, cfg = part_model(args, "vae", Ref.VideoVAE, device, vae_overrides(args))
    n_train = 32 if args.smoke else None
    train = load_clips(args.data, "train", n_train)
    held = load_clips(args.data, "heldout", 4 if args.smoke else 24)
    frames = torch.from_numpy(train["frames"]).to(device)
    bgs = torch.tensor(clips.BACKGROUND_RGB, device=device, dtype=torch.float32)[torch.from_numpy(train["bg"]).to(device)]
    n = frames.shape[0]
    steps = min(args.steps, 4) if args.smoke else args.steps
    batch = 2 if args.smoke else args.batch
    trained = [p for p in vae.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=args.lr, betas=(0.9, 0.99), weight_decay=0.0)
    rng = np.random.RandomState(args.seed)
    params = sum(p.numel() for p in trained)
    log("vae: %d parameters, %d training clips, %d steps of %d clips, config %s" % (
        params, n, steps, batch, {k: cfg[k] for k in SIZES["train"]["vae"]}))
    record = {"part": "vae", "seed": args.seed, "steps": steps, "batch": batch, "lr": args.lr,
              "kl_weight": args.kl, "fg_weight": args.fg_weight, "train_clips": n,
              "data_seed": train["seed"], "params": params, "env": env_record(), "resumed": bool(args.resume),
              "decoder_only": bool(args.decoder_only), "edge_weight": args.edge_weight,
              "precision": args.vae_precision, "log": []}
    # The probe on the held-out clips themselves: what "keeps the shape" is measured against.
    record["probe_clips"] = clips_probe(held)
    log("vae: the probe reads the held-out clips themselves as %s" % record["probe_clips"])
    if args.resume or args.decoder_only:
        vae.eval()
        record["probe_before"] = video_probe(vae, held, device)
        log("vae: held-out reconstructions before this run keep %s" % record["probe_before"])
        vae.train()
    t0 = time.time()
    budget = Budget(steps, 0 if args.smoke else args.time_budget, args.time_budget_file)
    for step in itertools.count():
        if not budget.more(step):
            break
        idx = torch.from_numpy(rng.randint(0, n, size=batch)).to(device)
        x, x01 = to_pixels(frames[idx], device)
        # bf16 autocast (--vae-precision): 11.2 steps/s against 6.2 in float32 on one H200 at 16
        # clips, with cuDNN kept deterministic (bench/RESULTS.md); the losses are taken in float32.
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.vae_precision == "bf16" and device == "cuda"):
            with torch.set_grad_enabled(not args.decoder_only):
                post = vae.encode(x).latent_dist
                z = post.mean + post.std * torch.randn_like(post.mean)
            y01 = from_pixels(vae.decode(z).sample, device)
        # Object pixels (anything not the clip's plain background) weigh more: a small shape would
        # otherwise be the cheapest thing to blur away.
        fg = ((x01 * 255.0 - bgs[idx].view(-1, 3, 1, 1, 1)).abs().amax(1, keepdim=True) > 0.5).float()
        w = 1.0 + args.fg_weight * fg
        err = y01 - x01
        l1 = (w * err.abs()).mean()
        l2 = (w * err * err).mean()
        kl = 0.5 * (post.mean.float() ** 2 + post.var.float() - 1.0 - post.logvar.float()).mean()
        edge = edge_loss(y01, x01) if args.edge_weight > 0 else torch.zeros((), device=device)
        loss = l1 + l2 + args.kl * kl + args.edge_weight * edge
        gn = optimizer_step(opt, vae, loss, lr_at(step, budget, args.lr, args.warmup))
        if step % args.log_every == 0 or budget.last(step):
            psnr = 10.0 * math.log10(1.0 / max(1e-10, float((err.detach().clamp(-1, 1) ** 2).mean())))
            e = {"step": step, "loss": float(loss), "l1": float(l1), "l2": float(l2), "kl": float(kl),
                 "edge": float(edge),
                 "grad_norm": float(gn), "train_psnr": psnr, "post_std": float(post.std.mean()),
                 "s": round(time.time() - t0, 1)}
            record["log"].append(e)
            log("vae step %d loss %.4f l1 %.4f l2 %.5f kl %.3f psnr %.2f dB std %.3f" % (
                step, e["loss"], e["l1"], e["l2"], e["kl"], psnr, e["post_std"]))
    record["steps_run"], record["stopped_by_time"] = step, budget.stopped_by_time
    vae.eval()
    record["heldout_psnr"] = video_psnr(vae, torch.from_numpy(held["frames"]).to(device), device)
    log("vae: held-out reconstruction PSNR %.2f dB (posterior mode)" % record["heldout_psnr"])
    os.makedirs(part_dir(args.out, "vae"), exist_ok=True)
    record["probe"] = video_probe(vae, held, device, sheet=os.path.join(part_dir(args.out, "vae"), "reconstructions.png"))
    log("vae: held-out reconstructions keep %s (reconstructions.png: each clip above its reconstruction)" % record["probe"])
    if args.decoder_only:
        # The encoder did not change: its latents' statistics (and the DiT trained on them) stand.
        record["latents_mean"], record["latents_std"] = cfg["latents_mean"], cfg["latents_std"]
        record["kept_from_earlier_vae"] = kept
    else:
        set_latent_stats(cfg, record, (vae.encode(to_pixels(frames[s:s + args.batch], device)[0]).latent_dist.mode()
                                       for s in range(0, n, args.batch)))
    log("vae: latents mean in [%.3f, %.3f], std in [%.3f, %.3f]" % (
        min(cfg["latents_mean"]), max(cfg["latents_mean"]), min(cfg["latents_std"]), max(cfg["latents_std"])))
    save_part(args.out, "vae", vae, cfg, record)
    log("vae: saved %s" % part_dir(args.out, "vae"))
    return 0


# ---- part: audio_vae ---------------------------------------------------------------------------

def stft_loss(y, x):
    """Multi-resolution STFT loss (spectral convergence + log magnitude), y/x [B, S].

    The log magnitude is taken of |S| + 1, not of |S| clamped at a tiny floor: the clips are
    mostly silent bins, and there a tiny floor gives near-silent output gradients of 1/|S| that
    swamp everything else after clipping. A first run with a 1e-5 floor learned silence (held-out
    SNR 0 dB, waveform L1 flat from the first step). A tone of amplitude 0.2 peaks at 13-100 in
    these transforms (n_fft / 4 x amplitude), so the +1 keeps the tone's and clicks' log shape."""
    import torch

    total = 0.0
    for n_fft in (256, 512, 1024, 2048):
        win = torch.hann_window(n_fft, device=x.device)
        sy = torch.stft(y, n_fft, hop_length=n_fft // 4, window=win, return_complex=True).abs()
        sx = torch.stft(x, n_fft, hop_length=n_fft // 4, window=win, return_complex=True).abs()
        sc = torch.linalg.norm(sy - sx, dim=(1, 2)) / torch.linalg.norm(sx, dim=(1, 2)).clamp_min(1e-5)
        total = total + sc.mean() + (torch.log1p(sy) - torch.log1p(sx)).abs().mean()
    return total / 4.0


def audio_metrics(avae, wav_gpu, device, batch=32):
    """SNR (dB) and tone-pitch agreement of posterior-mode reconstructions (channel 0)."""
    import numpy as np
    import torch

    snr, hits = [], 0
    with torch.no_grad():
        for s in range(0, wav_gpu.shape[0], batch):
            x = wav_gpu[s:s + batch, :1]
            y = avae.decode(avae.encode(x).latent_dist.mode()).sample
            snr.append(10 * torch.log10((x ** 2).sum((1, 2)) / ((y - x) ** 2).sum((1, 2)).clamp_min(1e-12)))
            for k in range(x.shape[0]):
                a = np.repeat(y[k].cpu().numpy(), 2, 0)
                b = np.repeat(x[k].cpu().numpy(), 2, 0)
                frame = np.zeros((FRAMES, HEIGHT, WIDTH, 3), dtype=np.uint8)
                hits += probe_clip(frame, a)[3] == probe_clip(frame, b)[3]
    return float(torch.cat(snr).mean()), hits / wav_gpu.shape[0]


def part_audio_vae(args, log):
    import numpy as np
    import torch

    device = args.device
    seed_all(args.seed)
    avae, cfg = part_model(args, "audio_vae", Ref.AudioVAE, device)
    train = load_clips(args.data, "train", 32 if args.smoke else None)
    held = load_clips(args.data, "heldout", 4 if args.smoke else 48)
    # Both stereo channels are the same signal (SPEC.md): the mono VAE trains on channel 0.
    wav = torch.from_numpy(np.ascontiguousarray(train["audio"][:, :1])).to(device)
    n = wav.shape[0]
    steps = min(args.steps, 4) if args.smoke else args.steps
    batch = 2 if args.smoke else args.batch
    opt = torch.optim.AdamW(avae.parameters(), lr=args.lr, betas=(0.8, 0.99), weight_decay=0.0)
    rng = np.random.RandomState(args.seed + 1)
    params = sum(p.numel() for p in avae.parameters())
    log("audio_vae: %d parameters, %d training clips, %d steps of %d clips" % (params, n, steps, batch))
    record = {"part": "audio_vae", "seed": args.seed, "steps": steps, "batch": batch, "lr": args.lr,
              "kl_weight": args.kl, "train_clips": n, "data_seed": train["seed"], "params": params,
              "env": env_record(), "resumed": bool(args.resume), "log": []}
    t0 = time.time()
    budget = Budget(steps, 0 if args.smoke else args.time_budget, args.time_budget_file)
    for step in itertools.count():
        if not budget.more(step):
            break
        idx = torch.from_numpy(rng.randint(0, n, size=batch)).to(device)
        # Random crops of whole latent frames: a third of the cost of whole clips per example.
        # They start on the 800-sample grid, as a whole clip does: there every tone starts each
        # latent frame at phase 0 (SPEC.md), which an off-grid crop would break.
        frames_in_clip = wav.shape[-1] // 800
        crop_frames = min(frames_in_clip, args.audio_crop)
        start = 800 * int(rng.randint(0, frames_in_clip - crop_frames + 1))
        crop = crop_frames * 800
        x = wav[idx, :, start:start + crop]
        post = avae.encode(x).latent_dist
        z = post.mean + post.std * torch.randn_like(post.mean)
        y = avae.decode(z).sample
        l1 = (y - x).abs().mean()
        spec = stft_loss(y[:, 0], x[:, 0])
        kl = 0.5 * (post.mean ** 2 + post.std ** 2 - 1.0 - 2.0 * post.logs).mean()
        loss = args.audio_l1 * l1 + spec + args.kl * kl
        gn = optimizer_step(opt, avae, loss, lr_at(step, budget, args.lr, args.warmup))
        if step % args.log_every == 0 or budget.last(step):
            e = {"step": step, "loss": float(loss), "l1": float(l1), "stft": float(spec), "kl": float(kl),
                 "grad_norm": float(gn), "post_std": float(post.std.mean()), "s": round(time.time() - t0, 1)}
            record["log"].append(e)
            log("audio_vae step %d loss %.4f l1 %.4f stft %.4f kl %.3f std %.3f" % (
                step, e["loss"], e["l1"], e["stft"], e["kl"], e["post_std"]))
    record["steps_run"], record["stopped_by_time"] = step, budget.stopped_by_time
    avae.eval()
    snr, pitch = audio_metrics(avae, torch.from_numpy(np.ascontiguousarray(held["audio"])).to(device), device)
    record["heldout_snr_db"], record["heldout_pitch_agreement"] = snr, pitch
    log("audio_vae: held-out reconstruction SNR %.2f dB, tone pitch kept in %.0f%% of clips" % (snr, 100 * pitch))
    set_latent_stats(cfg, record, (avae.encode(wav[s:s + 64]).latent_dist.mode() for s in range(0, n, 64)))
    save_part(args.out, "audio_vae", avae, cfg, record)
    log("audio_vae: saved %s" % part_dir(args.out, "audio_vae"))
    return 0


# ---- part: dit ---------------------------------------------------------------------------------

def load_features(args, log):
    """prompts.json + prompt_features.safetensors (README.md, "Prompt features"): {prompt: bf16
    tensor [L, text_dim]} on the CPU."""
    import torch
    from safetensors.torch import load_file

    pj = args.prompts or os.path.join(args.data, "prompts.json")
    pf = args.features or os.path.join(args.data, "prompt_features.safetensors")
    with open(pj) as f:
        prompts = json.load(f)
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise SystemExit("%s: must be a JSON list of prompt strings" % pj)
    for path in (pj, pf):
        if not os.path.isfile(path):
            raise SystemExit("%s: not found (README.md, 'Prompt features', says how to make it)" % path)
    _, meta = read_safetensors_header(pf)
    te = os.path.join(args.repo, "text_encoder", COMPONENT_FILE["text_encoder"])
    if meta.get("text_encoder_sha256"):
        have = hashlib.sha256(open(te, "rb").read()).hexdigest()
        if have != meta["text_encoder_sha256"]:
            raise SystemExit("%s was computed with another text encoder than %s" % (pf, te))
    if meta.get("text_encoder_layer", "50") != "50":
        raise SystemExit("%s: features of layer %s, the DiT reads layer 50" % (pf, meta["text_encoder_layer"]))
    tensors = load_file(pf)
    with open(os.path.join(args.repo, "transformer", "config.json")) as f:
        text_dim = json.load(f)["text_dim"]
    # `h3 encode-text` writes `prompt.<i>.embeds` (float32) with the prompts in its metadata; the
    # engine's own presentation of each prompt is exactly what the DiT will read at inference.
    engine_layout = "prompt.0.embeds" in tensors
    if engine_layout and meta.get("prompts") is not None and json.loads(meta["prompts"]) != prompts:
        raise SystemExit("%s: its prompts differ from %s" % (pf, pj))
    out = {}
    for i, p in enumerate(prompts):
        t = tensors.get("prompt.%d.embeds" % i if engine_layout else str(i))
        if t is None:
            raise SystemExit("%s: no tensor '%d' for prompt %r" % (pf, i, p))
        if t.ndim != 2 or t.shape[1] != text_dim or t.shape[0] < 1:
            raise SystemExit("%s: tensor '%d' has shape %s, want [L, %d]" % (pf, i, list(t.shape), text_dim))
        if not torch.isfinite(t.float()).all():
            raise SystemExit("%s: tensor '%d' is not finite" % (pf, i))
        out[p] = t.to(torch.bfloat16)  # the pipeline hands the conditioner's bf16 output to the DiT
    lens = sorted({int(t.shape[0]) for t in out.values()})
    allf = torch.cat([t.float() for t in out.values()])
    log("features: %d prompts, lengths %s, rms %.3g, max |x| %.3g" % (
        len(out), lens, float(allf.pow(2).mean().sqrt()), float(allf.abs().max())))
    return out


class Layouts:
    """The packed t2va inputs per text length, built by the reference's layout step when it can be
    imported (checked against this script's own layout), else by `t2va_layout`."""

    def __init__(self, geo, device):
        self.geo, self.device, self.cache = geo, device, {}

    def get(self, num_text):
        import numpy as np
        import torch

        if num_text in self.cache:
            return self.cache[num_text]
        f, h, w, na = self.geo
        pos, tags, vi, ai, ti = t2va_layout(num_text, f, h, w, na)
        if Ref.layout is not None:
            r = Ref.layout(torch.full((num_text,), TEXT_TAG, dtype=torch.long), f, h, w, na, (1, 2, 2),
                           AUDIO_CHANNELS, AUDIO_TAG, VIDEO_TAG, ())
            assert r[5] == 0 and r[6] == 0
            for mine, ref, name in ((tags, r[1], "token_tags"), (vi, r[2], "video_indices"),
                                    (ai, r[3], "audio_indices"), (ti, r[4], "text_indices")):
                if not np.array_equal(mine, ref.numpy()):
                    raise SystemExit("layout check: %s differs from the reference's at %d text rows" % (name, num_text))
            diff = float(np.abs(pos - r[0].numpy()).max())
            if diff > 1e-9:
                raise SystemExit("layout check: position_ids differ from the reference's by %g" % diff)
            if diff > 0:  # a last-ulp difference of summation order: the reference's values are used
                print("layout check: position_ids within %g of the reference's" % diff, flush=True)
            pos, tags, vi, ai, ti = (x.numpy() for x in r[:5])
        d = self.device
        lay = {"position_ids": torch.from_numpy(pos).to(d), "token_tags": torch.from_numpy(tags).to(d),
               "video_indices": torch.from_numpy(vi).long().to(d), "audio_indices": torch.from_numpy(ai).long().to(d),
               "text_indices": torch.from_numpy(ti).long().to(d), "_ai": ai, "_vi": vi, "_S": len(pos)}
        self.cache[num_text] = lay
        return lay

    def timesteps(self, lay, tv, ta):
        """(timestep, timestep_indices) of one forward, as the pipeline's SetTimesteps step builds them."""
        import torch

        num_text = int(lay["text_indices"].numel())
        if Ref.row_timesteps is not None:
            u, inv = Ref.row_timesteps(torch.from_numpy(lay["_vi"]), torch.from_numpy(lay["_ai"]), 0, 0, num_text,
                                       tv, ta, max(tv, KEYFRAME_NOISE_AUG), 1.0)
        else:
            u, inv = (torch.from_numpy(x) for x in t2va_row_timesteps(lay["_S"], lay["_ai"], tv, ta))
        return u.to(self.device), inv.long().to(self.device)


def encode_all(vae, vcfg, avae, acfg, data, device, batch=16):
    """Normalized latents of every clip, packed as the pipeline packs them: video rows [N, rows, 4 C]
    (patchify of (z - mean) / std, posterior mode) and channel-major audio rows [N, 130, Ca]."""
    import torch

    vm = torch.tensor(vcfg["latents_mean"], device=device).view(1, -1, 1, 1, 1)
    vs = torch.tensor(vcfg["latents_std"], device=device).view(1, -1, 1, 1, 1)
    am = torch.tensor(acfg["latents_mean"], device=device).view(1, -1, 1)
    ast = torch.tensor(acfg["latents_std"], device=device).view(1, -1, 1)
    vrows, arows = [], []
    with torch.no_grad():
        for s in range(0, len(data["prompt"]), batch):
            fr = torch.from_numpy(data["frames"][s:s + batch]).to(device)
            z = (vae.encode(to_pixels(fr, device)[0]).latent_dist.mode() - vm) / vs
            if Ref.patchify is not None:
                r = Ref.patchify(z, (1, 2, 2)).reshape(z.shape[0], -1, z.shape[1] * 4)
            else:
                r = torch.from_numpy(patchify_np(z.cpu().numpy())).to(device)
            vrows.append(r.float())
            au = torch.from_numpy(data["audio"][s:s + batch]).to(device)  # [B, 2, S]
            b = au.shape[0]
            za = avae.encode(au.reshape(b * AUDIO_CHANNELS, 1, -1)).latent_dist.mode()  # [2B, 32, 65]
            za = (za - am) / ast
            # Channel-major rows per clip: (2, 32, Na) -> permute(0, 2, 1) -> (2 Na, 32).
            arows.append(za.reshape(b, AUDIO_CHANNELS, za.shape[1], za.shape[2]).permute(0, 1, 3, 2)
                         .reshape(b, -1, za.shape[1]).float())
    return torch.cat(vrows), torch.cat(arows)


def cached_latents(args, log, vae, vcfg, avae, acfg, train, held, device):
    """encode_all of the training and held-out clips, kept in --latents-cache when given: several
    runs on the same VAEs and clips (a throughput comparison, a resumed run) encode them once. The
    file names the VAE weights and clips it was made from and is recomputed when they differ."""
    import hashlib

    import torch

    key = hashlib.sha256()
    for part in ("vae", "audio_vae"):
        with open(os.path.join(part_dir(args.out, part), "model.safetensors"), "rb") as f:
            key.update(hashlib.sha256(f.read()).digest())
    for d in (train, held):
        key.update(repr((len(d["prompt"]), d["seed"], d["frames"].shape)).encode())
        key.update(d["frames"][:: max(1, len(d["prompt"]) // 16)].tobytes())
    key = key.hexdigest()
    path = args.latents_cache
    if path and os.path.isfile(path):
        c = torch.load(path, map_location=device)
        if c.get("key") == key:
            log("dit: latents from %s" % path)
            return c["xv"], c["xa"], c["hv"], c["ha"]
        log("dit: %s was made from other VAEs or clips; encoding again" % path)
    xv, xa = encode_all(vae, vcfg, avae, acfg, train, device)
    hv, ha = encode_all(vae, vcfg, avae, acfg, held, device)
    if path:
        tmp = path + ".tmp"
        torch.save({"key": key, "xv": xv, "xa": xa, "hv": hv, "ha": ha}, tmp)
        os.replace(tmp, path)
    return xv, xa, hv, ha


def dit_forward(dit, lay, xv, xa, txt, timestep, tindices, precision):
    import torch

    # bf16 autocast on the GPU only: a --device cpu smoke check runs in float32.
    cuda = xv.device.type == "cuda"
    with torch.autocast(xv.device.type, dtype=torch.bfloat16, enabled=precision == "bf16" and cuda):
        v, a = dit(hidden_states=xv, audio_hidden_states=xa, encoder_hidden_states=txt, timestep=timestep,
                   timestep_indices=tindices, token_tags=lay["token_tags"], position_ids=lay["position_ids"],
                   video_indices=lay["video_indices"], audio_indices=lay["audio_indices"],
                   text_indices=lay["text_indices"], return_dict=False)
    return v.float(), a.float()


def sigmas_for(u):
    """(video t, audio t) of a base sigma u, in float32 as the schedulers compute them."""
    import torch

    u = torch.tensor([u], dtype=torch.float32)
    sv = VIDEO_SHIFT * u / (1 + (VIDEO_SHIFT - 1) * u)
    sa = AUDIO_SHIFT * u / (1 + (AUDIO_SHIFT - 1) * u)
    return float(1.0 - sv), float(1.0 - sa)


def flow_loss(dit, layouts, lay, x0v, x0a, txt, u, gen, precision, audio_weight):
    import torch

    tv, ta = sigmas_for(u)
    ev = torch.randn(x0v.shape, generator=gen, device=x0v.device)
    ea = torch.randn(x0a.shape, generator=gen, device=x0a.device)
    # x_t = t x0 + (1 - t) noise (the scheduler's scale_noise); velocity target x0 - noise (data-ward).
    xv = layouts.sched_v.scale_noise(x0v, tv, ev)
    xa = layouts.sched_a.scale_noise(x0a, ta, ea)
    ts, ti = layouts.timesteps(lay, tv, ta)
    pv, pa = dit_forward(dit, lay, xv, xa, txt, ts, ti, precision)
    lv = ((pv - (x0v - ev)) ** 2).mean()
    la = ((pa - (x0a - ea)) ** 2).mean()
    return lv + audio_weight * la, lv, la


def sample(dit, layouts, feats, prompts_list, vae, vcfg, avae, acfg, geo, steps, seed, device, precision):
    """t2va sampling as the pipeline does it: video noise [1, C, F, H, W] then audio rows [2 Na, Ca]
    from one CPU generator per prompt (seed + k), both schedulers over `steps` grid points, one
    forward per step; decoded with the trained VAEs. Returns uint8 frames and waveforms."""
    import numpy as np
    import torch

    f, h, w, na = geo
    vm = torch.tensor(vcfg["latents_mean"], device=device).view(1, -1, 1, 1, 1)
    vs = torch.tensor(vcfg["latents_std"], device=device).view(1, -1, 1, 1, 1)
    am = torch.tensor(acfg["latents_mean"], device=device).view(1, -1, 1)
    ast = torch.tensor(acfg["latents_std"], device=device).view(1, -1, 1)
    cv, ca = vcfg["latent_channels"], acfg["latent_channels"]
    frames_out, audio_out = [], []
    for k, p in enumerate(prompts_list):
        g = torch.Generator("cpu").manual_seed(seed + k)
        zv = torch.randn((1, cv, f, h, w), generator=g, dtype=torch.float32)
        za = torch.randn((na * AUDIO_CHANNELS, ca), generator=g, dtype=torch.float32).to(device)
        xv = torch.from_numpy(patchify_np(zv.numpy())[0]).to(device)
        sv, sa = Ref.Scheduler(shift=VIDEO_SHIFT), Ref.Scheduler(shift=AUDIO_SHIFT)
        sv.set_timesteps(steps, device=device)
        sa.set_timesteps(steps, device=device)
        txt = feats[p].to(device)[None]
        lay = layouts.get(txt.shape[1])
        with torch.no_grad():
            for i, t in enumerate(sv.timesteps):
                ta = sa.timesteps[i]
                ts, ti = layouts.timesteps(lay, float(t), float(ta))
                pv, pa = dit_forward(dit, lay, xv[None], za[None], txt, ts, ti, precision)
                xv = sv.step(pv[0], t, xv, return_dict=False)[0]
                za = sa.step(pa[0], ta, za, return_dict=False)[0]
            z = torch.from_numpy(unpatchify_np(xv[None].cpu().numpy(), cv, f, h, w)).to(device) * vs + vm
            y = from_pixels(vae.decode(z).sample, device).clamp(0, 1)
            frames_out.append((y[0].permute(1, 2, 3, 0) * 255.0).round().byte().cpu().numpy())
            a = za.reshape(AUDIO_CHANNELS, na, ca).permute(0, 2, 1) * ast + am
            audio_out.append(avae.decode(a).sample[:, 0].float().cpu().numpy())
    return np.stack(frames_out), np.stack(audio_out)


def contact_sheet(frames):
    """Frames 0, 12, 25 and 38 of every clip, one clip per row, as one RGB image."""
    import numpy as np

    picks = [0, FRAMES // 3, 2 * FRAMES // 3, FRAMES - 1]
    rows = [np.concatenate([np.pad(c[i], ((1, 1), (1, 1), (0, 0)), constant_values=128) for i in picks], 1)
            for c in frames]
    return np.concatenate(rows, 0)


def part_dit(args, log):
    import numpy as np
    import torch

    device = args.device
    seed_all(args.seed)
    vae, vcfg = load_part(args.out, "vae", Ref.VideoVAE, device)
    avae, acfg = load_part(args.out, "audio_vae", Ref.AudioVAE, device)
    vae.eval().requires_grad_(False)
    avae.eval().requires_grad_(False)
    geo = latent_geometry(vae.spatial_compression_ratio, vcfg["clip_length"], vae.tokens_chunk_size)
    if Ref.layout is not None:
        assert geo[0] == Ref.video_latent_num_frames(FRAMES, vcfg["clip_length"], vae.tokens_chunk_size)
        assert geo[3] == Ref.audio_latent_num_frames(FRAMES)
    # The DiT reads the latents of the VAE it is trained on (the engine checks the pair).
    dit, cfg = part_model(args, "dit", Ref.DiT, device, {"in_channels": vcfg["latent_channels"]})
    assert cfg["in_channels"] == vcfg["latent_channels"], (cfg["in_channels"], vcfg["latent_channels"])
    if not args.resume:
        # adaLN-Zero start: modulation and output heads at zero, so every block begins as the
        # identity and the first prediction is 0 (the usual DiT initialization; the reference
        # module has none).
        with torch.no_grad():
            for blk in dit.transformer_blocks:
                blk.adaln_proj.linear.weight.zero_()
                blk.adaln_proj.linear.bias.zero_()
            for m in (dit.norm_out.linear, dit.proj_out, dit.audio_proj_out):
                m.weight.zero_()
                m.bias.zero_()
    dit.train()
    ema = [p.detach().clone() for p in dit.parameters()]
    # The model the training forwards run. `--precision bf16` runs the float32 master weights under
    # autocast, which casts every weight and many activations on each use, and runs the block
    # norms unfused (bf16 rows against float32 weights): in a profile of this loop on one H100 the
    # casts were a third of the operators and elementwise passes most of the GPU time.
    # `bf16-weights` runs a working copy in the release's own precision instead (bf16 except the
    # float32 islands the reference keeps, `_keep_in_fp32_modules`); its gradients go to the float32
    # master weights, which the optimizer and the EMA keep as before, and the copy follows each step.
    work = dit
    if args.precision == "bf16-weights":
        import copy

        islands = tuple(getattr(Ref.DiT, "_keep_in_fp32_modules", None) or ())
        work = copy.deepcopy(dit)
        for name, p in work.named_parameters():
            if not any(k in name for k in islands):
                p.data = p.data.to(torch.bfloat16)
        log("dit: bf16 working copy, float32 islands %s" % list(islands))
    fwd = work
    if args.compile:
        if not hasattr(torch, "compile"):
            raise SystemExit("--compile needs torch 2 or later (this is %s)" % torch.__version__)
        # torch's default shape policy: the first text length compiles a static graph, the second
        # one graph with the lengths symbolic (the prompt table has five lengths, a micro-batch one
        # of them). reduce-overhead replays CUDA graphs (one per length), which is what a
        # launch-bound step needs.
        fwd = torch.compile(work, mode=args.compile_mode)
        log("dit: torch.compile mode %s" % args.compile_mode)
    cudagraph_steps = args.compile and args.compile_mode == "reduce-overhead"
    master, working = list(dit.parameters()), list(work.parameters())
    # Validation and the samples run the float32 master (EMA) weights under autocast either way.
    eval_precision = "bf16" if args.precision == "bf16-weights" else args.precision
    feats = load_features(args, log)
    train = load_clips(args.data, "train", 64 if args.smoke else None)
    held = load_clips(args.data, "heldout", 12 if args.smoke else 48)
    for d in (train, held):
        missing = sorted({p for p in d["prompt"] if p not in feats})
        if missing:
            raise SystemExit("no prompt features for %s" % missing[:3])
    for a in train["attrs"]:
        assert not clips.is_held_out(*a), "a held-out triple in the DiT's training data"
    t0 = time.time()
    xv_all, xa_all, hv_all, ha_all = cached_latents(args, log, vae, vcfg, avae, acfg, train, held, device)
    log("dit: encoded %d train + %d held-out clips in %.1fs; normalized latents video std %.3f mean %.3f, "
        "audio std %.3f mean %.3f" % (len(train["prompt"]), len(held["prompt"]), time.time() - t0,
                                      float(xv_all.std()), float(xv_all.mean()), float(xa_all.std()), float(xa_all.mean())))
    layouts = Layouts(geo, device)
    layouts.sched_v, layouts.sched_a = Ref.Scheduler(shift=VIDEO_SHIFT), Ref.Scheduler(shift=AUDIO_SHIFT)
    # Clips grouped by the length of their prompt's features: one forward packs one layout.
    by_len = {}
    for i, p in enumerate(train["prompt"]):
        by_len.setdefault(int(feats[p].shape[0]), []).append(i)
    lens = sorted(by_len)
    weights = np.array([len(by_len[L]) for L in lens], dtype=np.float64)
    weights /= weights.sum()
    txt_cache = {p: feats[p].to(device) for p in set(train["prompt"]) | set(held["prompt"])}
    steps = min(args.steps, 5) if args.smoke else args.steps
    batch = 4 if args.smoke else args.batch
    groups = 1 if args.smoke else args.groups
    params = sum(p.numel() for p in dit.parameters())
    log("dit: %d parameters, %d steps of %d x %d clips, text lengths %s, config %s" % (
        params, steps, groups, batch, {L: len(by_len[L]) for L in lens},
        {k: cfg[k] for k in SIZES["train"]["dit"]}))
    opt = torch.optim.AdamW(dit.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.01)
    rng = np.random.RandomState(args.seed + 2)
    gen = torch.Generator(device).manual_seed(args.seed + 3)
    record = {"part": "dit", "seed": args.seed, "steps": steps, "batch": batch, "groups": groups, "lr": args.lr,
              "ema": args.ema, "audio_weight": args.audio_weight, "precision": args.precision,
              "stratified_noise_levels": bool(args.stratify),
              "train_clips": len(train["prompt"]), "data_seed": train["seed"], "heldout_seed": held["seed"], "params": params,
              "timestep_sampling": "base sigma u ~ U(0,1) per micro-batch (stratified over the step when "
                                   "stratified_noise_levels); video t = 1 - shift12(u), audio t = 1 - shift3(u); "
                                   "a low_noise_share of the micro-batches take u = shift12^-1(u) instead, so that "
                                   "their video sigma is uniform",
              "low_noise_share": args.low_noise_share,
              "env": env_record(), "resumed": bool(args.resume), "log": [], "val": []}

    # The base sigmas the held-out loss is taken at. The eight spread over u put the lowest video
    # sigma at 0.43; the low three (video sigma 0.1, 0.2, 0.3) are where edges are drawn, reported apart
    # so that the first series stays comparable with earlier runs.
    val_points = (0.06, 0.18, 0.31, 0.43, 0.56, 0.68, 0.81, 0.93)
    val_low_points = tuple(unshifted_sigma(x, VIDEO_SHIFT) for x in (0.1, 0.2, 0.3))
    # Between the two series the eight points leave a gap (video sigma 0.43 to 0.72): two more, for
    # the per-sigma table only.
    val_mid_points = tuple(unshifted_sigma(x, VIDEO_SHIFT) for x in (0.5, 0.6))

    # The video loss per point of validate_all()'s three series, keyed by the video sigma: where along the
    # sampling path a run's gains land (the object is placed at high sigma, its edges drawn at low).
    video_by_sigma = {}

    def validate(points=val_points):
        """Flow-matching loss on held-out clips at fixed base sigmas with fixed noise."""
        g = torch.Generator(device).manual_seed(1234)
        tot, n = np.zeros(3), 0
        per_point = np.zeros(len(points))
        with torch.no_grad():
            for i, p in enumerate(held["prompt"]):
                txt = txt_cache[p][None]
                lay = layouts.get(txt.shape[1])
                for j, u in enumerate(points):
                    l, lv, la = flow_loss(dit, layouts, lay, hv_all[i:i + 1], ha_all[i:i + 1], txt, u, g,
                                          eval_precision, args.audio_weight)
                    tot += [float(l), float(lv), float(la)]
                    per_point[j] += float(lv)
                    n += 1
        video_by_sigma.update({"%.2f" % shifted_sigma(u, VIDEO_SHIFT): round(float(x) / len(held["prompt"]), 5)
                               for u, x in zip(points, per_point)})
        return tot / n

    def validate_all(name, step=None):
        """Both validations, logged; their figures as one record entry."""
        video_by_sigma.clear()
        v, vl = validate(), validate(val_low_points)
        validate(val_mid_points)
        log("dit val (%s)%s loss %.4f video %.4f audio %.4f; video at sigma 0.1-0.3 %.4f"
            % (name, "" if step is None else " step %d" % step, *v, vl[1]))
        log("dit val video loss by sigma " + " ".join(
            "%s:%.4f" % kv for kv in sorted(video_by_sigma.items(), key=lambda kv: float(kv[0]))))
        entry = {} if step is None else {"step": step}
        entry.update({"loss": v[0], "video": v[1], "audio": v[2], "video_low": vl[1],
                      "video_by_sigma": dict(video_by_sigma)})
        return entry

    if args.resume and not args.bench_steps:
        # The resumed weights' held-out loss: what this run's figures compare with.
        record["val_start"] = validate_all("resumed weights")
    ema_decay = args.ema
    t0 = time.time()
    budget = Budget(steps, 0 if args.smoke else args.time_budget, args.time_budget_file)
    # --profile N: N steps from step 2 (after the first steps' set-up) under torch.profiler, with
    # the table of the costliest kernels and operators in the log (where a step's time goes:
    # arithmetic, memory passes or launches).
    prof = None
    bench_from = min(args.bench_steps // 2, 50)  # past the first steps' set-up and compiles
    for step in itertools.count():
        if args.bench_steps and step == bench_from:
            if device == "cuda":
                torch.cuda.synchronize()
            t_bench = time.time()
        if args.bench_steps and step == args.bench_steps:
            if device == "cuda":
                torch.cuda.synchronize()
            rate = (step - bench_from) / (time.time() - t_bench)
            log("dit: bench %.2f steps/s (steps %d-%d), precision %s, compile %s, %.0f s in all" % (
                rate, bench_from, step - 1, args.precision, args.compile_mode if args.compile else "off",
                time.time() - t0))
            return 0
        if not budget.more(step):
            break
        if args.profile and step == 2:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU] + (
                [torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else []))
            prof.start()
        if prof is not None and step == 2 + args.profile:
            if device == "cuda":
                torch.cuda.synchronize()
            prof.stop()
            # The device column's name changed across torch versions; a table that cannot be made
            # must not stop the training.
            table = None
            for sort in (("device_time_total", "cuda_time_total") if device == "cuda" else ("cpu_time_total",)):
                try:
                    table = prof.key_averages().table(sort_by=sort, row_limit=30)
                    break
                except Exception as e:  # noqa: BLE001
                    table = "no profile table (%s)" % e
            log("dit: profile of steps 2-%d\n%s" % (step - 1, table))
            prof = None
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, budget, args.lr, args.warmup)
        opt.zero_grad(set_to_none=True)
        tot = torch.zeros(3, device=device)
        # One noise level per micro-batch (the DiT takes one row layout per call), stratified over
        # the step's micro-batches: each still draws u ~ U(0, 1), but a step covers the whole range
        # instead of a few random points of it, so the gradient varies less from step to step.
        strata = rng.permutation(groups) if args.stratify else None
        for g in range(groups):
            L = lens[rng.choice(len(lens), p=weights)]
            idx = rng.choice(by_len[L], size=batch)
            u = float((strata[g] + rng.uniform(0.0, 1.0)) / groups) if args.stratify else float(rng.uniform(0.0, 1.0))
            if args.low_noise_share > 0 and rng.uniform(0.0, 1.0) < args.low_noise_share:
                # Read the draw as the video sigma itself: uniform in sigma instead of in u.
                u = unshifted_sigma(u, VIDEO_SHIFT)
            txt = torch.stack([txt_cache[train["prompt"][i]] for i in idx])
            ix = torch.from_numpy(idx).to(device)
            if cudagraph_steps:
                # Each micro-batch is a new replay: its outputs and saved activations may reuse the
                # previous replay's memory, which the backward above has finished with.
                torch.compiler.cudagraph_mark_step_begin()
            loss, lv, la = flow_loss(fwd, layouts, layouts.get(L), xv_all[ix], xa_all[ix], txt, u, gen,
                                     args.precision, args.audio_weight)
            (loss / groups).backward()
            tot += torch.stack([loss.detach(), lv.detach(), la.detach()])
            if work is not dit:
                # The micro-batches' gradients add up in float32 on the master, not in bf16.
                for pm, pw in zip(master, working):
                    if pw.grad is not None:
                        pm.grad = pw.grad.float() if pm.grad is None else pm.grad.add_(pw.grad)
                        pw.grad = None
        gn = torch.nn.utils.clip_grad_norm_(dit.parameters(), 1.0)
        opt.step()
        if work is not dit:
            with torch.no_grad():
                for pw, pm in zip(working, master):
                    pw.copy_(pm)
        with torch.no_grad():
            d = min(ema_decay, (1.0 + step) / (10.0 + step))
            torch._foreach_lerp_(ema, [p.detach() for p in dit.parameters()], 1.0 - d)
        if step % args.log_every == 0 or budget.last(step):
            tot = (tot / groups).tolist()
            e = {"step": step, "loss": tot[0], "video": tot[1], "audio": tot[2], "grad_norm": float(gn),
                 "s": round(time.time() - t0, 1)}
            record["log"].append(e)
            log("dit step %d loss %.4f video %.4f audio %.4f gn %.3f" % (step, tot[0], tot[1], tot[2], float(gn)))
        if not args.bench_steps and ((step + 1) % args.val_every == 0 or budget.last(step)):
            record["val"].append(validate_all("held-out prompts", step))
    record["steps_run"], record["stopped_by_time"] = step, budget.stopped_by_time
    # Export the EMA weights.
    with torch.no_grad():
        for pe, p in zip(ema, dit.parameters()):
            p.copy_(pe)
    dit.eval()
    record["val_ema"] = validate_all("EMA weights")
    save_part(args.out, "dit", dit, cfg, record)
    # Samples of the held-out prompts (the evaluation's cases), with the dense preset's 50 points.
    heldout_prompts = [clips.prompt(*a) for a in clips.held_out_attributes()]
    heldout_prompts = heldout_prompts[:2] if args.smoke else heldout_prompts
    fr, au = sample(dit, layouts, {p: txt_cache[p] if p in txt_cache else feats[p] for p in heldout_prompts},
                    heldout_prompts, vae, vcfg, avae, acfg, geo, 4 if args.smoke else args.sample_steps,
                    args.seed, device, eval_precision)
    d = part_dir(args.out, "dit")
    np.savez_compressed(os.path.join(d, "samples.npz"), frames=fr, audio=au, prompt=np.array(heldout_prompts))
    with open(os.path.join(d, "samples.png"), "wb") as f:
        f.write(png_bytes(contact_sheet(fr)))
    hits = np.zeros(4)
    for k, a in enumerate(clips.held_out_attributes()[:len(heldout_prompts)]):
        got = probe_clip(fr[k], au[k])
        hits += [got[0] == a[0], got[1] == a[1], got[2] == a[2], got[3] == a[0]]
        log("sample %2d %-36s probe colour %s shape %s motion %s pitch %s" % (
            k, heldout_prompts[k], *[("-" if g < 0 else n[g]) for g, n in zip(
                got, (clips.COLOURS, clips.SHAPES, clips.MOTIONS, clips.COLOURS))]))
    record["sample_probe"] = dict(zip(("colour", "shape", "motion", "pitch"), (hits / len(heldout_prompts)).tolist()))
    log("dit: rough probe of %d held-out samples: %s (h3 eval tiny is the judge)" % (
        len(heldout_prompts), record["sample_probe"]))
    with open(os.path.join(d, "log.json"), "w") as f:
        json.dump(record, f, indent=1)
    log("dit: saved %s (samples.png, samples.npz)" % d)
    return 0


# ---- part: export ------------------------------------------------------------------------------

def part_export(args, log):
    """WORK/repo: a copy of the make-tiny repository with vae/, audio_vae/ and transformer/ replaced
    by the trained parts (configs and weights), tensors in the release's dtypes; WORK/PROVENANCE.md."""
    import torch
    from safetensors.torch import load_file, save_file

    repo = os.path.join(args.out, "repo")
    tmp = repo + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(args.repo, tmp)
    records = {}
    for part in PARTS:
        comp = PART_COMPONENT[part]
        d = part_dir(args.out, part)
        if not os.path.isfile(os.path.join(d, "model.safetensors")):
            raise SystemExit("%s: missing; run `%s` first" % (d, part))
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(d, "log.json")) as f:
            records[part] = json.load(f)
        sd = load_file(os.path.join(d, "model.safetensors"))
        orig, _ = read_safetensors_header(os.path.join(args.repo, comp, COMPONENT_FILE[comp]))
        # Same inventory as make-tiny writes (layer counts may differ when resized).
        if {name_pattern(k) for k in sd} != {name_pattern(k) for k in orig}:
            extra = sorted({name_pattern(k) for k in sd} - {name_pattern(k) for k in orig})
            miss = sorted({name_pattern(k) for k in orig} - {name_pattern(k) for k in sd})
            raise SystemExit("%s: tensor names differ from make-tiny's: extra %s missing %s" % (comp, extra[:5], miss[:5]))
        out = {}
        for k, v in sd.items():
            want = release_dtype(comp, k)
            if k in orig and orig[k][0] != want:
                raise SystemExit("%s: make-tiny stores %s as %s, the release rule says %s" % (comp, k, orig[k][0], want))
            out[k] = v.to(torch.float32 if want == "F32" else torch.bfloat16).contiguous()
        folder = os.path.join(tmp, comp)
        for fn in os.listdir(folder):
            if fn.endswith(".safetensors") or fn.endswith(".safetensors.index.json"):
                os.remove(os.path.join(folder, fn))
        save_file(out, os.path.join(folder, COMPONENT_FILE[comp]), metadata={"format": "pt"})
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        log("export: %s: %d tensors, %.2f MB" % (comp, len(out), os.path.getsize(os.path.join(folder, COMPONENT_FILE[comp])) / 1e6))
    # The clips' geometry as the checkpoint's default request (the engine reads these index entries
    # when a request names no size or frame count), so `h3 generate --model repo --prompt ...` draws
    # what the model was trained on.
    index_file = os.path.join(tmp, "modular_model_index.json")
    with open(index_file) as f:
        index = json.load(f)
    index.update({"default_height": HEIGHT, "default_width": WIDTH, "default_num_frames": FRAMES})
    with open(index_file, "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(tmp) for f in fs)
    shutil.rmtree(repo, ignore_errors=True)
    os.rename(tmp, repo)
    log("export: wrote %s (%.1f MB in all%s)" % (repo, total / 1e6, "; over the 40 MB budget" if total > 40e6 else ""))
    with open(os.path.join(args.out, "PROVENANCE.md"), "w") as f:
        f.write(provenance(args, records, total))
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(records, f, indent=1)
    log("export: wrote %s" % os.path.join(args.out, "PROVENANCE.md"))
    return 0


def provenance(args, records, total):
    def steps(rec):
        own = rec.get("steps_run", rec["steps"])
        before = sum(r.get("steps_run", r.get("steps", 0)) for r in rec.get("earlier_runs", []))
        return "%d (%d resumed)" % (own + before, own) if rec.get("resumed") else "%d" % own

    def last(rec, key):
        return rec["log"][-1][key] if rec.get("log") else float("nan")

    v, a, d = records["vae"], records["audio_vae"], records["dit"]
    env = d.get("env", {})
    lines = [
        "# Provenance of the trained tiny MiniMax-H3",
        "",
        "Written by `tools/train_tiny/train.py export`; the numbers come from each part's log.json.",
        "",
        "| | |", "|---|---|",
        "| script | tools/train_tiny/train.py (sha256 %s), clips.py (sha256 %s) |" % (
            env.get("script_sha256", "?")[:16], env.get("clips_sha256", "?")[:16]),
        "| commit | %s |" % env.get("git_commit", "unknown"),
        "| machine | %s, torch %s, python %s |" % (env.get("device", "?"), env.get("torch", "?"), env.get("python", "?")),
        "| data | clips.py seed %s: %d training clips (held-out triples never drawn) |" % (d.get("data_seed"), d.get("train_clips", 0)),
        "| starting repository | `h3 make-tiny` (tokenizer, processor, schedulers, text encoder, transformer_ref kept) |",
        "| repository size | %.1f MB |" % (total / 1e6),
        "",
        "| part | seed | steps x batch | parameters | final training loss | held-out |",
        "|---|---|---|---|---|---|",
        "| vae | %d | %s x %d | %d | %.4f (L1 %.4f) | PSNR %.2f dB |" % (
            v["seed"], steps(v), v["batch"], v["params"], last(v, "loss"), last(v, "l1"), v.get("heldout_psnr", float("nan"))),
        "| audio_vae | %d | %s x %d | %d | %.4f (STFT %.4f) | SNR %.2f dB, pitch kept %.0f%% |" % (
            a["seed"], steps(a), a["batch"], a["params"], last(a, "loss"), last(a, "stft"),
            a.get("heldout_snr_db", float("nan")), 100 * a.get("heldout_pitch_agreement", float("nan"))),
        "| dit | %d | %s x %d x %d | %d | %.4f (video %.4f, audio %.4f) | flow loss %.4f (EMA) |" % (
            d["seed"], steps(d), d["groups"], d["batch"], d["params"], last(d, "loss"), last(d, "video"),
            last(d, "audio"), d.get("val_ema", {}).get("loss", float("nan"))),
        "",
        "DiT timestep sampling: %s; EMA %s; precision %s." % (d.get("timestep_sampling"), d.get("ema"), d.get("precision")),
        "Rough probe of the 12 held-out samples (training-time check, not the evaluation): %s." % d.get("sample_probe"),
        "",
    ]
    return "\n".join(lines)


# =================================================================================================

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=("data", "vae", "audio_vae", "dit", "export", "prompts", "self-check", "fasth3"))
    ap.add_argument("--repo", help="the make-tiny repository training starts from (read only)")
    ap.add_argument("--data", help="dataset folder: train/, heldout/ (the `data` part writes them), "
                                   "prompts.json, prompt_features.safetensors")
    ap.add_argument("--out", default="out/train-tiny", help="work folder: parts/<part>/, repo/, PROVENANCE.md")
    ap.add_argument("--anchor", default=os.environ.get("H3_ANCHOR_DIR", os.path.join(ROOT, ".device-anchor")),
                    help="the anchor folder (dmin.tar.xz, refenv.py)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=0.0,
                    help="seconds: end the training loop there even before --steps (0: no limit)")
    ap.add_argument("--time-budget-file", default=None,
                    help="a file that may hold a number of seconds, read while training: it replaces "
                         "--time-budget (a lease found shorter than planned ends the run early, its "
                         "learning rate still decayed)")
    ap.add_argument("--smoke", action="store_true", help="a handful of steps on tiny batches: checks the part end to end")
    ap.add_argument("--resume", action="store_true", help="start from WORK/parts/PART's weights (fresh optimizer)")
    ap.add_argument("--size", choices=sorted(SIZES), default="train")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--kl", type=float, default=None, help="KL weight (VAEs; KL is a mean per latent element)")
    ap.add_argument("--decoder-only", action="store_true",
                    help="vae: keep WORK/parts/vae's encoder (and latent space), train a fresh decoder at --size "
                         "(with --resume: train the trained decoder on)")
    ap.add_argument("--edge-weight", type=float, default=2.0,
                    help="vae: weight of an L1 loss on spatial differences (sharper edges)")
    ap.add_argument("--vae-spatial-ratio", type=int, choices=(4, 8, 16), default=None,
                    help="vae: pixels per latent token along each spatial axis (default: the size preset's)")
    ap.add_argument("--vae-latent-channels", type=int, default=None,
                    help="vae: latent channels (default: the size preset's)")
    ap.add_argument("--fg-weight", type=float, default=4.0, help="extra loss weight of object pixels (vae)")
    ap.add_argument("--audio-crop", type=int, default=20, help="audio_vae: training crop in latent frames (800 samples)")
    ap.add_argument("--audio-l1", type=float, default=5.0, help="waveform L1 weight next to the STFT loss")
    ap.add_argument("--groups", type=int, default=4, help="dit: micro-batches per step (one timestep each)")
    ap.add_argument("--stratify", action=argparse.BooleanOptionalAction, default=True,
                    help="dit: stratify the micro-batches' noise levels over [0, 1) within a step")
    ap.add_argument("--low-noise-share", type=float, default=0.0,
                    help="dit: share of micro-batches whose video sigma is drawn uniformly instead of as shift12(u) "
                         "(shift 12 puts 3 %% of u ~ U(0,1) below sigma 0.3, where edges are drawn)")
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--audio-weight", type=float, default=1.0)
    ap.add_argument("--precision", choices=("bf16", "bf16-weights", "fp32"), default="bf16",
                    help="dit: bf16 autocast over float32 weights; bf16-weights: a bf16 working copy (the "
                         "release's precision) with float32 master weights; fp32")
    ap.add_argument("--compile", action="store_true", help="dit: torch.compile the training forward (torch 2+)")
    ap.add_argument("--compile-mode", choices=("default", "reduce-overhead", "max-autotune-no-cudagraphs"),
                    default="default", help="dit: torch.compile's mode (reduce-overhead: CUDA graphs)")
    ap.add_argument("--bench-steps", type=int, default=0,
                    help="dit: train N steps, log the rate of the second half (at most the steps after 50) and "
                         "stop without saving: compares --precision and --compile on one machine")
    ap.add_argument("--latents-cache", help="dit: a file keeping the clips' encoded latents between runs")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: float32, for a --smoke check of a part on a machine without a GPU")
    ap.add_argument("--vae-precision", choices=("bf16", "fp32"), default="bf16",
                    help="vae: autocast of the training steps (held-out checks and latent statistics in float32)")
    ap.add_argument("--sample-steps", type=int, default=50, help="grid points of the samples (dense preset: 50)")
    ap.add_argument("--profile", type=int, default=0, help="dit: profile N steps from step 2 (torch.profiler table in the log)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--val-every", type=int, default=1000)
    ap.add_argument("--prompts", help="prompts.json (default DATA/prompts.json)")
    ap.add_argument("--features", help="prompt_features.safetensors (default DATA/prompt_features.safetensors)")
    ap.add_argument("--count", type=int, default=6000, help="data: training clips")
    ap.add_argument("--heldout", type=int, default=48, help="data: held-out clips (4 of each held-out triple)")
    ap.add_argument("--data-seed", type=int, default=0, help="data: the training clips' seed")
    ap.add_argument("--heldout-seed", type=int, default=0,
                    help="data: the held-out clips' seed (fixed, so that validation losses compare across runs)")
    ap.add_argument("--out-file", help="prompts: where to write prompts.json")
    args = ap.parse_args(argv)
    log = Logger()

    if args.part == "self-check":
        return self_check()
    if args.part == "prompts":
        text = json.dumps(all_prompts(), indent=1) + "\n"
        if args.out_file:
            with open(args.out_file, "w") as f:
                f.write(text)
        else:
            sys.stdout.write(text)
        return 0
    if args.part == "fasth3":
        raise SystemExit("fasth3: not implemented. The FastH3 gates (attn.to_gate_compress) belong to the VSA "
                         "compression branch, which the reference's diffusers DiT does not have, and a few-step "
                         "student needs a distillation recipe, not the flow objective; see README.md.")
    if not 0.0 <= args.low_noise_share <= 1.0:
        ap.error("--low-noise-share must be in [0, 1], got %g" % args.low_noise_share)
    if args.part == "data":
        if not args.data:
            ap.error("data: --data DIR is required")
        return part_data(args, log)
    # At these sizes a step is bound by kernel launches, not arithmetic: on one H200 the DiT ran
    # 7.0 steps/s at 4 x 16 clips, the VAEs 11.8 (8 clips) and 7.0 (16 crops). Larger batches cost
    # little more per step and the training time is counted in seconds, so the batches are 2-4x
    # those first runs' (the DiT's rate raised with its batch).
    defaults = {  # part: steps, batch, lr, warmup, kl
        "vae": (3000, 16, 5e-4, 200, 1e-4),
        "audio_vae": (3000, 32, 5e-4, 200, 1e-4),
        "dit": (8000, 64, 5e-4, 300, 0.0),
        "export": (0, 0, 0.0, 0, 0.0),
    }[args.part]
    for name, value in zip(("steps", "batch", "lr", "warmup", "kl"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if not args.repo or not os.path.isfile(os.path.join(args.repo, "modular_model_index.json")):
        ap.error("--repo must be a MiniMax-H3 repository written by `h3 make-tiny`")
    if args.part != "export" and not args.data:
        ap.error("--data DIR is required")
    os.makedirs(args.out, exist_ok=True)
    import torch

    if args.part != "export":
        if args.device == "cuda" and not torch.cuda.is_available():
            raise SystemExit("%s: needs a CUDA device (--device cpu runs a --smoke check here, slowly)" % args.part)
        load_reference(args.anchor, log)
    return {"vae": part_vae, "audio_vae": part_audio_vae, "dit": part_dit, "export": part_export}[args.part](args, log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
