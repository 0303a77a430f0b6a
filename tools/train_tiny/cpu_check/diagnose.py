"""Looks inside a trained DiT and video VAE on the CPU, with train.py's own helpers and the
reference's modules (the same set-up as run.sh). Three checks, each cheap enough for two cores:

  x0    the x0 predictions x_t + (1 - t) v of one sampling over the 50-point grid, decoded at
        chosen steps, one contact-sheet row per step and the final sample last: shows at which
        noise level a sample's structure is decided;
  blur  held-out clips' latents blurred in latent space (3 x 3, 5 x 5 boxes) or shrunk toward
        their mean (x 0.7, x 0.5), decoded: whether the decoder itself turns uncertain latents
        into fragments;
  leak  held-out clips noised to grid levels: the DiT's x0 error and its regression on the
        noise, against the value an ideal denoiser of independent unit Gaussians would give.

    diagnose.py x0|blur|leak --work WORK --repo TINY --features FEATS [--data DATA] [--out PNG]

WORK holds parts/{vae,audio_vae,dit} (train.py's work folder), TINY the make-tiny repository the
features were computed with, FEATS the folder of prompts.json and prompt_features.safetensors,
DATA a clip folder with heldout/ (run.sh renders one). Needs H3_REF_DIR and H3_ANCHOR_DIR as
run.sh sets them.
"""
import argparse
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(HERE, "standins"))
import torch_compat  # noqa: E402,F401  (backfills what an older torch lacks)

sys.path.insert(0, os.path.dirname(HERE))
import train as T  # noqa: E402


def decode_rows(vae, z):
    y = T.from_pixels(vae.decode(z).sample, "cpu").clamp(0, 1)
    return (y[0].permute(1, 2, 3, 0) * 255).round().byte().numpy()


def cmd_x0(a, parts, log):
    import numpy as np
    import torch

    vae, vcfg, dit, feats, layouts, geo = parts
    f, h, w, na = geo
    vm = torch.tensor(vcfg["latents_mean"]).view(1, -1, 1, 1, 1)
    vs = torch.tensor(vcfg["latents_std"]).view(1, -1, 1, 1, 1)
    cv = vcfg["latent_channels"]
    g = torch.Generator("cpu").manual_seed(a.seed)
    # The pipeline's draw order: video noise, then the audio rows.
    zv = torch.randn((1, cv, f, h, w), generator=g)
    za = torch.randn((na * T.AUDIO_CHANNELS, int(dit.config.audio_in_channels)), generator=g)
    xv = torch.from_numpy(T.patchify_np(zv.numpy())[0])
    sv, sa = T.Ref.Scheduler(shift=a.video_shift), T.Ref.Scheduler(shift=T.AUDIO_SHIFT)
    sv.set_timesteps(a.points)
    sa.set_timesteps(a.points)
    txt = feats[a.prompt].float()[None]
    lay = layouts.get(txt.shape[1])
    keep = {int(s) for s in a.steps.split(",")}
    rows = []
    with torch.no_grad():
        for i, t in enumerate(sv.timesteps):
            ta = sa.timesteps[i]
            ts, ti = layouts.timesteps(lay, float(t), float(ta))
            pv, pa = T.dit_forward(dit, lay, xv[None], za[None], txt, ts, ti, "fp32")
            if i in keep:
                tv = 1.0 - float(sv.sigmas[i])
                x0 = xv + (1.0 - tv) * pv[0]
                rows.append(decode_rows(vae, torch.from_numpy(T.unpatchify_np(x0[None].numpy(), cv, f, h, w)) * vs + vm))
                log("row %d: x0 prediction at step %d (video t %.3f)" % (len(rows) - 1, i, tv))
            xv = sv.step(pv[0], t, xv, return_dict=False)[0]
            za = sa.step(pa[0], ta, za, return_dict=False)[0]
        rows.append(decode_rows(vae, torch.from_numpy(T.unpatchify_np(xv[None].numpy(), cv, f, h, w)) * vs + vm))
    log("row %d: the sample" % (len(rows) - 1))
    return np.stack(rows)


