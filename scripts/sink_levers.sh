#!/usr/bin/env bash
# Levers for a real attention sink in the default model (issue 18; docs/DEFAULT_MODEL.md, "Levers
# for a real sink"). Each run continues the embedded default model (`train --from`, 3000 steps on
# Brown) for STEPS more steps, AdamW lr 2e-3 (100 warmup steps, cosine to 2e-4), BOS first,
# first-token probe every 100 steps, and differs from the others in one lever:
#   C  Brown only, weight decay 0.5            (more steps, annealed: the control)
#   A  the mix of scripts/make_sink_corpus.py  (more English text: Brown x2, the King James Bible,
#      fortunes, Python docs), weight decay 0.5
#   B  the mix, weight decay 1.0
#   L  the mix at context 1024 (RoPE: config.json's context raised; batch 4 x 1024, the same
#      tokens per step), weight decay 0.5
#   W  the mix, weight decay 0.1                 (less weight decay: Gu et al. 2024's other side)
#   R  the mix, lr 4e-3 (cosine to 4e-4)         (the learning-rate lever)
#   D4 the mix from scratch: 4 layers (the default model's shape), SCRATCH_STEPS steps
#   D6 the mix from scratch: 6 layers, otherwise the same       (the depth lever)
# The continuing runs start from INIT_REV's data/default-model (default: the first-stage model,
# the one the calibration table was measured on, as committed before issue 35's long run shipped;
# INIT_REV=HEAD continues the shipped model instead). D4 and D6 use lr 3e-3 (cosine to 3e-4, 200
# warmup steps) like scripts/make_default_model.sh.
# Then `attnlab eval` on the 25 held-out Brown documents and `attnlab analyze` on data/sample.txt
# for every run; the table is printed and written to $WORK/levers.md.
# Runs go one after another on THREADS threads (default 1, leaving a core free), each resumable:
# a run with a finished model.safetensors is skipped, one with a checkpoint resumes from it.
#   STEPS=500 RUNS="C L A B" scripts/sink_levers.sh   # ~15 min a run on one core
# Needs Debian's bible-kjv, bible-kjv-text, fortunes and python3.11-doc (installed if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${ATTNLAB:-$PWD/build/attnlab}
WORK=${WORK:-build/sink-levers}
STEPS=${STEPS:-500}
RUNS=${RUNS-C L A B}  # RUNS="" only builds the corpora
THREADS=${THREADS:-1}
INIT_REV=${INIT_REV:-8856e51^}  # the commit before piece 3 of the long run became the default
SCRATCH_STEPS=${SCRATCH_STEPS:-1000}
[ -x "$B" ] || ./scripts/build.sh attnlab_cli
missing=()
for p in bible-kjv bible-kjv-text fortunes python3.11-doc; do
  dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
mkdir -p "$WORK"
[ -f "$WORK/brown/train.tok" ] ||
  $B prepare --corpus brown --tokenizer bpe:4096 --out "$WORK/brown" > /dev/null
[ -f "$WORK/mix/train.tok" ] ||
  /usr/bin/python3 scripts/make_sink_corpus.py "$B" "$WORK/brown" "$WORK/mix"
INIT=$WORK/init
if [ ! -f "$INIT/data/default-model/config.json" ]; then
  mkdir -p "$INIT"
  git archive "$INIT_REV" data/default-model | tar -x -C "$INIT"
fi
INIT=$INIT/data/default-model
if [ ! -f "$WORK/init1024/config.json" ]; then
  mkdir -p "$WORK/init1024"
  cp "$INIT/model.safetensors" "$WORK/init1024/"
  /usr/bin/python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['context'] = 1024; \
json.dump(c, open(sys.argv[2], 'w'))" "$INIT/config.json" "$WORK/init1024/config.json"
fi
common=(--bos --eval-every 250
        --eval-batches 16 --log-every 50 --checkpoint-every 250 --probe-every 100)
