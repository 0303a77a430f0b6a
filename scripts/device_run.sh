#!/usr/bin/env bash
# Runs the staged test binaries on the GPU machine (see device_build.sh) and prints a short
# summary; full logs go to $OUT (or /tmp/h3-device-out). Steps:
#   1. unit tests, backend-ops (then the large attention shapes, H3_OPS_LARGE=1), gpu tests;
#   2. the attention benchmark (H3_BENCH_ATTENTION=1, H3_BENCH_CHECK=1);
#   3. compute-sanitizer memcheck over the CUDA backend-ops cases and the CUDA graph tests, and
#      racecheck over two small gpu tests that use shared memory (when compute-sanitizer is
#      installed).
#   4. the model benchmarks (`h3 bench dit|vae|vsa`) and the load benchmark (`h3 bench load`);
#   5. "e2e": `h3 bench e2e` on a released-shape repository (sparse files, random weights filled
#      on the device) at 1344x768x124: FastH3 with gates, a first and a warm generation (once per
#      entry of H3_E2E_ENVS, e.g. "none H3_CUDA_GRAPHS=0"); the dense preset for seconds per
#      forward; `h3 bench dit` at the same rows for the loop's overhead.
#   6. "vsa": the VSA tests (unless "tests" runs too), then `h3 bench vsa` at tiles 64 and 256 and
#      under the settings H3_VSA_ENVS lists; with H3_NCU=1 also a Nsight Compute profile of the
#      fine kernel.
#   7. "fp8": the Fp8 backend-ops cases and the fusion switches (unless "tests" runs), `h3 bench
#      fp8` (each layer with its activation quantization, the GEMM alone and with a bias; with
#      H3_FP8_SEARCH=N, cuBLASLt's configurations searched), and `h3 bench dit` in bf16 and FP8: the
#      FastH3 block (VSA 0.9, tile 64, gates) and the dense one (H3_FP8_DENSE=0 leaves it out).
#   8. "vaeload": each VAE's decoder loaded alone from the page cache, with its phases.
#   9. "vae": the video VAE decode: its kernels' tests, `h3 bench vae` with a profile, per attention
#      kernel, with the decoder's fusions off, at tile batches 1, 4 and 14, and with the video
#      widened to float32 (--f32-output).
#  10. "audio": the audio VAE's ops (1-D convolutions, the anti-aliased SnakeBeta; the large
#      shapes too), its GPU tests and `h3 bench vae --audio-vae` with the released-shape audio VAE
#      and the audio decode's profile, with every fusion and with the audio decoder's fusions off
#      (H3_AUDIO_ENVS adds settings).
#  11. "variants": the golden tier and the GPU tests on the golden folder's resized variants,
#      written here by tests/golden/make_resized.py with this machine's PyTorch from the staged
#      golden folder and the anchor (H3_ANCHOR_DIR, default .device-anchor in the working tree).
#  12. "qkrope": the q/k norm + RoPE kernel with one and with four rows per lane group
#      (H3_QKROPE_ROWS): its tests, the DiT blocks and the video VAE decode under each.
#  13. "causal": the Hopper attention kernel's causal path: the attention cases, the conditioner's
#      GPU tests, the attention benchmark.
# H3_DEVICE_STEPS selects steps (default "tests bench models load sanitize"; also "e2e", "lora",
# "fp8", "vaeload", "vae", "audio", "variants", "qkrope", "causal"). H3_E2E_DIT_DTYPES (default "bf16"; e.g. "bf16 fp8 fp8-block") runs the e2e FastH3
# generations once per --dit-dtype ("fp8-block": with --fp8-scaling block).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
if [ -f "$here/bin.tar.xz" ] && [ ! -d "$bin" ]; then tar -C "$here" -xJf "$here/bin.tar.xz"; fi
out=${OUT:-/tmp/h3-device-out}
mkdir -p "$out"
steps=${H3_DEVICE_STEPS:-tests bench models load sanitize}
[ -f "$here/golden/manifest.json" ] && export H3_GOLDEN_DIR=$here/golden
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$summary"

# run NAME TIMEOUT CMD...: runs, keeps the log, and notes gtest's tally.
run() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local tally
  # gtest's totals only (not one line per skipped test), and the sanitizers' summaries.
  tally=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]|ERROR SUMMARY|RACECHECK SUMMARY" "$out/$name.log" \
    | tr '\n' ' ')
  note "$name: rc=$rc ($((SECONDS - start)) s) $tally"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$out/$name.log" | head -20 | tee -a "$summary"
}

