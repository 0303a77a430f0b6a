#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/fuzz_*.cpp) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in its own build folder, then runs each target for an equal share of
# a total time budget. Exits non-zero when a target fails to build or a run finds a crash.
#
# Usage: scripts/fuzz.sh [total_seconds (default 60)] [build_folder (default build-fuzz)]
# Env:   H3_FUZZ_JOBS  build parallelism (default 2)
#        H3_FUZZ_ARGS  extra libFuzzer flags for every run (e.g. "-jobs=2")
#
# Seeds come from tests/fuzz/corpus/<target>/ and stay untouched: new inputs go to a working corpus
# in the build folder, crashing inputs to <build>/fuzz-artifacts/<target>/ (reproduce with
# `<build>/tests/fuzz/<target> <crash file>`).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
budget=${1:-60}
build=${2:-$root/build-fuzz}
jobs=${H3_FUZZ_JOBS:-2}
if ! [[ "$budget" =~ ^[0-9]+$ ]] || [ "$budget" -lt 1 ]; then
  echo "fuzz.sh: total_seconds must be a positive integer, got '$budget'" >&2
  exit 2
fi
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (libFuzzer needs clang)" >&2; exit 2; }

targets=()
for src in "$root"/tests/fuzz/fuzz_*.cpp; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .cpp)
  targets+=("$name")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz.sh: no tests/fuzz/fuzz_*.cpp found" >&2
  exit 2
fi

cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DH3_FUZZ=ON -DH3_TESTS=ON -DH3_CUDA=OFF -DH3_SANITIZE=address,undefined >/dev/null
cmake --build "$build" --target "${targets[@]}" -j "$jobs"

per=$((budget / ${#targets[@]}))
[ "$per" -ge 1 ] || per=1
failed=()
for name in "${targets[@]}"; do
  work="$build/fuzz-corpus/$name"
  artifacts="$build/fuzz-artifacts/$name/"
  mkdir -p "$work" "$artifacts"
  args=(-max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$artifacts")
  [ -f "$root/tests/fuzz/$name.dict" ] && args+=(-dict="$root/tests/fuzz/$name.dict")
  dirs=("$work")
  [ -d "$root/tests/fuzz/corpus/$name" ] && dirs+=("$root/tests/fuzz/corpus/$name")
  echo "== $name: ${per}s"
  # shellcheck disable=SC2086  # H3_FUZZ_ARGS is a list of flags
  if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$build/tests/fuzz/$name" "${args[@]}" ${H3_FUZZ_ARGS:-} "${dirs[@]}"; then
    echo "== $name: no crash in ${per}s"
  else
    echo "== $name: FAILED (inputs in $artifacts)" >&2
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: ${#failed[@]} of ${#targets[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} target(s) ran ${per}s each without a crash"
