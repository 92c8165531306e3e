#!/usr/bin/python3
"""Markdown table of a training log (CKPT.log.jsonl, one JSON record per step): loss, validation
loss and the first-token probe (sink emergence) at every step that has a probe or a validation.

    scripts/train_log_table.py data/default-model/train_log.jsonl

Columns: step, training loss (mean over the records since the previous row), validation loss,
per layer the mean over heads of alpha_1 (the attention on token 0 averaged over query positions;
docs/METRICS.md), the largest alpha_1 of any head, and Sink_1^0.3 (share of heads with
alpha_1 > 0.3).
"""
import json
import sys


def main():
    recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    layers = None
    rows, losses = [], []
    for r in recs:
        if r.get("loss") is not None:
            losses.append(r["loss"])
        if "probe" not in r and "val_loss" not in r:
            continue
        p = r.get("probe")
        row = [str(r["step"]), f"{sum(losses) / max(1, len(losses)):.3f}",
               f"{r['val_loss']:.3f}" if "val_loss" in r else ""]
        losses = []
        if p:
            a = p["alpha1"]
            layers = len(a)
            row += [f"{sum(h) / len(h):.3f}" for h in a]
            row += [f"{max(max(h) for h in a):.3f}",
                    f"{sum(x > 0.3 for h in a for x in h) / sum(len(h) for h in a):.2f}"]
        else:
            row += [""] * ((layers or 0) + 2)
        rows.append(row)
    head = ["step", "train loss", "val loss"] + [f"alpha_1 L{i}" for i in range(layers or 0)] + \
           ["max alpha_1", "Sink_1^0.3"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        row += [""] * (len(head) - len(row))
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