if [[ " $steps " == *" tests "* ]]; then
  [ -x "$bin/h3_unit_tests" ] && run unit 90 "$bin/h3_unit_tests"
  # VSA first and on its own, under a short limit: a producer/consumer disagreement in a
  # warp-specialized kernel hangs instead of failing.
  [ -x "$bin/h3_backend_ops" ] && run ops_vsa 90 "$bin/h3_backend_ops" --gtest_filter='*vsa*:*Vsa*'
  [ -x "$bin/h3_gpu_tests" ] && run gpu_vsa 120 "$bin/h3_gpu_tests" --gtest_filter='*Vsa*'
  [ -x "$bin/h3_backend_ops" ] && run ops 200 "$bin/h3_backend_ops" --gtest_filter='-*vsa*:*Vsa*'
  # Large shapes: only the attention ones (the CPU side of other large cases is slow without BLAS).
  [ -x "$bin/h3_backend_ops" ] && H3_OPS_LARGE=1 run ops_large 150 "$bin/h3_backend_ops" \
    --gtest_filter='*attention_dit_slice*:*attention_qwen*:*attention_vae*'
  grep -E "^\[cuda\]" "$out/ops_large.log" 2>/dev/null >>"$out/ops.log"
  [ -x "$bin/h3_gpu_tests" ] && run gpu 420 "$bin/h3_gpu_tests" --gtest_filter='-*Vsa*:AttentionBench.*'
  # The measured CUDA figures, for the record.
  grep -E "^\[cuda\]" "$out/ops.log" 2>/dev/null | grep -E "attention|rms_norm_modulate|qk_norm_rope|epilogue" \
    | head -40 >>"$summary"
  grep -E "rel_l2|floor" "$out/gpu.log" 2>/dev/null | head -60 >>"$summary"
fi

if [[ " $steps " == *" bench "* ]] && [ -x "$bin/h3_gpu_tests" ]; then
  H3_BENCH_ATTENTION=1 H3_BENCH_CHECK=${H3_BENCH_CHECK:-1} run bench 240 "$bin/h3_gpu_tests" --gtest_filter='AttentionBench.*'
  grep -E "^shape|^dit|^qwen|^vae|^vision|^audio|^d64" "$out/bench.log" | tee -a "$summary"
fi
# The q/k norm + RoPE kernel's rows per lane group (H3_QKROPE_ROWS): its backend-ops cases and
# the fusion tests, then the dense and the FastH3 DiT block and the video VAE decode with one row
# and with four.
if [[ " $steps " == *" qkrope "* ]]; then
  [ -x "$bin/h3_backend_ops" ] && run ops_qkrope 60 "$bin/h3_backend_ops" --gtest_filter='*qk_norm_rope*'
  [ -x "$bin/h3_gpu_tests" ] && run gpu_fusion 120 "$bin/h3_gpu_tests" --gtest_filter='CudaFusion.*'
  for rows in 1 4 1 4; do
    [ -x "$bin/h3" ] && H3_QKROPE_ROWS=$rows run "bench_dit_rows$rows" 200 "$bin/h3" bench dit --blocks 2 --iters 5
    grep -E "^\| (block|q/k|glue)" "$out/bench_dit_rows$rows.log" | sed "s/^/dense, rows $rows: /" | tee -a "$summary"
  done
  for rows in 1 4; do
    [ -x "$bin/h3" ] && H3_QKROPE_ROWS=$rows run "bench_fasth3_rows$rows" 200 "$bin/h3" bench dit --blocks 2 \
      --iters 5 --attention vsa --vsa-sparsity 0.9 --vsa-tile 64 --dit-dtype fp8
    grep -E "^\| (block|q/k|glue)" "$out/bench_fasth3_rows$rows.log" | sed "s/^/fasth3 fp8, rows $rows: /" \
      | tee -a "$summary"
  done
  for rows in 1 4; do
    [ -x "$bin/h3" ] && H3_QKROPE_ROWS=$rows run "bench_vae_rows$rows" 200 "$bin/h3" bench vae --repeat 2 --warmup 1
    grep -E "decode|seconds" "$out/bench_vae_rows$rows.log" | head -6 | sed "s/^/vae, rows $rows: /" | tee -a "$summary"
  done
