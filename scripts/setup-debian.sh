#!/usr/bin/env bash
# Installs what h3.cpp needs to build and test on Debian 12 (or newer) / Ubuntu 24.04.
# The CUDA toolkit is not installed here: when nvcc is on the machine (/usr/local/cuda/bin or
# PATH), the CUDA backend is built too; otherwise h3 is CPU-only.
# --browser also installs Debian's chromium and npm for scripts/test-browser.sh (the web page test).
# --reference also installs Debian's PyTorch, with which scripts/test_golden_variants.sh recomputes
# the golden component cases at other model sizes through the reference's own modules
# (tests/golden/make_resized.py; without it that variant is a visible skip).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libopenblas-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev
  libstb-dev libgtest-dev libbenchmark-dev clang ffmpeg
  libcpp-httplib-dev libsqlite3-dev libturbojpeg0-dev
  python3  # tests/golden/make_variants.py (standard library only)
  python3-numpy  # tools/train_tiny/clips.py (the tiny model's training clips, its self-check)
)
for flag in "$@"; do
  case "$flag" in
    --browser)
      packages+=(chromium)
      # A node installed from elsewhere brings its own npm (Debian's npm package would conflict).
      command -v npm >/dev/null || packages+=(npm)
      ;;
    # The reference's diffusers sources import packaging, requests, filelock and PIL themselves.
    --reference) packages+=(python3-torch python3-packaging python3-requests python3-filelock python3-pil) ;;
    *) echo "setup-debian.sh: unknown flag '$flag' (known: --browser, --reference)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
echo "setup: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
