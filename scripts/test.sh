#!/usr/bin/env bash
# Builds h3.cpp and runs every test tier that works on this machine (CPU always; CUDA cases skip
# visibly without a GPU). Usage: scripts/test.sh [--sanitize] [build-dir]
#   --sanitize   CPU-only build under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=""
if [[ "${1:-}" == "--sanitize" ]]; then
  sanitize="address,undefined"
  shift
fi
build="${1:-build}"
[[ -n "$sanitize" && "$build" == "build" ]] && build="build-asan"

if [[ -d /usr/local/cuda/bin && ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

jobs=$(nproc)
args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DH3_WERROR=ON)
if [[ -n "$sanitize" ]]; then
  # -O1 -g1: the sanitizers' own advice, and half the compile time of -O2 -g on two cores (the
  # instrumented build was the longest stage of CI); -g1 keeps the line tables the reports need.
  args+=(-DH3_SANITIZE="$sanitize" -DH3_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
         "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi

start=$(date +%s)
cmake -S . -B "$build" "${args[@]}"
build=$(cd "$build" && pwd)

# The gtest tiers run as shards, a few processes (scripts/gtest_shards.sh), not one process per
# test as ctest runs them: a process start costs about half a CPU-second here (the loader, OpenBLAS
# starting its threads; under the sanitizers the shadow memory and the leak scan too), which over
# the ~1,300 tests was most of the tiers' time. ctest runs the rest: the Python checks, and the
# trained tiny model's quality check (TinyModelQuality: three `h3 eval tiny` runs, several minutes
# each and mostly on one core), in the background beside the shards.
tiers=()
for t in h3_unit_tests h3_backend_ops h3_golden_tests h3_gpu_tests h3_pipeline_tests; do
  # Under the sanitizers (a CPU-only build) not the `gpu` tier, whose every case skips without
  # CUDA; the Release build compiles and runs it.
  [[ -n "$sanitize" && "$t" == h3_gpu_tests ]] && continue
  if cmake --build "$build" --target help | grep -q "^$t:"; then tiers+=("$t"); fi
done
if [[ -n "$sanitize" ]]; then
  cmake --build "$build" -j "$jobs" --target h3 "${tiers[@]}"
else
  cmake --build "$build" -j "$jobs"
fi
echo "test.sh: build took $(( $(date +%s) - start )) s"

logs="$build/test-logs"
rm -rf "$logs"
mkdir -p "$logs"
ctest_pid=""
if [[ -z "$sanitize" ]]; then
  ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 900 \
    -R '^TinyModelQuality[.]|Python$' > "$logs/ctest.log" 2>&1 &
  ctest_pid=$!
fi
# The shards leave TinyModelQuality to ctest above; under the sanitizers it does not run at all: it
# judges what the model draws (27 CPU generations, several minutes here, several times that
# instrumented), and the code it runs is the generation and evaluation the golden end-to-end and
# TinyEvalCli tests run.
failed=()
for t in "${tiers[@]}"; do
  H3_BIN="$build/h3" scripts/gtest_shards.sh "$build/tests/$t" "$logs/$t.log" \
    --gtest_filter='-TinyModelQuality.*' || failed+=("$t")
done
if [[ -n "$ctest_pid" ]]; then
  ctest_status=0
  wait "$ctest_pid" || ctest_status=$?
  cat "$logs/ctest.log"
  (( ctest_status == 0 )) || failed+=("ctest")
fi
echo "test.sh: total $(( $(date +%s) - start )) s"
if (( ${#failed[@]} )); then
  echo "test.sh: FAILED: ${failed[*]} (logs in $logs)" >&2
  exit 1
fi
