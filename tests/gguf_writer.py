#!/usr/bin/python3
"""A small GGUF (v3) writer for attnlab's tests: numpy only, no llama.cpp.

    from gguf_writer import write_gguf, Typed, quantize_q8_0, llama_permute
    write_gguf("m.gguf",
               {"general.architecture": "llama", "llama.block_count": 2,
                "llama.attention.layer_norm_rms_epsilon": 1e-5,
                "tokenizer.ggml.tokens": ["a", "b"], "llama.context_length": Typed("uint64", 64)},
               [("token_embd.weight", embedding, "F32"),       # numpy shape = HF shape [V, C]
                ("blk.0.attn_q.weight", llama_permute(wq, 4, 4), "Q8_0")])

Metadata values: a `Typed(type, value)` says the GGUF type ("uint8" ... "float64", "bool",
"string", or "array[<type>]" for arrays); plain Python values are inferred: bool -> bool, int ->
uint32 (int32 if negative, uint64/int64 if it does not fit 32 bits), float -> float32, str ->
string, list/tuple/np.ndarray -> an array of the inferred element type (all str: string; all
bool: bool; all int: int32 or int64; any float: float32), numpy scalars -> their own type.

Tensors: (name, array, ggml_type) with ggml_type in F32, F16, BF16, Q8_0; the array's numpy
shape is the Hugging Face shape (row-major, [out, in] for a linear weight); GGUF stores its
dims reversed (ne[0] = the row length). Q8_0 needs a row length that is a multiple of 32 and
quantizes as ggml's reference quantizer does (d = max|x| / 127 stored as f16, q = round(x / d)
half away from zero, computed with the float32 d). `dequantize_q8_0` gives what a reader gets.

`llama_permute(w, n_head, n_head_kv)` is llama.cpp's converter's row permutation of q_proj
(n_head_kv = None or n_head) and k_proj (n_head_kv), weights and biases, for architecture llama;
`neox_qkv_to_gguf(w, n_head)` is its reordering of GPT-NeoX's fused query_key_value.

`hf_to_gguf(config, state_dict, ggml_type)` turns a Hugging Face config.json dict and state
dict of a llama / mistral / qwen2 / qwen3 / gpt_neox model into (metadata, tensors) the way
llama.cpp's converter names, permutes and fuses them.

    /usr/bin/python3 tests/gguf_writer.py --selftest OUT.gguf         (every type)
    /usr/bin/python3 tests/gguf_writer.py --selftest-model OUT.gguf   (a tiny llama)
write the fixed files that src/formats/gguf_test.cc (GgufPythonWriter) reads back.
"""
import struct
import sys

import math

import numpy as np

VALUE_TYPES = {"uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint32": 4, "int32": 5,
               "float32": 6, "bool": 7, "string": 8, "array": 9, "uint64": 10, "int64": 11,
               "float64": 12}
_SCALAR_FMT = {"uint8": "<B", "int8": "<b", "uint16": "<H", "int16": "<h", "uint32": "<I",
               "int32": "<i", "float32": "<f", "bool": "<?", "uint64": "<Q", "int64": "<q",
               "float64": "<d"}
GGML_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14,
              "BF16": 30}
_NUMPY_TYPES = {np.uint8: "uint8", np.int8: "int8", np.uint16: "uint16", np.int16: "int16",
                np.uint32: "uint32", np.int32: "int32", np.float32: "float32", np.bool_: "bool",
                np.uint64: "uint64", np.int64: "int64", np.float64: "float64"}


class Typed:
    """A metadata value with an explicit GGUF type: Typed("uint64", 7), Typed("array[int32]", [1])."""

    def __init__(self, type_name, value):
        self.type_name = type_name
        self.value = value


class RawTensor:
    """A tensor given as bytes: ggml dims (ne[0] first), type id, data; offset None = packed.
    place=False writes only the tensor info (for files whose offsets point nowhere)."""

    def __init__(self, name, dims, type_id, data, offset=None, place=True):
        self.name, self.dims, self.type_id, self.data = name, list(dims), type_id, data
        self.offset, self.place = offset, place


