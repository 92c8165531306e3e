#!/usr/bin/python3
"""Issue 20's table in one run: every SIMD target of this CPU, each kernel as a ratio to a
baseline measured in the same run, and ggml's flash_attn_ext on the same shapes and threads.

    /usr/bin/python3 bench/targets_table.py --attnlab build/attnlab [--threads 2] \
        [--ggml-native /work/ggml-build-native/ggml_flash_bench] \
        [--ggml-avx2 /work/ggml-build-avx2/ggml_flash_bench] [--json out.json]

Per target (the best this CPU runs, then avx2 when it has more): `attnlab --simd T bench
attention` at N = 4096, D = 64 and 128, full and causal, forward and backward (8 heads), and
`attnlab --simd T bench decode` at KV = 32768, 12 heads, D = 64, f32 / bf16 / f16, cold (DRAM);
then ggml's driver (bench/ggml/) built for the same ISA, right after, on the same shapes. The
avx2 rows run oneDNN's sgemm with DNNL_MAX_CPU_ISA=AVX2, so the sgemm peak of their ratio is the
AVX2 peak. Ratios: flash GFLOP/s over the same invocation's 2048^3 sgemm GFLOP/s; decode GB/s
over the same invocation's STREAM triad; x ggml = attnlab rate / ggml rate (same flop and byte
conventions, bench/ggml/README.md). Prints a Markdown table (docs/PERFORMANCE.md) and, with
--json, writes every measurement.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "scripts"))
from perf_smoke import run_json, target_env, targets_to_measure  # noqa: E402


def attnlab_rows(binary, threads, target, env):
    rows = []
    base = [binary, "--threads", str(threads), "--simd", target, "bench"]
    for causal in (False, True):
        cmd = base + ["attention", "--n", "4096", "--head-dim", "64,128", "--heads", "8",
                      "--backward", "--no-reference", "--repeats", "3", "--json"]
        if causal:
            cmd.append("--causal")
        sys.stderr.write("  %s\n" % " ".join(cmd))
        doc = run_json(cmd, env)
        peak = next(b for b in doc["baselines"] if b["kernel"] == "sgemm_peak")["rate"]
        for r in doc["rows"]:
            if r["kernel"] not in ("flash_fwd", "flash_bwd") or not r["rate"]:
                continue
            rows.append(dict(kernel=r["kernel"], d=r["shape"]["head_dim"], causal=causal,
                             rate=r["rate"], unit="GFLOP/s", base=peak, base_name="sgemm 2048^3",
                             ratio=r["rate"] / peak))
    cmd = base + ["decode", "--len", "32768", "--heads", "12", "--head-dim", "64", "--json"]
    sys.stderr.write("  %s\n" % " ".join(cmd))
    doc = run_json(cmd, env)
    triad = next(b for b in doc["baselines"] if b["kernel"] == "triad")["rate"]
    f32_ms = None
    for r in doc["rows"]:
        if r["kernel"] != "decode" or "cold" not in r["shape_text"]:
            continue
        dtype = r["shape_text"].split()[3]
        if dtype == "f32":
            f32_ms = r["time_ms"]
        rows.append(dict(kernel="decode", d=64, dtype=dtype, rate=r["rate"], unit="GB/s",
                         base=triad, base_name="triad", ratio=r["rate"] / triad,
                         time_ms=r["time_ms"]))
    for r in rows:
        if r["kernel"] == "decode" and f32_ms:
            r["speedup_vs_f32"] = f32_ms / r["time_ms"]
    return rows, doc["cpu"], doc["simd"]["kernels"]


def ggml_rows(driver, threads):
    if not driver:
        return {}
    sys.stderr.write("  %s --threads %d --json\n" % (driver, threads))
    doc = run_json([driver, "--threads", str(threads), "--json"], dict(os.environ))
    out = {}
    for r in doc["rows"]:
        if r["kernel"] == "flash_fwd":
            out[("flash_fwd", r["d"], bool(r["causal"]))] = r["gflops"]
        elif r["kernel"] == "decode":
            out[("decode", r["dtype"])] = r["gbs"]
    out["commit"] = doc.get("commit", "?")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnlab", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ggml-native", help="ggml_flash_bench built with --isa native")
    ap.add_argument("--ggml-avx2", help="ggml_flash_bench built with --isa avx2")
    ap.add_argument("--json", help="write every measurement here")
    a = ap.parse_args()
    version = subprocess.run([a.attnlab, "--version"], stdout=subprocess.PIPE, text=True,
                             check=True).stdout
    targets = targets_to_measure(a.attnlab)
    everything = []
    print("| target | kernel | shape | attnlab | same-run baseline | ratio | ggml | x ggml |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for target in targets:
        env = target_env(target)
        sys.stderr.write("target %s\n" % target)
        rows, cpu, kernels = attnlab_rows(a.attnlab, a.threads, target, env)
        ggml = ggml_rows(a.ggml_avx2 if target == "avx2" else a.ggml_native, a.threads)
        for r in rows:
            if r["kernel"] == "decode":
                shape = "KV 32k, 12 heads, D=64, %s, cold" % r["dtype"]
                g = ggml.get(("decode", r["dtype"]))
                extra = " (%.2fx f32)" % r["speedup_vs_f32"] if r["dtype"] != "f32" else ""
            else:
                shape = "N=4096, H=8, D=%d, %s" % (r["d"], "causal" if r["causal"] else "full")
                g = ggml.get(("flash_fwd", r["d"], r["causal"])) if r["kernel"] == "flash_fwd" \
                    else None
                extra = ""
            r.update(target=target, kernels=kernels, cpu=cpu, ggml=g,
                     ggml_commit=ggml.get("commit"))
            print("| %s | %s | %s | %.1f %s%s | %.1f (%s) | %.2f | %s | %s |"
                  % (target, r["kernel"], shape, r["rate"], r["unit"], extra, r["base"],
                     r["base_name"], r["ratio"], "%.1f" % g if g else "-",
                     "%.2f" % (r["rate"] / g) if g else "-"))
            everything.append(r)
    print("\nCPU: %s; %d threads; attnlab %s" % (everything[0]["cpu"] if everything else "?",
                                                a.threads, version.strip()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(everything, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
