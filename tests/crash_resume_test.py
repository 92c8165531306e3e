#!/usr/bin/python3
"""Crash safety of `attnlab train`: kill it with SIGKILL at random moments and check, every time,
that a loadable checkpoint remains and that resuming reproduces the uninterrupted run exactly.

The test writes a small text, runs `attnlab prepare` on it (byte tokenizer), trains a tiny model
once without interruption (the reference: per-step losses in REF.log.jsonl, final weights), then,
for each of TRIALS trials:
  1. starts the same training into a fresh directory, waits until its first checkpoint exists
     (before that there is nothing to keep), then sleeps a random fraction of the reference
     run's duration and sends SIGKILL (checkpoints are written every step, so most kills land in
     or near a save);
  2. checks that `attnlab eval` loads the checkpoint left behind (CKPT, or CKPT.old when the kill
     fell between the two renames of a save);
  3. resumes with `attnlab train ... --resume` and lets it finish;
  4. compares the resumed log with the reference: one record per step 1..STEPS, each loss and
     gradient norm equal to the reference's bit for bit (Python parses the 17 significant digits
     nlohmann::json prints exactly), and the final model.safetensors equal byte for byte;
  5. checks that no temporary checkpoint directory (CKPT.tmp.*) is left behind.
Exit status 0 only if every trial passes. Takes about a minute on two cores.
"""
import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TRIALS = 24
STEPS = 12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    ap.add_argument("--trials", type=int, default=TRIALS)
    ap.add_argument("--seed", type=int, default=20240326)
    args = ap.parse_args()
    cli = os.path.abspath(args.attnlab)
    rng = random.Random(args.seed)
    failures = []

    def run(*argv, check=True):
        p = subprocess.run([cli, *argv], capture_output=True, text=True, errors="replace")
        if check and p.returncode != 0:
            raise SystemExit(f"FAILED: attnlab {' '.join(argv)}: exit {p.returncode}\n{p.stderr}")
        return p

    with tempfile.TemporaryDirectory(prefix="attnlab_crash_") as d:
        text = os.path.join(d, "text.txt")
        words = ("the jury said that the city of atlanta had conducted the election well and "
                 "without any evidence of irregularities in the primary").split()
        wr = random.Random(7)
        with open(text, "w") as f:
            for _ in range(120):
                f.write(" ".join(wr.choice(words) for _ in range(30)) + ".\n\n")
        data = os.path.join(d, "data")
        run("prepare", "--text", text, "--tokenizer", "byte", "--out", data)

        def train_args(out):
            return ["--threads", "2", "train", "--data", data, "--out", out, "--layers", "1",
                    "--d-model", "16", "--heads", "2", "--context", "16", "--batch", "4",
                    "--steps", str(STEPS), "--warmup", "2", "--lr", "0.003",
                    "--checkpoint-every", "1", "--eval-every", "4", "--eval-batches", "1",
                    "--log-every", "1"]

        def records(log_path):
            with open(log_path) as f:
                return [json.loads(line) for line in f if line.strip()]

        ref_dir = os.path.join(d, "ref")
        t0 = time.monotonic()
        run(*train_args(ref_dir))
        ref_seconds = time.monotonic() - t0
        ref = records(ref_dir + ".log.jsonl")
        assert [r["step"] for r in ref] == list(range(1, STEPS + 1)), [r["step"] for r in ref]
        with open(os.path.join(ref_dir, "model.safetensors"), "rb") as f:
            ref_weights = f.read()
        print(f"reference run: {STEPS} steps in {ref_seconds:.2f} s, "
              f"losses {ref[0]['loss']:.4f} -> {ref[-1]['loss']:.4f}")

        for trial in range(args.trials):
            tdir = os.path.join(d, f"trial{trial}")
            os.makedirs(tdir)
            ck = os.path.join(tdir, "ckpt")
            p = subprocess.Popen([cli, *train_args(ck)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            # Wait for the first checkpoint (or the end of the run).
            deadline = time.monotonic() + 60
            while not (os.path.isdir(ck) or os.path.isdir(ck + ".old")):
                if p.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.001)
            delay = rng.uniform(0, ref_seconds) * (0.05 if trial % 4 == 0 else 1.0)
            time.sleep(delay)
            finished = p.poll() is not None
            if not finished:
                p.send_signal(signal.SIGKILL)
            p.wait()
            where = ck if os.path.isdir(ck) else ck + ".old"
            label = (f"trial {trial}: killed after {delay * 1000:.0f} ms"
                     if not finished else f"trial {trial}: finished before the kill")
            if not os.path.isdir(where):
                failures.append(f"{label}: no checkpoint left (neither {ck} nor {ck}.old)")
                continue
            e = run("eval", "--model", ck, "--text", text, "--max-tokens", "64", "--json",
                    check=False)
            if e.returncode != 0:
                failures.append(f"{label}: the checkpoint left behind does not load: "
                                f"{e.stderr.strip()[-300:]}")
                continue
            left = json.load(open(os.path.join(where, "config.json")))["meta"]["step"]
            r = run(*train_args(ck), "--resume", check=False)
            if r.returncode != 0:
                failures.append(f"{label}: resume failed: {r.stderr.strip()[-300:]}")
                continue
            got = records(ck + ".log.jsonl")
            steps = [g["step"] for g in got]
            if steps != list(range(1, STEPS + 1)):
                failures.append(f"{label}: the resumed log has steps {steps}")
                continue
            for g, w in zip(got, ref):
                for key in ("loss", "grad_norm", "lr"):
                    if g[key] != w[key]:
                        failures.append(f"{label}: step {g['step']} {key} {g[key]!r} differs "
                                        f"from the uninterrupted run's {w[key]!r}")
            with open(os.path.join(ck, "model.safetensors"), "rb") as f:
                if f.read() != ref_weights:
                    failures.append(f"{label}: the final weights differ from the reference")
            debris = glob.glob(ck + ".tmp.*") + glob.glob(ck + ".old")
            if debris:
                failures.append(f"{label}: left behind {debris}")
            print(f"{label}: checkpoint at step {left} ({os.path.basename(where)}) loads; "
                  f"resumed run matches the reference bit for bit")
            shutil.rmtree(tdir, ignore_errors=True)

    if failures:
        print("\n".join("FAIL " + f for f in failures))
        sys.exit(1)
    print(f"crash_resume_test: {args.trials} SIGKILL trials, all resumed exactly")


if __name__ == "__main__":
    main()
