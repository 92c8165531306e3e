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


def hf_sentencepiece(metaspace=False):
    ms = "\u2581"
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for c in [ms, "h", "e", "l", "o", "w", "r", "d", "a", "b", "\u4e2d"]:
        vocab[c] = len(vocab)
    merges = [("l", "l"), (ms, "h"), ("e", "ll"), (ms + "h", "ell"), (ms + "hell", "o"),
              (ms, "w"), ("o", "r"), (ms + "w", "or"), (ms, ms)]
    for l, r in merges:
        vocab.setdefault(l + r, len(vocab))
    j = {"added_tokens": [{"id": i, "content": t, "special": True}
                          for i, t in enumerate(["<unk>", "<s>", "</s>"])],
         "normalizer": {"type": "Sequence", "normalizers": [
             {"type": "Prepend", "prepend": ms},
             {"type": "Replace", "pattern": {"String": " "}, "content": ms}]},
         "pre_tokenizer": None,
         "post_processor": {"type": "TemplateProcessing",
                            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}}]},
         "decoder": {"type": "Sequence", "decoders": [
             {"type": "Replace", "pattern": {"String": ms}, "content": " "},
             {"type": "ByteFallback"}, {"type": "Fuse"},
             {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
         "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
                   "vocab": vocab, "merges": [l + " " + r for l, r in merges]}}
    if metaspace:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": ms, "prepend_scheme": "first",
                              "split": True}
        j["model"]["merges"] = [[l, r] for l, r in merges]
    return j


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def hf_byte_level(regex=LLAMA3_REGEX):
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("t", "h"), ("h", "e"), ("th", "e"), (b2u[32], "t"), (b2u[32] + "t", "he")]
    for l, r in merges:
        vocab[l + r] = len(vocab)
    pre = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    if regex is not None:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
             "invert": False},
            dict(pre, use_regex=False)]}
    return {"added_tokens": [{"id": len(vocab), "content": "<|begin_of_text|>", "special": True}],
            "normalizer": None, "pre_tokenizer": pre, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "ignore_merges": True, "vocab": vocab,
                      "merges": [[l, r] for l, r in merges]}}


