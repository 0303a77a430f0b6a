#!/usr/bin/env bash
# Drives the h3 serve web page in a headless Chromium (Debian's chromium + puppeteer-core from
# npm). Skips, saying so, where chromium, node or the server is missing.
# Usage: scripts/test-browser.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
h3="$build/h3"

chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$chromium" ]]; then
  echo "test-browser: SKIP: chromium is not installed (apt-get install chromium)"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "test-browser: SKIP: node/npm are not installed"
  exit 0
fi
if ! "$h3" serve --help >/dev/null 2>&1 || "$h3" serve --model /nonexistent 2>&1 | grep -q "no server"; then
  echo "test-browser: SKIP: $h3 has no server (H3_SERVE off)"
  exit 0
fi
(cd tests/browser && npm install --no-audit --no-fund --silent)

work=$(mktemp -d)
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$h3" make-tiny "$work/tiny" >/dev/null
"$h3" serve --model "$work/tiny" --port 0 --data "$work/data" >"$work/serve.log" 2>&1 &
pid=$!
url=""
for _ in $(seq 300); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve.log" || true)
  [[ -n "$url" ]] && break
  sleep 0.1
done
[[ -n "$url" ]] || { echo "test-browser: FAIL: the server did not start"; cat "$work/serve.log"; exit 1; }
timeout 300 node tests/browser/serve_page.mjs "$chromium" "$url/"
