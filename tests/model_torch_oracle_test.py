#!/usr/bin/python3
"""PyTorch float64 oracle for attnlab's GPT: logits and every parameter gradient, every option.

Run by ctest as:
  /usr/bin/python3 model_torch_oracle_test.py --attnlab <CLI> --driver <model_oracle_driver>
(Debian's python3-torch 1.13 and python3-numpy; the `safetensors` package is not needed). Exits
non-zero if any configuration fails, naming the configuration and the tensor.

For each configuration below (one ModelConfig option varied at a time from a small base, plus
combinations) the script
  1. draws random float64 weights with non-trivial values (matrices N(0, 0.3^2), biases
     N(0, 0.3^2), norm gains 1 + N(0, 0.3^2), ReZero alphas and sink logits away from 0) and
     rounds them to float32;
  2. writes them with a safetensors writer written here (struct + json + numpy), plus
     config.json (ModelConfigToJson's keys), tokens.npy and targets.npy (int32 [B, T], with
     ignored targets -1);
  3. runs tests/model_oracle_driver.cc, which loads them into attnlab's Gpt, writes the raw
     logits [B, T, V] (Forward without targets) and d(mean loss)/d(every parameter) (Forward with
     targets, Backward) and the loss;
  4. computes the same with the model below, written from the documented semantics only
     (include/attnlab/model_config.h, attention.h, rope.h, src/engine/ops.h,
     src/model/parameters.h), in float64 with torch autograd on the SAME float32-rounded
     weights, and compares.

The model (x: residual stream [B, Tm, C], Tm = T + 1 with a sink token at position 0):
  x0 = wte[token] (or sink_token) + wpe[position]                      (learned positions)
  per layer, with f the attention or the MLP sublayer and a the residual scale:
    pre-LN: x = x + a f(LN(x)); post-LN: x = LN(x + a f(x)); none: x = x + a f(x);
    no residual: x + a f -> f (a unused); DeepNorm (post-LN): x = LN(alpha x + f(x)),
    alpha = float32((2 n_layer)^(1/4)) (Wang et al. 2022, decoder-only)
    attention: q|k|v = a_in W_qkv + b; RoPE on q and k (rotate_half or interleaved pairs,
      partial rotary, linear / NTK / YaRN scaled frequencies, cos and sin rounded to float32 as
      rope.h's "Precision" paragraph says); scores q.k / sqrt(head_dim); key j visible to query i
      iff j <= i (causal; every j when causal = false), j >= i - window (window >= 0; the sink token, if any, is exempt), j != 0
      (mask_first_key); with attention_type sparse also j < G or i < G (G = attention_global
      global positions, Longformer); softmax / softmax1
      (+1 in the denominator) / sink logit (+exp(b_h)) / sigmoid(s + bias) / softpick
      relu(expm1(s)) / (sum |expm1(s)| + 1e-6) (Zuhri et al. 2025), bias = sigmoid_bias
      or -log(max_positions) when 0; key_bias adds exp(q . k*_h / sqrt(head_dim)) to a
      softmax row's denominator (k* [H_kv, hd] unrotated, value 0; Gu et al. 2024); a row with no visible key outputs 0 (handled explicitly with
      torch.where, no NaN anywhere); GQA head h reads kv head h // (H / H_kv); output gate
      o_h *= sigmoid(a_in W_g + b_g)_h (headwise) or o *= sigmoid(a_in W_g + b_g) channel by
      channel, reshaped [H, hd] (gate_elementwise); then o W_proj + b.
      attention_type linear replaces the scores and softmax by causal linear attention (after
      RoPE, if any): O_i = sum_{j <= i} w_ij v_j / (sum_{j <= i} w_ij + 1e-6), w_ij =
      phi(q_i) . phi(k_j), phi = elu + 1, computed as a masked Tm x Tm product (attnlab runs
      a chunked kernel and, when decoding, a recurrence: neither is this form).
    MLP: gelu_tanh(m_in W_fc + b) W_proj + b.
  logits = LN_f(x) W_head^T (pre-LN only has LN_f), W_head = wte when tied.
  loss = mean over positions with target >= 0 of -log softmax(logits)[target] (the sink position
  has no target).

Tolerance, derived from fp32 arithmetic. attnlab computes in float32 (unit roundoff
u = 2^-24); the truth is float64 from the same float32 weights, so the difference is attnlab's
rounding error. Each fp32 stage (matmul, norm, softmax, GELU, residual add) on the path from the
weights to a value contributes a relative error of a few u of the magnitudes flowing through it.
The number of chained stages grows with depth: forward ~5 per sublayer (norm, matmul, attention
or GELU, matmul, add) and the backward walks them again, so we take the depth factor
    D = 10 * (2 * n_layer) + 10      (2 sublayers per layer, +10 for embedding, head and loss)
and the magnitude of a tensor as its largest |value| in the truth. Every compared tensor X
(logits, each gradient) must satisfy
    max |X_attnlab - X_torch| <= C * u * D * max |X_torch|        with C = 8
(C covers the condition of each stage: a dot product of length K is off by ~u sqrt(K) |terms|,
and the sums inside LayerNorm, softmax and the gradient reductions cancel partly). For the base
config D = 50, so the bound is 8 * 50 * 2^-24 = 2.4e-5 relative to the tensor's largest value.
The loss is checked the same way with magnitude max(|loss|, 1). A tensor whose truth is exactly
zero (a parameter the loss does not depend on) must be exactly zero. The worst ratio err / tol of
each configuration is printed (1.0 = the bound is just met); over seeds 1-5 and the default,
every configuration stays below 0.25 (typically 0.02-0.1).

The bound is checked for being too loose (a wrong sign or a missing term must fail):
  * for every compared tensor of every configuration, attnlab's result with its largest-|truth|
    element moved by 1% must fail the comparison (1% is ~400x the bound);
  * SENSITIVITY: the truth is recomputed with a deliberate mistake (the diagonal not visible,
    the RoPE pair layout swapped, YaRN's attention factor dropped, the LayerNorm eps outside the
    square root, softmax1's +1 dropped, the sink logit's sign flipped, the sigmoid bias from the
    wrong length, the gate bias dropped, the first key visible, GQA heads mapped modulo, the
    window off by one, the ReZero alpha of the MLP ignored, erf GELU instead of tanh, ...; the
    list SENSITIVITY) and at least one tensor of attnlab's result must then fail, or the script
    fails.
Also, the driver must refuse weights with a missing, misshapen or extra tensor, naming it.
"""

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

