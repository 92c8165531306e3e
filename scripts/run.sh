#!/usr/bin/env bash
# The main job: sets up and builds (if needed), then asks the embedded default model
# (data/default-model) where its attention sinks are and whether its attention collapses with
# depth, on the bundled sample text (data/sample.txt: held-out Brown documents, ~20k tokens).
# Writes analysis/report.html (open it in a browser), report.json, heads.csv and layers.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh attnlab_cli   # only the CLI: the report comes first, tests build in test.sh
BUILD_DIR="${ATTNLAB_BUILD_DIR:-build}"
OUT="${1:-analysis}"
"$BUILD_DIR/attnlab" analyze --text data/sample.txt --out "$OUT"
echo "run: the report is $OUT/report.html (JSON: $OUT/report.json)"
