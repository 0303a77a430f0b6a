#!/usr/bin/env python3
"""Writes variants of a golden folder, for running the golden tests against folders of the same
format that differ from the shared one in the ways a held-out folder may (golden README: "Tests take
every case and the checkpoint from the manifest, never from hard-coded names, so another folder of
the same format runs unchanged"; "every kind is optional").

Usage: make_variants.py SRC OUT [NAME ...]
  SRC   a golden folder (manifest.json, its checkpoint, optionally vsa/)
  OUT   the folder the variants are written into, one subfolder per variant (replaced if present)
  NAME  only these variants (default: all)

Variants:
  reordered   manifest entries, tensors inside every case file, the audio_resample cases, the
              tokenizer cases, the VSA attention cases, their sparsity/mode combinations and the
              VSA metadata cases in another order; plus one more e2e case, a copy of the first
              ref2va case with its references in another order (an image first, a video last),
              holding the inputs and the per-reference outputs only (the outputs that depend on the
              reference order cannot be derived without the reference pipeline).
  sparse_a    kinds e2e, rng, tokenizer and image_processor and the vsa/ folder absent; optional
              tensors (intermediates, posterior details) absent from the remaining case files.
  sparse_b    kinds dit, conditioner_text, conditioner_presentation, video_vae_decode,
              video_vae_encode_sampled, audio_vae_encode, schedulers, layouts and audio_resample
              absent, and generation_info.json; optional tensors absent from the e2e cases; the
              VSA manifest without its DiT case and with one attention case fewer.
  two_blocks  the checkpoint's DiT partitions trimmed to their first 2 blocks (config and
              weights); every stored output was made with the full model, which the tests must
              notice (generation_info.json records the configuration the outputs came from).
  near_tie    the VSA float32 attention case changed so that one query tile of one head has two
              video key tiles tied in its top-k (a gap of one float32 step in the stored scores,
              selected the other way round from what an exact float32 evaluation of the stored
              q and k gives); the tensors that depend on that tile are recomputed in float64.

Only the Python standard library is used.
"""

import copy
import hashlib
import json
import math
import os
import shutil
import struct
import sys

# ---- safetensors -----------------------------------------------------------------------------

_DTYPE_FMT = {"F32": "f", "F64": "d", "I64": "q", "I32": "i", "U8": "B", "I8": "b", "I16": "h"}


def read_safetensors(path):
    """Returns (tensors, metadata): tensors is a dict name -> {dtype, shape, data} in file order."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    meta = header.pop("__metadata__", None)
    base = 8 + n
    tensors = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = info["data_offsets"]
        tensors[name] = {"dtype": info["dtype"], "shape": list(info["shape"]), "data": blob[base + b : base + e]}
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header = {}
    if meta is not None:
        header["__metadata__"] = meta
    offset = 0
    for name, t in tensors.items():
        header[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [offset, offset + len(t["data"])]}
        offset += len(t["data"])
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in tensors.values():
            f.write(t["data"])


def values(t):
    fmt = _DTYPE_FMT[t["dtype"]]
    count = len(t["data"]) // struct.calcsize(fmt)
    return list(struct.unpack("<%d%s" % (count, fmt), t["data"]))


def with_values(t, vals):
    fmt = _DTYPE_FMT[t["dtype"]]
    out = dict(t)
    out["data"] = struct.pack("<%d%s" % (len(vals), fmt), *vals)
    return out


def f32(x):
    """Rounds a Python float to float32 (round to nearest even) and back."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_next(x, direction):
    """The float32 neighbour of float32 x towards +inf (direction > 0) or -inf."""
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    if x == 0.0:
        bits = 1 if direction > 0 else 0x80000001
    elif (x > 0) == (direction > 0):
        bits += 1
    else:
        bits -= 1
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# ---- folders -----------------------------------------------------------------------------------


def copy_tree(src, dst):
    """Copies src to dst with writable files and folders (the shared folder is read-only)."""
    if os.path.exists(dst):
        for root, dirs, _ in os.walk(dst):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        os.chmod(dst, 0o755)
        shutil.rmtree(dst)
    for root, _, files in os.walk(src):
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for name in files:
            shutil.copyfile(os.path.join(root, name), os.path.join(dst, rel, name))


