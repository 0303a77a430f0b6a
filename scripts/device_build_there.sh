#!/usr/bin/env bash
# Builds h3 on the GPU machine itself (16 cores there, 2 here): for a run whose binaries were not
# built here beforehand (scripts/device_build.sh is the usual way). That machine has no package
# registry, so the headers and static libraries come along as Debian packages in .device-debs/
# (made here: ../shared/device/fetch-debs.sh .device-debs libutf8proc-dev libstb-dev) and are
# unpacked into a prefix. Stages .device/bin/h3 as device_build.sh does; the build folder is
# git-ignored and stays for the next call while the machine is held.
# Usage there: bash scripts/device_build_there.sh [target ...]   (default: h3)
# Environment: H3_THERE_BUILD_DIR (default build-there), H3_THERE_PREFIX (default /tmp/h3-deps).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${H3_THERE_BUILD_DIR:-$root/build-there}
prefix=${H3_THERE_PREFIX:-/tmp/h3-deps}
debs=$root/.device-debs
ls "$debs"/*.deb > /dev/null 2>&1 ||
  { echo "device_build_there.sh: no .deb files in $debs" >&2; exit 2; }

mkdir -p "$prefix"
for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix"; done
# The packages' pkg-config files name /usr; point them at the prefix they now live in.
find "$prefix" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$prefix/usr|" {} +

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3_CUDA=ON -DH3_FFMPEG=OFF \
  -DH3_OPENBLAS=OFF -DH3_SERVE=OFF -DH3_STATIC_DEPS=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu" >/dev/null
targets=("${@:-h3}")
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
mkdir -p "$root/.device/bin"
for t in "${targets[@]}"; do
  for f in "$build/$t" "$build/tests/$t"; do
    if [ -x "$f" ]; then cp "$f" "$root/.device/bin/"; fi
  done
done
ls -la "$root/.device/bin"