fi
# The Hopper attention kernel's causal path (the Qwen language model's grouped-query prefill): the
# attention backend-ops cases (the large ones too), the conditioner's GPU tests, and the attention
# benchmark (the Hopper kernel beside the mma.sync one it replaces).
if [[ " $steps " == *" causal "* ]]; then
  [ -x "$bin/h3_backend_ops" ] && run ops_attention 120 "$bin/h3_backend_ops" --gtest_filter='*ttention*'
  [ -x "$bin/h3_backend_ops" ] && H3_OPS_LARGE=1 run ops_attention_large 150 "$bin/h3_backend_ops" \
    --gtest_filter='*attention_dit_slice*:*attention_qwen*:*attention_vae*'
  [ -x "$bin/h3_gpu_tests" ] && run gpu_conditioner 200 "$bin/h3_gpu_tests" --gtest_filter='*onditioner*:*Qwen*:*Text*'
  # Variant 0 is the automatic choice (the Hopper kernel), variants 1 and 2 the mma.sync kernel.
  [ -x "$bin/h3_gpu_tests" ] && H3_BENCH_ATTENTION=1 run bench_attention 240 "$bin/h3_gpu_tests" \
    --gtest_filter='AttentionBench.*'
  grep -E "^shape|^dit|^qwen" "$out/bench_attention.log" | tee -a "$summary"
fi
# Model benchmarks through the h3 tool (weights random, released width).
if [[ " $steps " == *" models "* ]] && [ -x "$bin/h3" ]; then
  run bench_dit 240 "$bin/h3" bench dit --blocks 2 --iters 3
  cat "$out/bench_dit.log" >>"$summary"
  run bench_vae 240 "$bin/h3" bench vae --repeat 1 --warmup 0 --profile
  cat "$out/bench_vae.log" >>"$summary"
  if "$bin/h3" bench vsa --help >/dev/null 2>&1; then
    run bench_vsa 120 "$bin/h3" bench vsa
    cat "$out/bench_vsa.log" >>"$summary"
    H3_VSA_HOPPER=0 run bench_vsa_mma 120 "$bin/h3" bench vsa
    grep -E "whole op|fine branch" "$out/bench_vsa_mma.log" | sed 's/^/H3_VSA_HOPPER=0 /' >>"$summary"
    H3_VSA_HOPPER_ORDER=head H3_VSA_TOPK=sort run bench_vsa_old_order 120 "$bin/h3" bench vsa
    grep -E "whole op|fine branch|top-k" "$out/bench_vsa_old_order.log" | sed 's/^/ORDER=head TOPK=sort /' >>"$summary"
    run bench_vsa_256 120 "$bin/h3" bench vsa --tile 256
    grep -E "whole op|fine branch" "$out/bench_vsa_256.log" | sed 's/^/tile 256 /' >>"$summary"
  fi
