#!/usr/bin/python3
"""PyTorch oracle for the Hugging Face decoder families: `attnlab logits` on small random models.

Run by ctest as: /usr/bin/python3 hf_decoder_torch_test.py --attnlab <CLI>
(Debian's python3-torch 1.13 and python3-numpy; no `transformers`, no `safetensors` package).

For every family (llama with GQA and llama3 RoPE scaling, llama with linear and yarn scaling,
llama with attention_bias and mlp_bias, mistral with a sliding window, qwen2 with q/k/v biases and tied embeddings, qwen3 with q/k
RMSNorm and head_dim != hidden / heads, gpt_neox with parallel residual and partial rotary, and
gpt_neox sequential) and every storage format (F32 in one model.safetensors; BF16 in two shards
with model.safetensors.index.json; F16 in one file) the script
  1. draws random weights under Hugging Face's tensor names and shapes (nn.Linear [out, in];
     GPT-NeoX's fused query_key_value with rows [head, q|k|v, head_dim]), rounds them to the
     storage dtype, and writes them with a safetensors writer written here, plus config.json
     with the family's keys;
  2. runs `attnlab logits --model DIR --tokens ...`;
  3. computes the logits with the forward below, written from transformers' modeling code's
     semantics (rotate_half RoPE with the rope_scaling initialisers, repeat_kv, the causal /
     sliding-window mask, RMSNorm or LayerNorm, SwiGLU or GELU, parallel residual), in float64
     on the same dtype-rounded weights, and compares.

Products: `--matmul fp32` (fp32 activations) for the checks below. BF16 files are also run with
the bf16 products (--matmul bf16, where the CPU multiplies bf16 natively: AVX512-BF16 or AMX)
against a truth whose linear layers round their inputs to bf16 as attnlab does, bound BF16_TOL.

Tolerance: the issue's 1e-4 relative, max |attnlab - truth| <= 1e-4 * max |truth|; the fp32
rounding of a correct implementation is ~1e-6 here (printed as err/scale). The bound is checked
for being too loose: for each family a truth with one plausible mistake (interleaved instead of
rotate_half pairs, GELU tanh for erf, no sliding window, sequential for parallel residual, no
q/k norm, yarn's attention factor dropped, llama3 scaling ignored, q/k/v biases dropped, o and
MLP biases dropped) must be
outside it.

Bad inputs (each must exit 1 with one line naming the file and the tensor or key): unknown
model_type, a missing shard, an index naming a tensor its shard lacks, a tensor whose shape
disagrees with config.json, an unsupported rope_scaling type, an unexpected tensor.
"""

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer  # noqa: E402  (tests/gguf_writer.py)

torch.set_default_dtype(torch.float64)
REL_TOL = 1e-4
# GGUF files are written for these families (llama.cpp writes mistral as llama; attnlab's GGUF
# reader maps "llama" with a sliding_window key back to mistral).
GGUF_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gpt_neox")
T_TOKENS = 40
# The bf16 products against the truth with bf16-rounded inputs: both round the same inputs, but
# attnlab's fp32 activations and the float64 truth's differ by ~1e-6 of their size, so an input
# within that of a rounding boundary rounds the other way (one term off by 2^-8 of itself), and
# these random 2-3 layer models amplify such differences (one plausible mistake moves their logits
# by 30-120%). Measured on a Sapphire Rapids (AMX): 7e-8 to 6e-3 of the largest logit.
BF16_TOL = 1e-2
_BF16_NATIVE = {}


def bf16_native(cli):
    """Whether attnlab's auto setting takes the bf16 products on this CPU (--version says)."""
    if cli not in _BF16_NATIVE:
        v = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=60).stdout
        _BF16_NATIVE[cli] = "products with BF16 weights: bf16" in v
    return _BF16_NATIVE[cli]


# ---------------------------------------------------------------------------------------------
# Families: config.json for a small model of each.

