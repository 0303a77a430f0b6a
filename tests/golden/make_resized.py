#!/usr/bin/env python3
"""Writes the `resized` variants of a golden folder: its component cases at other model sizes, with
every stored output recomputed by the reference's own modules (the diffusers sources the anchor
packs) on the CPU in float32, as the golden folder's were.

The shared folder's checkpoint has one size of each component; a held-out folder of the same format
may have others ("model sizes" in the golden README's sense). Each preset changes what a size can
change while keeping the conditioner and the tokenizer (PRESETS below has every value):

  resized         DiT of 3 heads of 64 with 10 rotary frequencies per axis (60 of 64 channels
                  rotated), 2 blocks, 1 refiner block, 16 video and 24 audio latent channels; a
                  video VAE with 2 resnets per level and a 3-layer decoder of heads of 24 with half
                  of each rotated; an audio VAE with other strides, 6 upsamplers (one of rate 4) and
                  two AMP kernel sizes
  resized_ratio8  8x spatial compression (the latents of each case's canvas double per side, and
                  the tiles' overlaps widen in 8-pixel steps), DiT heads of 96 with every channel
                  rotated, 8 video and 16 audio latent channels, a 1-layer decoder with 8 register
                  tokens, an audio VAE with 7 upsamplers of rates 2 and 5 in another order

The weights are random, drawn per tensor from a generator seeded by the tensor's name, stored in the
release's dtypes (the DiT in bf16 with its float32 islands, the VAEs in float32), and the outputs
are computed after reading them back, as the golden README says of its own. The decoders' last
layers are scaled so that decoded pixels and samples mostly stay inside their clamp ranges.

Kinds recomputed: e2e (from each run's stored prompt rows, keyframes and normalized references: the
visual conditions' latents and the soundtracks' rows through the new VAEs, the request generator's
draws at the new latent widths, every step through the reference's DiT partition and schedulers, the
final latents and both decodes; the presentation, layout, media normalization and schedules do not
depend on the resized components and stay as stored, so runs are kept only where the spatial
compression is the source's), dit (inputs of the new widths drawn at random, the layout, timesteps
and prompt rows of each case kept; intermediates included), video_vae_encode, video_vae_decode and
their `_sampled` forms (same canvases, pixels, formulas, tile settings and sample positions; latents
and tile layouts as the new VAE has them), audio_vae_encode and audio_vae_decode (intermediates
included), with their float64 noise floors in tolerances.json. Kept as they are: every kind that
does not depend on these components (conditioner, tokenizer, processors, schedulers, layouts, rng,
audio resampling) and vsa/ (its own checkpoint). generation_info.json records the new
configurations. --check recomputes the shared folder's six runs too: draws bit for bit, generated
rows within 8.7e-7 and the DiT's outputs for them within 1.2e-6 at every step, final latents within
8.7e-7, frames within 6e-7; a few conditioning latents land one float16 step away (up to 5.3e-4 of
the largest), as does what the DiT makes of those rows (2.1e-4).

Usage:
  make_resized.py SRC OUT [PRESET ...]  write OUT/<preset> (default: every preset) from the golden
                                        folder SRC
  make_resized.py SRC --check           recompute SRC's own cases with its own checkpoint and compare
                                        with what it stores: checks this script's recipes (rel_max
                                        <= 1e-5, or the golden tests' bound where it is wider: the
                                        audio encode, the waveforms; one float16 step for what the
                                        recipe rounds to float16 and what the DiT makes of it)

Needs a python3 with torch (1.13 or later) and numpy, and the anchor folder (dmin.tar.xz, refenv.py):
$H3_ANCHOR_DIR, else SRC/../anchor. What an older torch or a machine without safetensors lacks comes
from tools/train_tiny/cpu_check (torch_compat.py, standins/).
"""

import hashlib
import json
import os
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import make_variants as MV  # noqa: E402  (golden folder helpers)

# Each preset: the config keys it changes per component (transformer_ref takes the transformer's).
PRESETS = {
    "resized": {
        "transformer": {
            "num_attention_heads": 3, "attention_head_dim": 64, "hidden_size": 192, "num_layers": 2,
            "num_refiner_layers": 1, "ffn_dim": 320, "in_channels": 16, "audio_in_channels": 24,
            "freq_dim": 128, "time_embed_hidden_dim": 96, "time_embed_dim": 48, "rope_freq_dim": 10,
            "rope_theta": 5000.0, "norm_eps": 1e-6, "qk_norm_eps": 1e-6, "final_norm_eps": 1e-6,
        },
        "vae": {
            "latent_channels": 16, "block_out_channels": [8, 16, 32, 32, 48, 48], "layers_per_block": 2,
            "norm_eps": 1e-5, "decoder_num_layers": 3, "decoder_num_attention_heads": 2,
            "decoder_attention_head_dim": 24, "decoder_num_register_tokens": 2, "decoder_ffn_mult": 2,
            "decoder_rope_theta": 50.0, "decoder_rope_dim_ratio": 0.5, "decoder_norm_eps": 1e-6,
        },
        "audio_vae": {
            "encoder_dim": 4, "encoder_rates": [4, 4, 2, 5, 5], "latent_dim": 48, "latent_channels": 24,
            "num_attention_heads": 2, "decoder_dim": 64, "decoder_rates": [5, 5, 4, 2, 2, 2],
            "decoder_kernel_sizes": [9, 9, 8, 4, 4, 4], "resblock_kernel_sizes": [3, 5],
            "resblock_dilation_sizes": [[1, 3, 5], [1, 2, 4]],
        },
    },
    # 8x spatial compression (the tiles' overlaps then widen in 8-pixel steps), heads of 96 with
    # every channel rotated, a decoder with 8 register tokens, an audio VAE with 7 upsamplers.
    "resized_ratio8": {
        "transformer": {
            "num_attention_heads": 2, "attention_head_dim": 96, "hidden_size": 192, "num_layers": 3,
            "num_refiner_layers": 2, "ffn_dim": 256, "in_channels": 8, "audio_in_channels": 16,
            "time_embed_hidden_dim": 64, "time_embed_dim": 32, "rope_freq_dim": 16, "rope_theta": 20000.0,
        },
        "vae": {
            "latent_channels": 8, "block_out_channels": [16, 16, 32, 32, 32, 32],
            "spatial_downsample_factors": [2, 2, 2, 1, 1, 1], "decoder_num_layers": 1,
            "decoder_num_attention_heads": 4, "decoder_attention_head_dim": 16,
            "decoder_num_register_tokens": 8, "decoder_ffn_mult": 3, "decoder_rope_dim_ratio": 0.75,
        },
        "audio_vae": {
            "encoder_dim": 2, "encoder_rates": [5, 5, 4, 4, 2], "latent_dim": 32, "latent_channels": 16,
            "num_attention_heads": 4, "decoder_dim": 128, "decoder_rates": [2, 5, 2, 5, 2, 2, 2],
            "decoder_kernel_sizes": [4, 9, 4, 9, 4, 4, 4], "resblock_kernel_sizes": [3, 7, 11],
            "resblock_dilation_sizes": [[1, 2, 3], [1, 3, 5], [1, 1, 1]],
        },
    },
}
PIXEL_MEAN, PIXEL_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
REGENERATED = ("e2e", "dit", "video_vae_encode", "video_vae_decode", "video_vae_encode_sampled",
               "video_vae_decode_sampled", "audio_vae_encode", "audio_vae_decode")