def _string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _infer(value):
    if isinstance(value, Typed):
        return value.type_name, value.value
    for np_type, name in _NUMPY_TYPES.items():
        if isinstance(value, np_type):
            return name, value.item()
    if isinstance(value, bool):
        return "bool", value
    if isinstance(value, int):
        if 0 <= value < 2**32:
            return "uint32", value
        if -2**31 <= value < 0:
            return "int32", value
        return ("uint64" if value >= 0 else "int64"), value
    if isinstance(value, float):
        return "float32", value
    if isinstance(value, (str, bytes)):
        return "string", value
    if isinstance(value, np.ndarray):
        return "array[" + _NUMPY_TYPES[value.dtype.type] + "]", value.tolist()
    if isinstance(value, (list, tuple)):
        items = list(value)
        if all(isinstance(x, (str, bytes)) for x in items):
            return "array[string]", items
        if all(isinstance(x, bool) for x in items):
            return "array[bool]", items
        if all(isinstance(x, int) and not isinstance(x, bool) for x in items):
            fits = all(-2**31 <= x < 2**31 for x in items)
            return ("array[int32]" if fits else "array[int64]"), items
        return "array[float32]", [float(x) for x in items]
    raise TypeError(f"cannot infer a GGUF type for {value!r}")


def encode_value(type_name, value):
    """The bytes of a value (without its type id)."""
    if type_name.startswith("array[") and type_name.endswith("]"):
        elem = type_name[6:-1]
        out = struct.pack("<IQ", VALUE_TYPES[elem], len(value))
        return out + b"".join(encode_value(elem, x) for x in value)
    if type_name == "string":
        return _string(value)
    return struct.pack(_SCALAR_FMT[type_name], value)


def encode_kv(key, value):
    type_name, v = _infer(value)
    tid = VALUE_TYPES["array" if type_name.startswith("array[") else type_name]
    return _string(key) + struct.pack("<I", tid) + encode_value(type_name, v)


# ---- tensor data ---------------------------------------------------------------------------

def _bf16_bytes(a):
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype("<u2")
    return rounded.tobytes()


def bf16_round(a):
    """The float32 values a BF16 tensor of `a` holds."""
    b = np.frombuffer(_bf16_bytes(a), dtype="<u2").astype(np.uint32) << 16
    return b.view(np.float32).reshape(np.shape(a))


_Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", (32,))])


def quantize_q8_0(a):
    """Q8_0 blocks (bytes) of a float array whose last dimension is a multiple of 32."""
    x = np.asarray(a, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % 32 != 0:
        raise ValueError(f"Q8_0 needs rows that are a multiple of 32, got shape {x.shape}")
    blocks = x.reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1) / np.float32(127)).astype(np.float32)
    inv = np.zeros_like(d)
    nz = d != 0
    inv[nz] = np.float32(1) / d[nz]
    v = (blocks * inv[:, None]).astype(np.float32).astype(np.float64)
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)  # roundf: half away from zero
    out = np.zeros(len(blocks), dtype=_Q8_0)
    out["d"] = d.astype(np.float16)
    out["qs"] = np.clip(q, -128, 127).astype(np.int8)
    return out.tobytes()


def dequantize_q8_0(data, shape):
    """The float32 values a reader gets from Q8_0 bytes, in `shape`."""
    blocks = np.frombuffer(data, dtype=_Q8_0)
    vals = blocks["d"].astype(np.float32)[:, None] * blocks["qs"].astype(np.float32)
    return vals.reshape(shape)


def tensor_bytes(array, ggml_type):
    a = np.asarray(array)
    if ggml_type == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if ggml_type == "F16":
        return np.ascontiguousarray(a, dtype="<f2").tobytes()
    if ggml_type == "BF16":
        return _bf16_bytes(a)
    if ggml_type == "Q8_0":
        return quantize_q8_0(a)
    raise ValueError(f"unsupported ggml type {ggml_type} (F32, F16, BF16, Q8_0)")


