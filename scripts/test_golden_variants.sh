#!/usr/bin/env bash
# Runs the golden tier against variants of the golden folder, written to a temporary folder by
# tests/golden/make_variants.py: cases and references in another order, optional kinds and tensors
# absent, the DiT trimmed to 2 blocks, a VSA top-k near tie, and (where torch is installed) the
# component cases recomputed by the reference at other model sizes. The tests must take everything
# from the manifest: each variant has to pass, and what a variant lacks must be a visible skip.
# Usage: scripts/test_golden_variants.sh [build-dir] [variant ...]   (after scripts/test.sh)
#   H3_GOLDEN_DIR   the folder the variants are made from (default ../shared/golden)
set -euo pipefail
cd "$(dirname "$0")/.."

build="${1:-build}"
shift || true
bin="$build/tests/h3_golden_tests"
[[ -x "$bin" ]] || { echo "test_golden_variants.sh: $bin not built (run scripts/test.sh first)" >&2; exit 2; }
src="${H3_GOLDEN_DIR:-$(pwd)/../shared/golden}"
[[ -f "$src/manifest.json" ]] || { echo "test_golden_variants.sh: no golden folder at $src" >&2; exit 2; }

out="$(mktemp -d "${TMPDIR:-/tmp}/h3-golden-variants.XXXXXX")"
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
# `resized` (tests/golden/make_resized.py: its presets resized and resized_ratio8) recomputes the
# component cases at other model sizes with the reference's own modules: it needs a python3 with
# torch and numpy (Debian: python3-torch, which `scripts/setup-debian.sh --reference` installs) and
# the anchor's packed reference sources.
# With no names, every variant; otherwise `resized` selects those, the rest go to make_variants.py.
want_resized=$(( $# == 0 ))
names=()
for n in "$@"; do
  if [[ "$n" == resized ]]; then want_resized=1; else names+=("$n"); fi
done
if (( ${#names[@]} > 0 || $# == 0 )); then
  python3 tests/golden/make_variants.py "$src" "$out" "${names[@]}"
fi
if (( want_resized )); then
  torch_python=""
  for p in python3 /usr/bin/python3; do
    # The rest: what the reference's diffusers sources import themselves.
    if "$p" -c 'import torch, numpy, packaging, requests, filelock, PIL' 2>/dev/null; then torch_python=$p; break; fi
  done
  anchor="${H3_ANCHOR_DIR:-$(dirname "$src")/anchor}"
  if [[ -z "$torch_python" ]]; then
    echo "== variant resized: skipped (no python3 with torch, numpy and the reference's imports; scripts/setup-debian.sh --reference)"
  elif [[ ! -f "$anchor/dmin.tar.xz" ]]; then
    echo "== variant resized: skipped (no reference sources at $anchor/dmin.tar.xz; set H3_ANCHOR_DIR)"
  else
    # First the recipes themselves: the folder's own cases recomputed with its own checkpoint.
    H3_ANCHOR_DIR="$anchor" "$torch_python" tests/golden/make_resized.py "$src" --check > "$out/resized-check.log" 2>&1 || {
      tail -20 "$out/resized-check.log"
      echo "test_golden_variants.sh: make_resized.py --check: the recipes do not reproduce $src" >&2
      exit 1
    }
    echo "== make_resized.py --check: $(tail -1 "$out/resized-check.log")"
    H3_ANCHOR_DIR="$anchor" "$torch_python" tests/golden/make_resized.py "$src" "$out" | grep '^wrote'
  fi
fi

# Each variant's tests in shards, two per core (scripts/gtest_shards.sh); the log keeps every line.
failed=()
for dir in "$out"/*/; do
  name="$(basename "$dir")"
  echo "== variant $name"
  H3_GOLDEN_DIR="$dir" H3_REQUIRE_GOLDEN=1 scripts/gtest_shards.sh "$bin" "$out/$name.log" ||
    failed+=("$name")
done
echo "test_golden_variants.sh: $(ls -d "$out"/*/ | wc -l) variant(s) in $(( $(date +%s) - start )) s"
if (( ${#failed[@]} )); then
  echo "test_golden_variants.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
