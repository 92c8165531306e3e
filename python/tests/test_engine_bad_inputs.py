"""Bad input to attnlab.attention / attention_backward / set_num_threads: a TypeError (wrong
type or dtype) or ValueError (everything else) with the CLI's message where `attnlab attention`
has the same check, and never a crash."""
import os
import subprocess
import sys

import numpy as np
import pytest

import attnlab

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ATTNLAB_BIN = os.environ.get("ATTNLAB_BIN") or os.path.join(SOURCE_DIR, "build", "attnlab")


def qkv(B=1, Hq=2, Hkv=2, Lq=4, Lk=4, D=8, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((B, Hq, Lq, D)).astype(dtype),
            rng.standard_normal((B, Hkv, Lk, D)).astype(dtype),
            rng.standard_normal((B, Hkv, Lk, D)).astype(dtype))


def cli_error(tmp_path, q, k, v, *flags, mask=None):
    """The message `attnlab attention` prints for the same input (after 'error: ')."""
    if not os.path.exists(ATTNLAB_BIN):
        pytest.skip(f"no CLI at {ATTNLAB_BIN}")
    args = [ATTNLAB_BIN, "attention", "--o", str(tmp_path / "o.npy")]
    for name, a in (("q", q), ("k", k), ("v", v), ("mask", mask)):
        if a is not None:
            np.save(tmp_path / f"{name}.npy", a)
            args += [f"--{name}", str(tmp_path / f"{name}.npy")]
    r = subprocess.run(args + list(flags), capture_output=True, text=True)
    assert r.returncode in (1, 2), r.stderr
    assert not (tmp_path / "o.npy").exists()
    return r.stderr.strip()


def raises(exc, fn, *args, **kwargs):
    with pytest.raises(exc) as e:
        fn(*args, **kwargs)
    return str(e.value)


# ---- dtypes and types: TypeError ----------------------------------------------------------


def test_wrong_dtype_is_a_type_error():
    q, k, v = qkv()
    msg = raises(TypeError, attnlab.attention, q.astype(np.int64), k, v)
    assert msg == "q must be float32 or float64, got int64"
    assert "v must be float32 or float64, got float16" == raises(
        TypeError, attnlab.attention, q, k, v.astype(np.float16))


def test_mixed_dtypes_are_a_type_error():
    q, k, v = qkv()
    msg = raises(TypeError, attnlab.attention, q, k.astype(np.float64), v)
    assert msg.startswith("k has dtype float64 but q has float32")


def test_big_endian_float32_is_refused_not_converted():
    q, k, v = qkv()
    assert "got >f4" in raises(TypeError, attnlab.attention, q.astype(">f4"), k, v)


def test_not_an_array_is_a_type_error():
    _, k, v = qkv()
    assert "got list" in raises(TypeError, attnlab.attention, [[1.0]], k, v)


def test_torch_bfloat16_is_a_type_error():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv())
    msg = raises(TypeError, attnlab.attention, q.to(torch.bfloat16), k, v)
    assert msg == "q must be float32 or float64, got torch.bfloat16"


def test_mask_dtype_is_a_type_error():
    q, k, v = qkv()
    msg = raises(TypeError, attnlab.attention, q, k, v, mask=np.ones((4, 4), np.float32))
    assert msg.startswith("mask must be bool or uint8")


# ---- layouts and shapes: ValueError ------------------------------------------------------


def test_non_contiguous_is_a_value_error():
    q, k, v = qkv(Lq=8, D=8)
    msg = raises(ValueError, attnlab.attention, q.transpose(0, 1, 3, 2), k, v)
    assert "q must be C-contiguous" in msg
    assert "k must be C-contiguous" in raises(ValueError, attnlab.attention, q, k[:, :, ::2], v)


def test_non_contiguous_torch_tensor_is_a_value_error():
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(x) for x in qkv(Lq=8, D=8))
    assert "q must be C-contiguous" in raises(ValueError, attnlab.attention,
                                              q.transpose(2, 3), k, v)


