#!/usr/bin/env bash
# Builds h3 and its test binaries here for the GPU machine (sm_90a; no FFmpeg, no OpenBLAS and no
# HTTP server, whose libraries that machine lacks; PCRE2 and utf8proc linked statically, since that
# machine lacks their shared libraries) and stages
# them, with device_run.sh, in .device/ (git-ignored). Then, on the GPU machine:
#   bash .device/device_run.sh
# Environment: H3_DEVICE_BUILD_DIR (default build-device), H3_JOBS (default 2), H3_DEVICE_TARGETS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${H3_DEVICE_BUILD_DIR:-$root/build-device}
case "$build" in /*) ;; *) build=$root/$build ;; esac
stage=$root/.device

# ccache, when installed, keeps rebuilds after small changes short (the CUDA sources dominate).
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3_CUDA=ON -DH3_FFMPEG=OFF \
  -DH3_OPENBLAS=OFF -DH3_SERVE=OFF -DH3_STATIC_DEPS=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DH3_WERROR=ON \
  "${launcher[@]}" >/dev/null

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

# Golden data for the GPU parity tests: the manifest cut down to the kinds in H3_DEVICE_GOLDEN
# ("all", the default, keeps every kind), those files, and the checkpoint components they need
# (the GPU machine has no shared/ folder). H3_DEVICE_GOLDEN_COMPONENTS names the checkpoint
# folders to copy ("all", the default, copies every one).
golden=${H3_GOLDEN_DIR:-$root/../shared/golden}
if [ -f "$golden/manifest.json" ]; then
  python3 - "$golden" "$stage/golden" "${H3_DEVICE_GOLDEN:-all}" \
    "${H3_DEVICE_GOLDEN_COMPONENTS:-all}" <<'PY'
import json, os, shutil, sys
src, dst, kinds, comps = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
m = json.load(open(os.path.join(src, "manifest.json")))
if kinds == ["all"]:
    kinds = sorted({f.get("kind") for f in m["files"]} | {"vsa"})
keep = [f for f in m["files"] if f.get("kind") in kinds]
for f in keep:
    os.makedirs(os.path.dirname(os.path.join(dst, f["file"])), exist_ok=True)
    shutil.copy(os.path.join(src, f["file"]), os.path.join(dst, f["file"]))
ck = m["checkpoint"]
os.makedirs(os.path.join(dst, ck), exist_ok=True)
for name in os.listdir(os.path.join(src, ck)):
    p = os.path.join(src, ck, name)
    if os.path.isfile(p):
        shutil.copy(p, os.path.join(dst, ck, name))
    elif name in comps or comps == ["all"]:
        shutil.copytree(p, os.path.join(dst, ck, name), dirs_exist_ok=True)
if "vsa" in kinds and os.path.isdir(os.path.join(src, "vsa")):
    shutil.copytree(os.path.join(src, "vsa"), os.path.join(dst, "vsa"), dirs_exist_ok=True)
m["files"] = keep
json.dump(m, open(os.path.join(dst, "manifest.json"), "w"))
print("device_build: staged %d golden files of kinds %s" % (len(keep), kinds))
PY
fi

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
ls -la "$stage/bin"
# The working tree that travels to the GPU machine is limited in size: the static binaries
# compress about 5x, so they travel packed and device_run.sh unpacks them.
tar -C "$stage" -cJf "$stage/bin.tar.xz" bin && rm -rf "$stage/bin"
du -sh "$stage" "$stage"/*
