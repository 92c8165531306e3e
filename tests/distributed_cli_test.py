#!/usr/bin/python3
"""Data-parallel runs under OpenMPI (issue 36; docs/DISTRIBUTED.md), on this machine only:
`mpirun --allow-run-as-root --oversubscribe --mca btl self,vader` (shared memory; no network
address is ever a target).

  1. train: the same global batch (4 sequences) on P = 1 and P = 2 ranks (and P = 3, which
     shares 4 sequences unevenly) gives the same loss and gradient norm at each of 20 steps to
     within 1e-5 relative, and final weights equal to within a bound derived from fp32 rounding;
     only rank 0 writes (one log, one checkpoint, no debris); the JSON summary reports the
     all-reduce's bytes, time and the share hidden behind the backward.
  2. resume with a different P: 10 steps on 2 ranks, then --resume on 1 rank to step 20,
     matches the uninterrupted 1-rank run to 1e-5.
  3. eval: windows shared among the ranks give the single-process result bit for bit
     (tokens, loss) on the bundled text, and every window split across the ranks
     (--sequence-parallel, ring attention) gives it to the printed precision; analyze at P = 2 and 3 gives the one-process
     report.json to within 1e-9 relative (only the order of the sums' additions differs), with
     rank 0 alone writing and the same attention view; analyze --sequence-parallel (every
     window split across the ranks) gives every number within 1e-5 relative or 1e-7 absolute,
     also with a last window shorter than P; stream --compare at P = 2 and 3 gives
     every loss, perplexity, cache size and verdict of one process bit for bit.
  4. faults: a rank that stops answering (ATTNLAB_DIST_TEST_STALL) makes the job end within
     ATTNLAB_DIST_TIMEOUT plus a margin, non-zero, with an error naming the operation; a rank
     killed with SIGKILL in the middle of a 2-rank run with a checkpoint every step ends the job
     (no hang), and the checkpoint left behind loads and resumes.
  5. usage: a batch smaller than the number of ranks is refused on every rank with one clear
     line, exit 1, not a hang.
Skipped (exit 0, with a note) only when attnlab was built without MPI; a missing mpirun in an
MPI build is a failure (scripts/setup.sh installs openmpi-bin).
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "data", "sample.txt")
FAILURES = []
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
       "-x", "ATTNLAB_DIST_TIMEOUT", "-x", "ATTNLAB_DIST_TEST_STALL"]


def expect(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)


def run(argv, env=None, timeout=300, check=True):
    p = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env,
                       timeout=timeout)
    if check and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(argv)}: exit {p.returncode}\n{p.stdout[-2000:]}\n"
                 f"{p.stderr[-3000:]}")
    return p


def mpi(P, cli, *args, **kw):
    env = dict(os.environ)
    env.setdefault("ATTNLAB_DIST_TIMEOUT", "60")
    env.setdefault("ATTNLAB_DIST_TEST_STALL", "")
    env.update(kw.pop("extra_env", {}))
    return run(MPI + ["-np", str(P), cli, *args], env=env, **kw)


def records(log_path):
    with open(log_path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        assert v["dtype"] == "F32", v["dtype"]
        out[k] = np.frombuffer(b[8 + n + lo:8 + n + hi], dtype=np.float32)
    return out


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def compare_reports(a, b, path=""):
    """(largest relative difference over every number, other differences) between two
    report.json trees, leaving out run (times, memory) and input.ranks."""
    worst, other = 0.0, []
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return worst, [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        for k in a:
            if path == "" and k == "run" or path == ".input" and k == "ranks":
                continue
            w, o = compare_reports(a[k], b[k], f"{path}.{k}")
            worst, other = max(worst, w), other + o
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return worst, [f"{path}: lengths {len(a)} and {len(b)}"]
        for i, (u, v) in enumerate(zip(a, b)):
            w, o = compare_reports(u, v, f"{path}[{i}]")
            worst, other = max(worst, w), other + o
    elif isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            other.append(f"{path}: {a} vs {b}")
        elif not (np.isnan(a) and np.isnan(b)) and a != b:
            worst = abs(a - b) / max(abs(a), abs(b))
    elif a != b:
        other.append(f"{path}: {a} vs {b}")
    return worst, other


def close_reports(a, b, rtol, atol, path=""):
    """(numbers farther apart than rtol relative and atol absolute, the largest relative
    difference, other differences) between two report.json trees, leaving out run and
    input.ranks."""
    bad, worst, other = [], 0.0, []
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return bad, worst, [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        for k in a:
            if path == "" and k == "run" or path == ".input" and k == "ranks":
                continue
            x, w, o = close_reports(a[k], b[k], rtol, atol, f"{path}.{k}")
            bad, worst, other = bad + x, max(worst, w), other + o
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return bad, worst, [f"{path}: lengths {len(a)} and {len(b)}"]
        for i, (u, v) in enumerate(zip(a, b)):
            x, w, o = close_reports(u, v, rtol, atol, f"{path}[{i}]")
            bad, worst, other = bad + x, max(worst, w), other + o
    elif isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            other.append(f"{path}: {a} vs {b}")
        elif not (np.isnan(a) and np.isnan(b)) and a != b:
            worst = abs(a - b) / max(abs(a), abs(b))
            if abs(a - b) > rtol * max(abs(a), abs(b)) + atol:
                bad.append(f"{path}: {a} vs {b}")
    elif a != b:
        other.append(f"{path}: {a} vs {b}")
    return bad, worst, other


def stream_differences(a, b, path=""):
    """Where two stream --json documents differ, leaving out what measures time or memory
    (seconds, tokens/s, RSS, the memory sentence that quotes tokens/s, files, ranks)."""
    timing = {"seconds", "tokens_per_s", "rss_bytes", "files", "ranks", "memory"}
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}: keys {sorted(set(a) ^ set(b))}"] if set(a) != set(b) else []
        for k in set(a) & set(b):
            if k not in timing:
                out += stream_differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} and {len(b)}"]
        return [x for i, (u, v) in enumerate(zip(a, b))
                for x in stream_differences(u, v, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a} vs {b}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    args = ap.parse_args()
    cli = os.path.abspath(args.attnlab)
    version = run([cli, "--version"]).stdout
    if "distributed: MPI" not in version:
        print(f"SKIP: this attnlab was built without MPI ({version.strip()})")
        return 0
    if shutil.which("mpirun") is None:
        sys.exit("FAIL: attnlab was built with MPI but mpirun is missing (openmpi-bin; "
                 "scripts/setup.sh installs it)")

    with tempfile.TemporaryDirectory(prefix="attnlab_dist_") as d:
        # The bundled sample's words as 80 documents of 120 words (prepare holds every 20th out).
        with open(SAMPLE, encoding="utf-8") as f:
            words = f.read().split()
        text = os.path.join(d, "text.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n\n".join(" ".join(words[i:i + 120]) for i in range(0, 80 * 120, 120)))
        data = os.path.join(d, "data")
        run([cli, "prepare", "--text", text, "--tokenizer", "byte", "--out", data])

        def train_args(out, steps=20):
            return ["--threads", "1", "train", "--data", data, "--out", out, "--layers", "2",
                    "--d-model", "32", "--heads", "4", "--context", "32", "--batch", "4",
                    "--steps", str(steps), "--warmup", "3", "--lr", "0.003", "--bos",
                    "--checkpoint-every", "5", "--eval-every", "10", "--eval-batches", "2",
                    "--log-every", "1"]

        # ---- 1. P = 1 against P = 2 and P = 3 for the same global batch.
        ref = os.path.join(d, "p1")
        mpi(1, cli, *train_args(ref))
        ref_log = records(ref + ".log.jsonl")
        ref_w = load_safetensors(os.path.join(ref, "model.safetensors"))
        expect([r["step"] for r in ref_log] == list(range(1, 21)), "P = 1: 20 logged steps")
        for P in (2, 3):
            out = os.path.join(d, f"p{P}")
            p = mpi(P, cli, *train_args(out), "--json")
            got = records(out + ".log.jsonl")
            expect([r["step"] for r in got] == list(range(1, 21)), f"P = {P}: 20 logged steps")
            worst = max(max(rel(g[k], w[k]) for k in ("loss", "grad_norm"))
                        for g, w in zip(got, ref_log))
            expect(worst <= 1e-5, f"P = {P}: per-step loss and gradient norm within 1e-5 of "
                                  f"P = 1 (worst {worst:.2e})")
            vals = [(g["val_loss"], w["val_loss"]) for g, w in zip(got, ref_log) if "val_loss" in w]
            expect(len(vals) == 2 and all(rel(a, b) <= 1e-5 for a, b in vals),
                   f"P = {P}: validation losses equal P = 1's: {vals}")
            w = load_safetensors(os.path.join(out, "model.safetensors"))
            # Each step moves a weight by at most ~lr (Adam); the ranks' gradients differ from
            # the one-process gradient by fp32 rounding of the summation order, which Adam's
            # normalisation can turn into a relative change of the step where v is tiny: bound
            # the drift by 1e-3 of lr per step over 20 steps.
            drift = max(float(np.max(np.abs(w[k] - ref_w[k]))) for k in ref_w)
            expect(set(w) == set(ref_w) and drift <= 20 * 3e-3 * 1e-3,
                   f"P = {P}: final weights equal P = 1's to {drift:.2e} (bound 6e-5)")
            j = json.loads(p.stdout)
            dp = j.get("data_parallel") or {}
            expect(dp.get("ranks") == P and dp.get("allreduce_bytes_per_step", 0) > 0 and
                   0 <= dp.get("allreduce_hidden", -1) <= 1,
                   f"P = {P}: --json reports the all-reduce per step: {dp}")
            left = sorted(f for f in os.listdir(d) if f.startswith(f"p{P}"))
            expect(left == [f"p{P}", f"p{P}.log.jsonl"],
                   f"P = {P}: rank 0 alone wrote one checkpoint and one log: {left}")
            expect(f"{P} ranks" in p.stderr and p.stderr.count("trained") == 0,
                   f"P = {P}: one progress stream, naming the ranks")

        # ---- 2. A run saved on 2 ranks resumes on 1.
        half = os.path.join(d, "half")
        mpi(2, cli, *train_args(half, steps=20), "--stop-at", "10")
        expect(records(half + ".log.jsonl")[-1]["step"] == 10, "2 ranks stopped at step 10")
        mpi(1, cli, *train_args(half, steps=20), "--resume")
        got = records(half + ".log.jsonl")
        worst = max(rel(g["loss"], w["loss"]) for g, w in zip(got, ref_log))
        expect([r["step"] for r in got] == list(range(1, 21)) and worst <= 1e-5,
               f"resumed on 1 rank from a 2-rank checkpoint: losses within 1e-5 (worst {worst:.2e})")

        # ---- 3. eval split by windows: the same bits as one process.
        e1 = json.loads(run([cli, "eval", "--text", SAMPLE, "--max-tokens", "3000", "--json"]).stdout)
        for P in (2, 3):
            eP = json.loads(mpi(P, cli, "eval", "--text", SAMPLE, "--max-tokens", "3000",
                                "--json").stdout)
            expect(eP["tokens"] == e1["tokens"] and eP["loss"] == e1["loss"],
                   f"eval on {P} ranks equals one process: {eP['tokens']} tokens, loss "
                   f"{eP['loss']} vs {e1['loss']}")
            # Every window split across the ranks (ring attention): the same up to the order of
            # the additions (the JSON prints the loss to 1e-6).
            eS = json.loads(mpi(P, cli, "eval", "--text", SAMPLE, "--max-tokens", "3000",
                                "--sequence-parallel", "--json").stdout)
            expect(eS["tokens"] == e1["tokens"] and abs(eS["loss"] - e1["loss"]) <= 2e-6,
                   f"eval --sequence-parallel on {P} ranks equals one process: {eS['tokens']} "
                   f"tokens, loss {eS['loss']} vs {e1['loss']}")
        # A last window of fewer tokens than ranks (BOS + 1 token at 257 tokens) runs whole.
        s1 = json.loads(run([cli, "eval", "--text", SAMPLE, "--max-tokens", "257", "--json"]).stdout)
        s3 = json.loads(mpi(3, cli, "eval", "--text", SAMPLE, "--max-tokens", "257",
                            "--sequence-parallel", "--json").stdout)
        expect(s3["tokens"] == s1["tokens"] and abs(s3["loss"] - s1["loss"]) <= 2e-6,
               f"eval --sequence-parallel with a window shorter than the ranks: {s3} vs {s1}")

        # ---- 3b. analyze split by windows: the merged report equals one process's up to the
        # order of the sums' additions; rank 0 alone writes, and its attention view (window 0)
        # is the same bytes.
        a1 = os.path.join(d, "analyze1")
        run([cli, "--threads", "1", "analyze", "--text", SAMPLE,
             "--out", a1])
        r1 = json.load(open(os.path.join(a1, "report.json")))
        for P in (2, 3):
            aP = os.path.join(d, f"analyze{P}")
            mpi(P, cli, "--threads", "1", "analyze", "--text", SAMPLE,
                "--out", aP)
            rP = json.load(open(os.path.join(aP, "report.json")))
            worst, other = compare_reports(r1, rP)
            expect(rP["input"]["ranks"] == P and worst <= 1e-9 and not other,
                   f"analyze on {P} ranks equals one process: worst relative difference "
                   f"{worst:.2e} over every number, {len(other)} other differences {other[:3]}")
            same = open(os.path.join(a1, "attention.html"), "rb").read() == \
                open(os.path.join(aP, "attention.html"), "rb").read()
            expect(same and sorted(os.listdir(aP)) == sorted(os.listdir(a1)),
                   f"analyze on {P} ranks: one report directory, the same attention view")

        # ---- 3b'. analyze --sequence-parallel: every window split across the ranks (ring
        # attention, the diagnostics completed over the ranks layer by layer). The forward's
        # fp32 rounding moves the numbers: each within 1e-5 relative or 1e-7 absolute (an excess
        # of 5e-6 carries the subtraction's cancellation), nothing else different; and with a
        # last window of fewer tokens than ranks (BOS + 1 token at 511 text tokens), which every
        # rank runs whole.
        for P, extra in ((2, []), (3, []), (3, ["--max-tokens", "511"])):
            base = a1
            if extra:
                base = os.path.join(d, "analyze1short")
                run([cli, "--threads", "1", "analyze", "--text", SAMPLE, "--out", base] + extra)
            aS = os.path.join(d, f"analyze_sp{P}{'short' if extra else ''}")
            mpi(P, cli, "--threads", "1", "analyze", "--text", SAMPLE, "--out", aS,
                "--sequence-parallel", *extra)
            rb = json.load(open(os.path.join(base, "report.json")))
            rS = json.load(open(os.path.join(aS, "report.json")))
            bad, worst, other = close_reports(rb, rS, 1e-5, 1e-7)
            expect(rS["input"]["ranks"] == P and not bad and not other,
                   f"analyze --sequence-parallel on {P} ranks {extra} equals one process: worst "
                   f"relative difference {worst:.2e}, {len(bad)} numbers past 1e-5 relative and "
                   f"1e-7 absolute {bad[:3]}, {len(other)} other differences {other[:3]}")
            expect(sorted(os.listdir(aS)) == sorted(os.listdir(base)),
                   f"analyze --sequence-parallel on {P} ranks: one report directory")

        # ---- 3c. stream --compare: whole policies on one rank each, recompute's tokens shared;
        # every loss, perplexity and verdict bit for bit as one process (times differ).
        sargs = ["--threads", "1", "stream", "--compare", "--max-tokens", "600", "--window", "64",
                 "--sinks", "4", "--chunk", "100", "--json"]
        s1 = json.loads(run([cli] + sargs + ["--out", os.path.join(d, "stream1")]).stdout)
        for P in (2, 3):
            sP = json.loads(mpi(P, cli, *sargs, "--out", os.path.join(d, f"stream{P}")).stdout)
            diff = stream_differences(s1, sP)
            expect(sP["ranks"] == P and [r["policy"] for r in sP["results"]] ==
                   [r["policy"] for r in s1["results"]] and not diff,
                   f"stream --compare on {P} ranks equals one process (losses, perplexities, "
                   f"cache sizes, verdicts): {len(diff)} differences {diff[:3]}")
            expect(sorted(os.listdir(os.path.join(d, f"stream{P}"))) ==
                   sorted(os.listdir(os.path.join(d, "stream1"))),
                   f"stream --compare on {P} ranks: one report directory")

        # ---- 4a. A rank that never answers: the others time out with a clear error.
        t0 = time.monotonic()
        p = mpi(2, cli, *train_args(os.path.join(d, "stall")), check=False, timeout=120,
                extra_env={"ATTNLAB_DIST_TIMEOUT": "4", "ATTNLAB_DIST_TEST_STALL": "1:3"})
        dt = time.monotonic() - t0
        expect(p.returncode != 0 and dt < 60 and "waited" in p.stderr and "all-reduce" in p.stderr,
               f"a stalled rank ends the job in {dt:.1f} s (exit {p.returncode}) with: "
               f"{[l for l in p.stderr.splitlines() if 'waited' in l][:1]}")

        # ---- 4b. A rank killed with SIGKILL: the job ends; the checkpoint loads and resumes.
        ck = os.path.join(d, "killed")
        env = dict(os.environ, ATTNLAB_DIST_TIMEOUT="20", ATTNLAB_DIST_TEST_STALL="")
        argv = MPI + ["-np", "2", cli] + train_args(ck, steps=400)
        argv[argv.index("--checkpoint-every") + 1] = "1"
        job = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                               text=True, errors="replace")
        deadline = time.monotonic() + 60
        while not os.path.isdir(ck) and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.05)
        time.sleep(0.5)
        pids = run(["pgrep", "-f", "-P", str(job.pid), "attnlab"], check=False).stdout.split()
        if not pids:  # the ranks may be grandchildren (orted)
            pids = [l.split()[0] for l in run(["pgrep", "-a", "-f", ck], check=False)
                    .stdout.splitlines() if "mpirun" not in l]
        victim = pids[-1] if pids else None
        if victim:
            os.kill(int(victim), signal.SIGKILL)
        try:
            _, err = job.communicate(timeout=90)
            ended = True
        except subprocess.TimeoutExpired:
            job.kill()
            _, err = job.communicate()
            ended = False
        expect(victim is not None and ended and job.returncode != 0,
               f"SIGKILL of rank process {victim} ends the 2-rank job (exit {job.returncode})")
        where = ck if os.path.isdir(ck) else ck + ".old"
        e = run([cli, "eval", "--model", where, "--text", SAMPLE, "--max-tokens", "64", "--json"],
                check=False)
        expect(e.returncode == 0, f"the checkpoint left by the killed job loads: {e.stderr[-200:]}")
        if where != ck:
            os.rename(where, ck)
        r = mpi(2, cli, *train_args(ck, steps=400), "--stop-at",
                str(json.load(open(os.path.join(ck, "config.json")))["meta"]["step"] + 2),
                "--resume", check=False)
        expect(r.returncode == 0, f"and resumes on 2 ranks: {r.stderr[-300:]}")

        # ---- 5. A batch smaller than the ranks: one clear error, no hang.
        argv = train_args(os.path.join(d, "small"))
        argv[argv.index("--batch") + 1] = "1"
        p = mpi(2, cli, *argv, check=False, timeout=120)
        expect(p.returncode != 0 and "smaller than the 2 ranks" in p.stderr,
               f"batch 1 on 2 ranks refused: {p.stderr.strip().splitlines()[:2]}")

        # ---- 6. A malformed timeout: one clear line, with or without a launcher.
        for argv in ([cli, "eval", "--max-tokens", "10"],
                     MPI + ["-np", "2", cli, "eval", "--max-tokens", "10"]):
            p = run(argv, env=dict(os.environ, ATTNLAB_DIST_TIMEOUT="abc",
                                   ATTNLAB_DIST_TEST_STALL=""), check=False, timeout=120)
            expect(p.returncode != 0 and "ATTNLAB_DIST_TIMEOUT='abc': expected seconds > 0"
                   in p.stderr, f"ATTNLAB_DIST_TIMEOUT=abc refused ({argv[0]}): "
                   f"{p.stderr.strip().splitlines()[-1:]}")

    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("all distributed checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