for r in $RUNS; do
  [ -f "$WORK/$r.done" ] && continue
  lr=(--lr 2e-3 --min-lr 2e-4 --warmup 100)  # train takes each option once
  steps=$STEPS
  scratch=(--d-model 256 --heads 16 --context 256 --batch 16 --weight-decay 0.5)
  case $r in
    A) args=(--data "$WORK/mix" --from "$INIT" --batch 16 --weight-decay 0.5) ;;
    B) args=(--data "$WORK/mix" --from "$INIT" --batch 16 --weight-decay 1.0) ;;
    C) args=(--data "$WORK/brown" --from "$INIT" --batch 16 --weight-decay 0.5) ;;
    L) args=(--data "$WORK/mix" --from "$WORK/init1024" --batch 4 --weight-decay 0.5) ;;
    W) args=(--data "$WORK/mix" --from "$INIT" --batch 16 --weight-decay 0.1) ;;
    R) args=(--data "$WORK/mix" --from "$INIT" --batch 16 --weight-decay 0.5)
       lr=(--lr 4e-3 --min-lr 4e-4 --warmup 100) ;;
    D4|D6) args=(--data "$WORK/mix" --layers "${r#D}" "${scratch[@]}")
       lr=(--lr 3e-3 --min-lr 3e-4 --warmup 200); steps=$SCRATCH_STEPS ;;
    *) echo "unknown run $r" >&2; exit 2 ;;
  esac
  # A checkpoint of an interrupted run resumes it (exact resume: docs/CLI.md, train --resume).
  if [ -f "$WORK/$r/config.json" ]; then
    kept=()
    for ((i = 0; i < ${#args[@]}; i++)); do
      case ${args[$i]} in
        --from|--layers|--d-model|--heads|--context) i=$((i + 1)) ;;  # fixed by the checkpoint
        *) kept+=("${args[$i]}") ;;
      esac
    done
    args=("${kept[@]}" --resume)
  fi
  echo "== run $r: ${args[*]} ($(date +%T))" >&2
  $B --threads "$THREADS" train --out "$WORK/$r" "${common[@]}" "${lr[@]}" "${args[@]}" --steps "$steps" \
    > "$WORK/$r.out" 2>&1
  $B --threads "$THREADS" eval --model "$WORK/$r" --text "$WORK/brown/val.txt" --json \
    > "$WORK/$r.eval.json"
  $B --threads "$THREADS" analyze --model "$WORK/$r" --text data/sample.txt \
    --out "$WORK/$r.analysis" > /dev/null
  touch "$WORK/$r.done"
done
/usr/bin/python3 - "$WORK" $RUNS <<'PY'
import json, sys
work, runs = sys.argv[1], sys.argv[2:]
rows = ["| run | tokens | held-out loss | probe: max alpha_1 (first / last) | slope of max alpha_1 "
        "per M tokens (least squares) | largest layer mean alpha_1 (last probe) | analyze on "
        "sample.txt: max alpha_1 | Sink_1^0.3 |", "|---|---|---|---|---|---|---|---|"]
for r in runs:
    ev = json.load(open(f"{work}/{r}.eval.json"))
    an = json.load(open(f"{work}/{r}.analysis/report.json"))
    recs = [json.loads(l) for l in open(f"{work}/{r}.log.jsonl") if '"probe"' in l]
    probes = [j["probe"]["alpha1"] for j in recs]
    tok = [j["step"] * j.get("tokens_per_step", 4096) / 1e6 for j in recs]
    mx = [max(max(h) for h in p) for p in probes]
    n = len(mx)
    mt, ma = sum(tok) / n, sum(mx) / n
    den = sum((t - mt) ** 2 for t in tok)
    slope = sum((t - mt) * (a - ma) for t, a in zip(tok, mx)) / den if den > 0 else 0.0
    lm = max(sum(h) / len(h) for h in probes[-1])
    a1 = [h["alpha"][0] for l in an["layers"] for h in l["heads"]]
    rows.append(f"| {r} | {tok[-1]:.1f}M | {ev['loss']:.3f} | {mx[0]:.3f} / {mx[-1]:.3f} | "
                f"{slope:+.4f} | {lm:.3f} | "
                f"{max(a1):.3f} | {sum(a > 0.3 for a in a1) / len(a1):.2f} |")
open(f"{work}/levers.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
