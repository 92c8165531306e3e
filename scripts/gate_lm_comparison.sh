#!/usr/bin/env bash
# Qiu et al. 2025's gated attention (G1) on a language model at the default model's scale
# (issue 18; docs/EXPERIMENTS.md, "Gated attention on a language model"): three models with the
# default model's architecture and recipe (scripts/make_default_model.sh), the same data order
# and initialisation seed, differing only in the output gate: none, head-wise, element-wise.
# Each is trained for STEPS steps (default 600, 2.5M tokens; the default model had 3000), then
# `attnlab eval` gives the held-out loss and `attnlab analyze` the first-token attention, the
# gate statistics, the gate-weighted first-token mass and the massive activations on the held-out
# documents. The summary table is printed at the end and written to $WORK/summary.md.
#   scripts/gate_lm_comparison.sh            # ~30 min on 2 quiet cores at STEPS=600
#   STEPS=3000 scripts/gate_lm_comparison.sh # the default model's length, ~2.5 hours
set -euo pipefail
cd "$(dirname "$0")/.."
B=${ATTNLAB:-build/attnlab}
WORK=${WORK:-build/gate-lm-run}
STEPS=${STEPS:-600}
THREADS=${THREADS:-2}
[ -x "$B" ] || ./scripts/build.sh attnlab_cli
mkdir -p "$WORK"
[ -f "$WORK/data/tokenizer.json" ] ||
  $B prepare --corpus brown --tokenizer bpe:4096 --out "$WORK/data"
for v in none headwise elementwise; do
  case $v in
    none) flag=() ;;
    headwise) flag=(--gate) ;;
    elementwise) flag=(--gate-elementwise) ;;
  esac
  if [ ! -f "$WORK/$v/model.safetensors" ]; then
    echo "== training $v ($STEPS steps)" >&2
    $B --threads "$THREADS" train --data "$WORK/data" --out "$WORK/$v" --layers 4 --d-model 256 \
      --heads 16 --context 256 --batch 16 --steps "$STEPS" --lr 3e-3 --min-lr 3e-4 \
      --weight-decay 0.5 --warmup 200 --bos --eval-every "$STEPS" --probe-every 200 \
      --log-every 100 --checkpoint-every "$STEPS" "${flag[@]}"
  fi
  $B --threads "$THREADS" eval --model "$WORK/$v" --text "$WORK/data/val.txt" --json \
    > "$WORK/$v.eval.json"
  $B --threads "$THREADS" analyze --model "$WORK/$v" --text "$WORK/data/val.txt" \
    --out "$WORK/$v.analysis" > /dev/null
done
/usr/bin/python3 - "$WORK" "$STEPS" <<'PY'
import json, sys
work, steps = sys.argv[1], sys.argv[2]
rows = []
for v in ("none", "headwise", "elementwise"):
    ev = json.load(open(f"{work}/{v}.eval.json"))
    an = json.load(open(f"{work}/{v}.analysis/report.json"))
    heads = [h for l in an["layers"] for h in l["heads"]]
    a1 = [h["alpha"][0] for h in heads]
    gated = [h["gate"]["first_mass"] if "gate" in h else None for h in heads]
    gm = [h["gate"]["mean"] if "gate" in h else None for h in heads]
    massive = max(l["output"]["massive"]["max_abs"] for l in an["layers"])
    ratio = max(l["output"]["massive"]["ratio"] for l in an["layers"])
    f = lambda xs: "n/a" if any(x is None for x in xs) else f"{sum(xs) / len(xs):.3f}"
    rows.append(f"| {v} | {ev['loss']:.3f} | {sum(a > 0.3 for a in a1) / len(a1):.2f} | "
                f"{max(a1):.3f} | {sum(a1) / len(a1):.3f} | {f(gated)} | {f(gm)} | "
                f"{massive:.1f} | {ratio:.1f} |")
table = "\n".join([
    f"gate | held-out loss | Sink_1^0.3 | max alpha_1 | mean alpha_1 | mean gated first-token mass "
    f"| mean gate | max abs activation | massive ratio ({steps} steps)",
    "|---|---|---|---|---|---|---|---|---|"] + rows)
open(f"{work}/summary.md", "w").write("| " + table + "\n")
print("| " + table)
PY
