#!/usr/bin/env bash
# The long run for a real attention sink in the default model (issue 35; docs/DEFAULT_MODEL.md,
# "The long run"), in pieces that each end in a commit. Recipe from the calibration table: the
# English mix of scripts/make_sink_corpus.py, weight decay 0.5, AdamW lr 2e-3 (100 warmup steps,
# cosine to 2e-4), batch 16 x 256, BOS first, probe every 100 steps.
#   scripts/sink_long.sh 1            # piece 1 continues data/default-model
#   scripts/sink_long.sh 2            # piece 2 continues results/sink-long/piece1 (committed)
# Each piece starts from the previous piece's committed weights with a fresh optimizer (its moments
# are not committed: twice the weights' 17 MB per piece) and its own warmup and cosine, i.e. warm
# restarts (Loshchilov & Hutter 2017, SGDR). Within a piece an interrupted run resumes exactly from
# its checkpoint (every 250 steps) when the script is run again. At the end of a piece the model
# is evaluated on Brown's 25 held-out documents and analysed on data/sample.txt, and the weights,
# train log, eval and report summary are copied to results/sink-long/pieceN/ for the commit.
# STEPS (default 2500, ~65 minutes at 1 thread, 2.7k tokens/s on AMD EPYC Zen 4), THREADS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
PIECE=${1:?usage: scripts/sink_long.sh PIECE}
B=${ATTNLAB:-$PWD/build/attnlab}
STEPS=${STEPS:-2500}
THREADS=${THREADS:-1}
WORK=${WORK:-build/sink-long}
LEVERS=build/sink-levers
[ -x "$B" ] || ./scripts/build.sh attnlab_cli
# The corpora (Brown with its held-out documents, the mix) come from the calibration script.
[ -f "$LEVERS/mix/train.tok" ] || STEPS=0 RUNS="" scripts/sink_levers.sh > /dev/null
if [ "$PIECE" = 1 ]; then prev=data/default-model; else prev=results/sink-long/piece$((PIECE - 1)); fi
[ -f "$prev/model.safetensors" ] || { echo "sink_long.sh: $prev/model.safetensors is missing" >&2; exit 2; }
out=$WORK/piece$PIECE
dest=results/sink-long/piece$PIECE
mkdir -p "$WORK" "$dest"
args=(--data "$LEVERS/mix" --batch 16 --weight-decay 0.5 --lr 2e-3 --min-lr 2e-4 --warmup 100
      --bos --eval-every 250 --eval-batches 16 --log-every 50 --checkpoint-every 250
      --probe-every 100 --steps "$STEPS")
if [ -f "$out/config.json" ]; then args+=(--resume); else args+=(--from "$prev"); fi
echo "== piece $PIECE from $prev: ${args[*]} ($(date +%T))" >&2
$B --threads "$THREADS" train --out "$out" "${args[@]}"
$B --threads "$THREADS" eval --model "$out" --text "$LEVERS/brown/val.txt" --json > "$dest/eval.json"
$B --threads "$THREADS" analyze --model "$out" --text data/sample.txt --out "$out.analysis" > /dev/null
cp "$out/model.safetensors" "$out/config.json" "$dest/"
cp "$out.log.jsonl" "$dest/train_log.jsonl"
/usr/bin/python3 - "$out.analysis/report.json" "$dest/eval.json" > "$dest/summary.txt" <<'PY'
import json, sys
an, ev = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
a1 = [(h["alpha"][0], li, hi) for li, l in enumerate(an["layers"]) for hi, h in enumerate(l["heads"])]
best = max(a1)
print(f"held-out Brown loss {ev['loss']:.4f} nats/token")
print(f"analyze data/sample.txt: max alpha_1 {best[0]:.3f} (layer {best[1]} head {best[2]}), "
      f"heads with alpha_1 > 0.3: {sum(a > 0.3 for a, _, _ in a1)} of {len(a1)}")
PY
cat "$dest/summary.txt"
echo "== piece $PIECE done ($(date +%T)); commit $dest" >&2
