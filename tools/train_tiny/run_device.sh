#!/usr/bin/env bash
# Runs tiny-model training parts on the GPU machine and copies the results to $OUT.
#
#   tools/train_tiny/run_device.sh REPO FEATURES_DIR WORK PART...
#
# REPO          the `h3 make-tiny` repository (carried from this machine)
# FEATURES_DIR  holds prompts.json and prompt_features.safetensors (README.md, "Prompt features")
# WORK          the work folder (parts/<part>/ of earlier runs are reused: carry it back in)
# PART          vae | audio_vae | dit | export, in order
#
# Environment: STEPS_VAE, STEPS_AUDIO, STEPS_DIT (step counts), TIME_VAE, TIME_AUDIO, TIME_DIT
# (seconds: each part's --time-budget, 0 = none), SEED (default 0), SMOKE=1 (a few
# steps per part), COUNT (training clips, default 6000), DATA_SEED (the clip stream's seed,
# default 0: a resumed DiT sees fresh clips with another), ANCHOR (default .device-anchor), EXTRA
# (more train.py flags for every part). The anchor's packed diffusers sources are unpacked into
# /tmp/h3-ref as its bench_ref.py does; the clips are rendered into /tmp/h3-tiny-data once per
# machine. WORK (without the repository copy of an unfinished export) goes to $OUT/train-tiny.tar
# (split into train-tiny.tar.aa, .ab, ...: the machine's return path drops deep folders and
# large files; `cat train-tiny.tar.* | tar -x` joins them). With H3_BIN set to an h3 binary,
# an exported repository is then evaluated on the GPU (`h3 eval tiny --device cuda`).
#
# A call that runs past its time limit loses what was not copied out, and the machine keeps
# nothing between leases: so WORK is packed into $OUT again after every finished part, and each
# part's log is appended to $OUT/progress.log as it is written. Budget a call as the parts' time
# limits plus about 40 s per part (imports, loading and encoding the clips, the held-out checks)
# plus 35 s for the clips on a fresh machine.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,14p' "$0" >&2
  exit 2
fi
REPO=$1 FEATURES=$2 WORK=$3
shift 3
cd "$(dirname "$0")/../.."
ANCHOR=${ANCHOR:-.device-anchor}
SEED=${SEED:-0}
DATA=/tmp/h3-tiny-data
SMOKE_FLAG=""
[ "${SMOKE:-0}" = 1 ] && SMOKE_FLAG=--smoke

if [ ! -d /tmp/h3-ref/dmin/diffusers ]; then
  mkdir -p /tmp/h3-ref
  tar -xJf "$ANCHOR/dmin.tar.xz" -C /tmp/h3-ref
fi
export H3_REF_DIR=/tmp/h3-ref/dmin H3_ANCHOR_DIR=$ANCHOR

nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
python3 -c 'import numpy, safetensors, torch; print("torch", torch.__version__, "numpy", numpy.__version__, "cuda", torch.cuda.is_available())'

COUNT=${COUNT:-6000}
[ -n "$SMOKE_FLAG" ] && COUNT=${COUNT_SMOKE:-128}
python3 tools/train_tiny/train.py data --data "$DATA" --count "$COUNT" --data-seed "${DATA_SEED:-0}"
cp "$FEATURES/prompts.json" "$FEATURES/prompt_features.safetensors" "$DATA/"

mkdir -p "$WORK"
# WORK (without the repository copy of an unfinished export) into $OUT, replacing the last copy.
pack() {
  [ -n "${OUT:-}" ] || return 0
  rm -f "$OUT"/train-tiny.tar.*
  # In 15 MiB pieces: the machine's return path takes files of at most 16 MiB.
  tar -cf - --exclude=./repo.tmp -C "$WORK" . | split -b 15m - "$OUT/train-tiny.tar."
}
progress=/dev/null
[ -n "${OUT:-}" ] && progress=$OUT/progress.log
status=0
for part in "$@"; do
  case $part in
    vae) steps=${STEPS_VAE:-3000} budget=${TIME_VAE:-0} ;;
    audio_vae) steps=${STEPS_AUDIO:-3000} budget=${TIME_AUDIO:-0} ;;
    dit) steps=${STEPS_DIT:-6000} budget=${TIME_DIT:-0} ;;
    export) steps=0 budget=0 ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  echo "=== $part ($steps steps, seed $SEED) ==="
  # shellcheck disable=SC2086
  if ! python3 tools/train_tiny/train.py "$part" --repo "$REPO" --data "$DATA" --out "$WORK" \
      --steps "$steps" --time-budget "$budget" --time-budget-file "$WORK/time-limit.$part" \
      --seed "$SEED" $SMOKE_FLAG ${EXTRA:-} 2>&1 |
      tee "$WORK/$part.log" | tee -a "$progress"; then
    status=1
    break
  fi
  pack
done

if [ $status = 0 ] && [ -n "${H3_BIN:-}" ] && [ -d "$WORK/repo" ]; then
  for cases in 12 48; do
    "$H3_BIN" eval tiny --model "$WORK/repo" --device cuda --cases $cases --json | tee "$WORK/eval-gpu-$cases.json" || status=1
  done
fi

if [ -n "${OUT:-}" ]; then
  pack
  du -sh "$WORK"/* "$OUT"/train-tiny.tar.* || true
fi
exit $status
