#!/usr/bin/env bash
# A --smoke run of training parts on this machine's CPU, before GPU time is spent on them: the same
# train.py, the reference's modules, a handful of steps on tiny batches, in float32.
#
#   tools/train_tiny/cpu_check/run.sh REPO FEATURES_DIR WORK [PART...]
#
# REPO, FEATURES_DIR and WORK as for run_device.sh; PART defaults to vae audio_vae dit export.
# Needs a python3 with torch and numpy (Debian: apt install python3-torch); what an older torch or a
# machine without the Hub client or safetensors lacks comes from torch_compat.py and standins/ (the
# installed packages win where they exist). ANCHOR (default .device-anchor) holds dmin.tar.xz; EXTRA
# holds more train.py flags for every part, as for run_device.sh.
# About three minutes on two cores.
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
REPO=$1 FEATURES=$2 WORK=$3
shift 3
PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=(vae audio_vae dit export)
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
ANCHOR=${ANCHOR:-.device-anchor}
PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch, numpy' 2>/dev/null; then PYTHON=$p; break; fi
  done
fi
[ -n "$PYTHON" ] || { echo "cpu_check: no python3 with torch and numpy (apt install python3-torch)" >&2; exit 2; }
REF=${TMPDIR:-/tmp}/h3-ref-cpu
if [ ! -d "$REF/dmin/diffusers" ]; then
  mkdir -p "$REF"
  tar -xJf "$ANCHOR/dmin.tar.xz" -C "$REF"
fi
export H3_REF_DIR=$REF/dmin H3_ANCHOR_DIR=$ANCHOR
DATA=${TMPDIR:-/tmp}/h3-tiny-data-cpu
# train.py, after torch_compat and with standins/ behind the installed packages.
train() {
  "$PYTHON" -c 'import runpy, sys
sys.path.insert(0, sys.argv[1]); sys.path.append(sys.argv[1] + "/standins")
import torch_compat  # noqa: F401
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$HERE" tools/train_tiny/train.py "$@"
}
train data --data "$DATA" --count 128 --data-seed 0
cp "$FEATURES/prompts.json" "$FEATURES/prompt_features.safetensors" "$DATA/"
mkdir -p "$WORK"
for part in "${PARTS[@]}"; do
  echo "=== $part (smoke, cpu) ==="
  train "$part" --repo "$REPO" --data "$DATA" --out "$WORK" --steps 4 --seed 0 --smoke --device cpu \
    --anchor "$ANCHOR" ${EXTRA:-} 2>&1 | tee "$WORK/$part.log"
done