def roundtrip(array, ggml_type):
    """What a GGUF reader returns for `array` stored as ggml_type (float32, same shape)."""
    a = np.asarray(array, dtype=np.float32)
    if ggml_type == "F32":
        return a.copy()
    if ggml_type == "F16":
        return a.astype(np.float16).astype(np.float32)
    if ggml_type == "BF16":
        return bf16_round(a)
    if ggml_type == "Q8_0":
        return dequantize_q8_0(quantize_q8_0(a), a.shape)
    raise ValueError(ggml_type)


# ---- llama.cpp's row reorderings -------------------------------------------------------------

def llama_permute(w, n_head, n_head_kv=None):
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half rows -> interleaved pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    w = np.asarray(w)
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w, n_head, n_head_kv=None):
    """The inverse of llama_permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    w = np.asarray(w)
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def neox_qkv_to_gguf(w, n_head):
    """GPT-NeoX query_key_value rows per head [q; k; v] -> [all q; all k; all v] (weight or bias)."""
    w = np.asarray(w)
    head_dim = w.shape[0] // 3 // n_head
    return w.reshape(n_head, 3, head_dim, *w.shape[1:]).swapaxes(0, 1).reshape(w.shape)


# ---- Hugging Face checkpoints -> GGUF (what convert_hf_to_gguf.py does, for small test models) -

_LLAMA_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
                "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
                "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
_NEOX_NAMES = {"input_layernorm": "attn_norm", "attention.query_key_value": "attn_qkv",
               "attention.dense": "attn_output", "post_attention_layernorm": "ffn_norm",
               "mlp.dense_h_to_4h": "ffn_up", "mlp.dense_4h_to_h": "ffn_down"}


def hf_to_gguf(config, state_dict, ggml_type="F32", vocab=None):
    """(metadata, tensors) for write_gguf from a Hugging Face config.json dict and state dict
    (name -> numpy array) of a llama / mistral / qwen2 / qwen3 / gpt_neox model. Linear weights
    (2-D, not the embeddings) are stored as ggml_type when their rows allow it (Q8_0 needs a
    multiple of 32), everything else as F32. llama and mistral get llama.cpp's Q/K permutation,
    gpt_neox its fused-QKV reordering. vocab: extra tokenizer.ggml.* metadata (a dict)."""
    mt = config["model_type"]
    arch = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
            "gpt_neox": "gptneox"}[mt]
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // n_head
    meta = {"general.architecture": arch,
            f"{arch}.context_length": config["max_position_embeddings"],
            f"{arch}.embedding_length": hidden, f"{arch}.block_count": config["num_hidden_layers"],
            f"{arch}.feed_forward_length": config["intermediate_size"],
            f"{arch}.attention.head_count": n_head}
    rs = config.get("rope_scaling")
    rope_freqs = None
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        # As llama.cpp's converter: no scaling keys, the per-frequency divisors as a tensor.
        rope_freqs = llama3_rope_factors(config)
    elif rs:
        kind = rs.get("rope_type", rs.get("type"))
        meta[f"{arch}.rope.scaling.type"] = kind
        meta[f"{arch}.rope.scaling.factor"] = float(rs["factor"])
        if "original_max_position_embeddings" in rs:
            meta[f"{arch}.rope.scaling.original_context_length"] = rs["original_max_position_embeddings"]
    if arch == "gptneox":
        meta[f"{arch}.rope.dimension_count"] = int(config.get("rotary_pct", 1.0) * head_dim)
        meta[f"{arch}.rope.freq_base"] = float(config.get("rotary_emb_base", config.get("rope_theta", 10000.0)))
        meta[f"{arch}.use_parallel_residual"] = bool(config.get("use_parallel_residual", True))
        meta[f"{arch}.attention.layer_norm_epsilon"] = float(config["layer_norm_eps"])
        prefix, names, glob = "gpt_neox.layers.", _NEOX_NAMES, {
            "gpt_neox.embed_in": "token_embd", "gpt_neox.final_layer_norm": "output_norm",
            "embed_out": "output"}
    else:
        meta[f"{arch}.attention.head_count_kv"] = n_kv
        meta[f"{arch}.rope.dimension_count"] = head_dim
        meta[f"{arch}.rope.freq_base"] = float(config.get("rope_theta", 10000.0))
        meta[f"{arch}.attention.layer_norm_rms_epsilon"] = float(config["rms_norm_eps"])
        if "head_dim" in config:
            meta[f"{arch}.attention.key_length"] = head_dim
            meta[f"{arch}.attention.value_length"] = head_dim
        if mt == "mistral" and config.get("sliding_window"):
            meta[f"{arch}.attention.sliding_window"] = config["sliding_window"]
        prefix, names, glob = "model.layers.", _LLAMA_NAMES, {
            "model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    if vocab:
        meta.update(vocab)
    tensors = []
    for name, array in state_dict.items():
        a = np.asarray(array, dtype=np.float32)
        base, _, kind = name.rpartition(".")
        if base in glob:
            gname = glob[base] + "." + kind
        elif base.startswith(prefix):
            layer, _, part = base[len(prefix):].partition(".")
            if part not in names:
                raise KeyError(f"no GGUF name for {name}")
            gname = f"blk.{layer}.{names[part]}.{kind}"
            if arch == "llama" and part == "self_attn.q_proj":
                a = llama_permute(a, n_head, n_head)
            elif arch == "llama" and part == "self_attn.k_proj":
                a = llama_permute(a, n_head, n_kv)
            elif arch == "gptneox" and part == "attention.query_key_value":
                a = neox_qkv_to_gguf(a, n_head)
        else:
            raise KeyError(f"no GGUF name for {name}")
        t = "F32"
        if a.ndim == 2 and gname != "token_embd.weight":
            t = ggml_type if ggml_type != "Q8_0" or a.shape[-1] % 32 == 0 else "F32"
        tensors.append((gname, a, t))
    if rope_freqs is not None:
        tensors.append(("rope_freqs.weight", rope_freqs, "F32"))
    return meta, tensors


def llama3_rope_factors(config):
    """rope_freqs.weight [head_dim / 2] as llama.cpp's convert_hf_to_gguf.py computes it for a
    llama3 rope_scaling (float32 frequencies; the divisor of each: 1, factor, or the blend), with
    the rope_scaling's own original_max_position_embeddings (what transformers uses)."""
    rs = config["rope_scaling"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    base = np.float32(config.get("rope_theta", 10000.0))
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
    factor, lo, hi = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    out = []
    for f in freqs.astype(np.float32):
        wavelen = 2 * math.pi / float(f)
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# ---- files -----------------------------------------------------------------------------------

def gguf_bytes(metadata, tensors, alignment=32, version=3, n_tensors=None, n_kv=None):
    """The bytes of a GGUF file. tensors: (name, array, ggml_type) or RawTensor. If metadata has
    no general.alignment and alignment != 32, it is added."""
    metadata = dict(metadata)
    if alignment != 32 and "general.alignment" not in metadata:
        metadata["general.alignment"] = Typed("uint32", alignment)
    raws = []
    for t in tensors:
        if isinstance(t, RawTensor):
            raws.append(t)
        else:
            name, array, ggml_type = t
            a = np.asarray(array)
            raws.append(RawTensor(name, list(reversed(a.shape)), GGML_TYPES[ggml_type],
                                  tensor_bytes(a, ggml_type)))
    offset, placed = 0, []
    for t in raws:
        off = t.offset
        if off is None:
            off = offset
            offset = (offset + len(t.data) + alignment - 1) // alignment * alignment
        placed.append((t, off))
    out = b"GGUF" + struct.pack("<IQQ", version, len(raws) if n_tensors is None else n_tensors,
                                len(metadata) if n_kv is None else n_kv)
    for key, value in metadata.items():
        out += encode_kv(key, value)
    for t, off in placed:
        out += _string(t.name) + struct.pack("<I", len(t.dims))
        out += b"".join(struct.pack("<Q", d) for d in t.dims)
        out += struct.pack("<IQ", t.type_id, off)
    out += b"\0" * ((-len(out)) % alignment)
    data = bytearray()
    for t, off in placed:
        if not t.place:
            continue
        if len(data) < off + len(t.data):
            data += b"\0" * (off + len(t.data) - len(data))
        data[off:off + len(t.data)] = t.data
    data += b"\0" * ((-len(data)) % alignment)
    return out + bytes(data)


def write_gguf(path, metadata, tensors, alignment=32):
    """Writes a GGUF v3 file (see the module docstring)."""
    data = gguf_bytes(metadata, tensors, alignment=alignment)
    with open(path, "wb") as f:
        f.write(data)


# ---- self test -------------------------------------------------------------------------------

def selftest_file(path):
    """The fixed file GgufPythonWriter (src/formats/gguf_test.cc) checks value by value."""
    meta = {
        "general.architecture": "selftest",
        "u8": Typed("uint8", 200), "i8": Typed("int8", -100), "u16": Typed("uint16", 60000),
        "i16": Typed("int16", -30000), "u32": 4000000000, "i32": -2000000000, "f32": 0.5,
        "bool": True, "str": "h\u00e9llo", "u64": 2**40, "i64": -2**40,
        "f64": Typed("float64", 0.1), "strs": ["a", "bc", ""], "ints": [1, -2, 3],
        "floats": [0.5, -1.5], "bools": [True, False], "u16s": Typed("array[uint16]", [7, 8]),
    }
    f32 = (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3)
    f16 = np.array([1, -2, 0.5, 65504], dtype=np.float32)
    bf16 = np.array([1.0, -3.0, 1.01171875], dtype=np.float32)  # a tie: rounds to even 1.015625
    q8 = ((np.arange(64, dtype=np.float32) - 32) / 8).reshape(2, 32)
    write_gguf(path, meta, [("f32", f32, "F32"), ("f16", f16, "F16"), ("bf16", bf16, "BF16"),
                            ("q8", q8, "Q8_0")], alignment=64)


def selftest_model_values(n, k):
    """Exactly representable test values: ((i + 3 k) % 17 - 8) / 16 for i < n."""
    return ((np.arange(n) + 3 * k) % 17 - 8).astype(np.float32) / 16


def selftest_model_file(path):
    """A tiny llama (2 layers, GQA) from hf_to_gguf, F32: GgufPythonWriter.HfToGgufLlama reads
    it back through OpenGgufAsHf and compares with the same values."""
    config = {"model_type": "llama", "hidden_size": 16, "intermediate_size": 24,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "vocab_size": 7}
    shapes = {"model.embed_tokens.weight": (7, 16), "model.norm.weight": (16,),
              "lm_head.weight": (7, 16)}
    for l in range(2):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (16,), p + "self_attn.q_proj.weight": (16, 16),
                       p + "self_attn.k_proj.weight": (8, 16), p + "self_attn.v_proj.weight": (8, 16),
                       p + "self_attn.o_proj.weight": (16, 16),
                       p + "post_attention_layernorm.weight": (16,),
                       p + "mlp.gate_proj.weight": (24, 16), p + "mlp.up_proj.weight": (24, 16),
                       p + "mlp.down_proj.weight": (16, 24)})
    sd = {name: selftest_model_values(int(np.prod(shape)), k).reshape(shape)
          for k, (name, shape) in enumerate(sorted(shapes.items()))}
    meta, tensors = hf_to_gguf(config, sd)
    write_gguf(path, meta, tensors)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--selftest":
        selftest_file(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "--selftest-model":
        selftest_model_file(sys.argv[2])
    else:
        sys.exit("usage: gguf_writer.py --selftest OUT.gguf | --selftest-model OUT.gguf")