torch = None
Ref = {}


def setup(src):
    """Imports torch and the reference's modules the way tools/train_tiny/cpu_check does."""
    global torch
    cpu_check = os.path.join(ROOT, "tools", "train_tiny", "cpu_check")
    sys.path.insert(0, cpu_check)
    sys.path.append(os.path.join(cpu_check, "standins"))
    import torch_compat  # noqa: F401  (backfills what an older torch lacks)
    import torch as _torch

    torch = _torch
    torch.set_num_threads(1)  # the golden's own setting; also what makes sums reproducible
    anchor = os.environ.get("H3_ANCHOR_DIR") or os.path.join(os.path.dirname(os.path.abspath(src)), "anchor")
    if not os.path.isfile(os.path.join(anchor, "dmin.tar.xz")):
        raise SystemExit("make_resized.py: no dmin.tar.xz in %s (set H3_ANCHOR_DIR)" % anchor)
    if not os.environ.get("H3_REF_DIR"):
        ref = os.path.join(tempfile.gettempdir(), "h3-ref-cpu")
        if not os.path.isdir(os.path.join(ref, "dmin", "diffusers")):
            os.makedirs(ref, exist_ok=True)
            with tarfile.open(os.path.join(anchor, "dmin.tar.xz")) as t:
                t.extractall(ref)
        os.environ["H3_REF_DIR"] = os.path.join(ref, "dmin")
    sys.path.insert(0, anchor)
    import refenv  # noqa: F401
    from diffusers.models.autoencoders.autoencoder_kl_minimax_h3 import AutoencoderKLMiniMaxH3
    from diffusers.models.autoencoders.autoencoder_kl_minimax_h3_audio import AutoencoderKLMiniMaxH3Audio
    from diffusers.models.transformers.transformer_minimax_h3 import MiniMaxH3Transformer3DModel
    from diffusers.schedulers.scheduling_minimax_h3 import MiniMaxH3Scheduler

    Ref.update(scheduler=MiniMaxH3Scheduler, vae=AutoencoderKLMiniMaxH3, audio_vae=AutoencoderKLMiniMaxH3Audio,
               transformer=MiniMaxH3Transformer3DModel, transformer_ref=MiniMaxH3Transformer3DModel)
    try:  # the pipeline's own helper, when its module imports here
        from diffusers.modular_pipelines.minimax_h3.encoders import encode_vae_condition

        Ref["encode_vae_condition"] = encode_vae_condition
    except Exception as e:  # noqa: BLE001  (optional media packages)
        print("make_resized.py: the pipeline's encode_vae_condition is not importable (%s); its output "
              "is the posterior recipe below" % e)


# ---- tensors -----------------------------------------------------------------------------------

def st_to_torch(t):
    import numpy as np

    np_dtype = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8,
                "BF16": np.uint16, "F16": np.float16}[t["dtype"]]
    a = np.frombuffer(t["data"], dtype=np_dtype).reshape(t["shape"])
    if t["dtype"] == "BF16":
        return torch.from_numpy((a.astype(np.uint32) << 16).view(np.float32).copy())
    return torch.from_numpy(a.copy())


def torch_to_st(x, dtype):
    import numpy as np

    x = x.detach().contiguous()
    if dtype == "BF16":
        bits = x.float().numpy().view(np.uint32)
        # round to nearest even, as torch's .to(torch.bfloat16) does for finite values
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        data = bits.tobytes()
    else:
        np_dtype = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}[dtype]
        data = x.numpy().astype(np_dtype).tobytes()
    return {"dtype": dtype, "shape": list(x.shape), "data": data}


def name_seed(name, salt=0):
    return int.from_bytes(hashlib.sha256(("%d:%s" % (salt, name)).encode()).digest()[:7], "little")