def hf_tokenizer_seeds():
    t = "hf_tokenizer"
    dump = lambda j: json.dumps(j, ensure_ascii=False).encode()
    config = b'{"add_bos_token": true, "bos_token": "<s>", "eos_token": {"content": "</s>"}}'
    spm = "\n".join(["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
                     + ["\u2581", "a", "b", "c", "ab", "bc", "\u2581a", "\u2581ab"]).encode()
    sp = hf_sentencepiece()
    put(t, "valid-sentencepiece", dump(sp) + SPLIT + config + SPLIT + spm)
    put(t, "valid-metaspace-split", dump(hf_sentencepiece(metaspace=True)))
    put(t, "valid-bytelevel-llama3", dump(hf_byte_level()) + SPLIT + b'{"bos_token": null}')
    put(t, "valid-bytelevel-gpt2", dump(hf_byte_level(None)))
    put(t, "empty", b"")
    put(t, "truncated", dump(sp)[:700])
    put(t, "duplicate-key", dump(sp)[:-1] + b', "model": {}}')
    put(t, "unknown-model-type", dump(dict(sp, model=dict(sp["model"], type="Unigram"))))
    bad = hf_byte_level(r"\w+|\s+")
    put(t, "unknown-regex", dump(bad))
    put(t, "id-out-of-range", dump(dict(sp, model=dict(sp["model"], vocab=dict(
        sp["model"]["vocab"], h=1 << 22)))))
    put(t, "duplicate-id", dump(dict(sp, model=dict(sp["model"], vocab=dict(
        sp["model"]["vocab"], h=5)))))
    put(t, "unknown-merge", dump(dict(sp, model=dict(sp["model"], merges=["q z"]))))
    vocab = dict(sp["model"]["vocab"])
    del vocab["<0x41>"]
    vocab["zz"] = 3 + 0x41
    put(t, "missing-byte-token", dump(dict(sp, model=dict(sp["model"], vocab=vocab))))
    put(t, "bad-config", dump(sp) + SPLIT + b'{"bos_token": "<q>"}')
    put(t, "spm-scores-only", b"{}" + SPLIT + SPLIT + spm)


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


# ---- gguf ------------------------------------------------------------------------------------

def gguf_seeds():
    """llama.cpp GGUF files (formats/gguf.h, gguf_model.h), written with tests/gguf_writer.py."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "tests"))
    import gguf_writer as g
    t = "gguf"
    rng = np.random.default_rng(16)

    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 0.5

    V, C, H, KV, D, F = 6, 32, 4, 2, 8, 32
    vocab = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default",
             "tokenizer.ggml.tokens": ["a", "b", "c", "ab", "<s>", "</s>"],
             "tokenizer.ggml.token_type": [1, 1, 1, 1, 3, 3],
             "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.bos_token_id": 4,
             "tokenizer.ggml.eos_token_id": 5, "tokenizer.ggml.add_bos_token": False}

    def llama_meta(arch, **extra):
        m = {"general.architecture": arch, f"{arch}.context_length": 64,
             f"{arch}.embedding_length": C, f"{arch}.block_count": 1,
             f"{arch}.feed_forward_length": F, f"{arch}.attention.head_count": H,
             f"{arch}.attention.head_count_kv": KV, f"{arch}.rope.freq_base": 10000.0,
             f"{arch}.attention.layer_norm_rms_epsilon": 1e-6}
        m.update(extra)
        m.update(vocab)
        return m

    def llama_tensors(arch, types=("F32", "Q8_0", "F16", "BF16")):
        ts = [("token_embd.weight", r(V, C), types[0]),
              ("blk.0.attn_norm.weight", r(C), "F32"),
              ("blk.0.attn_q.weight", g.llama_permute(r(H * D, C), H, H) if arch == "llama"
               else r(H * D, C), types[1]),
              ("blk.0.attn_k.weight", g.llama_permute(r(KV * D, C), H, KV) if arch == "llama"
               else r(KV * D, C), types[2]),
              ("blk.0.attn_v.weight", r(KV * D, C), types[3]),
              ("blk.0.attn_output.weight", r(C, H * D), types[1]),
              ("blk.0.ffn_norm.weight", r(C), "F32"),
              ("blk.0.ffn_gate.weight", r(F, C), types[1]),
              ("blk.0.ffn_up.weight", r(F, C), types[2]),
              ("blk.0.ffn_down.weight", r(C, F), types[3]),
              ("output_norm.weight", r(C), "F32")]
        if arch == "qwen3":
            ts += [("blk.0.attn_q_norm.weight", r(D), "F32"),
                   ("blk.0.attn_k_norm.weight", r(D), "F32")]
        if arch == "qwen2":
            ts += [("blk.0.attn_q.bias", r(H * D), "F32"), ("blk.0.attn_k.bias", r(KV * D), "F32"),
                   ("blk.0.attn_v.bias", r(KV * D), "F32"), ("output.weight", r(V, C), "F16")]
        return ts

    good = g.gguf_bytes(llama_meta("llama"), llama_tensors("llama"))
    put(t, "valid-llama", good)
    put(t, "valid-qwen2", g.gguf_bytes(llama_meta("qwen2"), llama_tensors("qwen2")))
    put(t, "valid-qwen3", g.gguf_bytes(llama_meta("qwen3", **{"qwen3.attention.key_length": D}),
                                       llama_tensors("qwen3")))
    neox_meta = {"general.architecture": "gptneox", "gptneox.context_length": 64,
                 "gptneox.embedding_length": C, "gptneox.block_count": 1,
                 "gptneox.feed_forward_length": F, "gptneox.attention.head_count": H,
                 "gptneox.rope.dimension_count": 2, "gptneox.use_parallel_residual": True,
                 "gptneox.attention.layer_norm_epsilon": 1e-5}
    neox = [("token_embd.weight", r(V, C), "F16"),
            ("blk.0.attn_norm.weight", r(C), "F32"), ("blk.0.attn_norm.bias", r(C), "F32"),
            ("blk.0.attn_qkv.weight", g.neox_qkv_to_gguf(r(3 * C, C), H), "Q8_0"),
            ("blk.0.attn_qkv.bias", g.neox_qkv_to_gguf(r(3 * C), H), "F32"),
            ("blk.0.attn_output.weight", r(C, C), "BF16"), ("blk.0.attn_output.bias", r(C), "F32"),
            ("blk.0.ffn_norm.weight", r(C), "F32"), ("blk.0.ffn_norm.bias", r(C), "F32"),
            ("blk.0.ffn_up.weight", r(F, C), "F32"), ("blk.0.ffn_up.bias", r(F), "F32"),
            ("blk.0.ffn_down.weight", r(C, F), "F32"), ("blk.0.ffn_down.bias", r(C), "F32"),
            ("output_norm.weight", r(C), "F32"), ("output_norm.bias", r(C), "F32"),
            ("output.weight", r(V, C), "F32")]
    put(t, "valid-gptneox", g.gguf_bytes(neox_meta, neox))
    put(t, "valid-metadata-only", g.gguf_bytes(
        {"general.architecture": "none", "u8": g.Typed("uint8", 1), "i64": -5, "f64":
         g.Typed("float64", 0.25), "strs": ["x", ""], "bools": [True, False],
         "general.alignment": g.Typed("uint32", 64)}, [], alignment=64))
    small = g.gguf_bytes({"general.architecture": "llama"},
                         [("a", np.arange(4, dtype=np.float32), "F32")])
    put(t, "empty", b"")
    put(t, "wrong-magic", b"GGUG" + good[4:])
    put(t, "version-1", good[:4] + struct.pack("<I", 1) + good[8:])
    put(t, "version-big-endian", good[:4] + struct.pack(">I", 3) + good[8:])
    put(t, "truncated-header", good[:40])
    put(t, "truncated-tensor-infos", good[:good.index(b"blk.0.ffn_norm.weight") + 4])
    put(t, "truncated-data", good[:-40])
    put(t, "huge-kv-count", small[:16] + struct.pack("<Q", 1 << 60) + small[24:])
    put(t, "huge-tensor-count", small[:8] + struct.pack("<Q", 1 << 60) + small[16:])
    put(t, "huge-string-length", small[:24] + struct.pack("<Q", 1 << 62) + small[32:])
    put(t, "huge-array", g.gguf_bytes({"a": g.Typed("array[uint32]", [1, 2])}, [])
        .replace(struct.pack("<IQ", 4, 2), struct.pack("<IQ", 4, 1 << 61), 1))
    put(t, "huge-dims", g.gguf_bytes({}, [g.RawTensor("a", [1 << 32, 1 << 32, 16], 0, b"")]))
    put(t, "too-many-dims", g.gguf_bytes({}, [g.RawTensor("a", [1, 1, 1, 1, 1], 0, b"\0" * 4)]))
    put(t, "unknown-ggml-type", g.gguf_bytes({}, [g.RawTensor("a", [4], 77, b"\0" * 16)]))
    put(t, "removed-ggml-type", g.gguf_bytes({}, [g.RawTensor("a", [32], 4, b"\0" * 32)]))
    put(t, "unknown-value-type", small.replace(struct.pack("<I", 8) + struct.pack("<Q", 5)
                                               + b"llama", struct.pack("<I", 13)
                                               + struct.pack("<Q", 5) + b"llama", 1))
    put(t, "nested-array", g.gguf_bytes({"a": g.Typed("array[uint32]", [])}, [])
        .replace(struct.pack("<IQ", 4, 0), struct.pack("<IQ", 9, 0), 1))
    put(t, "bad-bool", g.gguf_bytes({"a": True}, []).replace(b"\x07\0\0\0\x01", b"\x07\0\0\0\x05"))
    put(t, "bad-alignment", g.gguf_bytes({"general.alignment": g.Typed("uint32", 24)}, []))
    put(t, "misaligned-offset", g.gguf_bytes({}, [g.RawTensor("a", [4], 0, b"\0" * 16, offset=8)]))
    put(t, "overlap", g.gguf_bytes({}, [g.RawTensor("a", [8], 0, b"\0" * 32, offset=0),
                                        g.RawTensor("b", [8], 0, b"\0" * 32, offset=0)]))
    put(t, "data-past-end", g.gguf_bytes({}, [g.RawTensor("a", [4], 0, b"\0" * 16,
                                                          offset=1 << 40, place=False)]))
    put(t, "row-not-whole-blocks", g.gguf_bytes({}, [g.RawTensor("a", [33], 8, b"\0" * 34)]))
    put(t, "duplicate-key", g.gguf_bytes({"a": 1, "b": 2}, []).replace(
        struct.pack("<Q", 1) + b"b", struct.pack("<Q", 1) + b"a", 1))
    put(t, "duplicate-tensor", g.gguf_bytes({}, [g.RawTensor("a", [4], 0, b"\0" * 16),
                                                 g.RawTensor("a", [4], 0, b"\0" * 16)]))
    put(t, "unsupported-type-q5k", g.gguf_bytes(llama_meta("llama"), llama_tensors("llama")[:1] + [
        g.RawTensor("blk.0.attn_norm.weight", [256], 13, b"\0" * 176)]))
    put(t, "unknown-architecture", g.gguf_bytes(dict(llama_meta("llama"),
                                                     **{"general.architecture": "mamba"}), []))
    put(t, "unmapped-tensor", g.gguf_bytes(llama_meta("llama"), llama_tensors("llama") + [
        ("blk.0.attn_sinks.weight", r(4), "F32")]))
    put(t, "rope-freqs", g.gguf_bytes(llama_meta("llama"), llama_tensors("llama") + [
        ("rope_freqs.weight", r(4), "F32")]))
    put(t, "layer-out-of-range", g.gguf_bytes(llama_meta("llama"), llama_tensors("llama") + [
        ("blk.7.attn_norm.weight", r(C), "F32")]))
    put(t, "missing-hyperparameter", g.gguf_bytes(
        {k: v for k, v in llama_meta("llama").items() if k != "llama.block_count"},
        llama_tensors("llama")))
    # Llama 3.1-style scaling as llama.cpp writes it (rope_freqs.weight, no scaling keys): the
    # converter's divisors load as rope_scaling llama3; other divisors are refused.
    llama3 = {"hidden_size": C, "num_attention_heads": H, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}
    put(t, "valid-llama3-rope-freqs", g.gguf_bytes(llama_meta("llama"), llama_tensors("llama") + [
        ("rope_freqs.weight", g.llama3_rope_factors(llama3), "F32")]))
    put(t, "rope-freqs-not-llama3", g.gguf_bytes(llama_meta("llama"), llama_tensors("llama") + [
        ("rope_freqs.weight", np.array([1, 2, 3, 4], dtype=np.float32), "F32")]))


# ---- Hugging Face decoder config.json and the safetensors index ---------------------------------

def hf_config_seeds():
    t = "hf_config"
    base = {"model_type": "llama", "vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 24,
            "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "hidden_act": "silu", "tie_word_embeddings": False}
    j = lambda d: json.dumps(d, indent=1)
    put(t, "llama", j(base))
    put(t, "llama3-rope", j(dict(base, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16})))
    put(t, "yarn", j(dict(base, rope_scaling={"type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 16})))
    put(t, "linear", j(dict(base, rope_scaling={"type": "linear", "factor": 2.0})))
    put(t, "dynamic", j(dict(base, rope_scaling={"type": "dynamic", "factor": 2.0})))
    put(t, "longrope-unsupported", j(dict(base, rope_scaling={"type": "longrope", "factor": 2.0})))
    put(t, "mistral-window", j(dict(base, model_type="mistral", sliding_window=4)))
    put(t, "qwen2-window-layers", j(dict(base, model_type="qwen2", use_sliding_window=True,
                                         sliding_window=3, max_window_layers=1,
                                         tie_word_embeddings=True)))
    put(t, "qwen3", j(dict(base, model_type="qwen3", head_dim=8)))
    put(t, "layer-types", j(dict(base, model_type="qwen3", sliding_window=3,
                                 layer_types=["sliding_attention", "full_attention"])))
    put(t, "neox", j({"model_type": "gpt_neox", "vocab_size": 32, "hidden_size": 16,
                      "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
                      "max_position_embeddings": 64, "layer_norm_eps": 1e-5, "rotary_pct": 0.25,
                      "rotary_emb_base": 10000, "hidden_act": "gelu",
                      "use_parallel_residual": True}))
    put(t, "unknown-type", j(dict(base, model_type="phi3")))
    put(t, "wrong-types", j(dict(base, hidden_size="16", num_attention_heads=4.5)))
    put(t, "huge", j(dict(base, vocab_size=1 << 40, hidden_size=1 << 40)))
    put(t, "zero-heads", j(dict(base, num_attention_heads=0)))
    put(t, "bias", j(dict(base, attention_bias=True)))


def safetensors_index_seeds():
    t = "safetensors_index"
    j = lambda d: json.dumps(d, indent=1)
    put(t, "valid", j({"metadata": {"total_size": 10}, "weight_map": {
        "a.weight": "model-00001-of-00002.safetensors",
        "b.weight": "model-00002-of-00002.safetensors"}}))
    put(t, "path-escape", j({"weight_map": {"a": "../x.safetensors"}}))
    put(t, "absolute", j({"weight_map": {"a": "/etc/passwd"}}))
    put(t, "not-string", j({"weight_map": {"a": 3}}))
    put(t, "empty-map", j({"weight_map": {}}))
    put(t, "no-map", j({"metadata": {}}))
    put(t, "not-json", '{"weight_map": {"a": "x.safetensors"')


def main():
    safetensors_seeds()
    checkpoint_seeds()
    llmc_seeds()
    gpt2_seeds()
    bpe_vocab_seeds()
    hf_tokenizer_seeds()
    model_config_seeds()
    train_config_seeds()
    npy_seeds()
    token_file_seeds()
    cli_seeds()
    gguf_seeds()
    hf_config_seeds()
    safetensors_index_seeds()
    n = sum(len(files) for _, _, files in os.walk(ROOT))
    print(f"wrote the seed corpora under {ROOT} ({n} files)")


if __name__ == "__main__":
    main()
