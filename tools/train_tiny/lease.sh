#!/usr/bin/env bash
# One lease of DiT training on the GPU machine: resumes the kept DiT (parts/dit) on clips it has
# not seen, exports the repository and evaluates it there (`h3 eval tiny --device cuda`, 12 and 48
# cases). Run from the working tree's root, with the device build (scripts/device_build.sh:
# .device/bin.tar.xz) and the anchor (.device-anchor) carried:
#
#   bash tools/train_tiny/lease.sh                      # starts the run, follows it ~540 s
#   bash tools/train_tiny/run_device_bg.sh wait         # the next calls, each within the idle
#   bash tools/train_tiny/run_device_bg.sh collect      #   release
#
# The run lives under /tmp (REPO /tmp/tiny-src, WORK /tmp/h3-train-work), where a later call's
# copy of the working tree cannot replace it. Environment:
#   DIT        the DiT folder to resume (default parts/dit); a run kept for its training but not
#              shipped lives in an ignored folder the call carries, such as .device-dit-next/dit
#   DATA_SEED  default one past the highest data seed in DIT's log.json: every run sees fresh clips
#   SEED       default DATA_SEED
#   TIME_DIT   seconds, default 800; STEPS_DIT, default 6000
#   EXTRA      train.py flags; default the kept DiT's: bf16 weights, torch.compile, half the
#              micro-batches uniform in sigma
#   WAIT       seconds to follow the run in this call, default 540
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD
parts=tools/train_tiny/parts
dit=${DIT:-$parts/dit}
[ -f .device/bin.tar.xz ] || { echo "lease.sh: no .device/bin.tar.xz (scripts/device_build.sh)" >&2; exit 2; }
[ -f .device-anchor/dmin.tar.xz ] || { echo "lease.sh: no .device-anchor (copy ../shared/anchor)" >&2; exit 2; }
[ -f "$dit/model.safetensors" ] || { echo "lease.sh: no DiT to resume in '$dit'" >&2; exit 2; }
[ -x .device/bin/h3 ] || tar -C .device -xJf .device/bin.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader

if [ -z "${DATA_SEED:-}" ]; then
  DATA_SEED=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(1 + max(r.get("data_seed", 0) for r in d.get("earlier_runs", []) + [d]))' "$dit/log.json")
fi
work=/tmp/h3-train-work
rm -rf "$work"
mkdir -p "$work/parts"
cp -r "$parts/vae" "$parts/audio_vae" "$work/parts/"
cp -r "$dit" "$work/parts/dit"
echo "lease.sh: data seed $DATA_SEED, seed ${SEED:-$DATA_SEED}, ${TIME_DIT:-800} s or ${STEPS_DIT:-6000} steps"
export DATA_SEED
H3_BIN=$R/.device/bin/h3 SEED=${SEED:-$DATA_SEED} TIME_DIT=${TIME_DIT:-800} \
  STEPS_DIT=${STEPS_DIT:-6000} ANCHOR=$R/.device-anchor \
  EXTRA=${EXTRA:---precision bf16-weights --compile --low-noise-share 0.5 --resume --warmup 50} \
  WAIT=${WAIT:-540} bash tools/train_tiny/run_device_bg.sh start \
  /tmp/tiny-src "$R/$parts/features" "$work" dit export
