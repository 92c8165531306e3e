#!/usr/bin/env bash
# The main job: sets up and builds (if needed), then runs attnlab on the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
BUILD_DIR="${ATTNLAB_BUILD_DIR:-build}"
if [ -d data/default-model ]; then
  "$BUILD_DIR/attnlab" generate --prompt "The jury said" --max-tokens 60
else
  echo "run: data/default-model is not in this checkout yet; showing the engine instead"
  "$BUILD_DIR/attnlab" memory --n 65536 --heads 32 --head-dim 128 --dtype bf16
  "$BUILD_DIR/attnlab" bench attention --n 1024 --head-dim 64 --repeats 3
fi
