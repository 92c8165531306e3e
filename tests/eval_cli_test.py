#!/usr/bin/python3
"""`attnlab eval` scores every token exactly once, with the loss a plain forward gives.

Issue 21: eval advanced its windows by T - 1 while each window scored T tokens, so the token at
every window boundary was scored twice (--max-tokens 256 reported 257 tokens). Here the embedded
default model (trained with a BOS token; its context T read from data/default-model/config.json)
scores the first N tokens of the bundled sample for N on both sides of the window size; the expected count and loss are rebuilt
independently from `attnlab logits` (one forward per window over [BOS, tokens ...]) and a
log-softmax in NumPy: window w holds [BOS, ids[wT .. wT+T-2]] and predicts ids[wT .. wT+T-1].

Run by ctest as: /usr/bin/python3 eval_cli_test.py --attnlab <path to the CLI>
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "data", "sample.txt")


def default_context():
    with open(os.path.join(HERE, "..", "data", "default-model", "config.json")) as f:
        return int(json.load(f)["context"])


def run(cli, *args):
    p = subprocess.run([cli, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}: {p.stderr[-800:]}")
    return p.stdout


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    cli = ap.parse_args().attnlab
    failures = []
    with tempfile.TemporaryDirectory() as d:
        info = json.loads(run(cli, "tokenize", "--model", "default", "--text", SAMPLE, "--json"))
        ids, bos = info["ids"], info["bos"]
        if bos is None:
            sys.exit("FAIL: the default model should have been trained with a BOS token")
        T = default_context()
        for n in (1, 2, T - 1, T, T + 1, 2 * T - 12, 2 * T - 1, 2 * T, 2 * T + 1, 2 * T + 188):
            got = json.loads(run(cli, "eval", "--text", SAMPLE, "--max-tokens", str(n), "--json"))
            nll, count = 0.0, 0
            for s in range(0, n, T):
                window = ids[s:min(s + T - 1, n)]
                targets = ids[s:min(s + T, n)]
                out = os.path.join(d, f"w{n}_{s}")
                run(cli, "logits", "--tokens", ",".join(map(str, [bos] + window)), "--out", out)
                lp = log_softmax(np.load(os.path.join(out, "logits.npy")))
                nll -= sum(lp[t, y] for t, y in enumerate(targets))
                count += len(targets)
            want = nll / count
            ok = got["tokens"] == n == count and abs(got["loss"] - want) <= 1e-4 * max(1.0, want)
            print(f"{'ok' if ok else 'FAIL'}: --max-tokens {n}: eval scored {got['tokens']} tokens, "
                  f"loss {got['loss']:.6f}; expected {count} tokens, loss {want:.6f}")
            if not ok:
                failures.append(n)
    if failures:
        sys.exit(f"FAIL: eval disagrees with the plain forward at --max-tokens {failures}")
    print("eval: every token scored once, losses equal the plain forward's")


if __name__ == "__main__":
    main()
