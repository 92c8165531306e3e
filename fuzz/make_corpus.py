#!/usr/bin/python3
"""Writes the seed corpora under fuzz/corpus/<target>/: small valid files of every format attnlab
reads, and slightly broken variants of them (truncated, wrong magic, huge sizes, wrong dtype,
shape mismatch, NaN weights). Deterministic; run it again after changing a format and commit the
result. Files found by fuzzing (crash regressions) live next to the seeds as regress-*; this
script never touches them.

    /usr/bin/python3 fuzz/make_corpus.py
"""
import json
import os
import struct

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
SPLIT = b"\n@@attnlab-fuzz-split@@\n"


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ------------------------------------------------------------------------------

def safetensors(tensors, metadata=None, header_override=None, pad=True):
    """tensors: list of (name, dtype string, shape, raw bytes)."""
    header, off, buf = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        buf += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if header_override is not None:
        text = header_override
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + buf


def f32(a):
    return np.asarray(a, dtype="<f4").tobytes()


def safetensors_seeds():
    t = "safetensors"
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    good = safetensors([("a", "F32", (2, 3), a.tobytes()),
                        ("b", "F16", (2,), np.array([1.5, -2], dtype="<f2").tobytes()),
                        ("c", "BF16", (1,), b"\x80\x3f"),
                        ("d", "I64", (), struct.pack("<q", 7)),
                        ("e", "F32", (0, 5), b"")], metadata={"format": "pt"})
    put(t, "valid", good)
    put(t, "valid-f64-u8", safetensors([("x", "F64", (2,), np.array([1, 2], "<f8").tobytes()),
                                        ("y", "U8", (3,), b"\x01\x02\x03")]))
    put(t, "empty", b"")
    put(t, "truncated-length", good[:5])
    put(t, "truncated-header", good[:20])
    put(t, "truncated-data", good[:-3])
    put(t, "huge-header-length", struct.pack("<Q", 1 << 62) + good[8:])
    put(t, "header-not-object", safetensors([], header_override=b"[1,2]"))
    put(t, "wrong-dtype", safetensors([("a", "F33", (2,), f32([1, 2]))]))
    put(t, "shape-mismatch", safetensors([("a", "F32", (3,), f32([1, 2]))],
                                         header_override=b'{"a":{"dtype":"F32","shape":[3],'
                                                         b'"data_offsets":[0,8]}}'))
    put(t, "huge-shape", safetensors([], header_override=b'{"a":{"dtype":"F32","shape":'
                                                         b'[4294967296,4294967296,16],'
                                                         b'"data_offsets":[0,8]}}') + b"\0" * 8)
    put(t, "overlap", safetensors([], header_override=b'{"a":{"dtype":"U8","shape":[4],'
                                                      b'"data_offsets":[0,4]},"b":{"dtype":"U8",'
                                                      b'"shape":[4],"data_offsets":[2,6]}}')
        + b"\0" * 6)
    put(t, "duplicate-name", safetensors([], header_override=b'{"a":{"dtype":"U8","shape":[1],'
                                                             b'"data_offsets":[0,1]},"a":{"dtype":'
                                                             b'"U8","shape":[1],"data_offsets":'
                                                             b'[0,1]}}') + b"\0")
    put(t, "nan-weights", safetensors([("a", "F32", (2,), f32([np.nan, np.inf]))]))
    # GPT-2 names (Hugging Face layout), tiny: the mapping runs and refuses C % 64 != 0.
    C, V, P = 2, 3, 2
    rng = np.random.default_rng(0)
    hf = [("wte.weight", (V, C)), ("wpe.weight", (P, C)), ("h.0.ln_1.weight", (C,)),
          ("h.0.ln_1.bias", (C,)), ("h.0.attn.c_attn.weight", (C, 3 * C)),
          ("h.0.attn.c_attn.bias", (3 * C,)), ("h.0.attn.c_proj.weight", (C, C)),
          ("h.0.attn.c_proj.bias", (C,)), ("h.0.ln_2.weight", (C,)), ("h.0.ln_2.bias", (C,)),
          ("h.0.mlp.c_fc.weight", (C, 4 * C)), ("h.0.mlp.c_fc.bias", (4 * C,)),
          ("h.0.mlp.c_proj.weight", (4 * C, C)), ("h.0.mlp.c_proj.bias", (C,)),
          ("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    put(t, "hf-gpt2-tiny", safetensors([(n, "F32", s, f32(rng.standard_normal(s)))
                                        for n, s in hf]))


