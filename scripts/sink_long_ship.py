#!/usr/bin/python3
"""Ships a piece of the long sink run (scripts/sink_long.sh; issue 35) as the embedded default
model: copies results/sink-long/pieceN/{model.safetensors,config.json} into data/default-model/
and writes data/default-model/train_log.jsonl as the whole history in one log: the original
3000-step training (results/sink-long/piece0/train_log.jsonl, copied there from
data/default-model on the first ship) followed by pieces 1..N, their steps continued
(piece k's step s becomes the steps of everything before it + s) and each record marked with
its "piece". The analyze report's default-model note plots the probe lines of this log.

    scripts/sink_long_ship.py 2          # piece 2 becomes the default model

Refuses (exit 1) when the piece's held-out loss is worse than the model it replaces (issue 35:
a shipped model never gets worse on validation loss).
"""
import json
import os
import shutil
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def read_log(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: scripts/sink_long_ship.py PIECE (>= 1)")
    n = int(sys.argv[1])
    res = os.path.join(ROOT, "results", "sink-long")
    dm = os.path.join(ROOT, "data", "default-model")
    p0 = os.path.join(res, "piece0")
    if not os.path.exists(os.path.join(p0, "train_log.jsonl")):
        # The original training's log, kept before the default model's log is replaced.
        os.makedirs(p0, exist_ok=True)
        shutil.copy(os.path.join(dm, "train_log.jsonl"), os.path.join(p0, "train_log.jsonl"))
    piece = os.path.join(res, "piece%d" % n)
    new_loss = json.load(open(os.path.join(piece, "eval.json")))["loss"]
    shipped = os.path.join(dm, "eval.json")
    old_loss = json.load(open(shipped))["loss"] if os.path.exists(shipped) else 4.534
    if new_loss > old_loss:
        sys.exit("piece %d's held-out loss %.4f is worse than the shipped model's %.4f: not shipped"
                 % (n, new_loss, old_loss))
    records, offset = [], 0
    for k in range(n + 1):
        log = read_log(os.path.join(res, "piece%d" % k, "train_log.jsonl"))
        for r in log:
            r = dict(r)
            r["step"] = offset + int(r["step"])
            r["piece"] = k
            records.append(r)
        offset += max(int(r["step"]) for r in log)
    tmp = os.path.join(dm, "train_log.jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    os.replace(tmp, os.path.join(dm, "train_log.jsonl"))
    for name in ("model.safetensors", "config.json", "eval.json"):
        shutil.copy(os.path.join(piece, name), os.path.join(dm, name + ".tmp"))
        os.replace(os.path.join(dm, name + ".tmp"), os.path.join(dm, name))
    print("data/default-model is piece %d (held-out loss %.4f, was %.4f); %d log records over %d "
          "steps" % (n, new_loss, old_loss, len(records), offset))


if __name__ == "__main__":
    main()