fi
# The whole path at full size (H3_E2E_DENSE_STEPS: sigma points of the dense run, default 4 =
# 3 forwards; every forward is the same work, so seconds per forward need no 49-forward run).
if [[ " $steps " == *" e2e "* ]] && [ -x "$bin/h3" ]; then
  model=${H3_E2E_MODEL:-/tmp/h3-released-fasth3}
  [ -d "$model" ] || "$bin/h3" make-tiny --released-shapes --fasth3 "$model" >"$out/make_released.log" 2>&1
  # The first generation's loads from the page cache: every component's files are dropped from
  # the cache (posix_fadvise, no root needed) and then exactly the ranges a T2VA generation reads
  # are read once, in the order given: the conditioner's token embeddings and layers 0-49 (not
  # layers 50-63 nor the vision tower, 17 GB that would evict the rest), every other component
  # whole. All of the files (143 GB) do not fit this host's 128 GiB; what is read (127 GB) does.
  # Holes of a sparse file that were never read cost a page allocation each, which is not what a
  # cached read costs. H3_E2E_PRELOAD_ORDERS gives one order per --dit-dtype run (the last
  # repeats).
  read -r -a preload_orders <<<"${H3_E2E_PRELOAD_ORDERS:-text_encoder,transformer,vae,audio_vae}"
  preload() {
    [ "${H3_E2E_PRELOAD:-1}" = 1 ] || return 0
    local start=$SECONDS
    python3 - "$model" "$1" <<'PY' 2>&1 | tee -a "$summary"
import glob, json, os, re, struct, sys
model, order = sys.argv[1], sys.argv[2].split(",")
tap = 50
for f in glob.glob(os.path.join(model, "*", "*.safetensors")):
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
for comp in order:
    total = 0
    for f in sorted(glob.glob(os.path.join(model, comp, "*.safetensors"))):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        ranges = []
        for name, t in header.items():
            if name == "__metadata__":
                continue
            if comp == "text_encoder":
                m = re.match(r"model\.language_model\.layers\.(\d+)\.", name)
                keep = (m and int(m.group(1)) < tap) or name.startswith("model.language_model.embed_tokens.")
                if not keep:
                    continue
            a, b = t["data_offsets"]
            ranges.append((8 + n + a, 8 + n + b))
        ranges.sort()
        fd = os.open(f, os.O_RDONLY)
        for a, b in ranges:
            pos = a
            while pos < b:
                got = len(os.pread(fd, min(b - pos, 64 << 20), pos))
                if got == 0:
                    break
                pos += got
            total += b - a
        os.close(fd)
    print("  page cache: %s %.2f GB read" % (comp, total / 1e9))
PY
    note "page cache: $1 read in $((SECONDS - start)) s"
    grep -E "^(MemTotal|MemAvailable|Cached)" /proc/meminfo | tr -s ' ' | tr '\n' ' ' | sed 's/^/  /' | tee -a "$summary"; echo | tee -a "$summary"
  }
  # H3_E2E_FASTH3=0 leaves the FastH3 runs out (a dense-only call).
  run_index=0
  for dt in ${H3_E2E_DIT_DTYPES:-bf16}; do
  for e in ${H3_E2E_ENVS:-none}; do
    [ "${H3_E2E_FASTH3:-1}" = 0 ] && break
    order=${preload_orders[$((run_index < ${#preload_orders[@]} ? run_index : ${#preload_orders[@]} - 1))]}
    run_index=$((run_index + 1))
    preload "$order"
    tag=${e//[^A-Za-z0-9]/_}
    [ "$dt" != bf16 ] && tag=${tag}_${dt//-/_}
    envs=(); [ "$e" != none ] && envs=(${e//,/ })
    # "fp8-block" is --dit-dtype fp8 --fp8-scaling block.
    dtflags=(--dit-dtype "${dt%%-*}"); [[ "$dt" == *-* ]] && dtflags+=(--fp8-scaling "${dt#*-}")
    env "${envs[@]}" "$bin/h3" bench e2e --model "$model" --device cuda --preset fasth3 --repeat 2 \
      "${dtflags[@]}" --json >"$out/e2e_fasth3_$tag.json" 2>"$out/e2e_fasth3_$tag.log"
    note "e2e fasth3 ($e, --dit-dtype $dt): rc=$?"
    python3 - "$out/e2e_fasth3_$tag.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    runs = json.load(open(sys.argv[1]))
except Exception as ex:
    print("  (no JSON: %s)" % ex); sys.exit(0)
for g in runs:
    st = g["stages"]
    print("  gen %d: %s | loaded %.2f GB | %.2f ms/block | peak %.2f GiB | stage peaks %s | %s" % (
        g["generation"], ", ".join("%s %.0f" % (k, v) for k, v in st.items() if v is not None),
        g["loaded_bytes"] / 1e9, g["ms_per_block"], g["peak_device_bytes"] / 2**30,
        {k: round(v / 2**30, 2) for k, v in g["stage_peak_device_bytes"].items()},
        g["plan"]["decision"]))
    print("         planned stage peaks GiB: %s" % {k: round(v / 2**30, 2) for k, v in g["plan"]["stage_peaks"].items()})
    print("         load GB/s: %s" % {k: round(v, 1) for k, v in g["load_gb_per_s"].items()})
    print("         steps ms: %s, set-up %.1f ms" % ([round(x, 1) for x in g.get("denoise_step_ms", [])], g.get("denoise_setup_ms", 0.0)))
    cg = g.get("cuda_graphs", {})
    print("         CUDA graphs: %s, %s captured in %.1f ms, %s replays" % (
        cg.get("state"), cg.get("captures"), cg.get("capture_ms", 0.0), cg.get("replays")))
PY
  done
  done
  rows=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['packed_rows'])" "$out/e2e_fasth3_none.json" 2>/dev/null || echo 0)
  text=$((rows - 414 - 37296))
  if [ "$text" -gt 0 ]; then
    # Sustained, as the step loop runs: the H200 holds its power cap (about 690 W, 1.7 GHz) over
    # a 16 s denoise and over 40 iterations, not over 3 (2026-12-03: block mean 76.75 ms over 3,
    # 78.41 over 40, the loop 79.57).
    run bench_dit_vsa 200 "$bin/h3" bench dit --blocks 2 --iters 40 --warmup 3 --attention vsa --vsa-sparsity 0.9 --vsa-tile 64 --text-rows "$text"
    grep -E "ms per block|mean|block" "$out/bench_dit_vsa.log" | head -8 | tee -a "$summary"
  fi
  # H3_E2E_DENSE_STEPS=0 leaves the dense preset out.
  if [ "${H3_E2E_DENSE_STEPS:-4}" != 0 ]; then
  "$bin/h3" bench e2e --model "$model" --device cuda --preset dense --steps "${H3_E2E_DENSE_STEPS:-4}" \
    --repeat 1 --json >"$out/e2e_dense.json" 2>"$out/e2e_dense.log"
  note "e2e dense: rc=$?"
  python3 -c "
import json,sys
g=json.load(open(sys.argv[1]))[0]
print('  dense: %d forwards, denoise %.0f ms = %.2f s per forward, %.2f ms/block' % (g['dit_forwards'], g['stages']['denoise'], g['stages']['denoise']/g['dit_forwards']/1000, g['ms_per_block']))
" "$out/e2e_dense.json" 2>&1 | tee -a "$summary"
  fi
fi
# The two VAEs' loads alone ("vaeload"), decoder only, from the page cache, as a generation's
# first load: `h3 bench load --component` with the phases of each load (random weights filled).
if [[ " $steps " == *" vaeload "* ]] && [ -x "$bin/h3" ]; then
  model=${H3_E2E_MODEL:-/tmp/h3-released-fasth3}
  [ -d "$model" ] || "$bin/h3" make-tiny --released-shapes --fasth3 "$model" >"$out/make_released.log" 2>&1
  for c in audio_vae vae; do
    run load_$c 180 "$bin/h3" bench load --component "$model/$c" --repeat 5 --random-weights
    grep -E "^  load [0-9]|^best" "$out/load_$c.log" | sed "s/^/$c /" | tee -a "$summary"
    grep -E "VAE load" "$out/load_$c.log" | tail -2 | cut -c1-600 | sed "s/^/$c /" | tee -a "$summary"
  done
  # H3_VAELOAD_ENVS: the audio VAE's load again under each "NAME=VALUE[,NAME=VALUE]" setting
  # (e.g. "H3_LOAD_READERS=8 H3_LOAD_READERS=12").
  for e in ${H3_VAELOAD_ENVS:-}; do
    tag=${e//[=,]/_}
    run load_audio_vae_$tag 180 env ${e//,/ } "$bin/h3" bench load --component "$model/audio_vae" --repeat 5 --random-weights
    grep -E "^best" "$out/load_audio_vae_$tag.log" | sed "s/^/audio_vae $e /" | tee -a "$summary"
  done
fi
# The video VAE decode ("vae"): its kernels' tests (unless "tests" runs too), then `h3 bench vae`
# at the default settings with a profile, each attention kernel by name, with FP8 block GEMMs
# (--vae-dtype fp8, with its PSNR against f16), the decoder's fusion switch off (H3_VAE_ENVS adds
# settings), and tile batches 1, 4 and 14 for speed and memory.
if [[ " $steps " == *" vae "* ]] && [ -x "$bin/h3" ]; then
  if [[ " $steps " != *" tests "* ]]; then
    run ops_vae 150 "$bin/h3_backend_ops" --gtest_filter='*attention*:*residual*:*qk_norm_rope*:*swiglu*'
    H3_OPS_LARGE=1 run ops_vae_large 150 "$bin/h3_backend_ops" --gtest_filter='*attention_vae*'
    grep -E "^\[cuda\].*(attention|residual)" "$out/ops_vae.log" "$out/ops_vae_large.log" | head -40 >>"$summary"
    run gpu_vae 300 "$bin/h3_gpu_tests" --gtest_filter='CudaFusion.*:CudaAttention.*:*VideoVae*:*Vae*'
    grep -E "rel_l2|psnr|PSNR" "$out/gpu_vae.log" | head -30 >>"$summary"
  fi
  vae_row() { grep -E "decode seconds|attention kernel|peak device|tile batch|^\| decoder|^\| tile|^\| temporal|^\| unacc|TFLOP|Profiled" "$out/$1.log" | sed "s/^/$1: /" | tee -a "$summary"; }
  run vae_auto 240 "$bin/h3" bench vae --repeat 2 --warmup 1 --profile
  vae_row vae_auto
  for k in mma; do
    run vae_$k 240 "$bin/h3" bench vae --repeat 2 --warmup 1 --vae-attention $k
    vae_row vae_$k
  done
  run vae_fp8 300 "$bin/h3" bench vae --repeat 2 --warmup 1 --vae-dtype fp8 --profile
  vae_row vae_fp8
  grep -E "PSNR" "$out/vae_fp8.log" | head -3 | sed "s/^/vae_fp8: /" | tee -a "$summary"
  for e in H3_FUSE_RESIDUAL_NORM=0 ${H3_VAE_ENVS:-}; do
    tag=${e//[=,]/_}
    run vae_$tag 240 env ${e//,/ } "$bin/h3" bench vae --repeat 2 --warmup 1
    vae_row vae_$tag
  done
  for tb in 1 4 14; do
    run vae_tb$tb 300 "$bin/h3" bench vae --repeat 1 --warmup 1 --tile-batch $tb
    vae_row vae_tb$tb
  done
  run vae_f32out 240 "$bin/h3" bench vae --repeat 2 --warmup 1 --f32-output
  vae_row vae_f32out
fi
if [[ " $steps " == *" audio "* ]] && [ -x "$bin/h3" ]; then
  run ops_audio 200 "$bin/h3_backend_ops" --gtest_filter='*conv1d*:*conv_transpose1d*:*snake*'
  H3_OPS_LARGE=1 run ops_audio_large 300 "$bin/h3_backend_ops" --gtest_filter='*conv1d*:*anti_aliased*'
  grep -E "^\[cuda\].*(conv|snake)" "$out/ops_audio.log" "$out/ops_audio_large.log" | head -40 >>"$summary"
  run gpu_audio 300 "$bin/h3_gpu_tests" --gtest_filter='*Audio*:CudaFusion.AntiAliased*'
  grep -E "rel_l2|max_abs" "$out/gpu_audio.log" | head -20 >>"$summary"
  model=${H3_E2E_MODEL:-/tmp/h3-released-fasth3}
  [ -d "$model" ] || "$bin/h3" make-tiny --released-shapes --fasth3 "$model" >"$out/make_released.log" 2>&1
  for e in none H3_FUSE_CONV1D_GEMM=0,H3_FUSE_AA_SNAKE=0 ${H3_AUDIO_ENVS:-}; do
    tag=${e//[=,]/_}
    env_args=(); [ "$e" != none ] && env_args=(${e//,/ })
    run audio_$tag 300 env "${env_args[@]}" "$bin/h3" bench vae --repeat 2 --warmup 1 \
      --audio-vae "$model/audio_vae" --profile
    grep -E "audio|^\| (latents|input|upsamplers|activations|AMP|residual|conv_post|waveform)|decode seconds" \
      "$out/audio_$tag.log" | sed "s/^/audio $tag: /" | tee -a "$summary"
  done
fi
if [[ " $steps " == *" fp8 "* ]] && [ -x "$bin/h3" ]; then
  if [[ " $steps " != *" tests "* ]]; then
    run ops_fp8 120 "$bin/h3_backend_ops" --gtest_filter='*Fp8*:*fill_random*'
    run gpu_fp8 120 "$bin/h3_gpu_tests" --gtest_filter='CudaFusion.*:GpuFp8*'
  fi
  # H3_FP8_SEARCH=N also times up to N cuBLASLt configurations per GEMM (`--search N`).
  search=(); [ -n "${H3_FP8_SEARCH:-}" ] && search=(--search "$H3_FP8_SEARCH")
  # H3_FP8_GEMM_BENCH=0 leaves `h3 bench fp8` out.
  if [ "${H3_FP8_GEMM_BENCH:-1}" != 0 ]; then
    for sc in ${H3_FP8_SCALINGS:-channel}; do
      run bench_fp8_$sc 420 "$bin/h3" bench fp8 --scaling "$sc" "${search[@]}"
      grep -E "^(layer|qkv|attn_out|ffn_in|ffn_out|all four|\(\+bias)| +[a-z_]+ (config [1-3] of|search:)|heuristic's" \
        "$out/bench_fp8_$sc.log" | sed "s/^/$sc: /" | tee -a "$summary"
    done
  fi
  # The FP8 block runs once per entry of H3_FP8_ENVS (e.g. "none H3_FUSE_FP8_SWIGLU=0"; commas
  # join several settings of one entry); H3_DIT_ITERS sets the timed iterations (default 3).
  # H3_FP8_SCALINGS (default "channel"; e.g. "channel block") runs each FP8 figure once per
  # --fp8-scaling.
  for dt in bf16 ${H3_FP8_SCALINGS:-channel}; do
    dtype=fp8 scaling=(--fp8-scaling "$dt") name=fp8_$dt
    [ "$dt" = bf16 ] && dtype=bf16 scaling=() name=bf16
    envs_list=none; [ $dtype = fp8 ] && envs_list=${H3_FP8_ENVS:-none}
    for e in $envs_list; do
      tag=$name; [ "$e" != none ] && tag=${name}_${e//[^A-Za-z0-9]/_}
      envs=(); [ "$e" != none ] && envs=(${e//,/ })
      run dit_fasth3_$tag 240 env "${envs[@]}" "$bin/h3" bench dit --blocks 2 --iters "${H3_DIT_ITERS:-3}" \
        --attention vsa --vsa-sparsity 0.9 --vsa-tile 64 --dit-dtype $dtype "${scaling[@]}"
      grep -E "ms per block|mean|block" "$out/dit_fasth3_$tag.log" | head -4 | sed "s/^/fasth3 $tag: /" | tee -a "$summary"
    done
    [ "${H3_FP8_DENSE:-1}" = 0 ] && continue
    run dit_dense_$name 240 "$bin/h3" bench dit --blocks 2 --iters "${H3_DIT_ITERS:-3}" --dit-dtype $dtype "${scaling[@]}"
    grep -E "ms per block|mean|block" "$out/dit_dense_$name.log" | head -4 | sed "s/^/dense $name: /" | tee -a "$summary"
  done
fi
# LoRA at the released width ("lora"): the per-block cost of a rank-64 run-time adapter on q, k,
# v, out and the FFN against the same blocks without one, and the time to fuse it (8 blocks; the
# whole model is 50).
if [[ " $steps " == *" lora "* ]] && [ -x "$bin/h3" ]; then
  run lora_base 240 "$bin/h3" bench dit --blocks 2 --iters 3
  run lora_runtime 240 "$bin/h3" bench dit --blocks 2 --iters 3 --lora-rank 64 --lora-mode runtime
  run lora_fused 300 "$bin/h3" bench dit --blocks 8 --iters 1 --lora-rank 64 --lora-mode fused
  for n in lora_base lora_runtime lora_fused; do
    grep -E "block ms \(mean\)|LoRA" "$out/$n.log" | sed "s/^/$n /" | tee -a "$summary"
  done
fi
# VSA variants at the production geometry (fine-branch studies): H3_VSA_ENVS lists extra
# environment settings to compare, each "NAME=VALUE[,NAME=VALUE]" (default none).
if [[ " $steps " == *" vsa "* ]] && [ -x "$bin/h3" ]; then
  if [[ " $steps " != *" tests "* ]]; then
    [ -x "$bin/h3_backend_ops" ] && run ops_vsa 90 "$bin/h3_backend_ops" --gtest_filter='*vsa*:*Vsa*'
    [ -x "$bin/h3_gpu_tests" ] && run gpu_vsa 120 "$bin/h3_gpu_tests" --gtest_filter='*Vsa*'
  fi
  run vsa_64 120 "$bin/h3" bench vsa
  cat "$out/vsa_64.log" >>"$summary"
  run vsa_256 120 "$bin/h3" bench vsa --tile 256 --no-dense
  grep -E "whole op|fine branch" "$out/vsa_256.log" | sed 's/^/tile 256: /' >>"$summary"
  i=0
  for e in ${H3_VSA_ENVS:-}; do
    i=$((i + 1))
    for t in 64 256; do
      env ${e//,/ } "$bin/h3" bench vsa --tile $t --no-dense >"$out/vsa_env$i-$t.log" 2>&1
      grep -E "whole op|fine branch" "$out/vsa_env$i-$t.log" | sed "s/^/tile $t $e: /" | tee -a "$summary"
    done
  done
fi
# A Nsight Compute profile of the VSA fine kernel at the production shape (H3_NCU=1, when ncu is
# installed): pipe utilization, shared-memory traffic and warp stall reasons.
if [[ " $steps " == *" vsa "* ]] && [ "${H3_NCU:-0}" = 1 ]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
  if [ -n "$ncu_bin" ]; then
    for t in 64 256; do
      timeout 300 "$ncu_bin" --kernel-name regex:vsa_hopper --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section Occupancy \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio" \
        "$bin/h3" bench vsa --tile $t --iters 1 --warmup 0 --no-dense >"$out/ncu_$t.log" 2>&1
      note "ncu tile $t: rc=$? ($(wc -l <"$out/ncu_$t.log") lines)"
    done
  else
    note "ncu: not installed here"
  fi
fi
# Weight loading: a synthetic DiT-width file of 12+ GB, cold and warm (H3_LOAD_FILE to reuse one).
if [[ " $steps " == *" load "* ]] && [ -x "$bin/h3" ] && "$bin/h3" bench load --help >/dev/null 2>&1; then
  run bench_load 420 "$bin/h3" bench load --file "${H3_LOAD_FILE:-/tmp/h3-load-bench.safetensors}"
  cat "$out/bench_load.log" >>"$summary"
fi
if [[ " $steps " == *" sanitize "* ]]; then
  if command -v compute-sanitizer >/dev/null 2>&1; then
    san=$(command -v compute-sanitizer)
    # H3_MEMCHECK_OPS narrows the backend-ops cases (a gtest filter), e.g. to the new ones.
    run memcheck 200 "$san" --tool memcheck --error-exitcode 9 "$bin/h3_backend_ops" \
      --gtest_filter="${H3_MEMCHECK_OPS:-*Cuda*}"
    run racecheck 150 "$san" --tool racecheck --error-exitcode 9 "$bin/h3_gpu_tests" \
      --gtest_filter='CudaAttention.StridedQkvViewsMatchContiguous:CudaFusion.QkNormRopeSwitchRestoresPlainPath'
    # CUDA graphs, the audio VAE's device load and LoRA on the device. The test of a capture that must fail provokes
    # CUDA API errors on purpose, which memcheck reports: it is left out here.
    run memcheck_graphs 150 "$san" --tool memcheck --error-exitcode 9 "$bin/h3_gpu_tests" \
      --gtest_filter='GpuCudaGraph.*:GpuDitGraph.*:GpuAudioVaeLoad.*:GpuLora.*:-GpuCudaGraph.UncapturableWorkFailsTheCaptureCleanly'
  else
    note "compute-sanitizer: not installed here"
  fi
fi

if [[ " $steps " == *" variants "* ]]; then
  vout=/tmp/h3-golden-resized
  if [ -z "${H3_GOLDEN_DIR:-}" ] || ! python3 -c 'import torch, numpy' 2>/dev/null; then
    note "variants: skipped (no staged golden folder, or no python3 with torch and numpy)"
  else
    rm -rf "$vout"
    H3_ANCHOR_DIR=${H3_ANCHOR_DIR:-$here/../.device-anchor} timeout 400 \
      python3 "$here/../tests/golden/make_resized.py" "$H3_GOLDEN_DIR" "$vout" >"$out/variants_make.log" 2>&1
    note "variants: make_resized.py rc=$? ($(grep -c '^wrote' "$out/variants_make.log") folders)"
    for d in "$vout"/*/; do
      [ -f "$d/manifest.json" ] || continue
      n=$(basename "$d")
      H3_GOLDEN_DIR=$d run "golden_$n" 300 "$bin/h3_golden_tests"
      H3_GOLDEN_DIR=$d run "gpu_$n" 420 "$bin/h3_gpu_tests" --gtest_filter='-AttentionBench.*'
    done
  fi
fi

echo "logs in $out"