U = 2.0 ** -24   # fp32 unit roundoff
C_TOL = 8.0      # the constant C of the bound (see the docstring)
PERTURB = 0.01   # the self-check's relative perturbation

# ---------------------------------------------------------------------------------------------
# Configurations. Keys and values are ModelConfigToJson's (model_config.cc).

BASE = {
    "vocab_size": 40, "context": 12, "d_model": 16, "n_layer": 2, "n_head": 4,
    "n_kv_head": 0, "mlp_hidden": 24, "mlp": True, "residual": True, "bias": True,
    "tie_embeddings": True, "position": "rope", "rope_layout": "neox", "rotary_dim": 0,
    "rope_base": 10000.0, "rope_scaling": "none", "rope_factor": 1.0,
    "rope_original_context": 0, "norm": "pre", "norm_type": "layernorm", "norm_eps": 1e-5,
    "residual_scale": "one", "softmax": "standard", "sigmoid_bias": 0.0, "output_gate": False,
    "gate_elementwise": False, "key_bias": False,
    "mask_first_key": False, "sink_token": False, "attention_window": -1, "causal": True,
    "attention_type": "softmax", "attention_global": 0,
}

CONFIGS = [
    ("base", {}),
    # Positions.
    ("pos_learned", {"position": "learned"}),
    ("pos_none", {"position": "none"}),
    ("rope_neox_base100", {"rope_base": 100.0}),
    ("rope_gptj_base100", {"rope_layout": "gptj", "rope_base": 100.0}),
    ("rope_partial_2", {"rotary_dim": 2, "rope_base": 100.0}),
    ("rope_partial_neox_hd8", {"n_head": 2, "rotary_dim": 4, "rope_base": 100.0}),
    ("rope_partial_gptj_hd8", {"n_head": 2, "rotary_dim": 4, "rope_base": 100.0,
                               "rope_layout": "gptj"}),
    ("rope_linear", {"rope_scaling": "linear", "rope_factor": 2.0, "rope_base": 100.0}),
    ("rope_ntk", {"rope_scaling": "ntk", "rope_factor": 3.0, "rope_base": 100.0}),
    ("rope_yarn", {"rope_scaling": "yarn", "rope_factor": 4.0, "rope_original_context": 40,
                   "rope_base": 100.0}),
    # Norms.
    ("norm_post", {"norm": "post"}),
    ("norm_none", {"norm": "none"}),
    ("rmsnorm_pre", {"norm_type": "rmsnorm"}),
    ("rmsnorm_post", {"norm_type": "rmsnorm", "norm": "post"}),
    ("layernorm_eps0.1", {"norm_eps": 0.1}),
    ("rmsnorm_eps0.1", {"norm_type": "rmsnorm", "norm_eps": 0.1}),
    # Residual.
    ("residual_off", {"residual": False}),
    ("residual_inv_sqrt_2l", {"residual_scale": "inv_sqrt_2l"}),
    ("residual_rezero", {"residual_scale": "rezero"}),
    ("residual_deepnorm", {"norm": "post", "residual_scale": "deepnorm"}),
    ("deepnorm_rms_3layers_nomlp", {"norm": "post", "residual_scale": "deepnorm",
                                    "norm_type": "rmsnorm", "n_layer": 3, "mlp": False}),
    # Sublayers and linear layers.
    ("mlp_off", {"mlp": False}),
    ("bias_off", {"bias": False}),
    ("untied", {"tie_embeddings": False}),
    # Attention.
    ("softmax1", {"softmax": "softmax1"}),
    ("sink_logit", {"softmax": "sink_logit"}),
    ("sigmoid_default_bias", {"softmax": "sigmoid"}),
    ("sigmoid_bias_-1.5", {"softmax": "sigmoid", "sigmoid_bias": -1.5}),
    ("softpick", {"softmax": "softpick"}),
    # Gu et al. 2024's key with a zero value, with RoPE (k* unrotated), GQA, softmax1, a sink
    # logit, a window and a sink token around it.
    ("key_bias", {"key_bias": True}),
    ("key_bias_gqa_softmax1_window", {"key_bias": True, "n_kv_head": 2, "softmax": "softmax1",
                                      "attention_window": 3}),
    ("key_bias_sinklogit_sinktoken_learned", {"key_bias": True, "softmax": "sink_logit",
                                              "sink_token": True, "position": "learned"}),
    ("softpick_window_gqa", {"softmax": "softpick", "attention_window": 3, "n_kv_head": 2}),
    ("output_gate", {"output_gate": True}),
    ("output_gate_elementwise", {"output_gate": True, "gate_elementwise": True}),
    ("gate_elementwise_gqa_post_softpick", {"output_gate": True, "gate_elementwise": True,
                                           "n_kv_head": 2, "norm": "post", "softmax": "softpick"}),
    ("mask_first_key", {"mask_first_key": True}),
    ("sink_token", {"sink_token": True}),
    ("gqa_kv2", {"n_kv_head": 2}),
    ("mqa_kv1", {"n_kv_head": 1}),
    ("window_3", {"attention_window": 3}),
    ("window_0", {"attention_window": 0}),
    # Attention types: linear (phi = elu + 1) and sparse (window + global tokens).
    ("linear", {"attention_type": "linear"}),
    ("linear_gqa_learned_gate", {"attention_type": "linear", "n_kv_head": 2,
                                 "position": "learned", "output_gate": True}),
    ("linear_post_rms_nopos", {"attention_type": "linear", "norm": "post",
                               "norm_type": "rmsnorm", "position": "none"}),
    ("sparse_w2_g2", {"attention_type": "sparse", "attention_window": 2,
                      "attention_global": 2}),
    ("sparse_w0_g3_gqa_sinktoken_softmax1", {"attention_type": "sparse", "attention_window": 0,
                                             "attention_global": 3, "n_kv_head": 1,
                                             "sink_token": True, "softmax": "softmax1"}),
    ("bidirectional", {"causal": False}),
    ("bidirectional_nonorm_nomlp_maskfirst", {"causal": False, "norm": "none", "mlp": False,
                                              "mask_first_key": True}),
    # Released decoder families' options (issue 16).
    ("swiglu", {"mlp_activation": "swiglu"}),
    ("gelu_erf", {"mlp_activation": "gelu_erf"}),
    ("qkv_bias_only", {"bias": False, "qkv_bias": True}),
    ("llama_attention_and_mlp_bias", {"norm_type": "rmsnorm", "bias": False, "qkv_bias": True,
                                      "proj_bias": True, "mlp_bias": True,
                                      "mlp_activation": "swiglu", "n_kv_head": 2}),
    ("head_size_8_wider", {"head_size": 8}),
    ("head_size_2_narrower", {"head_size": 2}),
    ("qk_norm", {"qk_norm": True, "norm_type": "rmsnorm"}),
    ("parallel_residual", {"parallel_residual": True}),
    ("window_layers_wf", {"attention_window": 2, "window_layers": "wf"}),
    ("rope_llama3", {"rope_scaling": "llama3", "rope_factor": 8.0, "rope_original_context": 32,
                     "rope_base": 500.0}),
    ("rope_yarn_hf", {"rope_scaling": "yarn_hf", "rope_factor": 4.0,
                      "rope_original_context": 40, "rope_base": 100.0}),
    ("llama_like", {"norm_type": "rmsnorm", "bias": False, "mlp_activation": "swiglu",
                    "tie_embeddings": False, "n_kv_head": 2}),
    ("qwen2_like", {"norm_type": "rmsnorm", "bias": False, "qkv_bias": True,
                    "mlp_activation": "swiglu", "n_kv_head": 2}),
    ("qwen3_like", {"norm_type": "rmsnorm", "bias": False, "qk_norm": True, "head_size": 8,
                    "mlp_activation": "swiglu", "n_kv_head": 2, "tie_embeddings": False}),
    ("neox_like", {"parallel_residual": True, "mlp_activation": "gelu_erf", "n_head": 2,
                   "rotary_dim": 2, "tie_embeddings": False}),
    ("gptoss_like", {"norm_type": "rmsnorm", "softmax": "sink_logit", "attention_window": 3,
                     "window_layers": "wf", "mlp_activation": "swiglu", "n_kv_head": 2,
                     "head_size": 8, "rope_scaling": "yarn_hf", "rope_factor": 2.0,
                     "rope_original_context": 20, "rope_base": 100.0}),
    # Combinations.
    ("combo_post_rms_nobias_untied_learned", {"norm": "post", "norm_type": "rmsnorm",
                                              "bias": False, "tie_embeddings": False,
                                              "position": "learned"}),
    ("combo_sink_token_sigmoid_learned", {"sink_token": True, "softmax": "sigmoid",
                                          "position": "learned"}),
    ("combo_sinklogit_gate_gqa_window_maskfirst_sinktoken",
     {"softmax": "sink_logit", "output_gate": True, "n_kv_head": 2, "attention_window": 4,
      "mask_first_key": True, "sink_token": True}),
    ("combo_softmax1_gptj_partial_window0_maskfirst",
     {"softmax": "softmax1", "rope_layout": "gptj", "n_head": 2, "rotary_dim": 4,
      "rope_base": 100.0, "attention_window": 0, "mask_first_key": True}),
    ("combo_post_rezero_gate_mqa", {"norm": "post", "residual_scale": "rezero",
                                    "output_gate": True, "n_kv_head": 1}),
    ("combo_none_norm_rezero_nomlp_untied", {"norm": "none", "residual_scale": "rezero",
                                             "mlp": False, "tie_embeddings": False}),
    ("combo_noresidual_nonorm_inv_sqrt_2l", {"residual": False, "norm": "none",
                                             "residual_scale": "inv_sqrt_2l"}),
    ("combo_rms_bias_on_3layers_yarn_partial",
     {"norm_type": "rmsnorm", "n_layer": 3, "n_head": 2, "rotary_dim": 6,
      "rope_scaling": "yarn", "rope_factor": 2.0, "rope_base": 100.0}),
    # No residual with ReZero: x = f(x), the alphas are unused (model_config.h), so their
    # gradient is 0. Without norms, so that nothing scale-invariant hides a wrong gradient.
    ("combo_noresidual_rezero_nonorm", {"residual": False, "residual_scale": "rezero",
                                        "norm": "none"}),
]