class Folder:
    """A golden folder (or its vsa/ subfolder): the manifest and the files it lists."""

    def __init__(self, root):
        self.root = root
        with open(os.path.join(root, "manifest.json")) as f:
            self.manifest = json.load(f)

    def path(self, rel):
        return os.path.join(self.root, rel)

    def entry(self, rel):
        for e in self.manifest["files"]:
            if e["file"] == rel:
                return e
        return None

    def files(self, kind=None):
        return [e for e in self.manifest["files"] if kind is None or e.get("kind") == kind]

    def refresh(self, rel, tensors=None):
        """Updates the size and hash of a rewritten file (and its tensor list when given)."""
        e = self.entry(rel)
        if e is None:
            return
        with open(self.path(rel), "rb") as f:
            blob = f.read()
        e["bytes"] = len(blob)
        e["sha256"] = hashlib.sha256(blob).hexdigest()
        if tensors is not None and "tensors" in e:
            old = e["tensors"]
            e["tensors"] = {n: old.get(n, {"dtype": t["dtype"], "shape": t["shape"]}) for n, t in tensors.items()}

    def rewrite(self, rel, edit):
        """Reads a case file, applies edit(tensors, meta) -> (tensors, meta), writes it back."""
        tensors, meta = read_safetensors(self.path(rel))
        tensors, meta = edit(tensors, meta)
        write_safetensors(self.path(rel), tensors, meta)
        self.refresh(rel, tensors)
        return tensors

    def drop_kind(self, kind):
        for e in self.files(kind):
            os.remove(self.path(e["file"]))
        self.manifest["files"] = [e for e in self.manifest["files"] if e.get("kind") != kind]

    def drop_file(self, rel):
        if os.path.exists(self.path(rel)):
            os.remove(self.path(rel))
        self.manifest["files"] = [e for e in self.manifest["files"] if e["file"] != rel]

    def save(self):
        with open(self.path("manifest.json"), "w") as f:
            json.dump(self.manifest, f, indent=1)
            f.write("\n")


def drop_tensors(folder, kind, keep):
    """Removes the tensors for which keep(name) is false from every case file of `kind`."""
    for e in folder.files(kind):
        if not e["file"].endswith(".safetensors"):
            continue

        def edit(tensors, meta):
            return {n: t for n, t in tensors.items() if keep(n)}, meta

        folder.rewrite(e["file"], edit)


def set_meta_json(meta, key, value):
    """Updates one field of a case file's `meta_json` header string."""
    if meta is None or "meta_json" not in meta:
        return meta
    m = json.loads(meta["meta_json"])
    m[key] = value
    meta = dict(meta)
    meta["meta_json"] = json.dumps(m)
    return meta


# ---- variant: reordered ----------------------------------------------------------------------


def reverse_tensor_order(folder, rel):
    folder.rewrite(rel, lambda t, m: (dict(reversed(list(t.items()))), m))


def reordered_references(folder, out_rel):
    """A copy of the first ref2va case with an image reference first and a video reference last,
    holding what does not depend on the order: the inputs, the normalized references and the Qwen
    video sampling of each reference."""
    for e in folder.files("e2e"):
        meta = e.get("meta") or {}
        refs = meta.get("references") or []
        kinds = [r.get("kind") for r in refs]
        if meta.get("workflow") == "ref2va" and "image" in kinds and "video" in kinds:
            break
    else:
        return None
    # New order: images, then audio, then videos (each group in its old order).
    order = sorted(range(len(refs)), key=lambda k: ({"image": 0, "audio": 1, "video": 2}[kinds[k]], k))
    new_of = {old: new for new, old in enumerate(order)}
    tensors, smeta = read_safetensors(folder.path(e["file"]))
    out = {}
    prefixes = ("input_reference_", "normalized_reference_", "qwen_video_")
    for name, t in tensors.items():
        for p in prefixes:
            k, _, tail = name[len(p) :].partition("_")
            if name.startswith(p) and k.isdigit():
                out["%s%d_%s" % (p, new_of[int(k)], tail)] = t
                break
        else:
            # Order-independent: the prompt's schedule and the Qwen grids of one image and one video.
            if name in ("video_sigmas", "video_timesteps", "audio_sigmas", "audio_timesteps", "sampling_rate",
                        "qwen_image_grid_thw", "qwen_video_grid_thw", "qwen_pixel_values_videos"):
                out[name] = t
    out = dict(sorted(out.items()))
    new_meta = copy.deepcopy(meta)
    new_meta["references"] = [refs[old] for old in order]
    for v in new_meta.get("video_references", []):
        v["reference"] = new_of[v["reference"]]
    new_meta["reordered_from"] = e["file"]
    new_meta.pop("draw_shapes", None)
    new_meta.pop("text_tokens", None)
    write_safetensors(folder.path(out_rel), out, set_meta_json(smeta, "references", new_meta["references"]))
    entry = {"file": out_rel, "bytes": 0, "sha256": "",
             "what": "%s with its references in another order (inputs and per-reference outputs only)" % e["file"],
             "meta": new_meta, "tensors": {n: {"dtype": t["dtype"], "shape": t["shape"]} for n, t in out.items()},
             "kind": "e2e"}
    folder.manifest["files"].insert(0, entry)
    folder.refresh(out_rel)
    return out_rel