def base_cfg(model_type, **kw):
    c = {"model_type": model_type, "vocab_size": 211, "hidden_size": 64,
         "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 96, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
         "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False}
    c.update(kw)
    return c


FAMILIES = [
    ("llama_gqa_llama3", base_cfg("llama", rope_theta=500.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32}), "llama3_unscaled"),
    ("llama_linear_mha", base_cfg("llama", num_key_value_heads=4, rope_scaling={
        "type": "linear", "factor": 2.0}), "interleaved_rope"),
    ("llama_yarn", base_cfg("llama", rope_theta=100.0, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
     "yarn_no_attention_factor"),
    # Dynamic NTK: 40 tokens past max_position_embeddings 16, so the base really changes.
    ("llama_dynamic", base_cfg("llama", max_position_embeddings=16, rope_scaling={
        "type": "dynamic", "factor": 3.0}), "dynamic_static"),
    # attention_bias: biases on q, k, v and o; mlp_bias: on gate, up and down (transformers'
    # LlamaAttention / LlamaMLP).
    ("llama_biases", base_cfg("llama", attention_bias=True, mlp_bias=True), "o_mlp_bias_dropped"),
    ("mistral_window", base_cfg("mistral", sliding_window=7), "no_sliding_window"),
    ("qwen2_tied_bias", base_cfg("qwen2", tie_word_embeddings=True, rope_theta=1000000.0),
     "qkv_bias_dropped"),
    ("qwen2_window_layers", base_cfg("qwen2", use_sliding_window=True, sliding_window=5,
                                     max_window_layers=1), "no_sliding_window"),
    ("qwen3_qknorm_headdim", base_cfg("qwen3", head_dim=32, num_key_value_heads=1),
     "no_qk_norm"),
    ("gpt_neox_parallel", {
        "model_type": "gpt_neox", "vocab_size": 203, "hidden_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 128,
        "layer_norm_eps": 1e-5, "rotary_pct": 0.25, "rotary_emb_base": 10000,
        "hidden_act": "gelu", "use_parallel_residual": True, "tie_word_embeddings": False},
     "gelu_tanh"),
    ("gpt_neox_sequential", {
        "model_type": "gpt_neox", "vocab_size": 203, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 128,
        "layer_norm_eps": 1e-5, "rotary_pct": 0.5, "rotary_emb_base": 100,
        "hidden_act": "gelu", "use_parallel_residual": False},
     "parallel_for_sequential"),
]


def dims(c):
    C, H = c["hidden_size"], c["num_attention_heads"]
    Hkv = c.get("num_key_value_heads") or H
    hd = c.get("head_dim") or C // H
    return C, H, Hkv, hd


def hf_shapes(c):
    """name -> shape, as transformers' state_dict() holds them."""
    C, H, Hkv, hd = dims(c)
    V, F, L = c["vocab_size"], c["intermediate_size"], c["num_hidden_layers"]
    s = {}
    if c["model_type"] == "gpt_neox":
        s["gpt_neox.embed_in.weight"] = (V, C)
        for l in range(L):
            p = f"gpt_neox.layers.{l}."
            for n in ("input_layernorm", "post_attention_layernorm"):
                s[p + n + ".weight"] = (C,)
                s[p + n + ".bias"] = (C,)
            s[p + "attention.query_key_value.weight"] = (3 * H * hd, C)
            s[p + "attention.query_key_value.bias"] = (3 * H * hd,)
            s[p + "attention.dense.weight"] = (C, H * hd)
            s[p + "attention.dense.bias"] = (C,)
            s[p + "mlp.dense_h_to_4h.weight"] = (F, C)
            s[p + "mlp.dense_h_to_4h.bias"] = (F,)
            s[p + "mlp.dense_4h_to_h.weight"] = (C, F)
            s[p + "mlp.dense_4h_to_h.bias"] = (C,)
        s["gpt_neox.final_layer_norm.weight"] = (C,)
        s["gpt_neox.final_layer_norm.bias"] = (C,)
        if not c.get("tie_word_embeddings", False):
            s["embed_out.weight"] = (V, C)
        return s
    s["model.embed_tokens.weight"] = (V, C)
    for l in range(L):
        p = f"model.layers.{l}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "self_attn.q_proj.weight"] = (H * hd, C)
        s[p + "self_attn.k_proj.weight"] = (Hkv * hd, C)
        s[p + "self_attn.v_proj.weight"] = (Hkv * hd, C)
        attention_bias = c["model_type"] in ("llama", "qwen3") and c.get("attention_bias")
        mlp_bias = c["model_type"] == "llama" and c.get("mlp_bias")
        if c["model_type"] == "qwen2" or attention_bias:
            s[p + "self_attn.q_proj.bias"] = (H * hd,)
            s[p + "self_attn.k_proj.bias"] = (Hkv * hd,)
            s[p + "self_attn.v_proj.bias"] = (Hkv * hd,)
        if c["model_type"] == "qwen3":
            s[p + "self_attn.q_norm.weight"] = (hd,)
            s[p + "self_attn.k_norm.weight"] = (hd,)
        s[p + "self_attn.o_proj.weight"] = (C, H * hd)
        if attention_bias:
            s[p + "self_attn.o_proj.bias"] = (C,)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "mlp.gate_proj.weight"] = (F, C)
        s[p + "mlp.up_proj.weight"] = (F, C)
        s[p + "mlp.down_proj.weight"] = (C, F)
        if mlp_bias:
            s[p + "mlp.gate_proj.bias"] = (F,)
            s[p + "mlp.up_proj.bias"] = (F,)
            s[p + "mlp.down_proj.bias"] = (C,)
    s["model.norm.weight"] = (C,)
    if not c.get("tie_word_embeddings", False):
        s["lm_head.weight"] = (V, C)
    return s


