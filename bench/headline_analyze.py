#!/usr/bin/python3
"""The headline workload (issue 37): `attnlab analyze` of a 0.5B-parameter model on 32,768
tokens in one window, timed, with peak memory against the weights' bytes.

The model: random weights in Qwen2.5-0.5B's exact shapes (qwen2: 24 layers, d_model 896,
14 query heads and 2 KV heads of 64, SwiGLU 4864, vocabulary 151936, tied embeddings, q/k/v
biases, context 32768, rope_theta 1e6), written as BF16 safetensors with NumPy (std 0.02, norms
1) into --dir (default /tmp/attnlab-qwen05b; outside the repository, reused when present).
The text: the English licence texts every Debian has (/usr/share/common-licenses), repeated
until it holds enough tokens, cut to --tokens tokens by `attnlab analyze --max-tokens`.

Reports (stdout, and --json FILE): CPU, threads, wall time, the report's own seconds and phase
split (report.json run.phases: weight products, attention, diagnostics), peak RSS (the report's
and /usr/bin/time's) against the BF16 weights' bytes, and the passes per window.
  bench/headline_analyze.py --attnlab build/attnlab [--tokens 32768] [--threads 2]
                            [--matmul auto|fp32|bf16] [--simd avx2]
"""
import argparse
import glob
import json
import os
import platform
import re
import struct
import subprocess
import sys
import time

import numpy as np

SHAPES = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
              num_attention_heads=14, num_key_value_heads=2, vocab_size=151936)


def bf16_bytes(a):
    """float32 -> bfloat16 bits, rounded to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u >> 16) & 1) + 0x7FFF
    return ((u + r) >> 16).astype("<u2").tobytes()


def write_model(d, seed=1):
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return
    os.makedirs(d, exist_ok=True)
    s = SHAPES
    C, F, L, H, Hkv, V = (s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"],
                          s["num_attention_heads"], s["num_key_value_heads"], s["vocab_size"])
    hd = C // H
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
           "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_sliding_window": False,
           "sliding_window": 32768, "max_window_layers": 21, "bos_token_id": 151643,
           "eos_token_id": 151643, **s}
    rng = np.random.default_rng(seed)
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (C,),
                       p + "post_attention_layernorm.weight": (C,),
                       p + "self_attn.q_proj.weight": (H * hd, C), p + "self_attn.q_proj.bias": (H * hd,),
                       p + "self_attn.k_proj.weight": (Hkv * hd, C), p + "self_attn.k_proj.bias": (Hkv * hd,),
                       p + "self_attn.v_proj.weight": (Hkv * hd, C), p + "self_attn.v_proj.bias": (Hkv * hd,),
                       p + "self_attn.o_proj.weight": (C, H * hd),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shp in shapes.items():
        n = int(np.prod(shp)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shp), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    tmp = os.path.join(d, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shp in shapes.items():
            if name.endswith("norm.weight"):
                a = np.ones(shp, dtype=np.float32)
            else:
                a = rng.standard_normal(shp, dtype=np.float32) * 0.02
            f.write(bf16_bytes(a))
    os.replace(tmp, os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def write_text(path, min_bytes):
    parts = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    if not parts:
        sys.exit("no licence texts in /usr/share/common-licenses")
    text, i = "", 0
    while len(text) < min_bytes:
        text += parts[i % len(parts)] + "\n\n"
        i += 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
    fam = ""
    with open("/proc/cpuinfo") as f:
        mf = re.search(r"cpu family\s*:\s*(\d+)", f.read())
    if mf:
        fam = f" (family {mf.group(1)})"
    return (m.group(1).strip() if m else platform.processor()) + fam


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    ap.add_argument("--dir", default="/tmp/attnlab-qwen05b")
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--simd", default=None)
    ap.add_argument("--matmul", default=None, help="auto, fp32 or bf16 (attnlab --matmul)")
    ap.add_argument("--extra", default="", help="more analyze flags, space-separated")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    cli = os.path.abspath(a.attnlab)
    t0 = time.monotonic()
    write_model(a.dir)
    text = os.path.join(a.dir, "text.txt")
    write_text(text, a.tokens * 6)
    weights = os.path.getsize(os.path.join(a.dir, "model.safetensors"))
    print(f"model {a.dir} ({weights / 1e9:.2f} GB BF16) ready in {time.monotonic() - t0:.0f} s",
          flush=True)
    out = os.path.join(a.dir, "report")
    argv = ["/usr/bin/time", "-v", cli, "--threads", str(a.threads)]
    if a.simd:
        argv += ["--simd", a.simd]
    if a.matmul:
        argv += ["--matmul", a.matmul]
    argv += ["analyze", "--model", a.dir, "--tokenizer", "gpt2", "--text", text, "--max-tokens",
             str(a.tokens), "--window", str(a.tokens), "--out", out] + a.extra.split()
    print(" ".join(argv[2:]), flush=True)
    t1 = time.monotonic()
    # The progress lines (per pass, with what is left) are shown as they come.
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         errors="replace")
    err = []
    for line in p.stderr:
        err.append(line)
        if line.startswith("analyze"):
            sys.stderr.write(line)
            sys.stderr.flush()
    p.wait()
    wall = time.monotonic() - t1
    err = "".join(err)
    if p.returncode != 0:
        sys.exit(f"analyze failed (exit {p.returncode}):\n{err[-3000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    rss = int(m.group(1)) * 1024 if m else None
    rep = json.load(open(os.path.join(out, "report.json")))
    run = rep.get("run", {})
    res = {"cpu": cpu_name(), "threads": a.threads, "simd": a.simd or "best",
           "matmul": a.matmul or "auto",
           "tokens": a.tokens, "wall_s": wall, "report_seconds": run.get("seconds"),
           "phases": run.get("phases"), "passes": rep.get("passes", run.get("passes")),
           "peak_rss_bytes": rss, "weights_bytes": weights,
           "rss_over_weights": rss / weights if rss else None}
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
