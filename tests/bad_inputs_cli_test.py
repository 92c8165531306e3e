#!/usr/bin/python3
"""The bad-input catalogue (docs/BAD_INPUTS.md), command-line rows: every `attnlab` command with
a missing file, a wrong type (a file of the wrong kind, or a flag value of the wrong type) and an
out-of-range flag. For each row the test checks three things:
  1. the exit status is 1 for an error the command reports ("attnlab <command>: error: ..." as
     stderr's last line), 2 for a usage error CLI11 reports (the problem, then "Run with --help
     for more information.");
  2. the message names the problem (a phrase given per row);
  3. no output is left behind: the paths the command would write do not exist, and the working
     directory holds nothing new (no half-written file, no temporary debris).
Rows that do not apply (a command that reads no file) say so in docs/BAD_INPUTS.md. Then the NaN
rows: a NaN in an .npy input reaches exactly the output rows that use it (attention), and a
model file with a NaN weight is refused by every command that loads it.
"""
import argparse
import json
import os
import re
import shutil
import struct
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
    # attnlab's own errors: "attnlab <command>: error: ..." as the last line, exit 1; usage
    # errors (CLI11): the problem, then "Run with --help for more information.", exit 2.
    usage = (last == "Run with --help for more information." or
             re.match(r"attnlab( [a-z-]+)?: usage error: ", last) is not None)
    if usage and p.returncode != 2:
        problems.append(f"a usage error exits {p.returncode}, not 2")
    if not usage:
        if p.returncode != 1:
            problems.append(f"exit status {p.returncode}, not 1")
        if not re.match(r"attnlab( [a-z-]+)?: error: ", last):
            problems.append(f"stderr's last line is not an attnlab error: {last!r}")
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


def poison_weight(path, tensor, value):
    """Sets the first value of an F32 tensor of a safetensors file in place."""
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        assert header[tensor]["dtype"] == "F32", header[tensor]
        f.seek(8 + n + header[tensor]["data_offsets"][0])
        f.write(struct.pack("<f", value))