# (config, mutation): the truth with this mistake must disagree with attnlab.
SENSITIVITY = [
    ("base", "no_causal_diag"),
    ("pos_learned", "wpe_shift"),
    ("rope_gptj_base100", "rope_layout_swapped"),
    ("rope_partial_neox_hd8", "rope_full_rotary"),
    ("rope_yarn", "yarn_no_attention_factor"),
    ("norm_post", "post_norm_on_branch"),
    ("layernorm_eps0.1", "eps_outside_sqrt"),
    ("rmsnorm_eps0.1", "rms_as_layernorm"),
    ("residual_inv_sqrt_2l", "residual_scale_one"),
    ("residual_rezero", "rezero_mlp_alpha_ignored"),
    ("residual_deepnorm", "deepnorm_alpha_on_branch"),
    ("bidirectional", "bidirectional_as_causal"),
    ("softmax1", "softmax1_no_plus_one"),
    ("sink_logit", "sink_logit_sign"),
    ("sigmoid_default_bias", "sigmoid_bias_wrong_length"),
    ("softpick", "softpick_abs_numerator"),
    ("key_bias", "key_bias_unscaled"),
    ("output_gate", "gate_bias_dropped"),
    ("output_gate_elementwise", "gate_channels_transposed"),
    ("mask_first_key", "first_key_visible"),
    ("sink_token", "sink_token_not_prepended_to_position"),
    ("gqa_kv2", "gqa_modulo"),
    ("window_3", "window_off_by_one"),
    ("linear", "linear_phi_relu"),
    ("linear", "linear_no_causal_diag"),
    ("linear_gqa_learned_gate", "gqa_modulo"),
    ("linear_post_rms_nopos", "linear_as_softmax"),
    # (No "global_rows_local" row: in a causal model a global query at position p < G sees only
    # keys j <= p < G, which are global keys anyway, so the mistake cannot change any output.)
    ("sparse_w2_g2", "global_keys_local"),
    ("sparse_w0_g3_gqa_sinktoken_softmax1", "global_off_by_one"),
    ("untied", "tied_head"),
    ("base", "gelu_erf"),
    ("swiglu", "swiglu_swapped"),
    ("gelu_erf", "gelu_tanh_for_erf"),
    ("qk_norm", "qk_norm_after_rope"),
    ("parallel_residual", "parallel_as_sequential"),
    ("window_layers_wf", "window_every_layer"),
    ("rope_llama3", "llama3_unscaled"),
    ("rope_yarn_hf", "yarn_hf_as_paper"),
]