def make_reordered(src, dst):
    copy_tree(src, dst)
    g = Folder(dst)
    # Audio resampling cases: case i -> case (i + 1) mod n.
    for e in g.files("audio_resample"):
        n = len((e.get("meta") or {}).get("cases", []))
        if n < 2:
            continue
        perm = [(i + 1) % n for i in range(n)]

        def edit(tensors, meta, perm=perm):
            out = {}
            for name, t in tensors.items():
                if name.startswith("case"):
                    k, _, tail = name[4:].partition("_")
                    name = "case%d_%s" % (perm[int(k)], tail)
                out[name] = t
            if meta and "meta_json" in meta:
                m = json.loads(meta["meta_json"])
                cases = m.get("cases", [])
                if len(cases) == n:
                    new = [None] * n
                    for i, c in enumerate(cases):
                        new[perm[i]] = c
                    m["cases"] = new
                    meta = dict(meta)
                    meta["meta_json"] = json.dumps(m)
            return out, meta

        g.rewrite(e["file"], edit)
        cases = e["meta"]["cases"]
        new = [None] * n
        for i, c in enumerate(cases):
            new[perm[i]] = c
        e["meta"]["cases"] = new
        tens = {}
        for name, t in e["tensors"].items():
            if name.startswith("case"):
                k, _, tail = name[4:].partition("_")
                name = "case%d_%s" % (perm[int(k)], tail)
            tens[name] = t
        e["tensors"] = dict(sorted(tens.items()))
    # Tokenizer cases in reverse order.
    for e in g.files("tokenizer"):
        with open(g.path(e["file"])) as f:
            j = json.load(f)
        j["cases"] = list(reversed(j.get("cases", [])))
        with open(g.path(e["file"]), "w") as f:
            json.dump(j, f, indent=1)
        g.refresh(e["file"])
    # Tensors inside every case file in reverse order.
    for e in g.files():
        if e.get("kind") not in ("checkpoint", "info") and e["file"].endswith(".safetensors"):
            reverse_tensor_order(g, e["file"])
    reordered_references(g, "e2e/reordered_references.safetensors")
    g.manifest["files"] = list(reversed(g.manifest["files"]))
    g.save()
    # VSA: attention cases, their combinations, the metadata cases and the file list reversed.
    if os.path.isfile(os.path.join(dst, "vsa", "manifest.json")):
        v = Folder(os.path.join(dst, "vsa"))
        cases = v.manifest["cases"]
        cases["attention"] = list(reversed(cases.get("attention", [])))
        for c in cases["attention"]:
            c["combos"] = list(reversed(c["combos"]))
            reverse_tensor_order(v, c["file"])
        meta_rel = cases["metadata"]["file"]
        with open(v.path(meta_rel)) as f:
            j = json.load(f)
        j["cases"] = list(reversed(j["cases"]))
        with open(v.path(meta_rel), "w") as f:
            json.dump(j, f, indent=1)
        v.refresh(meta_rel)
        v.manifest["files"] = list(reversed(v.manifest["files"]))
        v.save()


# ---- variants: sparse_a, sparse_b ------------------------------------------------------------


def make_sparse_a(src, dst):
    copy_tree(src, dst)
    g = Folder(dst)
    for kind in ("e2e", "rng", "tokenizer", "image_processor"):
        g.drop_kind(kind)
    shutil.rmtree(os.path.join(dst, "vsa"), ignore_errors=True)
    drop_tensors(g, "dit", lambda n: not n.startswith("inter."))
    drop_tensors(g, "conditioner_text", lambda n: n in ("input_ids", "hidden_state_50"))
    drop_tensors(g, "conditioner_presentation",
                 lambda n: not (n.startswith("visual.hidden_states.") or
                                (n.startswith("hidden_state_") and n != "hidden_state_50") or
                                n in ("mm_token_type_ids", "last_hidden_state", "visual.last_hidden_state")))
    drop_tensors(g, "video_vae_encode", lambda n: n in ("pixels_uint8", "moments", "posterior_mean"))
    drop_tensors(g, "audio_vae_decode", lambda n: n in ("latents_normalized", "waveform"))
    drop_tensors(g, "audio_vae_encode", lambda n: n in ("waveform", "posterior_mean"))
    g.save()