def nan_inputs_reach_exactly_their_rows(cli, d, x):
    """The .npy NaN row of the catalogue: attention computes with NaN as IEEE arithmetic (and
    PyTorch) do. A NaN in q[0, 0, 1] makes exactly output row (0, 0, 1) NaN; a NaN in k[0, 0, 1]
    under a causal mask exactly the rows of head 0 that see key 1 (i >= 1). Every other row is
    what the NaN-free run gives. Both kernels, exit status 0."""
    for kernel in ("flash", "reference"):
        for which, expect in (("q", {(0, 0, 1)}), ("k", {(0, 0, i) for i in range(1, 4)})):
            arrays = {n: x.copy() for n in "qkv"}
            arrays[which][0, 0, 1, 3] = np.nan
            for n, a in arrays.items():
                np.save(os.path.join(d, f"nan_{n}.npy"), a)
            outs = {}
            for tag, names in (("nan", ("nan_q", "nan_k", "nan_v")), ("clean", ("q", "k", "v"))):
                args = ["attention", "--q", names[0] + ".npy", "--k", names[1] + ".npy", "--v",
                        names[2] + ".npy", "--causal", "--kernel", kernel, "--o",
                        f"o_{tag}.npy", "--lse", f"l_{tag}.npy"]
                p = subprocess.run([cli, *args], cwd=d, capture_output=True, text=True)
                row = f"attention/nan-input ({which}, {kernel})"
                if p.returncode != 0:
                    FAILURES.append(f"{row}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
                    return
                outs[tag] = (np.load(os.path.join(d, f"o_{tag}.npy")),
                             np.load(os.path.join(d, f"l_{tag}.npy")))
            (o, lse), (o0, lse0) = outs["nan"], outs["clean"]
            got = {idx for idx in np.ndindex(*o.shape[:3]) if np.isnan(o[idx]).any()}
            got_lse = {idx for idx in np.ndindex(*lse.shape) if np.isnan(lse[idx])}
            problems = []
            if got != expect:
                problems.append(f"NaN output rows {sorted(got)}, expected {sorted(expect)}")
            if got_lse != expect:
                problems.append(f"NaN lse rows {sorted(got_lse)}, expected {sorted(expect)}")
            for idx in np.ndindex(*o.shape[:3]):
                if idx not in expect and not np.array_equal(o[idx], o0[idx]):
                    problems.append(f"row {idx} differs from the NaN-free run")
            if problems:
                FAILURES.append(f"{row}: " + "; ".join(problems))
            else:
                print(f"ok {row}: NaN rows {sorted(got)}")
            for f in os.listdir(d):
                if re.match(r"(nan_[qkv]|[ol]_(nan|clean))\.npy$", f):
                    os.remove(os.path.join(d, f))


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
        os.mkdir(os.path.join(d, "adir"))
        with open(os.path.join(d, "blob.bin"), "wb") as f:  # a binary file given as a text
            f.write(bytes(range(256)) * 16)
        with open(os.path.join(d, "big.json"), "w") as f:  # sparse: 16 MiB + 1 of nothing
            f.write("{")
        os.truncate(os.path.join(d, "big.json"), (16 << 20) + 1)
        np.save(os.path.join(d, "qi.npy"), x.astype("<i4"))
        # The checkpoint with one NaN weight (wte[0]), and a data directory whose tokens do not
        # match its tokenizer (vocab_size 300 in the token files' headers).
        shutil.copytree(os.path.join(d, "ckpt"), os.path.join(d, "cknan"))
        poison_weight(os.path.join(d, "cknan", "model.safetensors"), "wte", float("nan"))
        shutil.copytree(os.path.join(d, "data"), os.path.join(d, "data300"))
        for n in ("train.tok", "val.tok"):
            path = os.path.join(d, "data300", n)
            with open(path, "r+b") as f:
                f.seek(16)
                f.write(struct.pack("<I", 300))

        att = ["attention", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--o", "o.npy"]
        rows = [
            # attention
            ("attention/missing-file", ["attention", "--q", "nothere.npy", "--k", "k.npy", "--v",
                                        "v.npy", "--o", "o.npy"], "nothere.npy: no such file",
             ["o.npy"]),
            ("attention/wrong-type", ["attention", "--q", "text.txt", "--k", "k.npy", "--v",
                                      "v.npy", "--o", "o.npy"], "not a .npy file", ["o.npy"]),
            ("attention/out-of-range", att + ["--window-left", "-3"],
             "--window-left must be >= 0", ["o.npy"]),
            # memory (reads no file)
            ("memory/wrong-type", ["memory", "--n", "abc"], "--n", []),
            ("memory/out-of-range", ["memory", "--n", "0"], "--n must be >= 1", []),
            # bench (reads no file)
            ("bench/wrong-type", ["bench", "attention", "--n", "x"], "--n", []),
            ("bench/out-of-range", ["bench", "attention", "--n", "64", "--head-dim", "0"],
             "head", []),
            ("bench-model/out-of-range", ["bench", "model", "--steps", "-1"], "--steps", []),
            # tokenize
            ("tokenize/missing-file", ["tokenize", "--tokenizer", "nothere.json", "--prompt", "hi"],
             "nothere.json", []),
            ("tokenize/wrong-type", ["tokenize", "--tokenizer", "q.npy", "--prompt", "hi"],
             "malformed JSON", []),
            ("tokenize/out-of-range", ["tokenize", "--train", "text.txt", "--merges", "-1",
                                       "--out", "vdir"], "--merges", ["vdir"]),
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
            ("train/out-of-range-first-token-power",
             ["train", "--data", "data", "--out", "ck2", "--first-token-penalty", "0.1",
              "--first-token-power", "3"], "'first_token_power' = 3 is outside [1, 2]",
             ["ck2", "ck2.log.jsonl"]),
            ("train/out-of-range-first-token-penalty",
             ["train", "--data", "data", "--out", "ck2", "--layers", "1", "--d-model", "16",
              "--heads", "2", "--context", "16", "--steps", "1", "--first-token-penalty", "1",
              "--mask-first-key"],
             "the first-token penalty is defined for causal standard softmax attention",
             ["ck2", "ck2.log.jsonl"]),
            ("train/out-of-range-position-every-layer",
             ["train", "--data", "data", "--out", "ck2", "--position-every-layer"],
             "position_every_layer adds the learned position table before every layer",
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
            ("analyze/out-of-range-view", ["analyze", "--model", "ckpt", "--text", "text.txt",
                                           "--view-tokens", "4096", "--out", "rep"],
             "--view-tokens", ["rep"]),
            # the global flag
            ("global/out-of-range", ["--threads", "0", "memory", "--n", "4"],
             "--threads: Value 0 not in range 1 to 1024", []),
            ("global/out-of-range-simd", ["--simd", "avx3", "memory", "--n", "4"],
             "--simd: unknown SIMD target 'avx3'; expected baseline, avx2 or avx512", []),
            # wrong types: a directory where a file belongs, a file where a directory belongs,
            # a file of the wrong kind or dtype
            ("attention/wrong-type-directory", ["attention", "--q", "adir", "--k", "k.npy", "--v",
                                                "v.npy", "--o", "o.npy"],
             "adir: not a regular file", ["o.npy"]),
            ("attention/wrong-dtype", ["attention", "--q", "qi.npy", "--k", "k.npy", "--v",
                                       "v.npy", "--o", "o.npy"],
             "expected dtype float32 ('<f4') or float64 ('<f8'), found int32", ["o.npy"]),
            ("attention/wrong-type-mask", att + ["--mask", "text.txt"], "not a .npy file",
             ["o.npy"]),
            ("bench-model/wrong-type", ["bench", "model", "--layers", "x"],
             "--layers", []),
            ("bench-decode/wrong-type", ["bench", "decode", "--len", "x"],
             "--len: expected cache lengths in [1, 2^24] separated by commas, got 'x'", []),
            ("bench-decode/out-of-range", ["bench", "decode", "--len", "64", "--dtype", "f8"],
             "unknown KV cache dtype 'f8'", []),
            ("bench-suite/wrong-type", ["bench", "suite", "--repeats", "x"],
             "--repeats", []),
            ("bench-suite/out-of-range", ["bench", "suite", "--repeats", "0"],
             "--repeats: Value 0 not in range", []),
            ("generate/out-of-range-kv-dtype", ["generate", "--model", "ckpt", "--kv-dtype", "f8",
                                                "--max-tokens", "2"],
             "unknown KV cache dtype 'f8'; expected f32, bf16 or f16", []),
            ("tokenize/missing-file-text", ["tokenize", "--tokenizer", "byte", "--text",
                                            "nothere.txt"], "nothere.txt: no such file", []),
            ("tokenize/wrong-type-directory", ["tokenize", "--tokenizer", "byte", "--text",
                                               "adir"], "adir: not a regular file", []),
            ("tokenize/wrong-type-batch", ["tokenize", "--tokenizer", "byte", "--batch",
                                           "text.txt"], "expected a JSON array of strings", []),
            ("tokenize/out-of-range-ids", ["tokenize", "--tokenizer", "byte", "--ids", "300"],
             "token id 300 is outside [0, 257)", []),
            ("prepare/wrong-type-directory", ["prepare", "--text", "adir", "--out", "d2"],
             "adir: not a regular file", ["d2"]),
            ("train/wrong-type-file-as-data", ["train", "--data", "text.txt", "--out", "ck2"],
             "expected a directory made by attnlab prepare", ["ck2", "ck2.log.jsonl"]),
            ("train/wrong-type-directory-as-config", ["train", "--data", "data", "--config",
                                                      "adir", "--out", "ck2"],
             "adir: not a regular file", ["ck2", "ck2.log.jsonl"]),
            ("train/missing-file-resume", ["train", "--data", "data", "--resume", "--out",
                                           "nothere"], "no checkpoint at nothere", ["nothere"]),
            ("train/shape-mismatch-tokens", ["train", "--data", "data300", "--out", "ck2"],
             "the data's tokens (vocabulary 300) do not match its tokenizer (257)",
             ["ck2", "ck2.log.jsonl"]),
            ("train/shape-mismatch-seq-len", ["train", "--data", "data", "--out", "ck2",
                                              "--layers", "1", "--d-model", "16", "--heads", "2",
                                              "--context", "16", "--seq-len", "32"],
             "seq_len 32 exceeds the model's context 16", ["ck2", "ck2.log.jsonl"]),
            ("train/huge-config-file", ["train", "--data", "data", "--config", "big.json",
                                        "--out", "ck2"],
             "16777217 bytes is more than the 16777216 bytes expected", ["ck2", "ck2.log.jsonl"]),
            ("train/huge-sizes", ["train", "--data", "data", "--out", "ck2", "--d-model",
                                  "65536", "--layers", "1024", "--heads", "1"],
             "GiB for weights, gradients and AdamW moments, more than this machine's",
             ["ck2", "ck2.log.jsonl"]),
            ("train/nan-divergence", ["train", "--data", "data", "--out", "ck2", "--layers", "1",
                                      "--d-model", "16", "--heads", "2", "--context", "16",
                                      "--batch", "2", "--steps", "40", "--eval-batches", "1",
                                      "--lr", "1e30", "--warmup", "0", "--grad-clip", "0",
                                      "--checkpoint-every", "1000"],
             "training stopped: 20 consecutive steps with NaN/Inf loss or gradients",
             ["ck2", "ck2.log.jsonl"]),
            ("generate/wrong-type-directory", ["generate", "--model", "ckpt", "--tokenizer",
                                               "adir"], "holds neither GPT-2's encoder.json", []),
            ("eval/wrong-type-directory", ["eval", "--model", "ckpt", "--text", "adir"],
             "adir: not a regular file", []),
            ("logits/missing-file-text", ["logits", "--model", "ckpt", "--text", "nothere.txt",
                                          "--out", "l.npy"], "nothere.txt: no such file",
             ["l.npy"]),
            ("logits/wrong-type-directory", ["logits", "--model", "adir", "--tokens", "1",
                                             "--out", "l.npy"], "adir: not a model", ["l.npy"]),
            ("stream/wrong-type-directory", ["stream", "--model", "ckpt", "--text", "adir"],
             "adir: not a regular file", []),
            ("stream/out-of-range-policy", ["stream", "--model", "ckpt", "--text", "text.txt",
                                            "--policy", "foo"], "unknown cache policy 'foo'",
             []),
            ("stream/out-of-range-budget", ["stream", "--model", "ckpt", "--text", "text.txt",
                                            "--policy", "h2o", "--window", "4", "--sinks", "4"],
             "something must be left to choose from", []),
            ("stream/out-of-range-snapkv", ["stream", "--model", "ckpt", "--text", "text.txt",
                                            "--policy", "snapkv", "--snap-kernel", "4"],
             "--snap-kernel must be odd", []),
            ("analyze/out-of-range-classes", ["analyze", "--model", "ckpt", "--text", "text.txt",
                                              "--class-rows", "-1", "--out", "rep"],
             "--class-rows", ["rep"]),
            ("analyze/wrong-type-directory", ["analyze", "--model", "ckpt", "--text", "adir",
                                              "--out", "rep"], "adir: not a regular file",
             ["rep"]),
            ("eval/wrong-type-binary", ["eval", "--model", "ckpt", "--text", "blob.bin"],
             "does not look like text", []),
            ("analyze/wrong-type-binary", ["analyze", "--model", "ckpt", "--text", "blob.bin",
                                           "--out", "rep"], "does not look like text", ["rep"]),
            ("stream/wrong-type-binary", ["stream", "--model", "ckpt", "--text", "blob.bin"],
             "does not look like text", []),
            ("report-demo/wrong-type-file-as-parent", ["report-demo", "--out", "text.txt/rep"],
             "text.txt", []),
            # experiment: a failed run removes the report directory it created
            ("experiment/missing-file", ["experiment", "heads", "--quick", "--data", "nothere",
                                         "--out", "exp"], "nothere: no such file", ["exp"]),
            ("experiment/wrong-type", ["experiment", "heads", "--quick", "--data", "text.txt",
                                       "--out", "exp/sub"], "text.txt: not a model", ["exp"]),
            ("experiment/wrong-type-file-as-data", ["experiment", "collapse-training", "--quick",
                                                    "--data", "text.txt", "--out", "exp"],
             "text.txt/train.tok", ["exp"]),
            ("experiment/out-of-range", ["experiment", "nothere", "--out", "exp"],
             "unknown experiment 'nothere'", ["exp"]),
            ("experiment/out-of-range-threads", ["experiment", "collapse-depth", "--quick",
                                                 "--threads", "0", "--out", "exp"],
             "--threads: Value 0 not in range 1 to 1024", ["exp"]),
            ("experiment/out-of-range-head", ["experiment", "manipulate", "--quick", "--layer",
                                              "99", "--head", "0", "--out", "exp"],
             "is not a head of this model", ["exp"]),
            ("experiment/out-of-range-head-flag", ["experiment", "heads", "--quick", "--layer",
                                                   "0", "--head", "0", "--out", "exp"],
             "--layer and --head are for experiments that study one head", ["exp"]),
            # NaN weights: the loaders refuse them, so every command that loads a model does
            ("eval/nan-weights", ["eval", "--model", "cknan", "--text", "text.txt"],
             "tensor 'wte' has NaN at index 0", []),
            ("generate/nan-weights", ["generate", "--model", "cknan", "--max-tokens", "3"],
             "tensor 'wte' has NaN at index 0", []),
            ("logits/nan-weights", ["logits", "--model", "cknan", "--tokens", "1", "--out",
                                    "l.npy"], "tensor 'wte' has NaN at index 0", ["l.npy"]),
            ("train/nan-weights-resume", ["train", "--data", "data", "--resume", "--out",
                                          "cknan", "--layers", "1", "--d-model", "16",
                                          "--heads", "2", "--context", "16", "--batch", "2",
                                          "--steps", "4", "--eval-batches", "1"],
             "tensor 'wte' has NaN at index 0", []),
        ]
        for row, args, needle, outputs in rows:
            check(cli, d, row, args, needle, outputs)
        nan_inputs_reach_exactly_their_rows(cli, d, x)
    if FAILURES:
        print("\n".join("FAIL " + f for f in FAILURES))
        sys.exit(1)
    print(f"bad_inputs_cli_test: {len(rows)} rows ok")


if __name__ == "__main__":
    main()