def full_config(overrides):
    c = dict(BASE)
    c.update(overrides)
    return c


# ---------------------------------------------------------------------------------------------
# File formats.

def write_safetensors(path, tensors):
    """safetensors: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}
    padded with spaces so the data starts at a multiple of 8, then the data (LE, C order)."""
    header, arrays, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays.append(a)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in arrays:
            f.write(a.tobytes())


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} has dtype {e['dtype']}, expected F32")
        b, en = e["data_offsets"]
        out[name] = np.frombuffer(buf[b:en], dtype="<f4").reshape(e["shape"]).astype(np.float64)
    return out


# ---------------------------------------------------------------------------------------------
# Parameters: names, shapes and the random values (parameters.h).

def head_dim(c):
    return c.get("head_size", 0) or c["d_model"] // c["n_head"]


def parameter_shapes(c):
    C, H, V = c["d_model"], c["n_head"], c["vocab_size"]
    Hkv = c["n_kv_head"] or H
    hd = head_dim(c)
    A = H * hd
    F = c["mlp_hidden"] or 4 * C
    F1 = 2 * F if c.get("mlp_activation") == "swiglu" else F
    Q = (H + 2 * Hkv) * hd
    P = c["context"] + (1 if c["sink_token"] else 0)
    ln_bias = c["bias"] and c["norm_type"] == "layernorm"
    has_norm = c["norm"] != "none"
    s = {"wte": (V, C)}
    if c["position"] == "learned":
        s["wpe"] = (P, C)
    if c["sink_token"]:
        s["sink_token"] = (C,)
    for l in range(c["n_layer"]):
        h = f"h.{l}."
        if has_norm:
            s[h + "ln1.weight"] = (C,)
            if ln_bias:
                s[h + "ln1.bias"] = (C,)
        s[h + "attn.qkv.weight"] = (C, Q)
        if c["bias"] or c.get("qkv_bias"):
            s[h + "attn.qkv.bias"] = (Q,)
        if c.get("qk_norm"):
            s[h + "attn.q_norm"] = (hd,)
            s[h + "attn.k_norm"] = (hd,)
        s[h + "attn.proj.weight"] = (A, C)
        if c["bias"] or c.get("proj_bias"):
            s[h + "attn.proj.bias"] = (C,)
        if c["output_gate"]:
            G = A if c.get("gate_elementwise", False) else H  # one gate per channel or per head
            s[h + "attn.gate.weight"] = (C, G)
            s[h + "attn.gate.bias"] = (G,)
        if c["softmax"] == "sink_logit":
            s[h + "attn.sink"] = (H,)
        if c.get("key_bias"):
            s[h + "attn.key_bias"] = (Hkv, hd)
        if c["mlp"]:
            if has_norm:
                s[h + "ln2.weight"] = (C,)
                if ln_bias:
                    s[h + "ln2.bias"] = (C,)
            s[h + "mlp.fc.weight"] = (C, F1)
            if c["bias"] or c.get("mlp_bias"):
                s[h + "mlp.fc.bias"] = (F1,)
            s[h + "mlp.proj.weight"] = (F, C)
            if c["bias"] or c.get("mlp_bias"):
                s[h + "mlp.proj.bias"] = (C,)
        if c["residual_scale"] == "rezero":
            s[h + "rezero"] = (2,)
    if c["norm"] == "pre":
        s["ln_f.weight"] = (C,)
        if ln_bias:
            s["ln_f.bias"] = (C,)
    if not c["tie_embeddings"]:
        s["lm_head"] = (V, C)
    return s


