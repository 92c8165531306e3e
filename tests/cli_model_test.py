#!/usr/bin/python3
"""The model commands end to end (prepare -> train -> resume -> generate -> eval -> logits) on a
small text this test writes, and every bad input the model issue lists: unknown config keys,
impossible shapes, missing files, a tokenizer that does not match the model's vocabulary. Each
bad input must print one clear `attnlab <command>: error: ...` line and exit non-zero."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

FAILURES = []


def run(cli, *args, expect_ok=True, needle=None):
    p = subprocess.run([cli, *args], capture_output=True, text=True, errors="replace")
    ok = p.returncode == 0
    label = " ".join(args[:2])
    if ok != expect_ok:
        FAILURES.append(f"{' '.join(args)}: exit {p.returncode}, expected "
                        f"{'0' if expect_ok else 'non-zero'}\nstdout: {p.stdout[-500:]}\nstderr: {p.stderr[-800:]}")
        return p
    if not expect_ok:
        err = p.stderr.strip().splitlines()
        if not err or "error" not in err[-1]:
            FAILURES.append(f"{' '.join(args)}: no error line on stderr: {p.stderr!r}")
        elif needle and needle not in p.stderr:
            FAILURES.append(f"{' '.join(args)}: error does not mention {needle!r}: {err[-1]}")
        else:
            print(f"ok (error as expected) {label}: {err[-1][:110]}")
    else:
        print(f"ok {label}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    cli = ap.parse_args().attnlab
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "text.txt")
        words = "the jury said the city of atlanta and the election was conducted".split()
        rng = np.random.default_rng(0)
        with open(text, "w") as f:
            for para in range(200):
                f.write(" ".join(rng.choice(words, size=40)) + ".\n\n")
        data = os.path.join(d, "data")
        run(cli, "prepare", "--text", text, "--tokenizer", "bpe:64", "--out", data)
        info = json.load(open(os.path.join(data, "corpus.json")))
        assert 257 < info["vocab_size"] <= 256 + 64 + 1, info  # merges stop when pairs run out

        ck = os.path.join(d, "ckpt")
        common = ["--data", data, "--out", ck, "--layers", "2", "--d-model", "32", "--heads", "4",
                  "--context", "32", "--batch", "4", "--warmup", "2", "--eval-every", "5",
                  "--eval-batches", "2", "--log-every", "5", "--checkpoint-every", "5", "--bos"]
        run(cli, "train", *common, "--steps", "10")
        log = [json.loads(l) for l in open(ck + ".log.jsonl")]
        assert [r["step"] for r in log] == list(range(1, 11)), [r["step"] for r in log]
        # Resuming a finished run with the same flags trains nothing more and keeps the log.
        run(cli, "train", *common, "--steps", "10", "--resume")
        # Changing a training flag on resume is refused.
        run(cli, "train", *common, "--steps", "10", "--lr", "0.5", "--resume", expect_ok=False,
            needle="lr")

        p = run(cli, "generate", "--model", ck, "--prompt", "the jury", "--max-tokens", "8",
                "--seed", "3")
        assert p.stdout.startswith("the jury"), p.stdout
        p = run(cli, "eval", "--model", ck, "--text", text, "--json")
        ev = json.loads(p.stdout)
        assert ev["tokens"] > 100 and np.isfinite(ev["loss"]), ev
        out = os.path.join(d, "l")
        run(cli, "logits", "--model", ck, "--tokens", "1,2,3,4", "--out", out)
        logits = np.load(os.path.join(out, "logits.npy"))
        assert logits.shape == (4, info["vocab_size"]), logits.shape

        # Streaming: policies, the comparison report, unlimited generation at constant memory.
        p = run(cli, "stream", "--model", ck, "--text", text, "--policy", "sink", "--sinks", "2",
                "--window", "16", "--max-tokens", "200", "--chunk", "50")
        assert "done: 200 tokens" in p.stdout, p.stdout[-400:]  # BOS first: every token scored
        rep = os.path.join(d, "stream")
        run(cli, "stream", "--model", ck, "--text", text, "--compare", "--sinks", "2",
            "--window", "16", "--max-tokens", "150", "--out", rep)
        js = json.load(open(os.path.join(rep, "stream.json")))
        assert [r["policy"] for r in js["results"]] == [
            "dense", "window", "sink", "recompute", "h2o", "h2o+sinks", "tova", "tova+sinks",
            "snapkv", "snapkv+sinks"], js
        assert os.path.getsize(os.path.join(rep, "report.html")) > 1000
        p = run(cli, "generate", "--model", ck, "--prompt", "the", "--policy", "sink",
                "--sinks", "2", "--window", "16", "--max-tokens", "100", "--temperature", "0")
        assert "100 tokens generated" in p.stderr, p.stderr
        run(cli, "stream", "--model", ck, "--text", text, "--policy", "sink", "--sinks", "4",
            "--window", "4", expect_ok=False, needle="larger than --sinks")
        run(cli, "stream", "--model", ck, "--text", text, "--policy", "window", "--window", "64",
            expect_ok=False, needle="exceeds the model's context")
        run(cli, "stream", "--model", ck, "--text", os.path.join(d, "missing.txt"),
            expect_ok=False, needle="missing")
        run(cli, "stream", "--model", ck, "--text", text, "--policy", "lru", expect_ok=False,
            needle="unknown cache policy")

        # Bad inputs.
        cfg = os.path.join(d, "bad.json")
        json.dump({"model": {"n_layer": 2, "d_model": 32, "n_head": 4, "wings": 3}}, open(cfg, "w"))
        run(cli, "train", "--data", data, "--config", cfg, "--steps", "1", expect_ok=False,
            needle="wings")
        json.dump({"model": {"n_layer": 2, "d_model": 30, "n_head": 4}}, open(cfg, "w"))
        run(cli, "train", "--data", data, "--config", cfg, "--steps", "1", expect_ok=False,
            needle="multiple of n_head")
        json.dump({"train": {"batch": 4, "rocket": 1}}, open(cfg, "w"))
        run(cli, "train", "--data", data, "--config", cfg, expect_ok=False, needle="rocket")
        run(cli, "train", "--data", os.path.join(d, "nope"), "--steps", "1", expect_ok=False)
        run(cli, "train", "--data", data, "--layers", "0", "--steps", "1", expect_ok=False,
            needle="n_layer")
        run(cli, "train", "--data", data, "--context", "16", "--seq-len", "64", "--steps", "1",
            expect_ok=False, needle="seq_len")
        run(cli, "generate", "--model", os.path.join(d, "missing"), "--prompt", "x",
            expect_ok=False, needle="missing")
        run(cli, "generate", "--model", ck, "--tokenizer", "byte", "--prompt", "x",
            expect_ok=False, needle="does not match")
        run(cli, "eval", "--model", ck, "--text", os.path.join(d, "missing.txt"), expect_ok=False)
        empty = os.path.join(d, "empty.txt")
        open(empty, "w").close()
        run(cli, "eval", "--model", ck, "--text", empty, expect_ok=False, needle="empty")
        run(cli, "logits", "--model", ck, "--tokens", "1,x", "--out", out, expect_ok=False)
        run(cli, "logits", "--model", ck, "--tokens", "1,99999", "--out", out, expect_ok=False,
            needle="vocabulary")
        run(cli, "generate", "--model", ck, "--prompt", "x", "--temperature", "-1",
            expect_ok=False, needle="temperature")
        run(cli, "generate", "--model", ck, "--prompt", "the " * 40, expect_ok=False,
            needle="context")
        not_model = os.path.join(d, "notmodel.bin")
        open(not_model, "wb").write(b"\x00" * 100)
        run(cli, "logits", "--model", not_model, "--tokens", "1", "--out", out, expect_ok=False,
            needle="not a model")
    if FAILURES:
        print("\n\n".join(FAILURES))
        sys.exit(1)
    print("all model-command checks passed")


if __name__ == "__main__":
    main()
