#!/usr/bin/python3
"""The cost model of docs/DISTRIBUTED.md: data-parallel training step time on P machines, and
how much of the gradient all-reduce the backward hides (dist/grad_reducer.h).

Per step, for a model of N parameters (N_last of them in the last bucket: embeddings, final
norm, head, whose gradient is final only after the whole backward) and a global batch of G
tokens, on machines of F flop/s with links of beta bytes/s and latency alpha:
  backward  t_b = 4 N G / (P F)            (forward 2 N G / (P F); 6 N per token in all)
  all-reduce of s floats (dist::Comm::AllReduceSum: an all-to-all reduce-scatter, then an
  all-gather; each rank sends 2 (P - 1) / P of the data, in 2 (P - 1) messages)
            t(s) = 2 (P - 1) / P * 4 s / beta + 2 (P - 1) alpha
  buckets   one per layer (L), summed while the backward computes the layers below; the last
            bucket cannot overlap anything:
  exposed   max(0, sum_l t(layer l) - t_b) + t(N_last)
usage: scripts/distributed_model.py [--params N] [--last N_last] [--layers L] [--tokens G]
(defaults: Qwen2.5-0.5B's shapes, a global batch of 256 x 1024 tokens)
"""
import argparse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=float, default=494e6)
    ap.add_argument("--last", type=float, default=151936 * 896, help="parameters in the last bucket")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--tokens", type=float, default=256 * 1024)
    ap.add_argument("--alpha", type=float, default=10e-6, help="seconds per message")
    a = ap.parse_args()
    N, last, L, G, alpha = a.params, a.last, a.layers, a.tokens, a.alpha
    print("| machine (sgemm flop/s) | link | " +
          " | ".join(f"P = {P}" for P in (8, 16, 32, 64, 128, 256)) + " |")
    print("|---|---|" + "---|" * 6)
    for F, fname in ((350e9, "2 cores, 350 GFLOP/s"), (3e12, "32 cores, 3 TFLOP/s")):
        for beta, bname in ((3.1e9, "25 GbE, 3.1 GB/s"), (12e9, "100 Gb/s, 12 GB/s")):
            cells = []
            for P in (8, 16, 32, 64, 128, 256):
                def t(s):
                    return 2 * (P - 1) / P * 4 * s / beta + 2 * (P - 1) * alpha
                tb = 4 * N * G / (P * F)
                tf = 2 * N * G / (P * F)
                layers = L * t((N - last) / L)
                exposed = max(0.0, layers - tb) + t(last)
                step = tf + tb + exposed
                cells.append(f"{step:.2f} s, {exposed / step * 100:.0f}% exposed")
            print(f"| {fname} | {bname} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
