#!/usr/bin/env bash
# The open speed issues' figures on one H200 in one call, with the reference timed beside them
# (bench/RESULTS.md): a dense and a FastH3 (VSA 0.9, tile 64) DiT block in bf16 and FP8, the FP8
# GEMMs at the DiT's shapes, the video VAE decode in f16 and FP8, then the reference's DiT block
# and VAE decode. Run from the working tree's root on the GPU machine with the device build
# (.device/bin.tar.xz) and the anchor (.device-anchor) carried. Each step has its own time limit,
# so one that hangs costs only itself.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x .device/bin/h3 ] || tar -C .device -xJf .device/bin.tar.xz || exit 2
h3=.device/bin/h3
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
step() {  # step SECONDS ARGS...: one timed step, its output and exit status
  local limit=$1
  shift
  echo "=== $* ($(date -u +%H:%M:%S))"
  timeout "$limit" "$@" 2>&1 | tail -${TAIL:-25}
  echo "=== rc=${PIPESTATUS[0]}"
}
step 90 $h3 bench dit --blocks 2 --iters 3
step 90 $h3 bench dit --blocks 2 --iters 3 --attention vsa --vsa-sparsity 0.9 --vsa-tile 64
step 90 $h3 bench dit --blocks 2 --iters 3 --attention vsa --vsa-sparsity 0.9 --vsa-tile 64 --dit-dtype fp8
step 60 $h3 bench fp8
step 120 $h3 bench vae --repeat 2 --warmup 1
step 120 $h3 bench vae --repeat 2 --warmup 1 --vae-dtype fp8
[ -f .device-anchor/bench_ref.py ] && TAIL=12 step 150 python3 .device-anchor/bench_ref.py dit vae