# ---- attnlab checkpoints ----------------------------------------------------------------------

BASE_CONFIG = {"vocab_size": 4, "context": 4, "d_model": 2, "n_layer": 1, "n_head": 1,
               "n_kv_head": 0, "mlp_hidden": 0, "mlp": False, "residual": True, "bias": False,
               "tie_embeddings": True, "position": "rope", "rope_layout": "neox", "rotary_dim": 0,
               "rope_base": 10000.0, "rope_scaling": "none", "rope_factor": 1.0,
               "rope_original_context": 0, "norm": "none", "norm_type": "layernorm",
               "norm_eps": 1e-5, "residual_scale": "one", "softmax": "standard",
               "sigmoid_bias": 0.0, "output_gate": False, "mask_first_key": False,
               "sink_token": False, "attention_window": -1, "init_std": 0.02,
               "scale_residual_init": True}


def layout(c):
    """ParameterLayout (src/model/parameters.cc) for a config dict."""
    C, H = c["d_model"], c["n_head"]
    hd = C // H
    kv = c["n_kv_head"] or H
    Q = (H + 2 * kv) * hd
    F = c["mlp_hidden"] or 4 * C
    V = c["vocab_size"]
    ln_bias = c["bias"] and c["norm_type"] == "layernorm"
    out = [("wte", (V, C))]
    if c["position"] == "learned":
        out.append(("wpe", (c["context"] + (1 if c["sink_token"] else 0), C)))
    if c["sink_token"]:
        out.append(("sink_token", (C,)))
    for l in range(c["n_layer"]):
        h = f"h.{l}."
        if c["norm"] != "none":
            out.append((h + "ln1.weight", (C,)))
            if ln_bias:
                out.append((h + "ln1.bias", (C,)))
        out.append((h + "attn.qkv.weight", (C, Q)))
        if c["bias"]:
            out.append((h + "attn.qkv.bias", (Q,)))
        out.append((h + "attn.proj.weight", (C, C)))
        if c["bias"]:
            out.append((h + "attn.proj.bias", (C,)))
        if c["output_gate"]:
            out += [(h + "attn.gate.weight", (C, H)), (h + "attn.gate.bias", (H,))]
        if c["softmax"] == "sink_logit":
            out.append((h + "attn.sink", (H,)))
        if c["mlp"]:
            if c["norm"] != "none":
                out.append((h + "ln2.weight", (C,)))
                if ln_bias:
                    out.append((h + "ln2.bias", (C,)))
            out.append((h + "mlp.fc.weight", (C, F)))
            if c["bias"]:
                out.append((h + "mlp.fc.bias", (F,)))
            out.append((h + "mlp.proj.weight", (F, C)))
            if c["bias"]:
                out.append((h + "mlp.proj.bias", (C,)))
        if c["residual_scale"] == "rezero":
            out.append((h + "rezero", (2,)))
    if c["norm"] == "pre":
        out.append(("ln_f.weight", (C,)))
        if ln_bias:
            out.append(("ln_f.bias", (C,)))
    if not c["tie_embeddings"]:
        out.append(("lm_head", (V, C)))
    return out


def checkpoint(cfg, seed=0, optimizer=True, step=3, mutate=None):
    rng = np.random.default_rng(seed)
    config = dict(cfg, format="attnlab-checkpoint", version=1, meta={"step": step})
    tensors = [(n, "F32", s, f32(0.1 * rng.standard_normal(s))) for n, s in layout(cfg)]
    if mutate:
        tensors = mutate(tensors)
    parts = [json.dumps(config, indent=1).encode(),
             safetensors(tensors, metadata={"format": "attnlab-checkpoint"})]
    if optimizer:
        opt = [("m." + n, "F32", s, f32(np.zeros(s))) for n, s in layout(cfg)]
        opt += [("v." + n, "F32", s, f32(np.ones(s) * 1e-4)) for n, s in layout(cfg)]
        parts.append(safetensors(opt, metadata={"format": "attnlab-optimizer", "step": str(step),
                                                "rng_state": "x"}))
    return SPLIT.join(parts)


