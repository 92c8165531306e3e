#!/usr/bin/python3
"""The bad-input catalogue (docs/BAD_INPUTS.md), command-line rows: every `attnlab` command with
a missing file, a wrong type (a file of the wrong kind, or a flag value of the wrong type) and an
out-of-range flag. For each row the test checks three things:
  1. the exit status is non-zero;
  2. stderr's last line is an error that names the problem (a phrase given per row);
  3. no output is left behind: the paths the command would write do not exist, and the working
     directory holds nothing new (no half-written file, no temporary debris).
Rows that do not apply (a command that reads no file) say so in docs/BAD_INPUTS.md.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

FAILURES = []


def listing(d):
    out = set()
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(root, n), d))
    return out


def check(cli, cwd, row, args, needle, outputs=()):
    before = listing(cwd)
    p = subprocess.run([cli, *args], cwd=cwd, capture_output=True, text=True, errors="replace")
    err = p.stderr.strip().splitlines()
    last = err[-1] if err else ""
    problems = []
    if p.returncode == 0:
        problems.append("exit status 0")
    # attnlab's own errors: "attnlab <command>: error: ..."; usage errors (CLI11): the problem,
    # then "Run with --help for more information."
    if not any("error" in line for line in err) and "Run with --help" not in p.stderr:
        problems.append(f"no error message on stderr (last line: {last!r})")
    if needle not in p.stderr:
        problems.append(f"the message does not mention {needle!r}")
    for o in outputs:
        if os.path.exists(os.path.join(cwd, o)):
            problems.append(f"output {o} was written")
    new = listing(cwd) - before
    if new:
        problems.append(f"left behind {sorted(new)}")
    if problems:
        FAILURES.append(f"{row}: attnlab {' '.join(args)}\n    " + "; ".join(problems) +
                        f"\n    stderr: {p.stderr.strip()[-400:]!r}")
    else:
        print(f"ok {row}: exit {p.returncode}: {last[:120]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    cli = os.path.abspath(ap.parse_args().attnlab)
    with tempfile.TemporaryDirectory(prefix="attnlab_badcli_") as d:
        # Fixtures: a text, a data directory, a tiny checkpoint, .npy inputs.
        words = "the jury said the city of atlanta and the election was conducted".split()
        rng = np.random.default_rng(0)
        with open(os.path.join(d, "text.txt"), "w") as f:
            for _ in range(60):
                f.write(" ".join(rng.choice(words, size=30)) + ".\n\n")
        setup = [["prepare", "--text", "text.txt", "--out", "data"],
                 ["train", "--data", "data", "--out", "ckpt", "--layers", "1", "--d-model", "16",
                  "--heads", "2", "--context", "16", "--batch", "2", "--steps", "2",
                  "--eval-batches", "1"]]
        for a in setup:
            p = subprocess.run([cli, *a], cwd=d, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"setup failed: attnlab {' '.join(a)}\n{p.stderr}")
        x = rng.standard_normal((1, 2, 4, 8)).astype("<f4")
        for n in ("q", "k", "v"):
            np.save(os.path.join(d, n + ".npy"), x)
        with open(os.path.join(d, "cfg.json"), "w") as f:
            json.dump({"train": {"batch": 0}}, f)

        att = ["attention", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy"]
        rows = [
            # attention
            ("attention/missing-file", ["attention", "--q", "nothere.npy", "--k", "k.npy", "--v",
                                        "v.npy", "--out", "o.npy"], "nothere.npy: no such file",
             ["o.npy"]),
            ("attention/wrong-type", ["attention", "--q", "text.txt", "--k", "k.npy", "--v",
                                      "v.npy", "--out", "o.npy"], "not a .npy file", ["o.npy"]),
            ("attention/out-of-range", att + ["--window-left", "-3"],
             "--window-left must be >= 0", ["o.npy"]),
            # memory (reads no file)
            ("memory/wrong-type", ["memory", "--n", "abc"], "--n", []),
            ("memory/out-of-range", ["memory", "--n", "0"], "--n must be >= 1", []),
            # bench (reads no file)
            ("bench/wrong-type", ["bench", "attention", "--n", "x"], "--n", []),
            ("bench/out-of-range", ["bench", "attention", "--n", "64", "--head-dim", "0"],
             "head", []),
            ("bench-model/out-of-range", ["bench", "model", "--steps", "0"], "--steps", []),
            # tokenize
            ("tokenize/missing-file", ["tokenize", "--tokenizer", "nothere.json", "--text", "hi"],
             "nothere.json", []),
            ("tokenize/wrong-type", ["tokenize", "--tokenizer", "q.npy", "--text", "hi"],
             "malformed JSON", []),
            ("tokenize/out-of-range", ["tokenize", "--train", "text.txt", "--merges", "-1",
                                       "--out", "v.json"], "--merges", ["v.json"]),
            # prepare
            ("prepare/missing-file", ["prepare", "--text", "nothere.txt", "--out", "d2"],
             "nothere.txt", ["d2"]),
            ("prepare/wrong-type", ["prepare", "--text", "text.txt", "--tokenizer", "bpe:abc",
                                    "--out", "d2"], "bpe:N needs a positive number", ["d2"]),
            ("prepare/out-of-range", ["prepare", "--text", "text.txt", "--val-every", "1",
                                      "--out", "d2"], "--val-every", ["d2"]),
            # train
            ("train/missing-file", ["train", "--data", "nothere", "--out", "ck2", "--steps", "1"],
             "nothere/tokenizer.json: no such file", ["ck2", "ck2.log.jsonl"]),
            ("train/wrong-type", ["train", "--data", "data", "--config", "q.npy", "--out", "ck2"],
             "not valid JSON", ["ck2", "ck2.log.jsonl"]),
            ("train/out-of-range", ["train", "--data", "data", "--out", "ck2", "--batch", "0"],
             "'batch' = 0 is outside [1, 65536]", ["ck2", "ck2.log.jsonl"]),
            ("train/out-of-range-config", ["train", "--data", "data", "--out", "ck2", "--config",
                                           "cfg.json"], "'batch' = 0 is outside",
             ["ck2", "ck2.log.jsonl"]),
            # generate
            ("generate/missing-file", ["generate", "--model", "nothere"],
             "nothere: no such file", []),
            ("generate/wrong-type", ["generate", "--model", "text.txt"], "not a model", []),
            ("generate/out-of-range", ["generate", "--model", "ckpt", "--top-p", "7"], "top", []),
            # eval
            ("eval/missing-file", ["eval", "--model", "ckpt", "--text", "nothere.txt"],
             "nothere.txt: no such file", []),
            ("eval/wrong-type", ["eval", "--model", "q.npy", "--text", "text.txt"],
             "not a model", []),
            ("eval/out-of-range", ["eval", "--model", "ckpt", "--text", "text.txt",
                                   "--max-tokens", "-5"], "--max-tokens", []),
            # logits
            ("logits/missing-file", ["logits", "--model", "nothere", "--tokens", "1", "--out",
                                     "l.npy"], "nothere: no such file", ["l.npy"]),
            ("logits/wrong-type", ["logits", "--model", "ckpt", "--tokens", "1,x", "--out",
                                   "l.npy"], "--tokens: expected non-negative integers",
             ["l.npy"]),
            ("logits/out-of-range", ["logits", "--model", "ckpt", "--tokens", "1,999999", "--out",
                                     "l.npy"], "outside the vocabulary", ["l.npy"]),
            # report-demo (reads no file)
            ("report-demo/wrong-type", ["report-demo", "--out", "text.txt"], "text.txt", []),
            # stream
            ("stream/missing-file", ["stream", "--model", "ckpt", "--text", "nothere.txt"],
             "nothere.txt: no such file", []),
            ("stream/wrong-type", ["stream", "--model", "text.txt", "--text", "text.txt"],
             "not a model", []),
            ("stream/out-of-range", ["stream", "--model", "ckpt", "--text", "text.txt",
                                     "--chunk", "0"], "--chunk", []),
            # analyze
            ("analyze/missing-file", ["analyze", "--model", "ckpt", "--text", "nothere.txt",
                                      "--out", "rep"], "nothere.txt: no such file", ["rep"]),
            ("analyze/wrong-type", ["analyze", "--model", "ckpt", "--text", "text.txt",
                                    "--plot-heads", "x.y", "--out", "rep"], "--plot-heads",
             ["rep"]),
            ("analyze/out-of-range", ["analyze", "--model", "ckpt", "--text", "text.txt",
                                      "--plot-heads", "7.0", "--out", "rep"], "--plot-heads",
             ["rep"]),
        ]
        for row, args, needle, outputs in rows:
            check(cli, d, row, args, needle, outputs)
    if FAILURES:
        print("\n".join("FAIL " + f for f in FAILURES))
        sys.exit(1)
    print(f"bad_inputs_cli_test: {len(rows)} rows ok")


if __name__ == "__main__":
    main()