def test_misaligned_buffer_is_a_value_error():
    q, k, v = qkv()
    raw = np.zeros(q.nbytes + 1, np.uint8)
    mis = raw[1:].view(np.float32).reshape(q.shape)
    assert "not aligned" in raises(ValueError, attnlab.attention, mis, k, v)


def test_wrong_rank_is_a_value_error(tmp_path):
    q, k, v = qkv()
    msg = raises(ValueError, attnlab.attention, q[0], k, v)
    assert msg == ("q: expected a 4-D array [batch, heads_q, len_q, head_dim], found shape "
                   "[2, 4, 8] (3-D)")
    # The CLI: "--q PATH: expected a 4-D array ..." (same text after the path).
    assert msg.split(": ", 1)[1] in cli_error(tmp_path, q[0], k, v)


def test_heads_not_a_multiple_is_the_validators_message(tmp_path):
    q, k, v = qkv(Hq=3, Hkv=2)
    msg = raises(ValueError, attnlab.attention, q, k, v)
    assert msg == "heads_q (3) must be a multiple of heads_kv (2) for grouped-query attention"
    assert msg in cli_error(tmp_path, q, k, v)  # ValidateAttention's text, in both
    assert msg == raises(ValueError, attnlab.attention, q, k, v, kernel="reference")
    assert msg == raises(ValueError, attnlab.attention, q.astype(np.float64),
                         k.astype(np.float64), v.astype(np.float64))


def test_k_v_shape_mismatch(tmp_path):
    q, k, _ = qkv()
    v = np.zeros((1, 2, 5, 8), np.float32)
    msg = raises(ValueError, attnlab.attention, q, k, v)
    assert msg == ("k has shape [1, 2, 4, 8] but v has shape [1, 2, 5, 8]; both must be "
                   "[batch, heads_kv, len_k, head_dim]")
    assert msg in cli_error(tmp_path, q, k, v)


def test_batch_and_head_dim_mismatch(tmp_path):
    q, k, v = qkv(B=2)
    msg = raises(ValueError, attnlab.attention, q, k[:1], v[:1])
    assert msg.startswith("q has batch 2") and msg in cli_error(tmp_path, q, k[:1], v[:1])
    k4, v4 = np.ascontiguousarray(k[..., :4]), np.ascontiguousarray(v[..., :4])
    msg = raises(ValueError, attnlab.attention, q, k4, v4)
    assert msg.startswith("q has head_dim 8") and msg in cli_error(tmp_path, q, k4, v4)


def test_empty_dimension_is_a_value_error():
    q, k, v = qkv()
    assert raises(ValueError, attnlab.attention, q[:, :, :0], k, v) == \
        "len_q must be >= 1, got 0"


def test_bad_mask_shape(tmp_path):
    q, k, v = qkv()
    mask = np.ones((3, 4), bool)
    msg = raises(ValueError, attnlab.attention, q, k, v, mask=mask)
    assert msg == ("mask: expected shape [len_q, len_k] = [4, 4] or [batch, heads_q, len_q, "
                   "len_k] = [1, 2, 4, 4] (a 1 in the first two broadcasts), found [3, 4]")
    assert msg.split(": ", 1)[1] in cli_error(tmp_path, q, k, v, mask=mask)
    # A head count that is neither heads_q nor 1 does not broadcast either.
    assert "found [1, 3, 4, 4]" in raises(ValueError, attnlab.attention, q, k, v,
                                          mask=np.ones((1, 3, 4, 4), bool))


def test_mask_with_strided_keys_is_a_value_error():
    q, k, v = qkv()
    mask = np.ones((4, 8), bool)[:, ::2]
    assert "last dimension (keys) must be contiguous" in raises(
        ValueError, attnlab.attention, q, k, v, mask=mask)


# ---- names and parameters: ValueError ----------------------------------------------------


def test_unknown_softmax_name(tmp_path):
    q, k, v = qkv()
    msg = raises(ValueError, attnlab.attention, q, k, v, softmax="softmax2")
    assert msg == "unknown softmax 'softmax2'; expected standard, softmax1, sink, sigmoid or softpick"
    assert "; expected standard, softmax1, sink, sigmoid or softpick" in cli_error(
        tmp_path, q, k, v, "--softmax", "softmax2")