def checkpoint_seeds():
    t = "checkpoint"
    put(t, "valid-minimal", checkpoint(BASE_CONFIG))
    put(t, "valid-no-optimizer", checkpoint(BASE_CONFIG, optimizer=False))
    rich = dict(BASE_CONFIG, mlp=True, mlp_hidden=2, bias=True, norm="pre", position="learned",
                output_gate=True, softmax="sink_logit", residual_scale="rezero",
                tie_embeddings=False, sink_token=True, vocab_size=3, context=3)
    put(t, "valid-rich", checkpoint(rich, seed=1, optimizer=False))
    gqa = dict(BASE_CONFIG, d_model=4, n_head=2, n_kv_head=1, norm="post", norm_type="rmsnorm",
               softmax="softmax1", attention_window=2, mask_first_key=True,
               rope_scaling="linear", rope_factor=2.0, mlp=True, mlp_hidden=4)
    put(t, "valid-gqa-post", checkpoint(gqa, seed=2, optimizer=False))
    good = checkpoint(BASE_CONFIG)
    put(t, "empty", b"")
    put(t, "config-only", json.dumps(dict(BASE_CONFIG, format="attnlab-checkpoint", version=1)))
    put(t, "truncated-config", good[:40])
    put(t, "truncated-model", good[:good.index(SPLIT) + len(SPLIT) + 30])
    cut = good.rindex(SPLIT)
    put(t, "truncated-optimizer", good[:cut + len(SPLIT) + 100])
    put(t, "wrong-format", good.replace(b'"attnlab-checkpoint"', b'"attnlab-checkpoinx"', 1))
    put(t, "wrong-version", good.replace(b'"version": 1', b'"version": 2', 1))
    huge = dict(BASE_CONFIG, vocab_size=1 << 24, context=1 << 20, d_model=1 << 16, n_layer=1024,
                n_head=1, format="attnlab-checkpoint", version=1)
    put(t, "huge-config", json.dumps(huge).encode() + SPLIT +
        safetensors([("wte", "F32", (2, 2), f32(np.ones(4)))]))
    put(t, "huge-rope-factor", checkpoint(dict(BASE_CONFIG, rope_scaling="linear",
                                               rope_factor=1e300), optimizer=False))
    put(t, "wrong-dtype", checkpoint(BASE_CONFIG, optimizer=False, mutate=lambda ts: [
        (n, "F16" if n == "wte" else d, s, b[:len(b) // 2] if n == "wte" else b)
        for n, d, s, b in ts]))
    put(t, "shape-mismatch", checkpoint(BASE_CONFIG, optimizer=False, mutate=lambda ts: [
        (n, d, (s[0] * s[1],) if n == "wte" else s, b) for n, d, s, b in ts]))
    put(t, "nan-weights", checkpoint(BASE_CONFIG, optimizer=False, mutate=lambda ts: [
        (n, d, s, f32(np.full(s, np.nan)) if n == "wte" else b) for n, d, s, b in ts]))
    put(t, "missing-tensor", checkpoint(BASE_CONFIG, optimizer=False, mutate=lambda ts: ts[1:]))
    put(t, "optimizer-other-step", good.replace(b'"step":"3"', b'"step":"4"'))


# ---- llm.c ------------------------------------------------------------------------------------

def llmc(maxT=2, V=3, Vp=4, L=1, NH=1, C=2, version=3, magic=20240326, seed=0, params=None,
         truncate=0, extra=b""):
    header = np.zeros(256, dtype="<i4")
    header[:8] = [magic, version, maxT, V, L, NH, C, Vp]
    n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
    if params is None:
        params = 0.1 * np.random.default_rng(seed).standard_normal(n)
    if version == 5:
        raw = (np.asarray(params, "<f4").view("<u4") >> 16).astype("<u2").tobytes()
    else:
        raw = f32(params)
    data = header.tobytes() + raw + extra
    return data[:len(data) - truncate] if truncate else data


def llmc_seeds():
    t = "llmc"
    put(t, "valid-fp32", llmc())
    put(t, "valid-bf16", llmc(version=5, seed=1))
    put(t, "valid-bigger", llmc(maxT=3, V=5, Vp=8, L=2, NH=2, C=4, seed=2))
    put(t, "empty", b"")
    put(t, "truncated-header", llmc()[:100])
    put(t, "truncated-params", llmc(truncate=6))
    put(t, "extra-bytes", llmc(extra=b"\0\0\0\0"))
    put(t, "wrong-magic", llmc(magic=20240327))
    put(t, "wrong-version", llmc(version=4))
    put(t, "huge-sizes", llmc(maxT=1 << 20, V=1 << 24, Vp=1 << 24, L=1024, NH=1, C=1 << 16,
                              params=np.zeros(4)))
    put(t, "negative-sizes", llmc(C=-2, params=np.zeros(4)))
    put(t, "padded-below-vocab", llmc(V=4, Vp=3))
    put(t, "heads-do-not-divide", llmc(NH=3, C=4, params=np.zeros(
        4 * 4 + 2 * 4 + 12 * 16 + 13 * 4 + 8)))
    nan = 0.1 * np.ones(90)
    nan[17] = np.nan
    put(t, "nan-weights", llmc(params=nan))


# ---- tokenizer files --------------------------------------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def gpt2_seeds():
    t = "gpt2_tokenizer"
    b2u = bytes_to_unicode()
    enc = {b2u[b]: b for b in range(256)}
    merges = [("t", "h"), ("h", "e"), ("th", "e"), (b2u[32], "t"), (b2u[32] + "t", "he"),
              ("a", "n"), ("an", "d")]
    for l, r in merges:
        enc[l + r] = len(enc)
    enc["<|endoftext|>"] = len(enc)
    encoder = json.dumps(enc, ensure_ascii=False).encode()
    vocab = ("#version: 0.2\n" + "".join(f"{l} {r}\n" for l, r in merges)).encode()
    put(t, "valid", encoder + SPLIT + vocab)
    put(t, "valid-crlf-no-final-newline", encoder + SPLIT + vocab.replace(b"\n", b"\r\n")[:-2])
    put(t, "empty", b"")
    put(t, "encoder-only", encoder)
    put(t, "truncated-encoder", encoder[:300] + SPLIT + vocab)
    put(t, "truncated-vocab", encoder + SPLIT + vocab[:20])
    put(t, "no-header-line", encoder + SPLIT + vocab[vocab.index(b"\n") + 1:])
    bad = dict(enc)
    bad["th"] = 10 ** 12
    put(t, "huge-id", json.dumps(bad, ensure_ascii=False).encode() + SPLIT + vocab)
    put(t, "duplicate-key", encoder[:-1] + b', "t": 5}' + SPLIT + vocab)
    put(t, "wrong-type", encoder.replace(b'"th": 256', b'"th": "256"') + SPLIT + vocab)
    put(t, "unknown-merge", encoder + SPLIT + vocab + b"q z\n")
    put(t, "repeated-merge", encoder + SPLIT + vocab + b"t h\n")


def bpe_vocab_seeds():
    t = "bpe_vocab"
    b2u = bytes_to_unicode()
    good = {"format": "attnlab-bpe", "version": 1, "pre_tokenizer": "gpt2",
            "merges": ["t h", "h e", "th e", b2u[32] + " t", b2u[32] + "t he", "a n", "an d"],
            "special_tokens": ["<|endoftext|>"]}
    text = json.dumps(good, ensure_ascii=False, indent=1)
    put(t, "valid", text)
    put(t, "valid-no-specials", json.dumps(dict(good, special_tokens=[], merges=[])))
    put(t, "empty", b"")
    put(t, "truncated", text[:60])
    put(t, "wrong-format", json.dumps(dict(good, format="gpt2")))
    put(t, "wrong-version", json.dumps(dict(good, version=2)))
    put(t, "unknown-key", json.dumps(dict(good, extra=1)))
    put(t, "merge-before-definition", json.dumps(dict(good, merges=["th e", "t h"])))
    put(t, "duplicate-result", json.dumps(dict(good, merges=["t h", "t h"])))
    put(t, "wrong-type", json.dumps(dict(good, merges=[1, 2])))
    put(t, "duplicate-special", json.dumps(dict(good, special_tokens=["<s>", "<s>"])))
    put(t, "duplicate-key", text[:-1] + ', "version": 1}')


# ---- JSON configs -----------------------------------------------------------------------------

def model_config_seeds():
    t = "model_config"
    put(t, "valid-defaults", "{}")
    put(t, "valid-full", json.dumps(BASE_CONFIG, indent=2))
    put(t, "valid-gpt2ish", json.dumps({"vocab_size": 50, "context": 8, "d_model": 8,
                                        "n_layer": 2, "n_head": 2, "position": "learned",
                                        "bias": True, "norm": "pre", "mlp": True}))
    put(t, "valid-variants", json.dumps(dict(BASE_CONFIG, softmax="sigmoid", sigmoid_bias=-2.0,
                                             rope_scaling="yarn", rope_factor=4.0,
                                             rope_original_context=4, rope_layout="gptj",
                                             residual_scale="inv_sqrt_2l", sink_token=True)))
    put(t, "empty", b"")
    put(t, "truncated", json.dumps(BASE_CONFIG)[:50])
    put(t, "unknown-key", json.dumps({"d_model": 8, "colour": "red"}))
    put(t, "wrong-type", json.dumps({"d_model": "8", "n_layer": 1.5}))
    put(t, "out-of-range", json.dumps({"vocab_size": 1 << 40, "n_head": 0}))
    put(t, "huge-rope-factor", json.dumps(dict(BASE_CONFIG, rope_scaling="linear",
                                               rope_factor=1e300)))
    put(t, "infinite-eps", '{"norm_eps": 1e999, "rope_base": 1e999}')
    put(t, "not-object", "[1, 2, 3]")
    put(t, "deep-nesting", "[" * 5000 + "]" * 5000)


def train_config_seeds():
    t = "train_config"
    good = {"model": {"n_layer": 1, "d_model": 8, "n_head": 2, "context": 16},
            "train": {"batch": 2, "steps": 10, "lr": 0.001, "warmup": 2, "bos": True,
                      "seed": 3, "eval_every": 5, "checkpoint_every": 5},
            "data": "data"}
    put(t, "valid", json.dumps(good, indent=2))
    put(t, "valid-empty", "{}")
    put(t, "empty", b"")
    put(t, "truncated", json.dumps(good)[:70])
    put(t, "unknown-key", json.dumps(dict(good, optimizer={})))
    put(t, "unknown-train-key", json.dumps({"train": {"batch_size": 4}}))
    put(t, "wrong-type", json.dumps({"train": {"batch": 2.5, "lr": "fast", "bos": 1}}))
    put(t, "huge-values", json.dumps({"train": {"batch": 1e300, "steps": 18446744073709551615,
                                                "lr": 1e300}}))
    put(t, "negative-seed", json.dumps({"train": {"seed": -1}}))
    put(t, "model-not-object", json.dumps({"model": 3}))


# ---- .npy -------------------------------------------------------------------------------------

def npy_bytes(a, version=None):
    import io
    buf = io.BytesIO()
    if version is None:
        np.save(buf, a)
    else:
        np.lib.format.write_array(buf, a, version=version)
    return buf.getvalue()


def npy_raw(descr, shape_text, data):
    """A version 1.0 file with a hand-written header (for shapes numpy would not write)."""
    d = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}"
    d += " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + data


def npy_seeds():
    t = "npy"
    good = npy_bytes(np.arange(6, dtype="<f4").reshape(2, 3))
    put(t, "valid-f4", good)
    put(t, "valid-f8", npy_bytes(np.array([1.5, -2.0])))
    put(t, "valid-u1", npy_bytes(np.array([[1, 0], [0, 1]], dtype=np.uint8)))
    put(t, "valid-b1", npy_bytes(np.array([True, False])))
    put(t, "valid-i4-scalar", npy_bytes(np.array(7, dtype="<i4")))
    put(t, "valid-i8-v2", npy_bytes(np.array([1, 2, 3], dtype="<i8"), version=(2, 0)))
    put(t, "valid-empty-array", npy_bytes(np.zeros((0, 4), dtype="<f4")))
    put(t, "empty", b"")
    put(t, "truncated-magic", good[:4])
    put(t, "truncated-header", good[:30])
    put(t, "truncated-data", good[:-2])
    put(t, "wrong-magic", b"\x93NUMPZ" + good[6:])
    put(t, "wrong-version", good[:6] + b"\x04\x00" + good[8:])
    put(t, "huge-header-length", good[:8] + b"\xff\xff" + good[10:])
    put(t, "wrong-dtype", good.replace(b"<f4", b"<c8"))
    put(t, "big-endian", npy_bytes(np.arange(3, dtype=">f4")))
    put(t, "fortran", npy_bytes(np.asfortranarray(np.ones((2, 3), dtype="<f4"))))
    put(t, "shape-mismatch", good.replace(b"(2, 3)", b"(3, 3)"))
    put(t, "huge-shape", npy_raw("<f4", "(4294967296, 4294967296, 8)", b"\0" * 24))
    put(t, "overflow-shape", npy_raw("<f4", "(99999999999999999999,)", b""))
    put(t, "zero-huge-shape", npy_raw("<f4", "(0, 4611686018427387904)", b""))
    put(t, "negative-shape", npy_raw("<f4", "(-1,)", b""))
    put(t, "nan-values", npy_bytes(np.array([np.nan, np.inf], dtype="<f4")))


# ---- token files ------------------------------------------------------------------------------

def tok(tokens, vocab, bpt=None, version=1, magic=b"ATLTOKS1", count=None):
    bpt = bpt or (2 if vocab <= 65536 else 4)
    head = magic + struct.pack("<IIII", version, bpt, vocab, 0)
    head += struct.pack("<Q", len(tokens) if count is None else count)
    return head + np.asarray(tokens, dtype="<u2" if bpt == 2 else "<u4").tobytes()


def token_file_seeds():
    t = "token_file"
    toks = list(range(20)) * 2
    put(t, "valid-u16", tok(toks, 257))
    put(t, "valid-u32", tok([0, 70000, 5, 3], 70001))
    put(t, "empty", b"")
    put(t, "truncated-header", tok(toks, 257)[:20])
    put(t, "truncated-tokens", tok(toks, 257)[:-3])
    put(t, "wrong-magic", tok(toks, 257, magic=b"ATLTOKS2"))
    put(t, "wrong-version", tok(toks, 257, version=2))
    put(t, "wrong-width", tok(toks, 257, bpt=3))
    put(t, "huge-count", tok(toks, 257, count=1 << 62))
    put(t, "token-outside-vocab", tok([1, 300], 257))
    put(t, "huge-vocab", tok([0x80000000, 1], 0xFFFFFFFF, bpt=4))


# ---- the command line -------------------------------------------------------------------------

def cli_seeds():
    t = "cli"
    cmds = {
        "eval": ["eval", "--model", "ckpt", "--text", "text.txt", "--max-tokens", "40"],
        "eval-llmc": ["eval", "--model", "model.bin", "--tokenizer", "byte", "--text", "text.txt",
                      "--max-tokens", "20"],
        "logits": ["logits", "--model", "ckpt", "--tokens", "1,2,3", "--out", "l.npy"],
        "logits-text": ["logits", "--model", "ckpt", "--text", "text.txt", "--out", "l.npy"],
        "generate": ["generate", "--model", "ckpt", "--prompt", "the", "--max-tokens", "5",
                     "--temperature", "0"],
        "generate-sink": ["generate", "--model", "ckpt", "--prompt", "the jury", "--max-tokens",
                          "20", "--policy", "sink", "--sinks", "2", "--window", "8"],
        "train": ["train", "--data", "data", "--out", "ck2", "--layers", "1", "--d-model", "8",
                  "--heads", "2", "--context", "8", "--batch", "2", "--steps", "2",
                  "--eval-batches", "1", "--eval-every", "1", "--checkpoint-every", "1"],
        "train-config": ["train", "--config", "train.json", "--data", "data", "--steps", "1",
                         "--out", "ck3"],
        "train-resume": ["train", "--data", "data", "--out", "ckpt", "--resume", "--steps", "2",
                         "--batch", "2", "--lr", "0.001", "--eval-batches", "1"],
        "prepare": ["prepare", "--text", "text.txt", "--tokenizer", "bpe:8", "--out", "d2"],
        "prepare-byte": ["prepare", "--text", "text.txt", "--out", "d3", "--val-every", "2"],
        "tokenize": ["tokenize", "--tokenizer", "vocab.json", "--text", "the jury", "--json"],
        "tokenize-gpt2": ["tokenize", "--tokenizer", "gpt2:gpt2dir", "--text", "the band",
                          "--show"],
        "tokenize-files": ["tokenize", "--encoder", "gpt2dir", "--vocab", "vocab.json", "--ids",
                           "1 2"],
        "tokenize-batch": ["tokenize", "--tokenizer", "byte", "--batch", "batch.json"],
        "tokenize-train": ["tokenize", "--train", "text.txt", "--merges", "10", "--out", "v2.json"],
        "attention": ["attention", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out",
                      "o.npy", "--causal", "--lse", "l.npy"],
        "attention-backward": ["attention", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy",
                               "--out", "o.npy", "--dout", "dout.npy", "--dq", "dq.npy", "--dk",
                               "dk.npy", "--dv", "dv.npy", "--softmax", "sink", "--sink-logits",
                               "sink.npy", "--dsink", "ds.npy"],
        "attention-mask": ["attention", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out",
                           "o.npy", "--mask", "mask.npy", "--kernel", "reference", "--probs",
                           "p.npy", "--window-left", "2", "--sinks", "1"],
        "memory": ["memory", "--n", "64", "--heads", "4", "--head-dim", "8", "--json"],
        "analyze": ["analyze", "--model", "ckpt", "--text", "text.txt", "--out", "rep",
                    "--max-tokens", "32", "--plot-heads", "0.0"],
        "stream": ["stream", "--model", "ckpt", "--text", "text.txt", "--max-tokens", "40",
                   "--policy", "sink", "--window", "8", "--sinks", "2"],
        "report-demo": ["report-demo", "--out", "demo", "--date", "2024-01-01"],
        "threads": ["--threads", "2", "memory", "--n", "16"],
        # Broken: missing files, wrong types, out-of-range flags, unknown commands.
        "bad-missing-file": ["eval", "--model", "nothere", "--text", "text.txt"],
        "bad-wrong-type": ["logits", "--model", "text.txt", "--tokens", "1", "--out", "l.npy"],
        "bad-range": ["generate", "--model", "ckpt", "--top-p", "7", "--max-tokens", "-3"],
        "bad-huge": ["attention", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out",
                     "o.npy", "--window-left", "9223372036854775807", "--sinks",
                     "-9223372036854775808"],
        "bad-tokens": ["logits", "--model", "ckpt", "--tokens", "1,,99999999999", "--out", "x"],
        "bad-command": ["frobnicate", "--help"],
        "bad-no-args": [""],
        "help": ["train", "--help"],
    }
    for name, args in cmds.items():
        put(t, name, b"\0".join(a.encode() for a in args))


def main():
    safetensors_seeds()
    checkpoint_seeds()
    llmc_seeds()
    gpt2_seeds()
    bpe_vocab_seeds()
    model_config_seeds()
    train_config_seeds()
    npy_seeds()
    token_file_seeds()
    cli_seeds()
    n = sum(len(files) for _, _, files in os.walk(ROOT))
    print(f"wrote the seed corpora under {ROOT} ({n} files)")


if __name__ == "__main__":
    main()
