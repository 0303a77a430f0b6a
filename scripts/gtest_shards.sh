#!/usr/bin/env bash
# Runs one gtest executable as shards, two processes per core (at most 8, a BLAS thread each), and
# prints a summary: how many passed, each skip with its reason, and the failures' lines.
# One process per shard rather than per test (ctest's way): under the sanitizers a process start
# costs about half a CPU-second (the loader's 2 million relocations, the shadow memory, the leak
# scan at exit), which over the ~1,300 tests was half of the sanitizer tier's time on two cores.
# Usage: scripts/gtest_shards.sh <executable> <log> [gtest flag ...]
#   <log>.<shard> keeps each shard's output, <log> all of them. Exit status 0 when every shard
#   passed. H3_SHARD_TIMEOUT (seconds, default 3000) bounds a shard, so a hang fails, not stalls.
set -euo pipefail
bin="$1"
log="$2"
shift 2
[[ -x "$bin" ]] || { echo "gtest_shards.sh: $bin is not an executable" >&2; exit 2; }

# Two shards a core: gtest deals the tests round robin, and the golden tier's few long cases made
# one of two shards run minutes past the other (under the sanitizers, 3 of 5.5 minutes).
jobs=$(( 2 * $(nproc) ))
(( jobs > 8 )) && jobs=8
pids=()
for (( i = 0; i < jobs; ++i )); do
  OPENBLAS_NUM_THREADS=1 GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i \
    timeout "${H3_SHARD_TIMEOUT:-3000}" "$bin" --gtest_color=no "$@" > "$log.$i" 2>&1 &
  pids+=($!)
done
status=0
for (( i = 0; i < jobs; ++i )); do
  wait "${pids[$i]}" || { status=1; echo "   shard $i of $(basename "$bin") exited non-zero"; }
done
cat "$log".* > "$log"
passed=$(grep -c '^\[       OK \]' "$log" || true)
skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z].*(' "$log" || true)
nfailed=$(grep -c '^\[  FAILED  \] [A-Za-z].*(' "$log" || true)
echo "== $(basename "$bin"): $passed passed, $skipped skipped, $nfailed failed"
# The skips, each with its reason (the line before gtest's SKIPPED line holds the message).
grep -B1 '^\[  SKIPPED \] [A-Za-z].*(' "$log" | grep -v '^--$' | paste - - |
  sed -E 's/^(.*)\t\[  SKIPPED \] ([^ ]+).*/   skipped \2: \1/' | cut -c1-240 || true
if (( status != 0 )); then
  # A sanitizer report ends its shard: show its head too, not only gtest's failure lines.
  grep -E '^\[  FAILED  \] [A-Za-z].*\(|Failure|error:|ERROR: (Address|Leak)Sanitizer|runtime error:' \
    "$log" | head -40 || true
  for (( i = 0; i < jobs; ++i )); do
    if ! grep -q '^\[  PASSED  \]' "$log.$i"; then
      echo "   --- the last lines of shard $i:"
      tail -30 "$log.$i"
    fi
  done
fi
exit "$status"
