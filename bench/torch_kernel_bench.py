#!/usr/bin/python3
"""PyTorch 1.13 (Debian's python3-torch) on the shapes of `attnlab bench suite`, side by side.

    /usr/bin/python3 bench/torch_kernel_bench.py --attnlab build/attnlab [--threads 2]
        [--repeats 3] [--quick]

Runs `attnlab --threads T bench suite --json` first, then every attention and decode row's shape
in PyTorch with torch.set_num_threads(T), and prints both rates and attnlab / PyTorch:
  flash_fwd / flash_bwd  PyTorch 1.13 has no fused attention on CPU (scaled_dot_product_attention
                         arrived in 2.0), so its attention is the textbook materialised form
                         softmax(Q K^T * scale + causal mask) V; the backward is autograd's.
                         FLOPs use attnlab's convention (causal counts half) for both.
  decode                 one query per head: softmax(q K^T * scale) V over the cache, with the
                         cache in the row's dtype (bf16 / fp16 when PyTorch's CPU matmul supports
                         it, else "n/a"); GB/s = cache bytes / time, as attnlab counts them.
Each PyTorch output is compared with a float64 computation of the same inputs before timing
(max abs error printed), so a fast wrong result cannot pass.

PyTorch's CPU matmul goes through its bundled BLAS; on this CPU Debian's OpenBLAS misdetects
the core unless OPENBLAS_CORETYPE is set. This script does not set it (see bench/README.md).
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
import time

import torch


def median_ms(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def attention_flops(h, n, d, causal):
    f = 4.0 * h * n * n * d
    return f / 2 if causal else f


def materialised(q, k, v, causal):
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def torch_attention(h, n, d, causal, backward, repeats):
    g = torch.Generator().manual_seed(1)
    q, k, v, do = (torch.randn(h, n, d, generator=g) for _ in range(4))
    ref = materialised(q.double(), k.double(), v.double(), causal)
    err = (materialised(q, k, v, causal).double() - ref).abs().max().item()
    fwd = median_ms(lambda: materialised(q, k, v, causal), repeats)
    bwd = None
    if backward:
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))

        def step():
            out = materialised(qg, kg, vg, causal)
            out.backward(do)
            qg.grad = kg.grad = vg.grad = None
        total = median_ms(step, repeats)
        bwd = max(total - fwd, 1e-6)  # the backward alone: forward + backward minus forward
    return fwd, bwd, err


def torch_decode(h, hkv, n, d, dtype, repeats):
    g = torch.Generator().manual_seed(n)
    q = torch.randn(h, 1, d, generator=g)
    k = torch.randn(hkv, n, d, generator=g)
    v = torch.randn(hkv, n, d, generator=g)
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    kc, vc = k.to(tdt), v.to(tdt)
    rep = h // hkv

    def step():
        kk = kc if rep == 1 else kc.repeat_interleave(rep, 0)
        vv = vc if rep == 1 else vc.repeat_interleave(rep, 0)
        s = torch.matmul(q.to(tdt), kk.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        return torch.matmul(torch.softmax(s.float(), dim=-1).to(tdt), vv)
    try:
        out = step()
    except RuntimeError as e:  # e.g. "not implemented for 'Half'" on CPU
        return None, str(e).splitlines()[0][:60]
    ref = materialised(q.double(), k.to(tdt).double(), v.to(tdt).double(), False)
    err = (out.double() - ref).abs().max().item()
    ms = median_ms(step, repeats)
    bytes_ = 2 * hkv * n * d * (4 if dtype == "f32" else 2)
    return (ms, bytes_ / (ms * 1e6), err), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="attnlab bench suite --quick shapes")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cmd = [args.attnlab, "--threads", str(args.threads), "bench", "suite", "--json",
           "--repeats", str(args.repeats)] + (["--quick"] if args.quick else ["--full"])
    suite = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    print(f"# attnlab bench suite vs PyTorch {torch.__version__} | CPU: {suite['cpu']} | "
          f"threads: {args.threads} | {suite['date']}")
    print("# attention: GFLOP/s (attnlab's FLOP convention for both); PyTorch = materialised "
          "softmax(QK^T)V (+ autograd); decode: GB/s of cache read")
    print(f"{'kernel':<10} {'shape':<40} {'attnlab':>9} {'pytorch':>9} {'unit':<8} "
          f"{'ratio':>7}  {'torch err':>9}")
    torch_fwd = {}
    for r in suite["rows"]:
        kern, sh, shape = r["kernel"], r["shape"], r["shape_text"]
        if kern in ("flash_fwd", "flash_bwd"):
            h, n, d, causal = sh["heads_q"], sh["len_k"], sh["head_dim"], bool(sh["causal"])
            key = (h, n, d, causal)
            if key not in torch_fwd:
                torch_fwd[key] = torch_attention(h, n, d, causal, True, args.repeats)
            fwd, bwd, err = torch_fwd[key]
            flops = attention_flops(h, n, d, causal) * (2.5 if kern == "flash_bwd" else 1)
            ms = fwd if kern == "flash_fwd" else bwd
            t_rate = flops / (ms * 1e6)
            print(f"{kern:<10} {shape:<40} {r['rate']:9.1f} {t_rate:9.1f} {'GFLOP/s':<8} "
                  f"{r['rate'] / t_rate:6.2f}x  {err:9.2e}")
        elif kern == "decode" and sh.get("cache") == "warm":
            h, hkv, n, d, dt = sh["heads_q"], sh["heads_kv"], sh["len_k"], sh["head_dim"], sh["dtype"]
            res, why = torch_decode(h, hkv, n, d, dt, max(5, 4 * args.repeats))
            if res is None:
                print(f"{'decode':<10} {shape:<40} {r['rate']:9.1f} {'n/a':>9} {'GB/s':<8} "
                      f"{'-':>7}  {why}")
                continue
            _, gbs, err = res
            print(f"{'decode':<10} {shape:<40} {r['rate']:9.1f} {gbs:9.1f} {'GB/s':<8} "
                  f"{r['rate'] / gbs:6.2f}x  {err:9.2e}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