def test_unknown_kernel_name():
    q, k, v = qkv()
    assert raises(ValueError, attnlab.attention, q, k, v, kernel="cuda") == \
        "unknown kernel 'cuda'; expected flash or reference"


def test_sink_softmax_without_sink_logits():
    q, k, v = qkv()
    assert "softmax='sink' needs sink_logits" in raises(ValueError, attnlab.attention, q, k, v,
                                                        softmax="sink")


def test_sink_logits_of_the_wrong_length(tmp_path):
    q, k, v = qkv()
    msg = raises(ValueError, attnlab.attention, q, k, v, softmax="sink",
                 sink_logits=np.zeros(3, np.float32))
    assert msg == "sink_logits: expected one logit per query head, shape [2], found [3]"
    np.save(tmp_path / "s.npy", np.zeros(3, np.float32))
    assert "expected one logit per query head, shape [2], found [3]" in cli_error(
        tmp_path, q, k, v, "--softmax", "sink", "--sink-logits", str(tmp_path / "s.npy"))
    assert "found [1, 2]" in raises(ValueError, attnlab.attention, q, k, v, softmax="sink",
                                    sink_logits=np.zeros((1, 2)))


def test_sink_logits_not_finite_or_not_numbers():
    q, k, v = qkv()
    assert raises(ValueError, attnlab.attention, q, k, v, softmax="sink",
                  sink_logits=[0.0, np.inf]) == "sink logits must be finite"
    assert raises(ValueError, attnlab.attention_backward, *qkv(dtype=np.float64), None, None,
                  qkv(dtype=np.float64)[0], softmax="sink",
                  sink_logits=[np.nan, 0.0]) == "sink logits must be finite"
    assert "sink_logits must be a 1-D float array" in raises(
        TypeError, attnlab.attention, q, k, v, softmax="sink", sink_logits=["a", "b"])


def test_parameters_of_another_softmax():
    q, k, v = qkv()
    assert "sink_logits is only used with softmax='sink'" in raises(
        ValueError, attnlab.attention, q, k, v, sink_logits=[0.0, 0.0])
    assert "sigmoid_bias is only used with softmax='sigmoid'" in raises(
        ValueError, attnlab.attention, q, k, v, sigmoid_bias=-1.0)


def test_bad_window(tmp_path):
    q, k, v = qkv()
    msg = raises(ValueError, attnlab.attention, q, k, v, window=(-3, None))
    assert msg == "window left must be >= 0 (None for an unbounded side), got -3"
    assert "must be >= 0 (omit it for an unbounded side), got -3" in cli_error(
        tmp_path, q, k, v, "--window-left", "-3")
    assert "window right must be >= 0" in raises(ValueError, attnlab.attention, q, k, v,
                                                 window=(None, -1))
    assert "window must be None or a (left, right) pair" in raises(
        ValueError, attnlab.attention, q, k, v, window=(1, 2, 3))
    assert "window must be None or a (left, right) pair" in raises(
        ValueError, attnlab.attention, q, k, v, window=4)
    raises(TypeError, attnlab.attention, q, k, v, window=(1.5, None))


def test_negative_sinks_and_globals(tmp_path):
    q, k, v = qkv()
    msg = raises(ValueError, attnlab.attention, q, k, v, sinks=-1)
    assert msg == "sinks must be >= 0, got -1"
    assert msg in cli_error(tmp_path, q, k, v, "--sinks", "-1")  # "--sinks must be >= 0, ..."
    assert raises(ValueError, attnlab.attention, q, k, v, n_global=-2) == \
        "n_global must be >= 0, got -2"


def test_non_finite_scale():
    q, k, v = qkv()
    assert raises(ValueError, attnlab.attention, q, k, v, scale=float("nan")) == \
        "scale must be finite"
    assert raises(ValueError, attnlab.attention, *qkv(dtype=np.float64),
                  scale=float("inf")) == "scale must be finite"


