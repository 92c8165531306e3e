#!/usr/bin/python3
"""docs/CLI.md's conventions, checked across every command.

For each command: a quick valid run with `--threads 1` AFTER the command name and `--json` must
exit 0 and print exactly one JSON document on stdout; a missing required option or an out-of-range
value must exit 2 with a "usage error" line; a runtime failure (a missing or binary --text file)
must exit 1 with an "error" line; `--out` must end up a directory. The front door: `attnlab` alone
(exit 2) and `attnlab --help` (exit 0) list every command with one line each; a misspelt command
gets a suggestion (exit 2); `attnlab --version` names the commit and the SIMD target.

Run by ctest as: /usr/bin/python3 cli_conventions_test.py --attnlab <path to the CLI>
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FAILURES = []

# Every visible command, as `attnlab --help` must list them.
COMMANDS = ["analyze", "stream", "generate", "experiment", "attention", "memory", "bench",
            "prepare", "tokenize", "train", "eval", "logits"]


def run(cli, args, cwd):
    return subprocess.run([cli] + args, cwd=cwd, capture_output=True, text=True, timeout=600)


def expect(cond, what, p=None):
    if cond:
        print("ok " + what)
    else:
        extra = f"\n    exit {p.returncode}; stdout {p.stdout[-300:]!r}; stderr {p.stderr[-500:]!r}" if p else ""
        FAILURES.append(what + extra)
        print("FAIL " + what + extra)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    cli = os.path.realpath(ap.parse_args().attnlab)
    with tempfile.TemporaryDirectory(prefix="attnlab_conv_") as d:
        text = os.path.join(d, "t.txt")
        shutil.copy(os.path.join(ROOT, "data", "sample.txt"), text)
        binary = os.path.join(d, "b.bin")
        with open(binary, "wb") as f:
            f.write(bytes(range(256)) * 64)
        rng = np.random.default_rng(0)
        for n in ("q", "k", "v"):
            np.save(os.path.join(d, n + ".npy"), rng.standard_normal((1, 2, 40, 16), dtype=np.float32))
        small = os.path.join(d, "small.txt")
        with open(small, "w") as f:
            for i in range(60):
                f.write("the jury said the city was well run and the election was fair.\n\n")

        # ---- The front door.
        p = run(cli, [], d)
        expect(p.returncode == 2 and all(c in p.stderr for c in COMMANDS),
               "`attnlab` alone: exit 2 and the overview of every command", p)
        p = run(cli, ["--help"], d)
        expect(p.returncode == 0 and all(f"\n  {c} " in p.stdout for c in COMMANDS),
               "`attnlab --help`: exit 0, one line per command", p)
        for wrong, want in (("analyse", "analyze"), ("evl", "eval"), ("strem", "stream"),
                            ("foo", None)):
            p = run(cli, [wrong], d)
            ok = p.returncode == 2 and f"unknown command '{wrong}'" in p.stderr
            if want:
                ok = ok and "did you mean" in p.stderr and want in p.stderr
            expect(ok, f"`attnlab {wrong}`: exit 2, unknown command" + (f", suggests {want}" if want else ""), p)
        p = run(cli, ["--version"], d)
        expect(p.returncode == 0 and "commit" in p.stdout and "SIMD" in p.stdout,
               "`attnlab --version` names the commit and the SIMD target", p)

        # ---- A quick valid run of every command: --threads after the name, --json on stdout.
        out = lambda n: os.path.join(d, "out_" + n)
        valid = {
            "analyze": ["--max-tokens", "40", "--out", out("analyze")],
            "stream": ["--max-tokens", "300", "--policy", "sink", "--window", "64", "--out", out("stream")],
            "generate": ["--max-tokens", "5", "--prompt", "The jury"],
            "experiment": ["--list"],
            "attention": ["--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--causal", "--o", "o.npy"],
            "memory": ["--n", "1024"],
            "bench": ["attention", "--n", "64", "--head-dim", "16", "--repeats", "1"],
            "prepare": ["--text", small, "--tokenizer", "byte", "--out", out("prepare")],
            "tokenize": ["--tokenizer", "byte", "--prompt", "hi"],
            "train": ["--data", out("prepare"), "--out", out("train"), "--layers", "1", "--d-model",
                      "16", "--heads", "2", "--context", "32", "--batch", "2", "--steps", "2",
                      "--warmup", "1"],
            "eval": ["--max-tokens", "20"],
            "logits": ["--tokens", "1,2,3", "--out", out("logits")],
        }
        assert sorted(valid) == sorted(COMMANDS)
        for c in COMMANDS:
            args = [c] + valid[c][:1] if c == "bench" else [c]
            rest = valid[c][1:] if c == "bench" else valid[c]
            p = run(cli, args + ["--threads", "1"] + rest + ["--json"], d)
            try:
                json.loads(p.stdout)
                parsed = True
            except ValueError:
                parsed = False
            expect(p.returncode == 0 and parsed,
                   f"{c}: --threads after the command and --json give one JSON document", p)
            if "--out" in rest:
                o = rest[rest.index("--out") + 1]
                expect(os.path.isdir(o), f"{c}: --out {os.path.basename(o)} is a directory")

        # ---- Usage errors: exit 2 with one "usage error" (or CLI11) line.
        usage = [
            ["attention", "--k", "k.npy", "--v", "v.npy", "--o", "o.npy"],   # missing --q
            ["memory"],                                                          # missing --n
            ["prepare", "--text", small],                                        # missing --out
            ["logits", "--tokens", "1,2"],                                       # missing --out
            ["train", "--out", out("x")],                                        # missing --data
            ["tokenize", "--tokenizer", "byte"],                                 # no input
            ["experiment"],                                                      # no name
            ["experiment", "no-such-experiment"],
            ["analyze", "--max-tokens", "0"],
            ["eval", "--max-tokens", "0"],
            ["logits", "--tokens", "1", "--max-tokens", "0", "--out", out("x")],
            ["stream", "--max-tokens", "0"],
            ["stream", "--window", "0"],
            ["generate", "--max-tokens", "0"],
            ["analyze", "--text", text, "--prompt", "both"],
            ["memory", "--n", "1024", "--heads", "0"],
        ]
        for args in usage:
            p = run(cli, args, d)
            expect(p.returncode == 2, "usage error exits 2: attnlab " + " ".join(
                os.path.basename(a) for a in args), p)
        # ---- Runtime errors: exit 1 with "attnlab <command>: error: ...".
        for args, needle in (
                (["eval", "--text", os.path.join(d, "missing.txt")], "missing.txt"),
                (["eval", "--text", binary], "does not look like text"),
                (["analyze", "--text", binary, "--out", out("bin")], "does not look like text"),
                (["stream", "--text", binary], "does not look like text"),
                (["tokenize", "--tokenizer", "byte", "--text", os.path.join(d, "missing.txt")],
                 "missing.txt")):
            p = run(cli, args, d)
            last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
            expect(p.returncode == 1 and ": error: " in last and needle in p.stderr,
                   f"runtime error exits 1 naming {needle!r}: attnlab {args[0]}", p)
    if FAILURES:
        print(f"\n{len(FAILURES)} convention(s) broken")
        sys.exit(1)
    print("every command follows docs/CLI.md")


if __name__ == "__main__":
    main()