def randn(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def rand(shape, seed):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


# ---- checkpoint --------------------------------------------------------------------------------


def load_model(ckpt, component):
    with open(os.path.join(ckpt, component, "config.json")) as f:
        cfg = json.load(f)
    model = Ref[component].from_config({k: v for k, v in cfg.items() if not k.startswith("_")})
    state = {}
    for name in sorted(os.listdir(os.path.join(ckpt, component))):
        if name.endswith(".safetensors"):
            tensors, _ = MV.read_safetensors(os.path.join(ckpt, component, name))
            state.update({n: st_to_torch(t) for n, t in tensors.items()})
    model.load_state_dict(state, strict=True)
    return model.float().eval(), cfg


def block_pattern(name):
    parts = name.split(".")
    return ".".join("N" if p.isdigit() else p for p in parts)


def random_state(model, component, old_dtypes):
    """Seeded random values for every tensor of the state dict, in the release's dtypes."""
    state = model.state_dict()
    out = {}
    for name, ref in state.items():
        seed = name_seed(name, {"transformer": 1, "transformer_ref": 2, "vae": 3, "audio_vae": 4}[component])
        leaf = name.rsplit(".", 1)[-1]
        if name.endswith("filter") or not ref.is_floating_point():
            x = ref.clone()  # anti-aliasing filters: fixed functions of the config, kept as built
        elif leaf == "weight_g":
            v = randn(state[name[:-1] + "v"].shape, name_seed(name[:-1] + "v", seed & 0xFFFF))
            # w = g v / |v| with |w| about that of a 1 / sqrt(fan-in) matrix, so that the audio
            # decoder's many layers keep the signal's scale
            norms = v.flatten(1).norm(dim=1).view(ref.shape) / max(1, v[0].numel()) ** 0.5
            x = norms * (0.5 + rand(ref.shape, seed))
        elif leaf == "weight_v":
            x = randn(ref.shape, name_seed(name, seed & 0xFFFF))
        elif leaf in ("alpha", "beta"):
            x = 0.1 * randn(ref.shape, seed)  # Snake / SnakeBeta (log scale for SnakeBeta)
        elif ref.dim() <= 1 and ("norm" in name or leaf in ("scale1", "scale2", "gamma")):
            base = 0.5 if leaf in ("scale1", "scale2", "gamma") else 1.0
            x = base + 0.1 * randn(ref.shape, seed)
        elif leaf == "bias" or ref.dim() <= 1:
            x = 0.05 * randn(ref.shape, seed)
        else:
            fan_in = max(1, ref.numel() // ref.shape[0])
            x = randn(ref.shape, seed) / fan_in**0.5
        dtype = old_dtypes.get(block_pattern(name), "F32")
        out[name] = (x.to(ref.dtype), dtype)
    return out


def write_component(ckpt, component, cfg, state):
    d = os.path.join(ckpt, component)
    for name in os.listdir(d):
        if name.endswith(".safetensors") or name.endswith(".json"):
            os.remove(os.path.join(d, name))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    tensors = {n: torch_to_st(x, dt) for n, (x, dt) in sorted(state.items())}
    MV.write_safetensors(os.path.join(d, "diffusion_pytorch_model.safetensors"), tensors, {"format": "pt"})


def build_checkpoint(src_ckpt, ckpt, preset, log):
    p = PRESETS[preset]
    sizes = {"transformer": p["transformer"], "transformer_ref": p["transformer"], "vae": p["vae"],
             "audio_vae": p["audio_vae"]}
    configs = {}
    for component, size in sizes.items():
        if not os.path.isdir(os.path.join(src_ckpt, component)):
            continue
        with open(os.path.join(src_ckpt, component, "config.json")) as f:
            cfg = json.load(f)
        old_dtypes = {}
        for name in os.listdir(os.path.join(src_ckpt, component)):
            if name.endswith(".safetensors"):
                tensors, _ = MV.read_safetensors(os.path.join(src_ckpt, component, name))
                old_dtypes.update({block_pattern(n): t["dtype"] for n, t in tensors.items()})
        cfg.update(size)
        salt = {"vae": 5, "audio_vae": 6}.get(component)
        if salt:
            c = cfg["latent_channels"]
            cfg["latents_mean"] = [round(0.1 * v, 6) for v in randn((c,), name_seed("mean", salt)).tolist()]
            cfg["latents_std"] = [round(0.6 + 0.9 * v, 6) for v in rand((c,), name_seed("std", salt)).tolist()]
        model = Ref[component].from_config({k: v for k, v in cfg.items() if not k.startswith("_")})
        state = random_state(model, component, old_dtypes)
        write_component(ckpt, component, cfg, state)
        calibrate(ckpt, component, cfg, state, log)
        configs[component] = cfg
    return configs


def calibrate(ckpt, component, cfg, state, log):
    """Scales a decoder's last layer so that its output mostly stays inside the clamp range (the
    shared golden's decoders were rescaled once for the same reason)."""
    if component not in ("vae", "audio_vae"):
        return
    model, _ = load_model(ckpt, component)
    with torch.no_grad():
        if component == "vae":
            z = randn((1, cfg["latent_channels"], 7, 2, 2), 7)
            y = model.decode(z, return_dict=False)[0]
            target, names = 0.8, ["decoder.proj_out.weight", "decoder.proj_out.bias"]
        else:  # the waveform is clamped after conv_post: measure before the clamp
            got, handles = capture(model, {"post": "decoder.conv_post"})
            model.decode(randn((2, cfg["latent_channels"], 8), 8), return_dict=False)
            handles[0].remove()
            y, target, names = got["post"], 0.3, ["decoder.conv_post.weight_g"]
    spread = float(y.std())
    scale = target / max(spread, 1e-6)
    for n in names:
        x, dt = state[n]
        state[n] = (x * scale, dt)
    write_component(ckpt, component, cfg, state)
    log("  %s: output spread %.3g scaled by %.3g" % (component, spread, scale))


# ---- cases -------------------------------------------------------------------------------------


def capture(model, names):
    """Forward hooks that keep the outputs of the named submodules."""
    got, handles = {}, []
    modules = dict(model.named_modules())
    for key, path in names.items():
        def hook(_m, _i, out, key=key):
            got[key] = out

        handles.append(modules[path].register_forward_hook(hook))
    return got, handles


def dit_case(model, cfg, t, fresh, seed):
    """out.* (and inter.* where the case has them) of one forward."""
    kw = {n[3:]: st_to_torch(x) for n, x in t.items() if n.startswith("in.")}
    if fresh:
        v, a = kw["hidden_states"], kw["audio_hidden_states"]
        patch = cfg["patch_size"]
        width = cfg["in_channels"] * patch[0] * patch[1] * patch[2]
        kw["hidden_states"] = randn((v.shape[0], v.shape[1], width), seed)
        kw["audio_hidden_states"] = randn((a.shape[0], a.shape[1], cfg["audio_in_channels"]), seed + 1)
        if kw["encoder_hidden_states"].shape[-1] != cfg["text_dim"]:
            e = kw["encoder_hidden_states"]
            kw["encoder_hidden_states"] = randn((e.shape[0], e.shape[1], cfg["text_dim"]), seed + 2)
    hooks = {"inter.temb": "time_embedder", "inter.context_embedder_out": "context_embedder",
             "inter.token_refiner_out": "token_refiner", "inter.rope": "rope", "inter.norm_out_out": "norm_out"}
    for i in range(cfg["num_layers"]):
        hooks["inter.block%d_out" % i] = "transformer_blocks.%d" % i
    want_inter = any(n.startswith("inter.") for n in t)
    got, handles = capture(model, hooks if want_inter else {})
    with torch.no_grad():
        video, audio = model(**kw, return_dict=False)
    for h in handles:
        h.remove()
    out = {"in." + k: v for k, v in kw.items()}
    out["out.sample"], out["out.audio_sample"] = video, audio
    for key, value in got.items():
        if key == "inter.rope":
            out["inter.rope.0"], out["inter.rope.1"] = value[0], value[1]
        else:
            out[key] = value[0] if isinstance(value, tuple) else value
    return out


def per_channel(values, dims):
    """A per-channel constant shaped to broadcast over dim 1 of a `dims`-dimensional tensor."""
    return torch.tensor(values).view([1, -1] + [1] * (dims - 2))


def pixels_normalized(px):
    return (px.to(torch.float32).div(255.0) - per_channel(PIXEL_MEAN, 5)) / per_channel(PIXEL_STD, 5)


def frames_float(decoded):
    """The pipeline's frames (F, H, W, 3) in [0, 1] from a decode (1, 3, F, H, W)."""
    f = (decoded.float() * per_channel(PIXEL_STD, 5) + per_channel(PIXEL_MEAN, 5)).clamp(0, 1)
    return f[0].permute(1, 2, 3, 0)


def frames_u8(decoded):
    return (frames_float(decoded) * 255.0).round().to(torch.uint8)


def condition_recipe(post, cfg):
    """The pipeline's conditioning latents from a video posterior: sampled under a fresh generator
    seeded 42, rounded to float16, normalized. Returns (noise, sample, float16 sample, latents)."""
    noise = randn(tuple(post.mean.shape), 42)
    sample = post.mean + post.std * noise
    half = sample.to(torch.float16).float()
    return noise, sample, half, (half - per_channel(cfg["latents_mean"], 5)) / per_channel(cfg["latents_std"], 5)


def audio_rows(post_mean, cfg):
    """Normalized audio latents (2, C, N) as the DiT's channel-major rows (2 N, C)."""
    rows = (post_mean.transpose(1, 2) - torch.tensor(cfg["latents_mean"])) / torch.tensor(cfg["latents_std"])
    return rows.reshape(-1, cfg["latent_channels"])


def with_tiling(vae, meta):
    vae.use_tiling = True
    h = meta.get("tile_sample_min_height", 256)
    w = meta.get("tile_sample_min_width", 256)
    ov = meta.get("tile_sample_min_overlap", 64)
    vae.tile_sample_min_height, vae.tile_sample_min_width = h, w
    vae.tile_sample_min_overlap_height = meta.get("tile_sample_min_overlap_height", ov)
    vae.tile_sample_min_overlap_width = meta.get("tile_sample_min_overlap_width", ov)


def formula_values(numel, seed, kind):
    """The `*_formula` of the sampled cases: a hash of the flat index and the seed, mod 2^32."""
    import numpy as np

    i = np.arange(numel, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(seed * 40503)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(2246822519)) & np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(13)
    if kind == "latents":
        return torch.from_numpy((((h >> np.uint64(22)).astype(np.int64) - 512) / 256.0).astype(np.float32))
    return torch.from_numpy((h >> np.uint64(24)).astype(np.uint8))


def spatial_scale(cfg, fresh):
    """How many times more latents per side this VAE has than the source folder's (1 in --check)."""
    if not fresh:
        return 1
    ratio = 1
    for f in cfg["spatial_downsample_factors"]:
        ratio *= f
    return Ref["src_ratio"] // ratio


def tile_layout(vae, height, width, meta):
    """The stored tile layout (pixel starts and overlaps) of a canvas, by the reference's own split."""
    ys, _, oy = vae._split_tiles(height, vae.tile_sample_min_height, vae.tile_sample_min_overlap_height)
    xs, _, ox = vae._split_tiles(width, vae.tile_sample_min_width, vae.tile_sample_min_overlap_width)
    out = {"tile_starts_y": torch.tensor(ys, dtype=torch.int64), "tile_starts_x": torch.tensor(xs, dtype=torch.int64),
           "tile_overlaps_y": torch.tensor(oy, dtype=torch.int64),
           "tile_overlaps_x": torch.tensor(ox, dtype=torch.int64)}
    if "tile_layout_px" in meta:
        meta = dict(meta, tile_layout_px={"tiles_y": ys, "overlaps_y": oy, "tiles_x": xs, "overlaps_x": ox})
    return out, meta


def vae_decode_case(vae, cfg, t, meta, fresh, seed):
    mean, std = per_channel(cfg["latents_mean"], 5), per_channel(cfg["latents_std"], 5)
    with_tiling(vae, meta)
    if "latents_normalized" in t:  # dense
        z = st_to_torch(t["latents_normalized"])
        if fresh:  # the same canvas: as many more latents per side as the VAE compresses less
            k = spatial_scale(cfg, fresh)
            z = randn((1, cfg["latent_channels"], z.shape[2], z.shape[3] * k, z.shape[4] * k), seed)
        den = z * std + mean
        with torch.no_grad():
            y = vae.decode(den, return_dict=False)[0]
        out = {"latents_normalized": z, "latents_denormalized": den, "decoded_raw": y, "frames_uint8": frames_u8(y)}
        return {k: v for k, v in out.items() if k in t}, meta
    shape = list(meta["latents_normalized_shape"])
    if fresh:
        k = spatial_scale(cfg, fresh)
        shape[1], shape[3], shape[4] = cfg["latent_channels"], shape[3] * k, shape[4] * k
        meta = dict(meta, latents_normalized_shape=shape)
    z = formula_values(int(torch.tensor(shape).prod()), meta["seed"], "latents").view(shape)
    with torch.no_grad():
        y = vae.decode(z * std + mean, return_dict=False)[0]
    f, r, c = (st_to_torch(t[n]).long() for n in ("sample_frames", "sample_rows", "sample_cols"))
    y = y[0][:, f][:, :, r][:, :, :, c]
    idx = torch.arange(0, z.numel(), 9973)
    out = {n: st_to_torch(t[n]) for n in t}
    out.update(decoded_raw_sampled=y, frames_uint8_sampled=frames_u8(y[None]), latents_check_index=idx,
               latents_check_values=z.flatten()[idx])
    tiles, meta = tile_layout(vae, shape[3] * vae.spatial_compression_ratio,
                              shape[4] * vae.spatial_compression_ratio, meta)
    out.update(tiles)
    return out, meta


def vae_encode_case(vae, cfg, t, meta, fresh, seed):
    del seed  # pixels are the inputs at every size
    with_tiling(vae, meta)
    if "pixels_uint8" in t:
        px = st_to_torch(t["pixels_uint8"])
        with torch.no_grad():
            post = vae.encode(pixels_normalized(px), return_dict=False)[0]
        out = {"pixels_uint8": px, "moments": post.parameters}
        if "posterior_mean" in t or "latents_normalized" in t:
            noise, sample, half, latents = condition_recipe(post, cfg)
            out.update(posterior_mean=post.mean, posterior_logvar_clamped=post.logvar, posterior_std=post.std,
                       posterior_noise_seed42=noise, posterior_sample=sample,
                       posterior_sample_fp16_roundtrip=half, latents_normalized=latents)
            if "encode_vae_condition_output" in t:
                helper = Ref.get("encode_vae_condition")
                with torch.no_grad():
                    out["encode_vae_condition_output"] = (
                        helper(vae, px, PIXEL_MEAN, PIXEL_STD, 42) if helper else out["latents_normalized"])
        return {k: v for k, v in out.items() if k in t}, meta
    shape = meta["pixels_shape"]
    px = formula_values(int(torch.tensor(shape).prod()), meta["seed"], "pixels").view(shape)
    with torch.no_grad():
        m = vae.encode(pixels_normalized(px), return_dict=False)[0].parameters
    k = spatial_scale(cfg, fresh)  # the stored latent positions spread over the larger grid
    r, c = (st_to_torch(t[n]).long() * k for n in ("sample_rows", "sample_cols"))
    out = {n: st_to_torch(t[n]) for n in t}
    out.update(moments_sampled=m[0][:, :, r][:, :, :, c], sample_rows=r, sample_cols=c)
    meta = dict(meta, moments_shape=list(m.shape))
    tiles, meta = tile_layout(vae, shape[-2], shape[-1], meta)
    out.update(tiles)
    return out, meta


def audio_encode_case(avae, cfg, t, meta, fresh, seed):
    del fresh, seed
    wav = st_to_torch(t["waveform"])
    got, handles = capture(avae, {"encoder_out": "encoder", "pre_block_out": "pre_block"})
    with torch.no_grad():
        post = avae.encode(wav[:, None, :], return_dict=False)[0]
    for h in handles:
        h.remove()
    out = {"waveform": wav, "encoder_out": got["encoder_out"], "pre_block_out": got["pre_block_out"],
           "posterior_mean": post.mean, "posterior_logs": post.logs, "normalized_rows": audio_rows(post.mean, cfg)}
    return {k: v for k, v in out.items() if k in t}, meta


def audio_decode_case(avae, cfg, t, meta, fresh, seed):
    z = st_to_torch(t["latents_normalized"])
    if fresh:
        z = randn((z.shape[0], cfg["latent_channels"], z.shape[2]), seed)
    den = z * per_channel(cfg["latents_std"], 3) + per_channel(cfg["latents_mean"], 3)
    got, handles = capture(avae, {"dec_in_proj_out": "dec_in_proj", "conv_pre_out": "decoder.conv_pre",
                                  "ups0_out": "decoder.ups.0.0"})
    with torch.no_grad():
        y = avae.decode(den, return_dict=False)[0]
    for h in handles:
        h.remove()
    out = dict(got, latents_normalized=z, latents_denormalized=den, waveform=y)
    return {k: v for k, v in out.items() if k in t}, meta


def patchify(z, patch):
    """[1, C, F, H, W] -> [rows, C*pt*ph*pw]: rows frame-major then row-major, channel-major patch
    vectors (checked against the stored rows of the shared folder by --check)."""
    _, c, f, h, w = z.shape
    pt, ph, pw = patch
    x = z.reshape(c, f // pt, pt, h // ph, ph, w // pw, pw).permute(1, 3, 5, 0, 2, 4, 6)
    return x.reshape(-1, c * pt * ph * pw)


def unpatchify(rows, c, f, h, w, patch):
    pt, ph, pw = patch
    x = rows.reshape(f // pt, h // ph, w // pw, c, pt, ph, pw).permute(3, 0, 4, 1, 5, 2, 6)
    return x.reshape(1, c, f, h, w)


def encode_condition(vae, vcfg, frames):
    """A keyframe's or visual reference's conditioning latents as the pipeline's encode helper makes
    them: ImageNet-normalized pixels, the posterior sampled under a fresh generator seeded 42,
    rounded to float16, normalized. `frames`: HWC or FHWC uint8."""
    if frames.dim() == 3:
        frames = frames[None]
    px = frames.permute(3, 0, 1, 2)[None]  # FHWC uint8 -> (1, 3, F, H, W)
    noise, _, _, latents = condition_recipe(vae.encode(pixels_normalized(px), return_dict=False)[0], vcfg)
    return latents, noise


def e2e_case(models, t, meta, fresh, seed):
    """A t2va, fl2va or ref2va run from its stored prompt rows, keyframes and normalized references:
    the visual conditions' latents, the soundtracks' normalized rows, the request generator's draws
    in the pipeline's order (one per visual condition, the video noise, the audio noise rows) at the
    new latent widths, the visual conditioning rows held at t = 0.999, every step (the run's DiT
    partition at the step's stored timesteps and row layout, each modality's generated rows stepped
    by its own scheduler; conditioning rows never), the final latents and their decodes."""
    del seed  # the request's own seed draws the noise, as in the pipeline
    dit, dcfg = models[meta.get("transformer_used", ["transformer"])[0]]
    vae, vcfg = models["vae"]
    avae, acfg = models["audio_vae"]
    with_tiling(vae, {})  # the pipeline's VAE: the default 256-pixel tiles
    sv, sa = (Ref["scheduler"].from_config(Ref["scheduler_config"][k]) for k in ("scheduler", "audio_scheduler"))
    steps = int(meta["num_inference_steps"])
    sv.set_timesteps(steps)
    sa.set_timesteps(steps)
    shapes = [list(d) for d in meta["draw_shapes"]]
    n_cond = len(shapes) - 2
    # The visual conditions in packed order (keyframes; image and video references), and the
    # soundtracks of audio-bearing references, which condition the audio rows un-noised.
    visual, sounds = [], []
    for k, r in enumerate(meta.get("references") or []):
        pre = "normalized_reference_%d_" % k
        if r.get("kind") == "image":
            visual.append(st_to_torch(t[pre + "image"]))
        elif r.get("kind") == "video":
            visual.append(st_to_torch(t[pre + "frames"]))
        if r.get("kind") == "audio" or (r.get("kind") == "video" and r.get("audio")):
            sounds.append(st_to_torch(t[pre + "audio"]))
    if not meta.get("references"):
        visual = [st_to_torch(t["keyframe_%d" % k]) for k in range(n_cond)]
    assert len(visual) == n_cond, (len(visual), n_cond)
    if fresh:
        for d in shapes[:-1]:
            d[1] = vcfg["latent_channels"]
        shapes[-1][1] = acfg["latent_channels"]
        meta = dict(meta, draw_shapes=shapes)
    out = {n: st_to_torch(x) for n, x in t.items()}
    g = torch.Generator().manual_seed(int(meta["seed"]))
    draws = [torch.randn(d, generator=g, dtype=torch.float32) for d in shapes]
    names = ["condition_noise_%d" % k for k in range(n_cond)] + ["video_noise", "audio_noise_rows"]
    out.update({"draw%d_%s" % (i, n): d for i, (n, d) in enumerate(zip(names, draws))})
    patch = dcfg["patch_size"]
    rows = []
    with torch.no_grad():
        for k in range(n_cond):
            cond, post_noise = encode_condition(vae, vcfg, visual[k])
            out.update({"condition_latents_%d" % k: cond, "posterior_noise_%d" % k: post_noise})
            rows.append(patchify(sv.scale_noise(cond, 0.999, draws[k]), patch))
        sound_rows = []
        for k, wav in enumerate(sounds):  # the posterior mean's rows
            sound_rows.append(audio_rows(avae.encode(wav[:, None, :], return_dict=False)[0].mean, acfg))
            out["audio_condition_rows_%d" % k] = sound_rows[-1]
    zv, za = draws[n_cond], draws[n_cond + 1]
    _, c, f, h, w = zv.shape
    nv = sum(r.shape[0] for r in rows)  # conditioning rows: first, never stepped
    na_cond = sum(r.shape[0] for r in sound_rows)
    if rows:
        out["condition_rows"] = torch.cat(rows)
    xv, xa = torch.cat(rows + [patchify(zv, patch)]), torch.cat(sound_rows + [za])
    layout = ("position_ids", "token_tags", "video_indices", "audio_indices", "text_indices")
    lay = {n: st_to_torch(t[n]) for n in layout}
    txt = st_to_torch(t["prompt_embeds"])
    out.update(step00_video_rows_in=xv, step00_audio_rows_in=xa)
    with torch.no_grad():
        for i in range(len(sv.timesteps)):
            key = "step%02d_" % i
            pv, pa = dit(hidden_states=xv[None], audio_hidden_states=xa[None], encoder_hidden_states=txt,
                         timestep=st_to_torch(t[key + "unique_timesteps"]),
                         timestep_indices=st_to_torch(t[key + "timestep_indices"]), return_dict=False, **lay)
            xv, xa = xv.clone(), xa.clone()
            xv[nv:] = sv.step(pv[0, nv:], sv.timesteps[i], xv[nv:], return_dict=False)[0]
            xa[na_cond:] = sa.step(pa[0, na_cond:], sa.timesteps[i], xa[na_cond:], return_dict=False)[0]
            out.update({key + "noise_pred": pv, key + "audio_noise_pred": pa, key + "video_rows_out": xv,
                        key + "audio_rows_out": xa})
        zf = unpatchify(xv[nv:], c, f, h, w, patch)
        na = (xa.shape[0] - na_cond) // 2  # one block of rows per stereo channel
        af = xa[na_cond:].reshape(2, na, xa.shape[1]).permute(0, 2, 1)
        y = vae.decode(zf * per_channel(vcfg["latents_std"], 5) + per_channel(vcfg["latents_mean"], 5),
                       return_dict=False)[0]
        wave = avae.decode(af * per_channel(acfg["latents_std"], 3) + per_channel(acfg["latents_mean"], 3),
                           return_dict=False)[0]  # [2, 1, S]
    out.update(latents_final=zf, audio_latents_final=af, frames_float=frames_float(y), frames_uint8=frames_u8(y),
               audio=wave.permute(1, 0, 2))
    return {k: v for k, v in out.items() if k in t}, meta


CASES = {
    "dit": None,  # per partition, below
    "video_vae_decode": ("vae", vae_decode_case), "video_vae_decode_sampled": ("vae", vae_decode_case),
    "video_vae_encode": ("vae", vae_encode_case), "video_vae_encode_sampled": ("vae", vae_encode_case),
    "audio_vae_encode": ("audio_vae", audio_encode_case), "audio_vae_decode": ("audio_vae", audio_decode_case),
}


def recomputable_run(entry):
    """An e2e case this script can recompute: one that records its draws and uses one partition."""
    meta = entry.get("meta") or {}
    return (meta.get("workflow") in ("t2va", "fl2va", "ref2va") and "draw_shapes" in meta
            and len(meta.get("transformer_used", ["transformer"])) == 1)


def load_schedulers(ckpt):
    Ref["scheduler_config"] = {}
    for k in ("scheduler", "audio_scheduler"):
        with open(os.path.join(ckpt, k, "scheduler_config.json")) as f:
            Ref["scheduler_config"][k] = {n: v for n, v in json.load(f).items() if not n.startswith("_")}


def run_case(folder, entry, models, fresh, seed):
    tensors, header = MV.read_safetensors(folder.path(entry["file"]))
    meta = dict(entry.get("meta") or {})
    kind = entry["kind"]
    if kind == "e2e":
        return e2e_case(models, tensors, meta, fresh, seed) + (tensors, header)
    if kind == "dit":
        part = meta.get("transformer", "transformer")
        model, cfg = models[part]
        return dit_case(model, cfg, tensors, fresh, seed), meta, tensors, header
    component, fn = CASES[kind]
    model, cfg = models[component]
    out, meta = fn(model, cfg, tensors, meta, fresh, seed)
    return out, meta, tensors, header


def compare(name, got, want):
    want = st_to_torch(want)
    if got.shape != want.shape:
        return "shape %s, stored %s" % (list(got.shape), list(want.shape)), float("inf")
    if want.dtype == torch.uint8:
        diff = (got.int() - want.int()).abs()
        what = "%d of %d differ (max %d)" % (int((diff > 0).sum()), diff.numel(), int(diff.max()))
        return what, float(diff.max())
    got, want = got.double(), want.double()
    rel = float((got - want).abs().max() / max(float(want.abs().max()), 1e-30))
    return "rel_max %.2e" % rel, rel


# Bounds of --check, as multiples of the float32 bound 1e-5 (TOLERANCES.md's CPU float32 row):
FP16_STEP = 100.0  # latents the recipe rounds to float16: one float16 step of the largest value
AUDIO_ENCODE = 10.0  # the audio VAE encode's bound, rel_max 1e-4
E2E_WAVEFORM = 5.0  # the e2e waveform's bound, max abs 5e-5 (|max| is 1): the audio decoder's own
# float32 noise (about 1e-5, tolerances.json) at the end of a whole run


def check_bound(kind, name, part, floors):
    """How many times 1e-5 the --check difference of a tensor (or of its conditioning `part`) may be."""
    if kind == "audio_vae_encode" or (kind == "e2e" and name.startswith("audio_condition_rows_")):
        return AUDIO_ENCODE
    if kind == "audio_vae_decode" and name == "waveform":
        # as the golden test: twice the float32 reference's own distance from float64 where larger
        floor = floors.get("audio_vae_decode_fp32_vs_fp64", {}).get("max_rel_to_ref_max", 0.0)
        return max(1.0, 2.0 * floor / 1e-5)
    fp16_chain = ("posterior_sample_fp16_roundtrip", "latents_normalized", "encode_vae_condition_output")
    if (kind == "video_vae_encode" and name in fp16_chain) or name.startswith("condition_"):
        return FP16_STEP
    if kind == "e2e" and part == "conditioning":
        # the conditioning rows and what the DiT makes of them: float16-rounded latents (a step
        # there moves the DiT's outputs for those rows) or the audio encode's output
        return AUDIO_ENCODE if "audio" in name else FP16_STEP
    if kind == "e2e" and name == "audio":
        return E2E_WAVEFORM
    return 1.0


def check(src):
    g = MV.Folder(src)
    ckpt = g.path(g.manifest["checkpoint"])
    models = {}
    for c in ("transformer", "transformer_ref", "vae", "audio_vae"):
        if os.path.isdir(os.path.join(ckpt, c)):
            models[c] = load_model(ckpt, c)
    worst = 0.0  # in units of each tensor's bound times 1e-5
    load_schedulers(ckpt)
    floors = {}
    if os.path.isfile(g.path("tolerances.json")):
        with open(g.path("tolerances.json")) as f:
            floors = json.load(f)
    for e in g.manifest["files"]:
        if e.get("kind") not in REGENERATED or (e["kind"] == "e2e" and not recomputable_run(e)):
            continue
        out, _, tensors, _ = run_case(g, e, models, fresh=False, seed=0)

        def count(n):
            return int(st_to_torch(tensors[n])[0]) if n in tensors else 0

        ncond = {"video": count("num_condition_video_rows"), "audio": count("num_condition_audio_rows")}
        for name in sorted(tensors):
            if name not in out:
                print("%-60s %-32s not recomputed" % (e["file"], name))
                continue
            got, want = out[name], tensors[name]
            stream = "audio" if "audio" in name else "video"
            rows_dim = 1 if name.endswith("noise_pred") else 0
            split = e["kind"] == "e2e" and ncond[stream] and (
                "_rows_in" in name or "_rows_out" in name or name.endswith("noise_pred"))
            if split:  # the leading conditioning rows and the generated rows, each at its bound
                w = st_to_torch(want)
                n = ncond[stream]
                what = []
                for part, a, b in (("conditioning", got.narrow(rows_dim, 0, n), w.narrow(rows_dim, 0, n)),
                                   ("generated", got.narrow(rows_dim, n, got.shape[rows_dim] - n),
                                    w.narrow(rows_dim, n, w.shape[rows_dim] - n))):
                    text, err = compare(name, a, torch_to_st(b.contiguous(), "F32"))
                    worst = max(worst, err / check_bound(e["kind"], name, part, floors))
                    what.append("%s %s" % (part, text))
                what = ", ".join(what)
            else:
                what, err = compare(name, got, want)
                if want["dtype"] == "U8":
                    err = 0.0 if err <= 1 else err  # a pixel on a rounding boundary may move one level
                else:
                    err = err / check_bound(e["kind"], name, None, floors)
                worst = max(worst, err)
            print("%-60s %-32s %s" % (e["file"], name, what))
    print("worst: %.2f of its bound" % (worst / 1e-5))
    return 0 if worst <= 1e-5 else 1


def write(src, out_root, preset):
    dst = os.path.join(out_root, preset)
    MV.copy_tree(src, dst)
    g = MV.Folder(dst)
    log = print
    ckpt = g.path(g.manifest["checkpoint"])
    with open(os.path.join(src, g.manifest["checkpoint"], "vae", "config.json")) as f:
        Ref["src_ratio"] = 1
        for factor in json.load(f)["spatial_downsample_factors"]:
            Ref["src_ratio"] *= factor
    configs = build_checkpoint(os.path.join(src, g.manifest["checkpoint"]), ckpt, preset, log)
    for e in g.files("checkpoint"):
        g.refresh(e["file"])
        if "tensors" in e and e["file"].endswith(".safetensors"):
            tensors, _ = MV.read_safetensors(g.path(e["file"]))
            e["tensors"] = {n: {"dtype": t["dtype"], "shape": t["shape"]} for n, t in tensors.items()}
    models = {c: load_model(ckpt, c) for c in configs}
    load_schedulers(ckpt)
    # e2e: the text-only runs, where the layout stays the stored one (the same spatial compression);
    # keyframe and reference runs need the pipeline's encoders of media, not recomputed here.
    for e in list(g.files("e2e")):
        if not recomputable_run(e) or spatial_scale(configs["vae"], True) != 1:
            g.drop_file(e["file"])
    for i, e in enumerate(list(g.manifest["files"])):
        if e.get("kind") not in REGENERATED:
            continue
        out, meta, tensors, header = run_case(g, e, models, fresh=True, seed=1000 + 17 * i)
        new = {}
        for name, t in tensors.items():  # the stored order and dtypes
            if name not in out:
                continue  # an intermediate this size has no counterpart of (a block past the last)
            new[name] = torch_to_st(out[name], t["dtype"] if t["dtype"] != "BF16" else "F32")
        for name in out:
            if name not in new and name.startswith("inter.block"):
                new[name] = torch_to_st(out[name], "F32")
        if e.get("meta") is not None:
            e["meta"] = meta
        if header and "meta_json" in header:
            header = dict(header, meta_json=json.dumps(dict(json.loads(header["meta_json"]), **meta)))
        MV.write_safetensors(g.path(e["file"]), new, header)
        g.refresh(e["file"])
        old = e.get("tensors", {})
        e["tensors"] = {n: dict(old.get(n, {}), dtype=t["dtype"], shape=t["shape"]) for n, t in new.items()}
        log("  %s" % e["file"])
    write_floors(g, models)
    info_rel = "generation_info.json"
    if os.path.isfile(g.path(info_rel)):
        with open(g.path(info_rel)) as f:
            info = json.load(f)
        rec = info.setdefault("config", {})
        for section, component in (("dit", "transformer"), ("vae", "vae"), ("avae", "audio_vae")):
            if component in configs and section in rec:
                rec[section] = {k: configs[component][k] for k in rec[section] if k in configs[component]}
        with open(g.path(info_rel), "w") as f:
            json.dump(info, f, indent=1)
            f.write("\n")
        g.refresh(info_rel)
    g.save()
    print("wrote %s" % dst)
    return 0


# tolerances.json keys that this script measures again (the float32 reference against a float64
# re-run of the same modules, on the regenerated case) -> (case file, tensor or {part: tensor}).
FLOORS = {
    "dit_transformer_t2va_step0_fp32_vs_fp64": (
        "components/dit_transformer_t2va_step00.safetensors", {"video": "out.sample", "audio": "out.audio_sample"}),
    "dit_transformer_ref_ref2va_step0_fp32_vs_fp64": (
        "components/dit_transformer_ref_ref2va_step00.safetensors",
        {"video": "out.sample", "audio": "out.audio_sample"}),
    "video_vae_decode_T12_fp32_vs_fp64": ("components/video_vae_decode_T12_32x32.safetensors", "decoded_raw"),
    "video_vae_encode_video22_fp32_vs_fp64": ("components/video_vae_encode_video22_64x96.safetensors", "moments"),
    "audio_vae_decode_fp32_vs_fp64": ("components/audio_vae_decode.safetensors", "waveform"),
    "audio_vae_encode_mean_fp32_vs_fp64": ("components/audio_vae_encode.safetensors", "posterior_mean"),
}
# Measurements of the resized components that this script does not repeat (bf16 runs, thread
# counts, the end-to-end runs): dropped rather than left describing other weights.
STALE = ("dit_transformer", "video_vae", "audio_vae", "e2e_")


def floor_stats(y32, y64):
    d = (y32.double() - y64).abs()
    ref_max = float(y64.abs().max())
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()), "ref_max_abs": ref_max,
            "max_rel_to_ref_max": float(d.max()) / max(ref_max, 1e-300),
            "rms_rel": float(d.norm() / max(float(y64.norm()), 1e-300)), "bitwise_equal": bool(float(d.max()) == 0.0)}


def write_floors(g, models):
    """Re-measures tolerances.json's noise floors on the regenerated cases."""
    import copy

    rel = "tolerances.json"
    if not os.path.isfile(g.path(rel)):
        return
    with open(g.path(rel)) as f:
        floors = json.load(f)
    floors = {k: v for k, v in floors.items() if not k.startswith(STALE)}
    models64 = {c: (copy.deepcopy(m).double(), cfg) for c, (m, cfg) in models.items()}
    for key, (case, names) in FLOORS.items():
        e = g.entry(case)
        if e is None:
            continue
        torch.set_default_dtype(torch.float64)
        try:
            out64, _, stored32, _ = run_case(g, e, models64, fresh=False, seed=0)
        finally:
            torch.set_default_dtype(torch.float32)
        parts = names if isinstance(names, dict) else {None: names}
        entry = {p: floor_stats(st_to_torch(stored32[n]), out64[n].double()) for p, n in parts.items()}
        floors[key] = entry[None] if None in entry else entry
        print("  %s: rel_max %s" % (key, ", ".join("%.2e" % v["max_rel_to_ref_max"] for v in entry.values())))
    with open(g.path(rel), "w") as f:
        json.dump(floors, f, indent=1)
        f.write("\n")
    g.refresh(rel)


def main(argv):
    if len(argv) < 3 or any(n not in PRESETS for n in argv[3:]) or (argv[2] == "--check" and len(argv) > 3):
        sys.stderr.write(__doc__)
        return 2
    src = argv[1]
    setup(src)
    if argv[2] == "--check":
        return check(src)
    for preset in argv[3:] or list(PRESETS):
        write(src, argv[2], preset)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