def make_weights(c, gen):
    w = {}
    for name, shape in hf_shapes(c).items():
        if "norm" in name and name.endswith("weight") or "layernorm.weight" in name:
            t = 1.0 + 0.2 * torch.randn(shape, generator=gen)
        elif name.endswith("bias"):
            t = 0.3 * torch.randn(shape, generator=gen)
        elif "embed" in name and "out" not in name:
            t = torch.randn(shape, generator=gen)
        else:
            fan_in = shape[1]
            # q and k larger, so attention rows are peaked and a wrong mask or position shows.
            boost = 2.5 if any(k in name for k in ("q_proj", "k_proj", "query_key_value")) else 1.0
            t = boost * torch.randn(shape, generator=gen) / math.sqrt(fan_in)
        w[name] = t.to(torch.float32)
    return w


# ---------------------------------------------------------------------------------------------
# Storage: safetensors written here (F32, F16, BF16), sharded or not.

def tensor_bytes(t, dtype):
    if dtype == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return t.to(torch.float16).numpy().astype("<f2").tobytes()
    if dtype == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    raise ValueError(dtype)


def rounded(t, dtype):
    """The float64 value of t as stored in `dtype` (what attnlab reads)."""
    d = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    return t.to(d).to(torch.float64)


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_model(d, cfg, w, dtype, shards):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    names = sorted(w)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), w, dtype)
        return
    weight_map = {}
    for s in range(shards):
        part = {n: w[n] for i, n in enumerate(names) if i % shards == s}
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(d, fname), part, dtype)
        weight_map.update({n: fname for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)


# ---------------------------------------------------------------------------------------------
# The truth: transformers' semantics in plain torch, float64.

def inv_freq_and_scaling(c, dim, mutation, seq_len):
    """(inv_freq [dim/2], attention_scaling) as transformers' ROPE_INIT_FUNCTIONS compute them
    for a forward over seq_len positions (only "dynamic" depends on it)."""
    base = c.get("rope_theta", c.get("rotary_emb_base", 10000.0))
    rs = c.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "dynamic" and mutation != "dynamic_static":
        # _compute_dynamic_ntk_parameters with seq_len = max(position_ids) + 1.
        L, factor = c["max_position_embeddings"], rs["factor"]
        S = max(seq_len, L)
        base = base * ((factor * S / L) - (factor - 1)) ** (dim / (dim - 2))
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = c.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    scaling = 1.0
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "llama3" and mutation != "llama3_unscaled":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        out = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        inv = torch.where(medium, smoothed, out)
    elif kind == "yarn":
        factor = rs["factor"]
        orig = rs.get("original_max_position_embeddings") or c["max_position_embeddings"]
        scaling = rs.get("attention_factor") or (0.1 * math.log(factor) + 1.0)
        if mutation == "yarn_no_attention_factor":
            scaling = 1.0

        def corr(rot):
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(corr(32)), 0)
        high = min(math.ceil(corr(1)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
        extrap = 1 - ramp
        pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        inv = (1.0 / (factor * pos_freqs)) * (1 - extrap) + (1.0 / pos_freqs) * extrap
    return inv, scaling


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rotary(x, cos, sin, rot, mutation):
    """x [heads, T, hd]; the first `rot` dims rotated (HF: partial rotary for GPT-NeoX)."""
    xr, xp = x[..., :rot], x[..., rot:]
    if mutation == "interleaved_rope":
        a, b = xr[..., 0::2], xr[..., 1::2]
        c, s = cos[..., : rot // 2], sin[..., : rot // 2]
        out = torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
    else:
        out = xr * cos + rotate_half(xr) * sin
    return torch.cat([out, xp], dim=-1)


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def ln(x, w, b, eps):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(v + eps) * w + b


def window_of_layer(c, l):
    t = c["model_type"]
    if t == "mistral":
        return c.get("sliding_window")
    if t in ("qwen2", "qwen3") and c.get("use_sliding_window"):
        return c["sliding_window"] if l >= c.get("max_window_layers", 0) else None
    return None


def truth_logits(c, W, tokens, mutation=None, bf16_inputs=False, bf16_head=False):
    """bf16_inputs: round the input of every linear layer to bf16 first (fp32, then bf16, to
    nearest even), as attnlab's bf16 products do (attnlab/matmul_precision.h); bf16_head: the
    LM head's input too (its weights are BF16 as well)."""
    r = (lambda z: z.float().bfloat16().double()) if bf16_inputs else (lambda z: z)
    C, H, Hkv, hd = dims(c)
    t = c["model_type"]
    neox = t == "gpt_neox"
    T = len(tokens)
    ids = torch.tensor(tokens)
    rot = int(hd * c.get("rotary_pct", 1.0)) if neox else hd
    inv, att_scale = inv_freq_and_scaling(c, rot, mutation, T)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos() * att_scale, emb.sin() * att_scale
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    if neox:
        x = W["gpt_neox.embed_in.weight"][ids]
        eps = c["layer_norm_eps"]
    else:
        x = W["model.embed_tokens.weight"][ids]
        eps = c["rms_norm_eps"]
    for l in range(c["num_hidden_layers"]):
        if neox:
            p = f"gpt_neox.layers.{l}."
            a_in = ln(x, W[p + "input_layernorm.weight"], W[p + "input_layernorm.bias"], eps)
            qkv = r(a_in) @ W[p + "attention.query_key_value.weight"].T + \
                W[p + "attention.query_key_value.bias"]
            qkv = qkv.view(T, H, 3 * hd).transpose(0, 1)  # [H, T, 3 hd]
            q, k, v = qkv[..., :hd], qkv[..., hd:2 * hd], qkv[..., 2 * hd:]
        else:
            p = f"model.layers.{l}."
            a_in = rms(x, W[p + "input_layernorm.weight"], eps)

            def proj(name, heads):
                y = r(a_in) @ W[p + f"self_attn.{name}.weight"].T
                if p + f"self_attn.{name}.bias" in W and mutation != "qkv_bias_dropped":
                    y = y + W[p + f"self_attn.{name}.bias"]
                return y.view(T, heads, hd).transpose(0, 1)
            q, k, v = proj("q_proj", H), proj("k_proj", Hkv), proj("v_proj", Hkv)
            if t == "qwen3" and mutation != "no_qk_norm":
                q = rms(q, W[p + "self_attn.q_norm.weight"], eps)
                k = rms(k, W[p + "self_attn.k_norm.weight"], eps)
        q = apply_rotary(q, cos, sin, rot, mutation)
        k = apply_rotary(k, cos, sin, rot, mutation)
        rep = H // k.shape[0]
        k = k.repeat_interleave(rep, dim=0)  # repeat_kv: kv head g serves heads g*rep..
        v = v.repeat_interleave(rep, dim=0)
        s = q @ k.transpose(-1, -2) / math.sqrt(hd)
        vis = j <= i
        sw = window_of_layer(c, l)
        if sw is not None and mutation != "no_sliding_window":
            vis = vis & (j > i - sw)
        s = s.masked_fill(~vis, -math.inf)
        att = torch.softmax(s, dim=-1) @ v  # [H, T, hd]
        att = att.transpose(0, 1).reshape(T, H * hd)
        if neox:
            o = r(att) @ W[p + "attention.dense.weight"].T + W[p + "attention.dense.bias"]

            def mlp(z):
                h = r(z) @ W[p + "mlp.dense_h_to_4h.weight"].T + W[p + "mlp.dense_h_to_4h.bias"]
                if (c["hidden_act"] == "gelu") != (mutation == "gelu_tanh"):
                    h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
                else:
                    h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
                return r(h) @ W[p + "mlp.dense_4h_to_h.weight"].T + W[p + "mlp.dense_4h_to_h.bias"]
            ln2 = lambda z: ln(z, W[p + "post_attention_layernorm.weight"],
                               W[p + "post_attention_layernorm.bias"], eps)
            parallel = c.get("use_parallel_residual", True)
            if mutation == "parallel_for_sequential":
                parallel = not parallel
            if parallel:
                x = x + o + mlp(ln2(x))
            else:
                x = x + o
                x = x + mlp(ln2(x))
        else:
            def linear(z, name):  # nn.Linear, with its bias when the model has one
                y = r(z) @ W[p + name + ".weight"].T
                if p + name + ".bias" in W and mutation != "o_mlp_bias_dropped":
                    y = y + W[p + name + ".bias"]
                return y
            x = x + linear(att, "self_attn.o_proj")
            m_in = rms(x, W[p + "post_attention_layernorm.weight"], eps)
            g = linear(m_in, "mlp.gate_proj")
            u = linear(m_in, "mlp.up_proj")
            x = x + linear(torch.nn.functional.silu(g) * u, "mlp.down_proj")
    if neox:
        x = ln(x, W["gpt_neox.final_layer_norm.weight"], W["gpt_neox.final_layer_norm.bias"], eps)
        head = W.get("embed_out.weight", W["gpt_neox.embed_in.weight"])
    else:
        x = rms(x, W["model.norm.weight"], eps)
        head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return (r(x) if bf16_head else x) @ head.T


# ---------------------------------------------------------------------------------------------

def run_logits(cli, model, tokens, out, matmul="fp32"):
    """matmul: attnlab's --matmul (fp32 unless a check of the bf16 products asks for another)."""
    cmd = [cli, "--matmul", matmul, "logits", "--model", model, "--tokens",
           ",".join(map(str, tokens)), "--out", out]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def write_gguf_model(d, cfg, w, ggml_type):
    """model.gguf as llama.cpp's converter lays it out (tests/gguf_writer.py: its tensor names,
    the Q/K row permutation for llama, GPT-NeoX's regrouped fused QKV); returns the weights
    under HF names as the reader will see them (rounded to their stored type)."""
    os.makedirs(d, exist_ok=True)
    meta, tensors = gguf_writer.hf_to_gguf(cfg, {k: v.numpy() for k, v in w.items()}, ggml_type)
    path = os.path.join(d, "model.gguf")
    gguf_writer.write_gguf(path, meta, tensors)
    stored = {}
    for k, v in w.items():
        a = v.numpy()
        # hf_to_gguf's rule: 2-D weights other than the token embedding take the type (Q8_0
        # only when rows are whole 32-blocks); permuting rows does not change any row's blocks.
        t = "F32"
        if a.ndim == 2 and "embed_tokens" not in k and "embed_in" not in k:
            t = ggml_type if ggml_type != "Q8_0" or a.shape[-1] % 32 == 0 else "F32"
        stored[k] = torch.tensor(gguf_writer.roundtrip(a, t), dtype=torch.float64)
    return path, stored


def check_family(cli, tmp, name, cfg, mutation, seed, formats):
    gen = torch.Generator().manual_seed(seed)
    w = make_weights(cfg, gen)
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.integers(0, cfg["vocab_size"], T_TOKENS)]
    ok = True
    for dtype, shards in formats:
        d = os.path.join(tmp, f"{name}_{dtype}_{shards}")
        if dtype.startswith("GGUF-"):
            # GGUF has no key for qwen2's use_sliding_window / max_window_layers (llama.cpp
            # runs Qwen2 without a window) nor a dynamic-NTK rope scaling type (llama.cpp has
            # none, linear, yarn, longrope), so such models cannot be written as GGUF.
            dynamic = (cfg.get("rope_scaling") or {}).get("type") == "dynamic"
            if cfg["model_type"] not in GGUF_FAMILIES or cfg.get("use_sliding_window") or dynamic:
                continue
            model, stored = write_gguf_model(d, cfg, w, dtype[5:])
        else:
            write_model(d, cfg, w, dtype, shards)
            model, stored = d, {k: rounded(v, dtype) for k, v in w.items()}
        # fp32 products against the float64 truth; with BF16 weights also the bf16 products
        # (where this CPU multiplies bf16 natively) against the truth with bf16-rounded inputs.
        runs = [("fp32", REL_TOL)]
        if dtype in ("BF16", "GGUF-BF16") and bf16_native(cli):
            runs.append(("bf16", BF16_TOL))
        for matmul, tol in runs:
            r = run_logits(cli, model, tokens, os.path.join(d, "out"), matmul)
            if r.returncode != 0:
                print(f"FAIL {name} {dtype} x{shards}: attnlab logits exited {r.returncode}: "
                      f"{r.stderr.strip()}")
                ok = False
                continue
            got = np.load(os.path.join(d, "out", "logits.npy")).astype(np.float64)
            got = got.reshape(T_TOKENS, cfg["vocab_size"])
            W = stored
            # The head's weights are BF16 unless a GGUF file ties it to its F32 embedding.
            untied = any(k in W for k in ("lm_head.weight", "embed_out.weight"))
            em = dict(bf16_inputs=matmul == "bf16",
                      bf16_head=matmul == "bf16" and (dtype == "BF16" or untied))
            with torch.no_grad():
                truth = truth_logits(cfg, W, tokens, **em).numpy()
                wrong = truth_logits(cfg, W, tokens, mutation, **em).numpy()
            scale = float(np.abs(truth).max())
            err = float(np.abs(got - truth).max())
            err_wrong = float(np.abs(got - wrong).max())
            status = "ok"
            if not err <= tol * scale:
                status, ok = "FAIL", False
            # A mutation smaller than the bf16 bound (GELU tanh for erf moves the logits by
            # ~5e-3) is checked on the fp32 run of the same file only.
            moves = float(np.abs(wrong - truth).max()) > 3 * tol * scale
            if not err_wrong > tol * scale and (matmul == "fp32" or moves):
                status, ok = f"FAIL (mutation {mutation} not detected)", False
            print(f"{status:4} {name:22} {dtype:9} shards={shards} {matmul} products "
                  f"err/scale={err / scale:.2e} (bound {tol:.0e}; mutation {mutation}: "
                  f"{err_wrong / scale:.2e})")
        # Kept for check_bad_inputs and check_commands.
        if (name, dtype) not in (("llama_gqa_llama3", "F32"), ("llama_biases", "GGUF-Q8_0")):
            shutil.rmtree(d)
    return ok


def expect_error(cli, tmp, label, model, must_contain):
    r = run_logits(cli, model, [1, 2, 3], os.path.join(tmp, "bad_out"))
    lines = [s for s in r.stderr.strip().splitlines() if s.strip()]
    good = r.returncode == 1 and lines and all(m in r.stderr for m in must_contain)
    print(f"{'ok' if good else 'FAIL':4} bad input {label}: exit {r.returncode}: "
          f"{lines[-1] if lines else '(no message)'}")
    return good


def check_bad_inputs(cli, tmp):
    """Variations of a valid llama folder (tmp/llama_gqa_llama3_F32_1)."""
    src = os.path.join(tmp, "llama_gqa_llama3_F32_1")
    ok = True

    def variant(label, edit_cfg=None, edit_dir=None):
        d = os.path.join(tmp, "bad_" + label)
        shutil.copytree(src, d)
        shutil.rmtree(os.path.join(d, "out"), ignore_errors=True)
        if edit_cfg:
            p = os.path.join(d, "config.json")
            with open(p) as f:
                c = json.load(f)
            edit_cfg(c)
            with open(p, "w") as f:
                json.dump(c, f)
        if edit_dir:
            edit_dir(d)
        return d

    ok &= expect_error(cli, tmp, "unknown model_type",
                       variant("type", lambda c: c.update(model_type="phi3")),
                       ["config.json", "model_type 'phi3'"])
    ok &= expect_error(cli, tmp, "unsupported rope_scaling",
                       variant("rope", lambda c: c.update(rope_scaling={"rope_type": "longrope",
                                                                        "factor": 2.0})),
                       ["config.json", "rope_scaling type 'longrope'"])
    ok &= expect_error(cli, tmp, "shape disagrees with config",
                       variant("shape", lambda c: c.update(intermediate_size=97)),
                       ["model.safetensors", "model.layers.0.mlp.gate_proj.weight", "[96, 64]"])

    def shard_it(d, drop_shard=False, bad_tensor=False):
        c = json.load(open(os.path.join(d, "config.json")))
        os.remove(os.path.join(d, "model.safetensors"))
        gen = torch.Generator().manual_seed(5)
        write_model(d, c, make_weights(c, gen), "F32", 2)
        if drop_shard:
            os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
        if bad_tensor:
            p = os.path.join(d, "model.safetensors.index.json")
            idx = json.load(open(p))
            idx["weight_map"]["model.layers.0.self_attn.q_proj.weight"] = \
                "model-00002-of-00002.safetensors" if \
                idx["weight_map"]["model.layers.0.self_attn.q_proj.weight"].startswith("model-00001") \
                else "model-00001-of-00002.safetensors"
            json.dump(idx, open(p, "w"))
    ok &= expect_error(cli, tmp, "missing shard",
                       variant("noshard", edit_dir=lambda d: shard_it(d, drop_shard=True)),
                       ["model-00002-of-00002.safetensors", "missing"])
    ok &= expect_error(cli, tmp, "index names a tensor its shard lacks",
                       variant("badindex", edit_dir=lambda d: shard_it(d, bad_tensor=True)),
                       ["model.layers.0.self_attn.q_proj.weight", ".safetensors"])

    def extra(d):
        c = json.load(open(os.path.join(d, "config.json")))
        w = make_weights(c, torch.Generator().manual_seed(3))
        w["model.layers.0.self_attn.rotary_extra.weight"] = torch.zeros(3)
        write_model(d, c, w, "F32", 1)
    ok &= expect_error(cli, tmp, "unexpected tensor", variant("extra", edit_dir=extra),
                       ["model.layers.0.self_attn.rotary_extra.weight", "model.safetensors"])

    def empty_config(d):
        open(os.path.join(d, "config.json"), "w").close()
    ok &= expect_error(cli, tmp, "empty config.json", variant("emptycfg", edit_dir=empty_config),
                       ["config.json", "not valid JSON"])

    def nan_weight(d):
        c = json.load(open(os.path.join(d, "config.json")))
        w = make_weights(c, torch.Generator().manual_seed(3))
        w["model.layers.1.mlp.up_proj.weight"][2, 3] = float("nan")
        write_model(d, c, w, "BF16", 1)
    ok &= expect_error(cli, tmp, "NaN weight", variant("nan", edit_dir=nan_weight),
                       ["model.safetensors", "model.layers.1.mlp.up_proj.weight", "NaN"])

    def int_tensor(d):
        """model.norm.weight stored as I32 (a dtype no weight can have)."""
        c = json.load(open(os.path.join(d, "config.json")))
        w = make_weights(c, torch.Generator().manual_seed(3))
        header, blobs, off = {}, [], 0
        for name, t in w.items():
            b = (t.numpy().astype("<i4") if name == "model.norm.weight"
                 else t.numpy().astype("<f4")).tobytes()
            header[name] = {"dtype": "I32" if name == "model.norm.weight" else "F32",
                            "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
            off += len(b)
            blobs.append(b)
        text = json.dumps(header).encode()
        text += b" " * (-(8 + len(text)) % 8)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    ok &= expect_error(cli, tmp, "integer dtype", variant("i32", edit_dir=int_tensor),
                       ["model.safetensors", "model.norm.weight", "I32"])
    return ok


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def write_tokenizer(d):
    """A byte-level BPE tokenizer.json (256 byte tokens, 2 merges, <s> = 258 added) and a
    tokenizer_config.json that asks for BOS, as Llama's do."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab[b2u[ord("t")] + b2u[ord("h")]] = 256
    vocab[b2u[ord("t")] + b2u[ord("h")] + b2u[ord("e")]] = 257
    tj = {"version": "1.0", "added_tokens": [{"id": 258, "content": "<s>", "special": True}],
          "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                                                "trim_offsets": True, "use_regex": True},
          "post_processor": None, "decoder": {"type": "ByteLevel"},
          "model": {"type": "BPE", "vocab": vocab,
                    "merges": [f"{b2u[ord('t')]} {b2u[ord('h')]}",
                               f"{b2u[ord('t')]}{b2u[ord('h')]} {b2u[ord('e')]}"]}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "add_bos_token": True}, f)


def check_commands(cli, tmp):
    """Every model command runs on an HF folder (a qwen2 model with a 260-row vocabulary, so the
    byte tokenizer's 257 ids fit), and `train --from` fine-tunes it: the loss goes down and the
    checkpoint it writes opens again."""
    cfg = base_cfg("qwen2", vocab_size=260, tie_word_embeddings=True)
    d = os.path.join(tmp, "cmd_qwen2")
    write_model(d, cfg, make_weights(cfg, torch.Generator().manual_seed(11)), "BF16", 2)
    text = os.path.join(tmp, "text.txt")
    with open(text, "w") as f:
        for i in range(600):
            f.write(f"line {i}: the quick brown fox jumps over the lazy dog number {i * 7 % 13}.\n"
                    + ("\n" if i % 10 == 9 else ""))
    ok = True

    def run(label, *argv):
        r = subprocess.run([cli, *argv], capture_output=True, text=True, timeout=600)
        good = r.returncode == 0
        print(f"{'ok' if good else 'FAIL':4} command {label}"
              + ("" if good else f": exit {r.returncode}: {r.stderr.strip()[-400:]}"))
        return good, r
    tok = ["--tokenizer", "byte"]
    ok &= run("analyze", "analyze", "--model", d, *tok, "--text", text, "--max-tokens", "96",
              "--out", os.path.join(tmp, "an"))[0]
    ok &= run("stream", "stream", "--model", d, *tok, "--text", text, "--policy", "sink",
              "--sinks", "2", "--window", "16", "--max-tokens", "80")[0]
    ok &= run("generate", "generate", "--model", d, *tok, "--prompt", "the quick",
              "--max-tokens", "8", "--policy", "sink", "--sinks", "2", "--window", "8")[0]
    ok &= run("eval", "eval", "--model", d, *tok, "--text", text, "--max-tokens", "96")[0]
    # The folder's own tokenizer.json, found without --tokenizer; its BOS rule followed.
    write_tokenizer(d)
    good, r = run("logits with the folder's tokenizer.json", "logits", "--model", d, "--prompt",
                  "the theme", "--out", os.path.join(tmp, "tl"), "--json")
    ok &= good
    if good:
        j = json.loads(r.stdout)
        want = [257, 32, 257, 109, 101]  # "the" " " "the" "m" "e"
        good = j.get("tokens") == want and j.get("bos") == 258
        print(f"{'ok' if good else 'FAIL':4} tokenizer.json picked up: tokens {j.get('tokens')} "
              f"bos {j.get('bos')} (want {want}, bos 258)")
        ok &= good
    ok &= run("generate with the folder's tokenizer.json", "generate", "--model", d, "--prompt",
              "the", "--max-tokens", "4")[0]
    ok &= run("experiment heads", "experiment", "heads", "--data", d, "--quick",
              "--out", os.path.join(tmp, "heads"))[0]
    ok &= run("bench model", "bench", "model", "--model", d, "--steps", "1", "--prefill", "16",
              "--decode", "4")[0]
    # Inference keeps the BF16 weights 16-bit (the rows say so); training on them is refused.
    good, r = run("bench model --steps 0", "bench", "model", "--model", d, "--steps", "0",
                  "--prefill", "16", "--decode", "4", "--json")
    stored = good and '"weights":"bf16"' in r.stdout.replace(" ", "")
    print(f"{'ok' if stored else 'FAIL':4} bench model --steps 0 ran on the stored bf16 weights")
    ok &= stored
    # A Q8_0 GGUF (written by check_family) keeps its matrices quantized for inference.
    q8 = os.path.join(tmp, "llama_biases_GGUF-Q8_0_1", "model.gguf")
    good, r = run("bench model on a Q8_0 GGUF", "bench", "model", "--model", q8, "--steps", "0",
                  "--prefill", "16", "--decode", "4", "--json")
    weights = json.loads(r.stdout)["rows"][0]["shape"].get("weights", "") if good else ""
    quantized = "Q8_0" in weights.split("+")
    print(f"{'ok' if quantized else 'FAIL':4} bench model on a Q8_0 GGUF ran on Q8_0 weights "
          f"(weights: {weights!r})")
    ok &= quantized
    r = subprocess.run([cli, "bench", "model", "--model", d, "--weights", "stored", "--steps", "1"],
                       capture_output=True, text=True, timeout=600)
    refused = r.returncode == 1 and "inference only" in r.stderr
    print(f"{'ok' if refused else 'FAIL':4} bad input bench model --weights stored with training: "
          f"exit {r.returncode}: {r.stderr.strip()[-200:]}")
    ok &= refused
    data = os.path.join(tmp, "data")
    good, _ = run("prepare", "prepare", "--text", text, "--tokenizer", "byte", "--out", data)
    ok &= good
    ck = os.path.join(tmp, "ft")
    good, r = run("train --from", "train", "--from", d, "--data", data, "--steps", "6",
                  "--batch", "2", "--seq-len", "32", "--lr", "3e-3", "--warmup", "1",
                  "--out", ck, "--json")
    ok &= good
    if good:
        def eval_loss(model):
            g, rr = run("eval " + os.path.basename(model), "eval", "--model", model, *tok,
                        "--text", text, "--max-tokens", "512", "--json")
            return json.loads(rr.stdout)["loss"] if g else math.inf
        before, after = eval_loss(d), eval_loss(ck)
        down = after < before
        print(f"{'ok' if down else 'FAIL':4} fine-tune (train --from, 6 steps): eval loss "
              f"{before:.4f} -> {after:.4f}")
        ok &= down
        ok &= run("logits on the fine-tuned checkpoint", "logits", "--model", ck,
                  "--tokens", "1,2,3", "--out", os.path.join(tmp, "ftl"))[0]
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attnlab", required=True)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    start = time.time()
    formats = [("F32", 1), ("BF16", 2), ("F16", 1), ("GGUF-F32", 1), ("GGUF-F16", 1),
               ("GGUF-BF16", 1), ("GGUF-Q8_0", 1)]
    ok = True
    with tempfile.TemporaryDirectory(prefix="attnlab_hf_decoder_") as tmp:
        for k, (name, cfg, mutation) in enumerate(FAMILIES):
            ok &= check_family(args.attnlab, tmp, name, cfg, mutation, args.seed + k, formats)
        ok &= check_bad_inputs(args.attnlab, tmp)
        ok &= check_commands(args.attnlab, tmp)
    print(f"{'PASS' if ok else 'FAIL'} ({time.time() - start:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