def make_sparse_b(src, dst):
    copy_tree(src, dst)
    g = Folder(dst)
    for kind in ("dit", "conditioner_text", "conditioner_presentation", "video_vae_decode",
                 "video_vae_encode_sampled", "audio_vae_encode", "schedulers", "layouts", "audio_resample"):
        g.drop_kind(kind)
    g.drop_file("generation_info.json")

    def optional(n):
        return (n in ("frames_float", "qwen_position_ids", "qwen_pixel_values_videos", "condition_rows",
                      "mm_token_type_ids", "text_indices") or n.startswith("posterior_noise_") or
                n.endswith("_source_frame_index") or n.endswith("_unique_timesteps") or
                n.endswith("_timestep_indices"))

    drop_tensors(g, "e2e", lambda n: not optional(n))
    g.save()
    if os.path.isfile(os.path.join(dst, "vsa", "manifest.json")):
        v = Folder(os.path.join(dst, "vsa"))
        for c in v.manifest["cases"].get("dit", []):
            v.drop_file(c["file"])
        v.manifest["cases"]["dit"] = []
        att = v.manifest["cases"].get("attention", [])
        if len(att) > 1:
            v.drop_file(att[0]["file"])
            v.manifest["cases"]["attention"] = att[1:]
        v.save()


# ---- variant: two_blocks ---------------------------------------------------------------------


