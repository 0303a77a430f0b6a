#!/usr/bin/env bash
# Runs run_device.sh in the background on the GPU machine, so that one training run can outlast a
# command's time limit: the machine stays leased while calls follow each other within its idle
# release, and a background process lives as long as the lease.
#
#   run_device_bg.sh start REPO FEATURES_DIR WORK PART...
#       starts `run_device.sh REPO FEATURES_DIR WORK PART...` (its environment passed on), then
#       follows its progress for WAIT seconds (default 60). With H3_BIN set and no REPO folder,
#       REPO is written first: `h3 make-tiny REPO --seed 0 --vae-spatial-ratio 4
#       --text-context-scale 0` (parts/README.md: the repository the kept parts start from).
#   run_device_bg.sh wait
#       follows the progress for WAIT seconds (default 540), or until the run ends.
#   run_device_bg.sh limit PART SECONDS
#       replaces the running part's time limit (seconds from its start; train.py
#       --time-budget-file): a lease found shorter than planned still ends with the learning rate
#       decayed, the weights exported and evaluated. Then follows the progress like `wait`.
#   run_device_bg.sh collect
#       waits up to WAIT seconds (default 540) for the end, then packs what a resumed DiT needs
#       to come back (the exported repository, WORK's logs, PROVENANCE.md, the GPU evaluations,
#       parts/dit without its weights, which repo/transformer holds) into $OUT/result.tar.xz.*
#       (15 MiB pieces): the full WORK (about 80 MB, the VAEs twice) need not come back.
#
# Each mode prints the progress log's new lines and, once the run has ended, its exit status.
# REPO and WORK belong outside the working tree (under /tmp): every call copies the tree again,
# and a folder a call carries replaces the machine's copy with what the run wrote there.
set -uo pipefail
state=/tmp/h3-train-bg
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-}
shift || true

follow() {  # follow SECONDS: prints the log's new lines until SECONDS pass or the run ends
  local limit=$1 start=$SECONDS shown=-60 seen
  seen=$(cat "$state/seen" 2>/dev/null || echo 0)
  while :; do
    local lines
    lines=$(wc -l <"$state/run.log")
    if ((lines > seen)); then
      # Every 50th step's loss would crowd out the validations: the latest, once a minute.
      sed -n "$((seen + 1)),${lines}p" "$state/run.log" | grep -v "dit step " | tail -40
      if ((SECONDS - shown >= 60)); then
        sed -n "$((seen + 1)),${lines}p" "$state/run.log" | grep "dit step " | tail -1
        shown=$SECONDS
      fi
      seen=$lines
      echo "$seen" >"$state/seen"
    fi
    if [ -f "$state/rc" ]; then
      echo "run ended: rc=$(cat "$state/rc") after $(($(date +%s) - $(cat "$state/started"))) s"
      return 0
    fi
    ((SECONDS - start >= limit)) && break
    sleep 5
  done
  echo "still running: $(($(date +%s) - $(cat "$state/started"))) s; last line: $(tail -1 "$state/run.log")"
  return 1
}

case $mode in
  start)
    [ $# -ge 4 ] || { sed -n '5,10p' "$0" >&2; exit 2; }
    if [ -f "$state/pid" ] && [ ! -f "$state/rc" ]; then
      echo "a run is already going (pid $(cat "$state/pid"))" >&2
      exit 1
    fi
    rm -rf "$state"
    mkdir -p "$state/out"
    repo=$1
    if [ ! -d "$repo" ]; then
      [ -n "${H3_BIN:-}" ] || { echo "no repository $repo and no H3_BIN to write one" >&2; exit 2; }
      "$H3_BIN" make-tiny "$repo" --seed 0 --vae-spatial-ratio 4 --text-context-scale 0 >/dev/null || exit 1
    fi
    echo "$3" >"$state/work"
    date +%s >"$state/started"
    # setsid: the run must not belong to this call's process group, which ends with the call.
    OUT=$state/out setsid nohup bash -c "bash '$here/run_device.sh' $(printf '%q ' "$@") >'$state/run.log' 2>&1; \
      echo \$? >'$state/rc'" </dev/null >/dev/null 2>&1 &
    echo $! >"$state/pid"
    sleep 1
    follow "${WAIT:-60}" || true
    ;;
  wait)
    [ -f "$state/pid" ] || { echo "no run started" >&2; exit 1; }
    follow "${WAIT:-540}" || true
    ;;
  limit)
    [ -f "$state/pid" ] || { echo "no run started" >&2; exit 1; }
    [[ $# -eq 2 && ${2:-} =~ ^[0-9]+$ ]] || { echo "limit needs PART SECONDS, got: $*" >&2; exit 2; }
    echo "$2" >"$(cat "$state/work")/time-limit.$1"
    echo "time limit of $1: $2 s from its start"
    follow "${WAIT:-540}" || true
    ;;
  collect)
    [ -f "$state/pid" ] || { echo "no run started" >&2; exit 1; }
    follow "${WAIT:-540}" || exit 1
    work=$(cat "$state/work")
    [ -n "${OUT:-}" ] || { echo "collect needs OUT" >&2; exit 2; }
    items=()
    for p in repo PROVENANCE.md training.json parts/dit/config.json parts/dit/log.json \
      parts/dit/samples.png; do
      [ -e "$work/$p" ] && items+=("$p")
    done
    for p in "$work"/*.log "$work"/eval-gpu-*.json; do
      [ -e "$p" ] && items+=("${p#"$work"/}")
    done
    cp "$state/run.log" "$OUT/run.log"
    tar -cJf - -C "$work" "${items[@]}" | split -b 15m - "$OUT/result.tar.xz."
    ls -la "$OUT"
    exit "$(cat "$state/rc")"
    ;;
  *)
    sed -n '2,21p' "$0" >&2
    exit 2
    ;;
esac