def cmd_blur(a, parts, log):
    import numpy as np
    import torch

    vae = parts[0]
    held = T.load_clips(a.data, "heldout", a.clips)
    rows = []
    with torch.no_grad():
        for i in range(len(held["prompt"])):
            z = vae.encode(T.to_pixels(torch.from_numpy(held["frames"][i:i + 1]), "cpu")[0]).latent_dist.mode()
            rows.append(held["frames"][i])
            rows.append(decode_rows(vae, z))
            for k in (3, 5):
                rows.append(decode_rows(vae, torch.nn.functional.avg_pool3d(
                    z, (1, k, k), stride=1, padding=(0, k // 2, k // 2), count_include_pad=False)))
            m = z.mean(dim=(2, 3, 4), keepdim=True)
            for s in (0.7, 0.5):
                rows.append(decode_rows(vae, m + s * (z - m)))
    log("rows per clip: the clip, its posterior mode, box blur 3, box blur 5, shrunk x 0.7, x 0.5")
    return np.stack(rows)


def cmd_leak(a, parts, log):
    import numpy as np
    import torch

    vae, vcfg, dit, feats, layouts, geo = parts
    avae, acfg = T.load_part(a.work, "audio_vae", T.Ref.AudioVAE, "cpu")
    avae.eval()
    held = T.load_clips(a.data, "heldout", a.clips)
    xv, xa = T.encode_all(vae, vcfg, avae, acfg, held, "cpu", batch=2)
    g = torch.Generator("cpu").manual_seed(a.seed)
    with torch.no_grad():
        for u in (0.9, 0.6, 0.45, 0.3, 0.15, 0.05):
            tv, ta = T.sigmas_for(u)
            betas, errs = [], []
            for i, p in enumerate(held["prompt"]):
                txt = feats[p].float()[None]
                lay = layouts.get(txt.shape[1])
                ev = torch.randn(xv[i:i + 1].shape, generator=g)
                ea = torch.randn(xa[i:i + 1].shape, generator=g)
                x = tv * xv[i:i + 1] + (1 - tv) * ev
                ts, ti = layouts.timesteps(lay, tv, ta)
                pv, _ = T.dit_forward(dit, lay, x, ta * xa[i:i + 1] + (1 - ta) * ea, txt, ts, ti, "fp32")
                r = (x + (1 - tv) * pv - xv[i:i + 1]).flatten()
                e = ev.flatten()
                betas.append(float((r * e).sum() / (e * e).sum()))
                errs.append(float((r * r).mean()))
            log("u %.2f (video t %.3f): x0 mean squared error %.3f, its regression on the noise %.3f "
                "(independent unit Gaussians, ideal: %.3f)" % (
                    u, tv, np.mean(errs), np.mean(betas), tv * (1 - tv) / (tv ** 2 + (1 - tv) ** 2)))
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=("x0", "blur", "leak"))
    ap.add_argument("--work", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--features", required=True)
    ap.add_argument("--data", help="clip folder with heldout/ (blur, leak)")
    ap.add_argument("--prompt", default="a red circle bounces", help="x0: the prompt sampled")
    ap.add_argument("--steps", default="5,15,25,35,42,46,48", help="x0: grid steps whose predictions are decoded")
    ap.add_argument("--video-shift", type=float, default=12.0,
                    help="x0: the video schedule's shift (the pipeline's is 12; others show where decisions fall)")
    ap.add_argument("--points", type=int, default=50, help="x0: grid points of the sampling")
    ap.add_argument("--clips", type=int, default=4, help="blur, leak: held-out clips used")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="diagnose.png")
    a = ap.parse_args(argv)
    if a.check != "x0" and not a.data:
        ap.error("%s needs --data" % a.check)
    import torch

    torch.manual_seed(a.seed)
    log = lambda m: print(m, flush=True)  # noqa: E731
    T.load_reference(os.environ.get("H3_ANCHOR_DIR", ""), log)
    vae, vcfg = T.load_part(a.work, "vae", T.Ref.VideoVAE, "cpu")
    vae.eval()
    parts = (vae,)
    if a.check != "blur":
        dit, _ = T.load_part(a.work, "dit", T.Ref.DiT, "cpu")
        dit.eval()
        feats = T.load_features(types.SimpleNamespace(
            prompts=os.path.join(a.features, "prompts.json"),
            features=os.path.join(a.features, "prompt_features.safetensors"), repo=a.repo, data=None), log)
        geo = T.latent_geometry(vae.spatial_compression_ratio, vcfg["clip_length"], vae.tokens_chunk_size)
        layouts = T.Layouts(geo, "cpu")
        parts = (vae, vcfg, dit, feats, layouts, geo)
    sheet = {"x0": cmd_x0, "blur": cmd_blur, "leak": cmd_leak}[a.check](a, parts, log)
    if sheet is not None:
        with open(a.out, "wb") as f:
            f.write(T.png_bytes(T.contact_sheet(sheet)))
        log("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