def test_set_num_threads_zero():
    old = attnlab.num_threads()
    assert raises(ValueError, attnlab.set_num_threads, 0) == \
        "set_num_threads: n must be >= 1, got 0"
    raises(ValueError, attnlab.set_num_threads, -4)
    assert attnlab.num_threads() == old


# ---- the backward's extra inputs ---------------------------------------------------------


def test_flash_backward_needs_out_and_lse():
    q, k, v = qkv()
    msg = raises(ValueError, attnlab.attention_backward, q, k, v, None, None, q)
    assert "the flash backward needs the forward's out and lse" in msg
    # The reference kernel recomputes the probabilities: out and lse may be None there.
    dq, dk, dv = attnlab.attention_backward(q, k, v, None, None, q, kernel="reference")
    assert dq.shape == q.shape and dk.shape == k.shape


def test_backward_shapes_and_dtypes():
    q, k, v = qkv()
    out, lse = attnlab.attention(q, k, v, return_lse=True)
    assert raises(ValueError, attnlab.attention_backward, q, k, v, out, lse, q[:, :1]) == \
        "dout: expected the shape of q [1, 2, 4, 8], found [1, 1, 4, 8]"
    lse3 = np.zeros((1, 2, 3), np.float32)
    assert raises(ValueError, attnlab.attention_backward, q, k, v, out, lse3, q) == \
        "lse: expected shape [batch, heads_q, len_q] = [1, 2, 4], found [1, 2, 3]"
    assert "out: expected the shape of q" in raises(ValueError, attnlab.attention_backward,
                                                    q, k, v, out[:, :1], lse, q)
    assert raises(TypeError, attnlab.attention_backward, q, k, v, out, lse,
                  q.astype(np.float64)) == "dout must be float32 (like q), got float64"


# ---- never a crash -------------------------------------------------------------------------

FUZZ = r"""
import itertools, random, sys
import numpy as np
import attnlab
rng = random.Random(0)
def arr(shape, dtype):
    return np.zeros(shape, dtype) if rng.random() < 0.5 else np.ones(shape, dtype)
shapes = [(1, 2, 3, 4), (1, 1, 3, 4), (2, 2, 3, 4), (1, 2, 0, 4), (1, 3, 3, 4), (2, 4),
          (1, 2, 3, 1)]
dtypes = [np.float32, np.float64, np.int32, np.bool_]
kwargs = [dict(), dict(causal=True), dict(window=(0, 0)), dict(window=(-1, None)), dict(sinks=99),
          dict(n_global=-1), dict(softmax="sink", sink_logits=[1.0, 2.0]), dict(softmax="x"),
          dict(mask=np.ones((3, 3), bool)), dict(mask=np.ones((1, 2, 3, 3), np.uint8)),
          dict(mask=np.zeros((3, 3), bool), mask_first_key=True), dict(scale=float("inf")),
          dict(softmax="sigmoid", sigmoid_bias=1e30), dict(kernel="reference")]
ok = bad = 0
for _ in range(600):
    good = rng.random() < 0.5  # a valid q, k, v half of the time
    dtype = rng.choice(dtypes[:2]) if good else rng.choice(dtypes)
    q = arr(shapes[0] if good else rng.choice(shapes), dtype)
    k = arr(shapes[1] if good else rng.choice(shapes), dtype if good else rng.choice(dtypes))
    v = k if good or rng.random() < 0.7 else arr(rng.choice(shapes), rng.choice(dtypes))
    kw = rng.choice(kwargs)
    try:
        if rng.random() < 0.5:
            attnlab.attention(q, k, v, **kw)
        else:
            attnlab.attention_backward(q, k, v, q if rng.random() < .5 else None,
                                       q[..., 0] if q.ndim == 4 else None, q, **kw)
        ok += 1
    except (TypeError, ValueError):
        bad += 1
print(ok, bad)
"""


def test_random_bad_calls_never_crash():
    # In a child process: a crash (abort, segfault) shows as a non-zero exit, not a lost run.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", FUZZ], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    ok, bad = map(int, r.stdout.split())
    assert ok > 50 and bad > 200, (ok, bad)  # both kinds of call happened