def make_weights(c, rng):
    """float32-rounded values as float64 arrays."""
    w = {}
    for name, shape in parameter_shapes(c).items():
        if name.endswith("rezero"):
            # Non-zero alphas of both signs and order 1 (0 would hide every sublayer's gradient).
            v = rng.uniform(0.4, 1.2, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        elif name.endswith("attn.sink"):
            v = rng.uniform(-3.0, 3.0, size=shape)  # exp(b_h) comparable to the row sums
        elif name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight", "q_norm", "k_norm")):
            v = 1.0 + 0.3 * rng.standard_normal(shape)
        else:
            v = 0.3 * rng.standard_normal(shape)
        w[name] = np.asarray(v, dtype=np.float32).astype(np.float64)
    return w


# ---------------------------------------------------------------------------------------------
# The truth: attnlab's GPT in plain PyTorch, float64.

def f32(x):
    """The float32 value of a float32 config field or of a float32 computation, as a float."""
    return float(np.float32(x))


def rope_tables(c, Tm, mutation):
    """cos, sin [Tm, d/2] (times YaRN's attention factor), rounded to float32 (rope.h)."""
    hd = head_dim(c)
    d = c["rotary_dim"] or hd
    base, s = c["rope_base"], c["rope_factor"]
    scaling = c["rope_scaling"]
    i = np.arange(d // 2, dtype=np.float64)
    if scaling == "ntk":
        base = base * s ** (d / (d - 2.0))
    theta = base ** (-2.0 * i / d)
    A = 1.0
    if scaling == "linear":
        theta = theta / s
    elif scaling == "yarn":
        L = c["rope_original_context"] or c["context"]
        alpha, beta = 1.0, 32.0
        r = L / (2.0 * math.pi / theta)
        gamma = np.clip((r - alpha) / (beta - alpha), 0.0, 1.0)
        theta = (1.0 - gamma) * theta / s + gamma * theta
        A = 0.1 * math.log(s) + 1.0
        if mutation == "yarn_no_attention_factor":
            A = 1.0
    elif scaling == "yarn_hf" and mutation == "yarn_hf_as_paper":
        L = c["rope_original_context"] or c["context"]
        r = L / (2.0 * math.pi / theta)
        gamma = np.clip((r - 1.0) / (32.0 - 1.0), 0.0, 1.0)
        theta = (1.0 - gamma) * theta / s + gamma * theta
        A = 0.1 * math.log(s) + 1.0
    elif scaling == "yarn_hf":
        # transformers' _compute_yarn_parameters (beta_fast 32, beta_slow 1, truncate).
        L = c["rope_original_context"] or c["context"]
        corr = lambda rot: d * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo = max(math.floor(corr(32.0)), 0)
        hi = min(math.ceil(corr(1.0)), d - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((i - lo) / (hi - lo), 0.0, 1.0)
        extrap = 1.0 - ramp
        theta = theta / s * (1.0 - extrap) + theta * extrap
        A = c.get("rope_attention_factor", 0.0) or 0.1 * math.log(s) + 1.0
    elif scaling == "llama3" and mutation != "llama3_unscaled":
        # transformers' _compute_llama3_parameters.
        L = c["rope_original_context"] or c["context"]
        lo_f, hi_f = c.get("rope_low_freq_factor", 1.0), c.get("rope_high_freq_factor", 4.0)
        wl = 2 * math.pi / theta
        scaled = np.where(wl > L / lo_f, theta / s, theta)
        k = (L / wl - lo_f) / (hi_f - lo_f)
        smooth = (1 - k) * scaled / s + k * scaled
        medium = ~(wl < L / hi_f) & ~(wl > L / lo_f)
        theta = np.where(medium, smooth, scaled)
    m = np.arange(Tm, dtype=np.float64)[:, None]
    cos = (A * np.cos(m * theta)).astype(np.float32).astype(np.float64)
    sin = (A * np.sin(m * theta)).astype(np.float32).astype(np.float64)
    return torch.tensor(cos), torch.tensor(sin), d


def apply_rope(x, cos, sin, d, layout):
    """x: [B, heads, Tm, hd]; rotates dims [0, d), pairs per layout; [d, hd) pass through."""
    rot, rest = x[..., :d], x[..., d:]
    if layout == "neox":
        a, b = rot[..., : d // 2], rot[..., d // 2:]
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([out, rest], dim=-1)


def layer_norm(x, w, b, eps, mutation):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    if mutation == "eps_outside_sqrt":
        y = (x - mean) / (torch.sqrt(var) + eps)
    else:
        y = (x - mean) / torch.sqrt(var + eps)
    y = y * w
    return y + b if b is not None else y


def rms_norm(x, w, eps, mutation):
    if mutation == "rms_as_layernorm":
        return layer_norm(x, w, None, eps, None)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear_attention(q, k, v, mutation):
    """Causal linear attention (Katharopoulos et al. 2020) in its quadratic, masked form, which
    neither of attnlab's kernels (recurrent, chunked) uses: w_ij = phi(q_i) . phi(k_j) for
    j <= i, phi = elu + 1, O_i = sum_j w_ij v_j / (sum_j w_ij + eps), eps = float32(1e-6)."""
    if mutation == "linear_phi_relu":
        phi = lambda x: torch.relu(x) + 1.0
    else:
        phi = lambda x: torch.nn.functional.elu(x) + 1.0
    Tm = q.shape[2]
    w = phi(q) @ phi(k).transpose(-1, -2)  # [B, H, Tm, Tm]
    i = torch.arange(Tm)[:, None]
    j = torch.arange(Tm)[None, :]
    vis = j < i if mutation == "linear_no_causal_diag" else j <= i
    w = torch.where(vis, w, torch.zeros_like(w))
    return (w @ v) / (w.sum(-1, keepdim=True) + f32(1e-6))


def attention(c, q, k, v, sink_logits, mutation, key_bias=None, pattern_edit=None):
    """q [B, H, Tm, hd], k, v [B, Hkv, Tm, hd] -> [B, H, Tm, hd] (attention.h). key_bias: None
    or k* [Hkv, hd], one more entry per row with score scale q . k* and value 0 (Gu et al.).
    pattern_edit: None or fn(p [B, H, Tm, Tm], visible [B, H, Tm, Tm]) -> p, applied to the
    normalised variants' probabilities before they weight v (python/tests' interventions)."""
    B, H, Tm, hd = q.shape
    Hkv = k.shape[1]
    group = H // Hkv
    if mutation == "gqa_modulo":
        idx = torch.arange(H) % Hkv
    else:
        idx = torch.arange(H) // group
    k, v = k[:, idx], v[:, idx]
    if c["attention_type"] == "linear" and mutation != "linear_as_softmax":
        return linear_attention(q, k, v, mutation)
    scale = f32(1.0 / math.sqrt(hd))
    s = scale * (q @ k.transpose(-1, -2))  # [B, H, Tm, Tm]
    i = torch.arange(Tm)[:, None]
    j = torch.arange(Tm)[None, :]
    vis = j <= i
    if mutation == "no_causal_diag":
        vis = j < i
    if not c["causal"] and mutation != "bidirectional_as_causal":
        vis = (j >= 0) & (i >= 0)  # every key
    w = c["attention_window"]
    if w >= 0:
        in_window = j >= i - (w + 1 if mutation == "window_off_by_one" else w)
        if c["sink_token"]:
            in_window = in_window | (j == 0)  # the sink token stays visible (StreamingLLM)
        G = c["attention_global"] if c["attention_type"] == "sparse" else 0
        if G > 0:  # Longformer: global keys seen by every row, global rows see every key
            if mutation == "global_off_by_one":
                G += 1
            if mutation != "global_keys_local":
                in_window = in_window | (j < G)
            if mutation != "global_rows_local":
                in_window = in_window | (i < G)
        vis = vis & in_window
    if c["mask_first_key"] and mutation != "first_key_visible":
        vis = vis & (j != 0)
    vis = vis.expand(B, H, Tm, Tm)
    kind = c["softmax"]
    if kind == "sigmoid":
        bias = c["sigmoid_bias"]
        if bias == 0.0:
            P = c["context"] + (1 if c["sink_token"] else 0)
            if mutation == "sigmoid_bias_wrong_length":
                P = c["context"] - 1  # differs from max_positions in every config
            bias = f32(-np.log(np.float32(P)))
        bias = f32(bias)
        p = torch.where(vis, torch.sigmoid(s + bias), torch.zeros_like(s))
        return p @ v
    if kind == "softpick":  # Zuhri et al. 2025, unshifted; eps is AttentionParams' float 1e-6
        em1 = torch.where(vis, torch.expm1(torch.where(vis, s, torch.zeros_like(s))),
                          torch.zeros_like(s))
        num = em1.abs() if mutation == "softpick_abs_numerator" else torch.relu(em1)
        return num / (em1.abs().sum(-1, keepdim=True) + f32(1e-6)) @ v
    # Normalised variants: exp of the visible scores only (masked entries never pass through
    # exp, so no inf and no NaN), then the denominator with the variant's extra term.
    s0 = torch.where(vis, s, torch.zeros_like(s))
    m = torch.where(vis, s, torch.full_like(s, -math.inf)).amax(-1, keepdim=True).detach()
    s_star = None
    if key_bias is not None:
        kb = key_bias[idx].unsqueeze(-1)  # [H, hd, 1]: each query head's kv head's k*
        s_star = (q @ kb) * (1.0 if mutation == "key_bias_unscaled" else scale)  # [B, H, Tm, 1]
        m = torch.maximum(m, s_star.detach())
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.where(vis, torch.exp(s0 - m), torch.zeros_like(s))
    den = e.sum(-1, keepdim=True)
    if kind == "softmax1" and mutation != "softmax1_no_plus_one":
        den = den + torch.exp(-m)
    elif kind == "sink_logit":
        b = sink_logits.view(1, H, 1, 1)
        if mutation == "sink_logit_sign":
            b = -b
        den = den + torch.exp(b - m)
    if s_star is not None:
        den = den + torch.exp(s_star - m)
    has_key = vis.any(-1, keepdim=True)
    safe = torch.where(has_key, den, torch.ones_like(den))
    p = torch.where(has_key, e / safe, torch.zeros_like(e))
    if pattern_edit is not None:
        p = pattern_edit(p, vis)
    return p @ v


def truth_forward(c, W, tokens, targets, mutation=None, edits=None):
    """W: name -> float64 leaf tensor. tokens, targets: int64 [B, T]. -> (logits [B, T, V], loss).
    edits: {("pattern", l): fn(p, visible) -> p, ("z", l): fn(z [B, H, Tm, hd]) -> z} (the head
    outputs before an output gate), for python/tests' interventions."""
    edits = edits or {}
    B, T = tokens.shape
    C, H, L = c["d_model"], c["n_head"], c["n_layer"]
    Hkv = c["n_kv_head"] or H
    hd = head_dim(c)
    off = 1 if c["sink_token"] else 0
    Tm = T + off
    eps = f32(c["norm_eps"])
    pre, post = c["norm"] == "pre", c["norm"] == "post"
    rms = c["norm_type"] == "rmsnorm"

    def norm(x, name):
        wt = W[name + ".weight"]
        if rms:
            return rms_norm(x, wt, eps, mutation)
        return layer_norm(x, wt, W.get(name + ".bias"), eps, mutation)

    def linear(x, name):
        y = x @ W[name + ".weight"]
        return y + W[name + ".bias"] if (name + ".bias") in W else y

    x = W["wte"][tokens]  # [B, T, C]
    if off:
        if mutation == "sink_token_not_prepended_to_position":
            x = torch.cat([x[:, :1] * 0 + W["sink_token"], x[:, 1:]], dim=1)  # overwrites token 0
            off, Tm = 0, T
        else:
            x = torch.cat([W["sink_token"].expand(B, 1, C), x], dim=1)
    if "wpe" in W:
        pos = torch.arange(Tm)
        if mutation == "wpe_shift":
            pos = torch.clamp(pos + 1, max=W["wpe"].shape[0] - 1)
        x = x + W["wpe"][pos]
    if c["position"] == "rope":
        cos, sin, d = rope_tables(c, Tm, mutation)
        layout = c["rope_layout"]
        if mutation == "rope_layout_swapped":
            layout = "neox" if layout == "gptj" else "gptj"
        if mutation == "rope_full_rotary":
            cc = dict(c, rotary_dim=0)
            cos, sin, d = rope_tables(cc, Tm, None)
    if c["residual_scale"] == "inv_sqrt_2l" and mutation != "residual_scale_one":
        fixed = float(np.float32(1.0) / np.sqrt(np.float32(2.0 * L)))
    else:
        fixed = 1.0
    skip = f32((2.0 * L) ** 0.25) if c["residual_scale"] == "deepnorm" else 1.0
    if mutation == "deepnorm_alpha_on_branch":  # LN(x + alpha f(x)) instead of LN(alpha x + f(x))
        skip, fixed = 1.0, f32((2.0 * L) ** 0.25)

    for l in range(L):
        h = f"h.{l}."
        rez = W.get(h + "rezero")
        a1 = rez[0] if rez is not None else fixed
        a2 = rez[1] if rez is not None else fixed
        if mutation == "rezero_mlp_alpha_ignored" and rez is not None:
            a2 = 1.0
        # Attention sublayer.
        a_in = norm(x, h + "ln1") if pre else x
        qkv = linear(a_in, h + "attn.qkv")
        q = qkv[..., : H * hd].reshape(B, Tm, H, hd).transpose(1, 2)
        k = qkv[..., H * hd:(H + Hkv) * hd].reshape(B, Tm, Hkv, hd).transpose(1, 2)
        v = qkv[..., (H + Hkv) * hd:].reshape(B, Tm, Hkv, hd).transpose(1, 2)
        qk_norm = c.get("qk_norm", False)
        if qk_norm and mutation != "qk_norm_after_rope":
            q = rms_norm(q, W[h + "attn.q_norm"], eps, None)
            k = rms_norm(k, W[h + "attn.k_norm"], eps, None)
        if c["position"] == "rope":
            q = apply_rope(q, cos, sin, d, layout)
            k = apply_rope(k, cos, sin, d, layout)
        if qk_norm and mutation == "qk_norm_after_rope":
            q = rms_norm(q, W[h + "attn.q_norm"], eps, None)
            k = rms_norm(k, W[h + "attn.k_norm"], eps, None)
        cl = c
        wl = c.get("window_layers", "")
        if wl and mutation != "window_every_layer" and wl[l] == "f":
            cl = dict(c, attention_window=-1)
        att = attention(cl, q, k, v, W.get(h + "attn.sink"), mutation,
                        W.get(h + "attn.key_bias"), edits.get(("pattern", l)))  # [B, H, Tm, hd]
        if ("z", l) in edits:
            att = edits[("z", l)](att)
        if c["output_gate"]:
            z = a_in @ W[h + "attn.gate.weight"]
            if mutation != "gate_bias_dropped":
                z = z + W[h + "attn.gate.bias"]
            if c.get("gate_elementwise", False):  # one gate per channel of [H, hd]
                if mutation == "gate_channels_transposed":
                    g = torch.sigmoid(z).reshape(B, Tm, hd, H).permute(0, 3, 1, 2)
                else:
                    g = torch.sigmoid(z).reshape(B, Tm, H, hd).transpose(1, 2)
                att = att * g
            else:
                att = att * torch.sigmoid(z).transpose(1, 2).unsqueeze(-1)
        att = att.transpose(1, 2).reshape(B, Tm, H * hd)
        o = linear(att, h + "attn.proj")
        if post and mutation == "post_norm_on_branch":  # x + a LN(f(x)) instead of LN(x + a f(x))
            s1, post_here = x + a1 * norm(o, h + "ln1"), False
        else:
            s1, post_here = (skip * x + a1 * o if c["residual"] else o), post
        mid = norm(s1, h + "ln1") if post_here else s1
        # MLP sublayer.
        if c["mlp"]:
            parallel = c.get("parallel_residual", False) and mutation != "parallel_as_sequential"
            m_in = norm(x if parallel else mid, h + "ln2") if pre else mid
            hh = linear(m_in, h + "mlp.fc")
            act = c.get("mlp_activation", "gelu_tanh")
            if act == "swiglu":
                F = hh.shape[-1] // 2
                gg, uu = hh[..., :F], hh[..., F:]
                if mutation == "swiglu_swapped":
                    gg, uu = uu, gg
                g = torch.nn.functional.silu(gg) * uu
            elif (act == "gelu_erf") != (mutation in ("gelu_erf", "gelu_tanh_for_erf")):
                g = torch.nn.functional.gelu(hh)
            else:
                g = gelu_tanh(hh)
            m = linear(g, h + "mlp.proj")
            s2 = skip * mid + a2 * m if c["residual"] else m
            x = norm(s2, h + "ln2") if post else s2
        else:
            x = mid
    if pre:
        x = norm(x, "ln_f")
    head = W["wte"] if (c["tie_embeddings"] or mutation == "tied_head") else W["lm_head"]
    logits = (x @ head.t())[:, off:]  # [B, T, V]
    lp = torch.log_softmax(logits, dim=-1)
    tgt = targets.clone()
    counted = tgt >= 0
    nll = -lp.gather(-1, torch.where(counted, tgt, torch.zeros_like(tgt)).unsqueeze(-1))[..., 0]
    loss = (nll * counted).sum() / counted.sum()
    return logits, loss


def truth(c, weights, tokens, targets, mutation=None):
    W = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    logits, loss = truth_forward(c, W, torch.tensor(tokens, dtype=torch.int64),
                                 torch.tensor(targets, dtype=torch.int64), mutation)
    loss.backward()
    grads = {k: t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
             for k, t in W.items()}
    return logits.detach().numpy(), float(loss), grads


# ---------------------------------------------------------------------------------------------
# Comparison.

def depth_factor(c):
    return 10.0 * (2 * c["n_layer"]) + 10.0


def tensor_check(got, want, D):
    """-> (ratio, err, tol): err = max |got - want|, tol = C u D max|want|; ratio <= 1 passes.
    An all-zero truth (tol = 0) must be matched exactly."""
    mag = float(np.max(np.abs(want))) if want.size else 0.0
    tol = C_TOL * U * D * mag
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    if tol == 0.0:
        return (0.0 if err == 0.0 else math.inf), err, tol
    return err / tol, err, tol


def tensor_ratio(got, want, D):
    return tensor_check(got, want, D)[0]


def compare(c, a_logits, a_loss, a_grads, t_logits, t_loss, t_grads):
    """-> list of (tensor name, ratio, detail)."""
    D = depth_factor(c)

    def entry(name, got, want):
        r, err, tol = tensor_check(got, want, D)
        return (name, r, f"max|err| {err:.3g}, tol {tol:.3g}, max|torch| "
                         f"{float(np.max(np.abs(want))):.3g}, max|attnlab| "
                         f"{float(np.max(np.abs(got))):.3g}")

    out = [entry("logits", a_logits, t_logits)]
    lt = C_TOL * U * D * max(abs(t_loss), 1.0)
    out.append(("loss", abs(a_loss - t_loss) / lt, f"attnlab {a_loss:.9g}, torch {t_loss:.9g}"))
    for name in t_grads:
        if name not in a_grads:
            out.append(("grad " + name, math.inf, "missing from the driver's output"))
            continue
        if a_grads[name].shape != t_grads[name].shape:
            out.append(("grad " + name, math.inf, f"shape {a_grads[name].shape}, expected "
                                                  f"{t_grads[name].shape}"))
            continue
        out.append(entry("grad " + name, a_grads[name], t_grads[name]))
    for name in a_grads:
        if name not in t_grads:
            out.append(("grad " + name, math.inf, "not a parameter of this configuration"))
    return out


def perturbation_check(c, a_logits, a_grads, t_logits, t_grads):
    """Moves the largest-|truth| element of each tensor by PERTURB (relative); each must fail.
    Returns the names of tensors for which the perturbed result still passed."""
    D = depth_factor(c)
    escaped = []
    items = [("logits", t_logits)] + [("grad " + k, v) for k, v in t_grads.items()]
    for name, want in items:
        if not np.any(want):
            continue  # an all-zero truth is compared exactly (tol = 0): any change fails
        idx = np.unravel_index(np.argmax(np.abs(want)), want.shape)
        bad = np.array(want, copy=True)
        bad[idx] *= 1.0 + PERTURB
        if tensor_ratio(bad, want, D) <= 1.0:
            escaped.append(name)
    return escaped


# ---------------------------------------------------------------------------------------------

def make_batch(c, rng):
    B, T, V = 2, c["context"], c["vocab_size"]
    tokens = rng.integers(0, V, size=(B, T)).astype(np.int32)
    targets = rng.integers(0, V, size=(B, T)).astype(np.int32)
    targets[0, 3] = -1
    targets[1, 0] = -1
    targets[1, T - 1] = -1
    return tokens, targets


def run_driver(driver, d, c, weights, tokens, targets):
    paths = {k: os.path.join(d, k) for k in
             ["config.json", "model.safetensors", "tokens.npy", "targets.npy", "logits.npy",
              "grads.safetensors", "loss.txt"]}
    with open(paths["config.json"], "w") as f:
        json.dump(c, f, indent=1)
    write_safetensors(paths["model.safetensors"], weights)
    np.save(paths["tokens.npy"], tokens)
    np.save(paths["targets.npy"], targets)
    cmd = [driver, "--config", paths["config.json"], "--weights", paths["model.safetensors"],
           "--tokens", paths["tokens.npy"], "--targets", paths["targets.npy"],
           "--out-logits", paths["logits.npy"], "--out-grads", paths["grads.safetensors"],
           "--loss-out", paths["loss.txt"]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"driver failed (exit {r.returncode}): {r.stderr.strip()}")
    logits = np.load(paths["logits.npy"]).astype(np.float64)
    grads = read_safetensors(paths["grads.safetensors"])
    with open(paths["loss.txt"]) as f:
        loss = float(f.read())
    return logits, loss, grads


def driver_input_checks(driver, tmp):
    """The driver must refuse weights that do not fit the configuration, naming the tensor.
    Returns a list of failure messages."""
    c = full_config({})
    rng = np.random.default_rng(99)
    good = make_weights(c, rng)
    tokens, targets = make_batch(c, rng)
    missing = {k: v for k, v in good.items() if k != "h.1.attn.proj.bias"}
    misshapen = dict(good, **{"h.0.mlp.fc.weight": good["h.0.mlp.fc.weight"].T.copy()})
    extra = dict(good, **{"h.0.attn.sink": np.zeros(4)})
    out = []
    for what, w, tensor in [("missing", missing, "h.1.attn.proj.bias"),
                            ("misshapen", misshapen, "h.0.mlp.fc.weight"),
                            ("extra", extra, "h.0.attn.sink")]:
        d = os.path.join(tmp, "reject_" + what)
        os.makedirs(d)
        try:
            run_driver(driver, d, c, w, tokens, targets)
            out.append(f"driver: accepted weights with a {what} tensor '{tensor}'")
        except RuntimeError as e:
            if tensor not in str(e):
                out.append(f"driver: the error for a {what} tensor does not name '{tensor}': {e}")
    print(f"driver input checks: {'ok' if not out else 'FAIL'} (missing, misshapen and extra "
          "tensors are refused, naming the tensor)")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnlab", help="the attnlab CLI (unused: the driver runs the model)")
    ap.add_argument("--driver", required=True, help="path to model_oracle_driver")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--only", help="run only configurations whose name contains this")
    ap.add_argument("--verbose", action="store_true", help="print every tensor's ratio")
    args = ap.parse_args()
    if not os.path.isfile(args.driver):
        print(f"FAIL: driver not found at {args.driver}", file=sys.stderr)
        return 1

    t0 = time.time()
    failures = []
    results = {}  # config name -> (c, weights, tokens, targets, attnlab outputs)
    print(f"tolerance: |attnlab - torch| <= C * u * D * max|torch| per tensor, C = {C_TOL:g}, "
          f"u = 2^-24, D = 10 * 2 * n_layer + 10 (D = {depth_factor(BASE):g} for the base)")
    with tempfile.TemporaryDirectory(prefix="attnlab_model_oracle_") as tmp:
        failures += driver_input_checks(args.driver, tmp)
        for idx, (name, overrides) in enumerate(CONFIGS):
            if args.only and args.only not in name:
                continue
            c = full_config(overrides)
            rng = np.random.default_rng(args.seed + 7919 * idx)
            weights = make_weights(c, rng)
            tokens, targets = make_batch(c, rng)
            d = os.path.join(tmp, name)
            os.makedirs(d)
            try:
                a_logits, a_loss, a_grads = run_driver(args.driver, d, c, weights, tokens,
                                                       targets)
            except RuntimeError as e:
                failures.append(f"{name}: {e}")
                print(f"FAIL {name:55s} {e}")
                continue
            t_logits, t_loss, t_grads = truth(c, weights, tokens, targets)
            if not (np.all(np.isfinite(t_logits)) and
                    all(np.all(np.isfinite(g)) for g in t_grads.values())):
                failures.append(f"{name}: the torch truth is not finite (oracle bug)")
                continue
            ratios = compare(c, a_logits, a_loss, a_grads, t_logits, t_loss, t_grads)
            worst_name, worst, _ = max(ratios, key=lambda r: r[1])
            bad = [(n, r, det) for n, r, det in ratios if not r <= 1.0]
            escaped = perturbation_check(c, a_logits, a_grads, t_logits, t_grads)
            status = "ok  " if not bad else "FAIL"
            print(f"{status} {name:55s} max err/tol {worst:9.3g} ({worst_name}); "
                  f"{len(ratios)} tensors; loss {t_loss:.6f}")
            if args.verbose:
                for n, r, det in ratios:
                    print(f"       {r:9.3g}  {n:32s} {det}")
            for n, r, det in bad:
                failures.append(f"{name}: {n}: err/tol = {r:.3g} ({det})")
            for n in escaped:
                failures.append(f"{name}: {n}: a {PERTURB:.0%} change of its largest element "
                                "still passes: the tolerance is too loose")
            results[name] = (c, weights, tokens, targets, (a_logits, a_loss, a_grads))

        # Sensitivity: a truth with a deliberate mistake must disagree.
        print("sensitivity (a mistaken truth must fail):")
        for name, mutation in SENSITIVITY:
            if name not in results:
                continue
            c, weights, tokens, targets, (a_logits, a_loss, a_grads) = results[name]
            m_logits, m_loss, m_grads = truth(c, weights, tokens, targets, mutation)
            ratios = compare(c, a_logits, a_loss, a_grads, m_logits, m_loss, m_grads)
            worst_name, worst, _ = max(ratios, key=lambda r: r[1])
            caught = worst > 1.0
            print(f"  {'caught' if caught else 'MISSED'} {mutation:38s} on {name:24s} "
                  f"max err/tol {worst:9.3g} ({worst_name})")
            if not caught:
                failures.append(f"sensitivity: the mistake '{mutation}' on {name} passed the "
                                "comparison: the test cannot see it")

    elapsed = time.time() - t0
    if failures:
        print(f"\n{len(failures)} failure(s) ({elapsed:.1f} s):", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"all {len(results)} configurations match ({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