def make_two_blocks(src, dst, blocks=2):
    copy_tree(src, dst)
    g = Folder(dst)
    ckpt = g.manifest.get("checkpoint", "")
    for part in ("transformer", "transformer_ref"):
        cfg_rel = os.path.join(ckpt, part, "config.json")
        if not os.path.isfile(g.path(cfg_rel)):
            continue
        with open(g.path(cfg_rel)) as f:
            cfg = json.load(f)
        if cfg.get("num_layers", 0) <= blocks:
            continue
        cfg["num_layers"] = blocks
        with open(g.path(cfg_rel), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        g.refresh(cfg_rel)
        for name in sorted(os.listdir(g.path(os.path.join(ckpt, part)))):
            if not name.endswith(".safetensors"):
                continue
            rel = os.path.join(ckpt, part, name)

            def keep(n):
                if not n.startswith("transformer_blocks."):
                    return True
                return int(n.split(".")[1]) < blocks

            g.rewrite(rel, lambda t, m: ({n: x for n, x in t.items() if keep(n)}, m))
    g.save()


# ---- variant: near_tie -----------------------------------------------------------------------


def vsa_topk(sparsity, v):
    return max(1, min(int(math.ceil((1.0 - sparsity) * v)), v))


def block_mask(scores, h_count, n, p, sparsity, mode):
    """ops::vsa_block_mask: [H][n][n] lists of 0/1 (ties to the lower index)."""
    v = n - p
    k_vid = vsa_topk(sparsity, v)
    mask = [[[0] * n for _ in range(n)] for _ in range(h_count)]
    for h in range(h_count):
        for i in range(n):
            if k_vid == v or i < p:
                mask[h][i] = [1] * n
                continue
            first = p if mode == "exempt" else 0
            k = k_vid if mode == "exempt" else min(k_vid + p, n)
            cols = sorted(range(first, n), key=lambda j: (-scores[h][i][j], j))
            for j in cols[:k]:
                mask[h][i][j] = 1
            if mode == "exempt":
                for j in range(p):
                    mask[h][i][j] = 1
    return mask


def min_margin(scores, h_count, n, p, sparsity, mode):
    """The smallest gap between the last selected and the first rejected score of any row."""
    v = n - p
    k_vid = vsa_topk(sparsity, v)
    if k_vid == v:
        return None
    best = None
    for h in range(h_count):
        for i in range(p, n):
            first = p if mode == "exempt" else 0
            k = k_vid if mode == "exempt" else min(k_vid + p, n)
            s = sorted((scores[h][i][j] for j in range(first, n)), reverse=True)
            if k < len(s):
                gap = s[k - 1] - s[k]
                best = gap if best is None else min(best, gap)
    return best


def make_near_tie(src, dst):
    copy_tree(src, dst)
    vroot = os.path.join(dst, "vsa")
    if not os.path.isfile(os.path.join(vroot, "manifest.json")):
        return
    v = Folder(vroot)
    case = next((c for c in v.manifest["cases"]["attention"] if c["dtype"] == "fp32"), None)
    if case is None:
        return
    tensors, smeta = read_safetensors(v.path(case["file"]))
    S, H, D = tensors["q"]["shape"]
    E = case["tile_size"]
    sizes = values(tensors["variable_block_sizes"])
    untile = values(tensors["untile_combined_index"])
    n = len(sizes)
    P = case["num_prefix_tiles"]
    scale = f32(case["softmax_scale"])
    q, k, vv, g = (values(tensors[x]) for x in ("q", "k", "v", "g"))
    ref_scores = values(tensors["scores"])
    # Rows of each tile in slot order (the order the CPU oracle sums them in).
    rows_of = [[] for _ in range(n)]
    for r in sorted(range(S), key=lambda r: untile[r]):
        rows_of[untile[r] // E].append(r)

    def at(x, r, h):
        base = (r * H + h) * D
        return x[base : base + D]

    def pooled(x, h, t):
        acc = [0.0] * D
        for r in rows_of[t]:
            row = at(x, r, h)
            for d in range(D):
                acc[d] += row[d]
        return [f32(a / sizes[t]) for a in acc]

    kp = [[pooled(k, h, t) for t in range(n)] for h in range(H)]
    vp = [[pooled(vv, h, t) for t in range(n)] for h in range(H)]

    def score(qbar, kbar):
        acc = 0.0
        for d in range(D):
            acc += qbar[d] * kbar[d]
        return f32(acc * scale)

    # The sparsity/mode combination whose boundary is tied: the first with a margin (exempt first).
    combos = sorted([c for c in case["combos"] if c.get("topk_min_margin") is not None],
                    key=lambda c: (c["mode"] != "exempt", c["sparsity"]))
    if not combos:
        print("near_tie: %s has no top-k selection to tie; left unchanged" % case["name"])
        return
    target = combos[0]
    k_vid = vsa_topk(target["sparsity"], n - P)
    # Pick the (head, query tile) whose boundary pair is closest, shift its query rows by
    # t * (kbar_B - kbar_A) so that the pair ties, and keep the pair at the boundary.
    candidates = []
    for h in range(H):
        for i in range(P, n):
            row = [ref_scores[(h * n + i) * n + j] for j in range(n)]
            order = sorted(range(P, n), key=lambda j: (-row[j], j))
            a, b = order[k_vid - 1], order[k_vid]
            candidates.append((row[a] - row[b], h, i, a, b))
    candidates.sort()
    for _, h, i, a, b in candidates:
        diff = [kp[h][b][d] - kp[h][a][d] for d in range(D)]
        norm2 = sum(x * x for x in diff)
        if norm2 == 0.0:
            continue
        base = list(q)

        def shifted(t):
            out = list(base)
            for r in rows_of[i]:
                off = (r * H + h) * D
                for d in range(D):
                    out[off + d] = f32(base[off + d] + t * diff[d])
            return out

        def gap(t):
            qq = shifted(t)
            qbar = pooled(qq, h, i)
            return score(qbar, kp[h][a]) - score(qbar, kp[h][b]), qq, qbar

        qbar0 = pooled(base, h, i)
        g0 = score(qbar0, kp[h][a]) - score(qbar0, kp[h][b])
        lo, hi = 0.0, 2.0 * g0 / (scale * norm2)
        if gap(hi)[0] > 0:
            continue
        for _ in range(80):  # bisection on the exact float32 evaluation
            mid = 0.5 * (lo + hi)
            if gap(mid)[0] > 0:
                lo = mid
            else:
                hi = mid
        d_lo, q_lo, qbar_lo = gap(lo)
        row = [score(qbar_lo, kp[h][j]) for j in range(n)]
        order = sorted(range(P, n), key=lambda j: (-row[j], j))
        if {order[k_vid - 1], order[k_vid]} != {a, b}:
            continue
        break
    else:
        print("near_tie: no query tile of %s could be tied; left unchanged" % case["name"])
        return
    q = q_lo
    own = row  # what an exact float32 evaluation (the CPU oracle) gives for this row
    # The stored scores: this row as evaluated, with the tied pair one float32 step apart in the
    # order the evaluation does not choose.
    stored = list(own)
    chosen = order[k_vid - 1]  # the evaluation keeps this one
    other = order[k_vid]
    stored[other] = f32_next(max(own[a], own[b]), +1)
    stored[chosen] = max(own[a], own[b])
    for j in range(n):
        ref_scores[(h * n + i) * n + j] = stored[j]
    qbar = pooled(q, h, i)
    q_pooled = values(tensors["q_pooled"])
    q_pooled[(h * n + i) * D : (h * n + i + 1) * D] = qbar
    # The compression branch of this row: softmax over every tile's stored score times the v means.
    out_c = values(tensors["out_c_f32"])
    srow = [ref_scores[(h * n + i) * n + j] for j in range(n)]
    mx = max(srow)
    w = [math.exp(s - mx) for s in srow]
    den = sum(w)
    out_c[(h * n + i) * D : (h * n + i + 1) * D] = [
        f32(sum(w[j] * vp[h][j][d] for j in range(n)) / den) for d in range(D)]
    tensors["q"] = with_values(tensors["q"], q)
    tensors["q_pooled"] = with_values(tensors["q_pooled"], q_pooled)
    tensors["scores"] = with_values(tensors["scores"], ref_scores)
    tensors["out_c_f32"] = with_values(tensors["out_c_f32"], out_c)
    tensors["out_c"] = with_values(tensors["out_c"], out_c)
    scores3 = [[[ref_scores[(hh * n + ii) * n + j] for j in range(n)] for ii in range(n)] for hh in range(H)]
    tile_of = [u // E for u in untile]
    # Masks, fine and out of every combination for the rows of the changed tile.
    done = {}
    for c in case["combos"]:
        m = block_mask(scores3, H, n, P, c["sparsity"], c["mode"])
        flat = [m[hh][ii][j] for hh in range(H) for ii in range(n) for j in range(n)]
        tensors[c["tensors"]["mask"]] = with_values(tensors[c["tensors"]["mask"]], flat)
        c["topk_min_margin"] = min_margin(scores3, H, n, P, c["sparsity"], c["mode"])
        key = c["tensors"]["fine"]
        if key in done:
            continue
        done[key] = True
        fine = values(tensors[c["tensors"]["fine"]])
        out = values(tensors[c["tensors"]["out"]])
        keys = [r for j in range(n) if m[h][i][j] for r in rows_of[j]]
        for r in rows_of[i]:
            qr = at(q, r, h)
            logits = [sum(qr[d] * at(k, key_r, h)[d] for d in range(D)) * scale for key_r in keys]
            mx = max(logits)
            p = [math.exp(x - mx) for x in logits]
            den = sum(p)
            off = (r * H + h) * D
            for d in range(D):
                fv = f32(sum(p[c2] * at(vv, keys[c2], h)[d] for c2 in range(len(keys))) / den)
                fine[off + d] = fv
                cg = f32(out_c[(h * n + tile_of[r]) * D + d] * g[off + d])
                out[off + d] = f32(fv + cg)
        tensors[c["tensors"]["fine"]] = with_values(tensors[c["tensors"]["fine"]], fine)
        tensors[c["tensors"]["out"]] = with_values(tensors[c["tensors"]["out"]], out)
    smeta = set_meta_json(smeta, "combos", case["combos"])
    smeta = set_meta_json(smeta, "near_tie", {"head": h, "query_tile": i, "key_tiles": [a, b]})
    write_safetensors(v.path(case["file"]), tensors, smeta)
    v.refresh(case["file"])
    case["near_tie"] = {"head": h, "query_tile": i, "key_tiles": [a, b],
                        "gap": stored[other] - stored[chosen]}
    v.save()
    print("near_tie: %s head %d query tile %d: key tiles %d and %d one float32 step apart"
          % (case["name"], h, i, a, b))


VARIANTS = {
    "reordered": make_reordered,
    "sparse_a": make_sparse_a,
    "sparse_b": make_sparse_b,
    "two_blocks": make_two_blocks,
    "near_tie": make_near_tie,
}


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    src, out = argv[1], argv[2]
    names = argv[3:] or list(VARIANTS)
    for name in names:
        if name not in VARIANTS:
            sys.stderr.write("unknown variant %s (known: %s)\n" % (name, ", ".join(VARIANTS)))
            return 2
    os.makedirs(out, exist_ok=True)
    for name in names:
        VARIANTS[name](src, os.path.join(out, name))
        print("wrote %s" % os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
