#!/usr/bin/env bash
# Builds h3 and its test binaries here for the GPU machine (sm_90a; no FFmpeg, no OpenBLAS; PCRE2
# and utf8proc linked statically, since that machine lacks their shared libraries) and stages
# them, with device_run.sh, in .device/ (git-ignored). Then, on the GPU machine:
#   bash .device/device_run.sh
# Environment: H3_DEVICE_BUILD_DIR (default build-device), H3_JOBS (default 2), H3_DEVICE_TARGETS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${H3_DEVICE_BUILD_DIR:-$root/build-device}
case "$build" in /*) ;; *) build=$root/$build ;; esac
stage=$root/.device

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3_CUDA=ON -DH3_FFMPEG=OFF \
  -DH3_OPENBLAS=OFF -DH3_STATIC_DEPS=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DH3_WERROR=ON >/dev/null

# Only the test tiers that exist (a tier without sources has no target).
# H3_DEVICE_TARGETS (space separated) narrows the tiers, e.g. "h3_backend_ops h3_gpu_tests".
targets=(h3)
for t in ${H3_DEVICE_TARGETS:-h3_unit_tests h3_backend_ops h3_gpu_tests h3_golden_tests h3_pipeline_tests}; do
  if cmake --build "$build" --target help | grep -q "^$t:"; then targets+=("$t"); fi
done
cmake --build "$build" -j"${H3_JOBS:-2}" --target "${targets[@]}"

rm -rf "$stage"
mkdir -p "$stage/bin"
for t in "${targets[@]}"; do
  for f in "$build/$t" "$build/tests/$t"; do
    if [ -x "$f" ]; then cp "$f" "$stage/bin/"; fi
  done
done
cp "$root/scripts/device_run.sh" "$stage/"

# The GPU machine has glibc, libstdc++ and the CUDA toolkit's cudart/cuBLAS(Lt); anything else
# would fail to load there.
allowed='linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so|libcudart|libcublasLt|libcublas\.so'
bad=0
for f in "$stage"/bin/*; do
  extra=$(ldd "$f" | awk '{print $1}' | grep -Ev "$allowed" || true)
  if [ -n "$extra" ]; then
    echo "device_build: $(basename "$f") needs libraries the GPU machine lacks: $extra" >&2
    bad=1
  fi
done
[ "$bad" = 0 ] || exit 1
du -sh "$stage"
ls -la "$stage/bin"
