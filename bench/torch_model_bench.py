#!/usr/bin/python3
"""PyTorch 1.13 (Debian's python3-torch) on the shapes of `attnlab bench model`, side by side.

    /usr/bin/python3 bench/torch_model_bench.py --attnlab build/attnlab [--preset small3m ...]
        [--threads 2] [--steps 5] [--decode 64]

Same GPT as attnlab's defaults (pre-LN LayerNorm with bias, GELU tanh, tied embeddings, RoPE
NeoX for small3m / learned positions for gpt2-small), fp32, torch.set_num_threads(threads).
Training = forward + backward + torch.optim.AdamW step (median of --steps after one warm-up).
Prefill: one sequence through the model filling a KV cache; decode: one token at a time against
it. Prints both implementations' tokens/s and attnlab / PyTorch.

torch 1.13's CPU matmuls go through its bundled BLAS; on this CPU Debian's OpenBLAS misdetects
the core unless OPENBLAS_CORETYPE is set. This script does not set it: pass it in the
environment yourself to measure PyTorch's best case (the performance issue's reference numbers
were measured that way).
"""
import argparse
import json
import math
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

PRESETS = {
    "small3m": dict(vocab=256, context=256, d_model=256, layers=4, heads=4, rope=True, batch=16,
                    seq_len=256),
    # The embedded default model's shape (data/default-model; docs/DEFAULT_MODEL.md).
    "default": dict(vocab=4353, context=256, d_model=256, layers=4, heads=16, rope=True, batch=16,
                    seq_len=256),
    "gpt2-small": dict(vocab=50257, context=1024, d_model=768, layers=12, heads=12, rope=False,
                       batch=4, seq_len=256),
}


class Gpt(torch.nn.Module):
    def __init__(self, vocab, context, d_model, layers, heads, rope, **_):
        super().__init__()
        self.h, self.hd, self.rope = heads, d_model // heads, rope
        self.wte = torch.nn.Embedding(vocab, d_model)
        self.wpe = None if rope else torch.nn.Embedding(context, d_model)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.Module()
            b.ln1 = torch.nn.LayerNorm(d_model)
            b.qkv = torch.nn.Linear(d_model, 3 * d_model)
            b.proj = torch.nn.Linear(d_model, d_model)
            b.ln2 = torch.nn.LayerNorm(d_model)
            b.fc = torch.nn.Linear(d_model, 4 * d_model)
            b.fcproj = torch.nn.Linear(4 * d_model, d_model)
            self.blocks.append(b)
        self.lnf = torch.nn.LayerNorm(d_model)
        for p in self.parameters():
            torch.nn.init.normal_(p, std=0.02)
        if rope:
            inv = 10000.0 ** (-torch.arange(0, self.hd, 2).float() / self.hd)
            ang = torch.arange(context).float()[:, None] * inv[None, :]
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

    def rotate(self, x, pos):  # x [B, H, T, hd], NeoX half split
        if not self.rope:
            return x
        c, s = self.cos[pos][None, None], self.sin[pos][None, None]
        a, b = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return torch.cat([a * c - b * s, a * s + b * c], dim=-1)

    def forward(self, idx, cache=None):
        B, T = idx.shape
        past = 0 if cache is None or cache[0] is None else cache[0][0].shape[2]
        pos = torch.arange(past, past + T)
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(pos)[None]
        for li, b in enumerate(self.blocks):
            q, k, v = b.qkv(b.ln1(x)).split(x.shape[-1], dim=-1)
            q, k, v = (t.view(B, T, self.h, self.hd).transpose(1, 2) for t in (q, k, v))
            q, k = self.rotate(q, pos), self.rotate(k, pos)
            if cache is not None:
                if cache[li] is not None:
                    k = torch.cat([cache[li][0], k], dim=2)
                    v = torch.cat([cache[li][1], v], dim=2)
                cache[li] = (k, v)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
            L = k.shape[2]
            mask = torch.ones(T, L, dtype=torch.bool).tril(L - T)
            s = s.masked_fill(~mask, float("-inf"))
            o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
            x = x + b.proj(o)
            x = x + b.fcproj(F.gelu(b.fc(b.ln2(x)), approximate="tanh"))
        return self.lnf(x) @ self.wte.weight.T


def bench_torch(p, steps, decode):
    torch.manual_seed(0)
    m = Gpt(**p)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    B, T, V = p["batch"], p["seq_len"], p["vocab"]
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        loss = F.cross_entropy(m(x).view(-1, V), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i > 0:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    P = min(p["context"] - decode, 512)
    with torch.no_grad():
        cache = [None] * p["layers"]
        t0 = time.perf_counter()
        m(x[:1, :P].repeat(1, 1) if P <= T else torch.randint(0, V, (1, P)), cache)
        t1 = time.perf_counter()
        for i in range(decode):
            m(torch.randint(0, V, (1, 1)), cache)
        t2 = time.perf_counter()
    return {"train_tokens_per_s": B * T / step, "prefill_tokens_per_s": P / (t1 - t0),
            "decode_tokens_per_s": decode / (t2 - t1) if decode else 0.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnlab", help="path to the attnlab CLI (omit: PyTorch only)")
    ap.add_argument("--preset", action="append", choices=sorted(PRESETS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--decode", type=int, default=64)
    a = ap.parse_args()
    presets = a.preset or ["small3m", "gpt2-small"]
    torch.set_num_threads(a.threads)
    ours = {}
    if a.attnlab:
        cmd = [a.attnlab, "--threads", str(a.threads), "bench", "model", "--json",
               "--steps", str(a.steps), "--decode", str(a.decode)]
        for p in presets:
            cmd += ["--preset", p]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        # attnlab-bench/1 (bench/README.md): rows train_step / prefill / decode, per preset.
        names = {"train_step": "train_tokens_per_s", "prefill": "prefill_tokens_per_s",
                 "decode": "decode_tokens_per_s"}
        for r in json.loads(out)["rows"]:
            sh = r["shape"]
            if r["kernel"] not in names or sh.get("kv_dtype", "f32") != "f32":
                continue
            ours.setdefault(sh["preset"], {})[names[r["kernel"]]] = r["rate"]
    print(f"# torch {torch.__version__}, {a.threads} threads; tokens/s (attnlab / PyTorch)")
    print(f"{'shape':12} {'metric':8} {'attnlab':>10} {'pytorch':>10} {'ratio':>7}")
    for name in presets:
        t = bench_torch(PRESETS[name], a.steps, a.decode)
        for key, label in (("train_tokens_per_s", "train"), ("prefill_tokens_per_s", "prefill"),
                           ("decode_tokens_per_s", "decode")):
            o = ours.get(name, {}).get(key)
            ratio = f"{o / t[key]:7.2f}" if o else "      -"
            print(f"{name:12} {label:8} {o if o else float('nan'):10.0f} {t[key]:10.0f} {ratio}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
