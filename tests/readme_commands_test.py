#!/usr/bin/python3
"""Every command of the README's CLI tour runs as written.

Issue 21: the tour's `attnlab tokenize --tokenizer gpt2 --text "Hello world"` failed for a new
user. This test reads README.md, takes the `sh` block under "## A tour of the CLI", and runs each
`$B ...` line in order, exactly as written (only `$B` becomes the CLI under test), in a scratch
directory holding the inputs the tour names:
  long.txt                the bundled sample text (data/sample.txt)
  q.npy, k.npy, v.npy     float32 [1, 4, 512, 64] random tensors
  gpt2.safetensors        a random GPT-2-layout model (vocabulary 50257, 1 layer, n_embd 64)
  qwen/                   a random Qwen2-layout Hugging Face folder (BF16, two shards, GPT-2's
                          BPE as tokenizer.json)
  tiny.gguf               a random Llama-layout GGUF file (Q8_0) with GPT-2's BPE embedded
Each command must exit 0 within its time limit; the tokenize line must print the ids its comment
promises (`# -> 15496 995`). Later lines use earlier lines' outputs (prepare -> train -> generate).

Run by ctest as: /usr/bin/python3 readme_commands_test.py --attnlab <path to the CLI>
"""
import argparse
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TIMEOUT_S = 900


def tour_commands(readme):
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"^## A tour of the CLI\n(.*?)^```sh\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit("FAIL: README.md has no ```sh block under '## A tour of the CLI'")
    cmds = []
    for line in m.group(2).splitlines():
        if not line.startswith("$B "):
            continue
        words = shlex.split(line, comments=True)
        expect = None
        e = re.search(r"#\s*->\s*(.+)$", line)
        if e:
            expect = e.group(1).strip()
        cmds.append((line.split("  #")[0].rstrip(), words[1:], expect))
    if len(cmds) < 10:
        sys.exit(f"FAIL: found only {len(cmds)} commands in the README's tour")
    return cmds


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def make_fixtures(d):
    shutil.copy(os.path.join(ROOT, "data", "sample.txt"), os.path.join(d, "long.txt"))
    rng = np.random.default_rng(0)
    for n in ("q", "k", "v"):
        np.save(os.path.join(d, n + ".npy"), rng.standard_normal((1, 4, 512, 64), dtype=np.float32))
    C, V, P = 64, 50257, 1024
    w = {"wte.weight": rng.normal(0, 0.02, (V, C)), "wpe.weight": rng.normal(0, 0.01, (P, C)),
         "ln_f.weight": np.ones(C), "ln_f.bias": np.zeros(C)}
    h = "h.0."
    w.update({h + "ln_1.weight": np.ones(C), h + "ln_1.bias": np.zeros(C),
              h + "attn.c_attn.weight": rng.normal(0, 0.02, (C, 3 * C)),
              h + "attn.c_attn.bias": np.zeros(3 * C),
              h + "attn.c_proj.weight": rng.normal(0, 0.02, (C, C)), h + "attn.c_proj.bias": np.zeros(C),
              h + "ln_2.weight": np.ones(C), h + "ln_2.bias": np.zeros(C),
              h + "mlp.c_fc.weight": rng.normal(0, 0.02, (C, 4 * C)), h + "mlp.c_fc.bias": np.zeros(4 * C),
              h + "mlp.c_proj.weight": rng.normal(0, 0.02, (4 * C, C)), h + "mlp.c_proj.bias": np.zeros(C)})
    write_safetensors(os.path.join(d, "gpt2.safetensors"), w)
    make_hf_folder(os.path.join(d, "qwen"))
    make_gguf(os.path.join(d, "tiny.gguf"))


def make_gguf(path):
    """tiny.gguf: a random Llama-layout model as llama.cpp's converter writes it (Q8_0 weights,
    permuted Q/K rows) with GPT-2's BPE embedded as its vocabulary (tokenizer.ggml.*)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import torch
    import gguf_writer
    import hf_decoder_torch_test as hf
    import tokenizer_hf_node_test as tk
    vocab, merges = tk.gpt2_files()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    cfg = hf.base_cfg("llama", vocab_size=len(tokens), hidden_size=64, num_hidden_layers=2,
                      intermediate_size=128, max_position_embeddings=4096)
    w = hf.make_weights(cfg, torch.Generator().manual_seed(4))
    meta, tensors = gguf_writer.hf_to_gguf(cfg, {k: v.numpy() for k, v in w.items()}, "Q8_0", vocab={
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": 50256, "tokenizer.ggml.eos_token_id": 50256})
    gguf_writer.write_gguf(path, meta, tensors)


def make_hf_folder(d):
    """qwen/: a random Qwen2-layout Hugging Face folder (config.json, BF16 weights in two
    shards + model.safetensors.index.json) with GPT-2's BPE as its tokenizer.json."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import torch
    import hf_decoder_torch_test as hf
    import tokenizer_hf_node_test as tk
    cfg = hf.base_cfg("qwen2", vocab_size=50304, hidden_size=64, num_hidden_layers=2,
                      intermediate_size=128, max_position_embeddings=4096,
                      tie_word_embeddings=True)
    hf.write_model(d, cfg, hf.make_weights(cfg, torch.Generator().manual_seed(3)), "BF16", 2)
    vocab, merges = tk.gpt2_files()
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tk.byte_level(vocab, merges, [("<|endoftext|>", 50256)]), f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|endoftext|>", "add_bos_token": False}, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    cli = os.path.realpath(ap.parse_args().attnlab)
    cmds = tour_commands(os.path.join(ROOT, "README.md"))
    failures = []
    with tempfile.TemporaryDirectory(prefix="attnlab_readme_") as d:
        make_fixtures(d)
        for shown, args, expect in cmds:
            t0 = time.time()
            try:
                p = subprocess.run([cli] + args, cwd=d, capture_output=True, text=True,
                                   timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                failures.append(f"{shown}: still running after {TIMEOUT_S} s")
                print(f"FAIL (timeout) {shown}")
                continue
            secs = time.time() - t0
            ok = p.returncode == 0
            why = f"exit {p.returncode}: {p.stderr.strip()[-600:]}"
            if ok and expect is not None and p.stdout.strip() != expect:
                ok, why = False, f"printed {p.stdout.strip()!r}, the README promises {expect!r}"
            print(f"{'ok' if ok else 'FAIL'} ({secs:.1f} s) {shown}")
            if not ok:
                failures.append(f"{shown}: {why}")
    if failures:
        print("\n".join("FAIL: " + f for f in failures))
        sys.exit(1)
    print(f"all {len(cmds)} README commands ran as written")


if __name__ == "__main__":
    main()
