#!/usr/bin/python3
"""The cost of calling the engine from Python (issue 17): attnlab.attention at N = 4096 against
the flash forward kernel time `attnlab bench attention --json` reports in the same run, plus
the fixed per-call overhead at a tiny shape.

    PYTHONPATH=build/python ATTNLAB_BIN=build/attnlab /usr/bin/python3 bench/python_overhead.py
        [--n 4096] [--head-dim 64,128] [--heads 8] [--repeats 5] [--rounds 5] [--threads T]
        [--json]

Both sides use the same thread count (the engine default, or --threads) and time the median
of --repeats runs after one warm-up run; --rounds alternate the CLI and Python measurements
shape by shape. overhead % = (python - cli) / cli, from each side's best median (other load on
the machine only ever adds time), and "paired" = the median over rounds of the same ratio
within a round. The Python side allocates its output on every call (as users see it) and
computes no lse; the CLI's timer reuses one output buffer and writes lse.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import attnlab
from attnlab import _attnlab


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def cli_flash_ms(binary, n, dims, heads, causal, repeats, threads):
    """{head_dim: flash_fwd median ms} from one `attnlab bench attention --json` run on
    `threads` threads."""
    cmd = [binary, "--threads", str(threads), "bench", "attention", "--n", str(n),
           "--head-dim", ",".join(map(str, dims)), "--heads", str(heads), "--no-reference",
           "--repeats", str(repeats), "--json"]
    if causal:
        cmd.append("--causal")
    doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    assert doc["threads"] == threads, (doc["threads"], threads)
    return {row["shape"]["head_dim"]: row["time_ms"] for row in doc["rows"]
            if row["kernel"] == "flash_fwd"}


def median_ms(fn, repeats):
    fn()  # warm-up, as the CLI's timer does
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def per_call_us(fn, calls=20000, rounds=5):
    """Median over `rounds` of the mean time of one call, in microseconds."""
    fn()
    means = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(means)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--head-dim", default="64,128")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating CLI / Python rounds; each side's best median is kept")
    ap.add_argument("--threads", type=int, default=0, help="engine threads (0: the default)")
    ap.add_argument("--bin", default=os.environ.get("ATTNLAB_BIN", "build/attnlab"))
    ap.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = ap.parse_args()
    if args.threads > 0:
        attnlab.set_num_threads(args.threads)
    threads = attnlab.num_threads()
    dims = [int(d) for d in args.head_dim.split(",")]
    rng = np.random.default_rng(0)
    result = {"cpu": cpu_model(), "threads": threads, "simd": attnlab.simd_target(),
              "n": args.n, "heads": args.heads, "repeats": args.repeats, "rounds": args.rounds,
              "rows": []}
    say = (lambda *a: None) if args.json else print
    say(f"# CPU: {result['cpu']} | threads: {threads} | kernels: {result['simd']} | "
        f"median of {args.repeats} after a warm-up, best of {args.rounds} alternating rounds")
    say(f"{'shape':30s} {'cli kernel':>11s} {'python':>10s} {'overhead':>9s} {'paired':>9s}"
        "   (ms; overhead: best medians; paired: median of the rounds' pairs)")
    configs = [(causal, d) for causal in (False, True) for d in dims]
    inputs = {d: [rng.standard_normal((1, args.heads, args.n, d), dtype=np.float32)
                  for _ in range(3)] for d in dims}
    cli = {c: [] for c in configs}
    py = {c: [] for c in configs}
    # Alternate the two sides shape by shape, round after round, and keep each side's best
    # median: load from elsewhere on the machine comes and goes over seconds and only ever adds
    # time, so the best medians are the two sides measured under the same (quiet) conditions.
    # Odd rounds run Python first, so neither side always follows the other.
    for r in range(args.rounds):
        for causal, d in configs:
            q, k, v = inputs[d]
            sides = [
                lambda: cli[causal, d].append(cli_flash_ms(args.bin, args.n, [d], args.heads,
                                                           causal, args.repeats, threads)[d]),
                lambda: py[causal, d].append(median_ms(
                    lambda: attnlab.attention(q, k, v, causal=causal), args.repeats)),
            ]
            for side in sides[::-1] if r % 2 else sides:
                side()
    for causal, d in configs:
        c, p = min(cli[causal, d]), min(py[causal, d])
        overhead = 100 * (p - c) / c
        # The same from each round's adjacent pair, median over rounds: a second estimate,
        # robust to slow drift in the machine's speed.
        paired = 100 * statistics.median((y - x) / x for x, y in zip(cli[causal, d],
                                                                      py[causal, d]))
        shape = f"B=1 H={args.heads} N={args.n} D={d}" + (" causal" if causal else "")
        result["rows"].append({"shape": shape, "head_dim": d, "causal": causal,
                               "cli_kernel_ms": c, "python_ms": p, "overhead_percent": overhead,
                               "paired_overhead_percent": paired,
                               "cli_medians_ms": cli[causal, d],
                               "python_medians_ms": py[causal, d]})
        say(f"{shape:30s} {c:11.2f} {p:10.2f} {overhead:8.2f}% {paired:8.2f}%   (medians cli "
            f"{', '.join(f'{x:.1f}' for x in cli[causal, d])}; python "
            f"{', '.join(f'{x:.1f}' for x in py[causal, d])})")

    # The fixed cost of one call, at a shape where the kernel itself takes ~nothing.
    q = rng.standard_normal((1, 1, 1, 8), dtype=np.float32)
    micro = {
        "pybind call, no work (attnlab.simd_target)": per_call_us(attnlab.simd_target),
        "_attnlab._attention_forward (C++ entry)": per_call_us(
            lambda: _attnlab._attention_forward(q, q, q)),
        "attnlab.attention, numpy": per_call_us(lambda: attnlab.attention(q, q, q)),
    }
    try:
        import torch
        tq = torch.from_numpy(q)
        micro["attnlab.attention, torch"] = per_call_us(lambda: attnlab.attention(tq, tq, tq))
    except ImportError:
        pass
    result["micro_us_per_call_1x1x1x8"] = micro
    say("\n# fixed per-call cost, q = k = v [1, 1, 1, 8] (mean of 20000 calls, median of 5)")
    for name, us in micro.items():
        say(f"{name:48s} {us:8.2f} us")
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
