"""attnlab.attention / attention_backward against an independent NumPy float64 implementation
of include/attnlab/attention.h, on awkward shapes and every mask and softmax variant; plus zero
copy, the GIL, threads and the SIMD target."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import attnlab
from attnlab import _attnlab, _engine

# ---- The truth: attention.h's semantics written out in float64 NumPy ------------------------


def visibility(B, Hq, Lq, Lk, causal=False, window=None, sinks=0, n_global=0, mask=None,
               mask_first_key=False):
    """bool [B, Hq, Lq, Lk]: rules (a)-(d) of attention.h, queries aligned to the last keys."""
    i = np.arange(Lq)[:, None]
    j = np.arange(Lk)[None, :]
    p = i + (Lk - Lq)
    vis = np.ones((Lq, Lk), bool)
    if causal:
        vis &= j <= p
    in_window = np.ones((Lq, Lk), bool)
    left, right = window if window is not None else (None, None)
    if left is not None:
        in_window &= j >= p - left
    if right is not None:
        in_window &= j <= p + right
    vis &= (j < sinks) | (j < n_global) | (p < n_global) | in_window
    if mask_first_key:
        vis &= j != 0
    vis = np.broadcast_to(vis, (B, Hq, Lq, Lk)).copy()
    if mask is not None:
        vis &= np.broadcast_to(np.asarray(mask).astype(bool), vis.shape)
    return vis


def truth(q, k, v, dout=None, *, softmax="standard", sink_logits=None, sigmoid_bias=0.0,
          scale=None, **mask_kw):
    """Forward (and backward with dout) in float64, with Higham-style magnitudes.

    Returns a dict: out, lse, dq, dk, dv, dsink and m_* (each element's sum with every term
    replaced by its absolute value), and kappa (the condition of the logits plus the summation
    depth), as in src/engine/attention_test_util.h."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    scale = 1 / np.sqrt(D) if scale is None else scale
    vis = visibility(B, Hq, Lq, Lk, **mask_kw)
    s = scale * np.einsum("bhid,bhjd->bhij", q, kk)
    cond = scale * np.einsum("bhid,bhjd->bhij", np.abs(q), np.abs(kk))
    kappa = (cond[vis].max() if vis.any() else 0) + np.log2(Lk + 1) + 1
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if softmax == "sigmoid":
            P = np.where(vis, 1 / (1 + np.exp(-(s + sigmoid_bias))), 0.0)
            lse = np.zeros((B, Hq, Lq))
        elif softmax == "softpick":  # Zuhri et al. 2025, unshifted; eps = float32(1e-6)
            em1 = np.where(vis, np.expm1(np.where(vis, s, 0.0)), 0.0)
            den = np.abs(em1).sum(-1) + float(np.float32(1e-6))
            P = np.maximum(em1, 0.0) / den[..., None]
            lse = np.where(vis.any(-1), np.log(den), -np.inf)
            # A score's error moves its term by ~E = e^s / den and every weight of the row by
            # sum E (attention_test_util.h): the weight magnitudes are E + P sum E.
            E = np.where(vis, np.exp(np.where(vis, s, 0.0)) / den[..., None], 0.0)
            E_sum = E.sum(-1, keepdims=True)
            Pm = E + P * E_sum
        else:
            extra = {"standard": np.full(Hq, -np.inf), "softmax1": np.zeros(Hq),
                     "sink": np.asarray(sink_logits, np.float64)}[softmax]
            extra = np.broadcast_to(extra[None, :, None], (B, Hq, Lq))
            m = np.maximum(np.where(vis, s, -np.inf).max(-1), extra)
            m_safe = np.where(np.isfinite(m), m, 0.0)
            e = np.where(vis, np.exp(s - m_safe[..., None]), 0.0)
            total = e.sum(-1) + np.exp(extra - m_safe)
            P = np.where(total[..., None] > 0, e / np.where(total > 0, total, 1)[..., None], 0.0)
            lse = np.where(total > 0, m_safe + np.log(total), -np.inf)
    if softmax != "softpick":
        Pm = P
    r = dict(out=P @ vv, lse=lse, m_out=Pm @ np.abs(vv), kappa=kappa)
    if softmax == "softpick":  # lse moves by ~ sum E per unit of score error
        r["lse_extra"] = E_sum[..., 0]
    if dout is None:
        return r
    do = np.asarray(dout, np.float64)
    dp = do @ vv.transpose(0, 1, 3, 2)
    dpa = np.abs(do) @ np.abs(vv).transpose(0, 1, 3, 2)
    dsum = (P * dp).sum(-1, keepdims=True)
    dsum_a = (Pm * dpa).sum(-1, keepdims=True)
    if softmax == "sigmoid":
        ds, ds_a = dp * P * (1 - P), dpa * P
    elif softmax == "softpick":  # dS = E (dP - D) for s > 0, E D for s < 0 (attention.h)
        ds = np.where(s > 0, E * (dp - dsum), np.where(s < 0, E * dsum, 0.0))
        ds = np.where(vis, ds, 0.0)
        ds_a = Pm * (dpa + dsum_a) * (1 + E_sum)
    else:
        ds, ds_a = P * (dp - dsum), P * (dpa + dsum_a)

    def per_kv(x):  # [B, Hq, Lk, D] summed over each kv head's group
        return x.reshape(B, Hkv, g, Lk, D).sum(2)

    r.update(dq=scale * ds @ kk, m_dq=scale * ds_a @ np.abs(kk),
             dk=per_kv(scale * ds.transpose(0, 1, 3, 2) @ q),
             m_dk=per_kv(scale * ds_a.transpose(0, 1, 3, 2) @ np.abs(q)),
             dv=per_kv(P.transpose(0, 1, 3, 2) @ do),
             m_dv=per_kv(Pm.transpose(0, 1, 3, 2) @ np.abs(do)))
    if softmax == "sink":
        with np.errstate(over="ignore"):
            p_sink = np.exp(np.asarray(sink_logits, np.float64)[None, :, None] - lse)
        r["dsink"] = -(p_sink * dsum[..., 0]).sum((0, 2))
        r["m_dsink"] = (p_sink * dsum_a[..., 0]).sum((0, 2))
    return r


# Tolerance, derived from float32 precision as in src/engine/attention_test_util.h (Higham's
# running error bound): each logit computed in float32 is off by about u times its term-wise
# magnitude, which moves every probability of the row by the same relative amount; sums of
# len_k terms add log2(len_k + 1) rounding steps. So per element
#   |got - truth| <= C * u * kappa * M,   u = 2^-24 (float32 unit roundoff), C = 16,
# kappa = max visible scale * sum_d |q_d k_d| + log2(len_k + 1) + 1, M the element's magnitude;
# gradients chain two such computations: twice that. lse is a log of a sum: its absolute error
# is about u * (kappa + |lse|). The float64 path uses u = 2^-53.
U32, U64, C = 2.0 ** -24, 2.0 ** -53, 16


def assert_within(name, got, want, mag, bound):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, name
    err = np.abs(got - want)
    tol = bound * mag + 1e-30
    worst = np.unravel_index(np.argmax(err / tol), err.shape) if err.size else None
    assert np.all(err <= tol), (
        f"{name}: |got - truth| = {err[worst]:.3g} > tol {tol[worst]:.3g} at {worst}")


def assert_lse(got, want, kappa, u, extra=None):
    """extra: softpick's per-row sum E, the lse's sensitivity to each score's error."""
    got = np.asarray(got, np.float64)
    inf = np.isinf(want)
    assert np.array_equal(np.isinf(got), inf) and np.all(got[inf] == want[inf])
    k = kappa if extra is None else kappa * (1 + extra[~inf])
    tol = C * u * (k + np.abs(want[~inf]))
    assert np.all(np.abs(got[~inf] - want[~inf]) <= tol)


# ---- Cases ------------------------------------------------------------------------------------


def make(rng, B, Hq, Hkv, Lq, Lk, D, dtype=np.float32, logit=1.5):
    q = (logit * rng.standard_normal((B, Hq, Lq, D))).astype(dtype)
    k = rng.standard_normal((B, Hkv, Lk, D)).astype(dtype)
    v = rng.standard_normal((B, Hkv, Lk, D)).astype(dtype)
    dout = rng.standard_normal((B, Hq, Lq, D)).astype(dtype)
    return q, k, v, dout


def random_mask(rng, shape, empty_rows=()):
    m = rng.random(shape) < 0.6
    for i in empty_rows:
        m[..., i, :] = False
    return m


# (B, Hq, Hkv, Lq, Lk, D, kwargs); a callable kwarg value is built from the rng.
CASES = {
    "len1_d1": (1, 1, 1, 1, 1, 1, {}),
    "len7_causal_d3": (1, 2, 2, 7, 7, 3, dict(causal=True)),
    "gqa2_window_sinks": (2, 4, 2, 59, 97, 16, dict(causal=True, window=(8, None), sinks=2)),
    "gqa4_sink_softmax": (1, 4, 1, 113, 113, 64,
                          dict(causal=True, window=(16, None), sinks=4, softmax="sink",
                               sink_logits=lambda r: r.standard_normal(4) * 2)),
    "lq_gt_lk_causal_empty_rows": (1, 2, 1, 97, 59, 5, dict(causal=True)),
    "global_window_softmax1": (1, 2, 2, 59, 59, 8,
                               dict(window=(3, 3), n_global=2, softmax="softmax1")),
    "global_causal_lq_lt_lk": (1, 2, 1, 7, 113, 24, dict(causal=True, window=(4, None),
                                                          n_global=3)),
    "mask2d_empty_rows": (1, 2, 1, 7, 113, 24,
                          dict(mask=lambda r: random_mask(r, (7, 113), empty_rows=(2, 5)))),
    "mask4d_uint8_bcast_heads": (2, 2, 2, 59, 59, 7,
                                 dict(causal=True, mask=lambda r: random_mask(
                                     r, (2, 1, 59, 59), empty_rows=(0,)).astype(np.uint8))),
    "mask4d_broadcast_to": (2, 4, 2, 7, 7, 2,
                            dict(mask=lambda r: np.broadcast_to(random_mask(r, (1, 4, 7, 7)),
                                                                (2, 4, 7, 7)))),
    "sigmoid_bias": (1, 2, 1, 97, 97, 32,
                     dict(causal=True, softmax="sigmoid", sigmoid_bias=-np.log(97))),
    "mask_first_key_softmax1": (1, 1, 1, 7, 7, 4,
                                dict(causal=True, mask_first_key=True, softmax="softmax1")),
    "mask_first_key_standard": (1, 2, 2, 7, 7, 4, dict(causal=True, mask_first_key=True)),
    "scale_d128_sink": (1, 2, 2, 59, 59, 128,
                        dict(scale=0.3, softmax="sink",
                             sink_logits=lambda r: np.array([3.0, -2.0]))),
    "window_right_only": (1, 1, 1, 113, 113, 1, dict(window=(None, 5), sinks=1)),
    "softpick_causal_gqa": (2, 4, 2, 97, 97, 59, dict(causal=True, softmax="softpick")),
    "softpick_mask2d_empty_rows": (1, 2, 1, 7, 113, 24, dict(
        softmax="softpick", mask=lambda r: random_mask(r, (7, 113), empty_rows=(2, 5)))),
}


def build(name, dtype=np.float32, seed=0):
    B, Hq, Hkv, Lq, Lk, D, kw = CASES[name]
    rng = np.random.default_rng(seed)
    kw = {key: (val(rng) if callable(val) else val) for key, val in kw.items()}
    return make(rng, B, Hq, Hkv, Lq, Lk, D, dtype), kw



@pytest.mark.parametrize("kernel", ["flash", "reference"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_matches_numpy_truth(name, kernel):
    (q, k, v, dout), kw = build(name)
    t = truth(q, k, v, dout, **kw)
    out, lse = attnlab.attention(q, k, v, return_lse=True, kernel=kernel, **kw)
    assert out.dtype == np.float32 and lse.dtype == np.float32
    bound = C * U32 * t["kappa"]
    assert_within("out", out, t["out"], t["m_out"], bound)
    assert_lse(lse, t["lse"], t["kappa"], U32, t.get("lse_extra"))
    grads = attnlab.attention_backward(q, k, v, out, lse, dout, kernel=kernel, **kw)
    assert len(grads) == (4 if kw.get("softmax") == "sink" else 3)
    for gname, got in zip(["dq", "dk", "dv", "dsink"], grads):
        assert got.dtype == np.float32
        assert_within(gname, got, t[gname], t["m_" + gname], 2 * bound)


@pytest.mark.parametrize("name", sorted(CASES))
def test_flash_matches_reference_kernel(name):
    (q, k, v, dout), kw = build(name, seed=1)
    t = truth(q, k, v, **kw)
    flash, lf = attnlab.attention(q, k, v, return_lse=True, **kw)
    ref, lr = attnlab.attention(q, k, v, return_lse=True, kernel="reference", **kw)
    # Both are within the float32 bound of the truth, so of each other within twice it.
    assert_within("flash vs reference", flash, ref.astype(np.float64), t["m_out"],
                  2 * C * U32 * t["kappa"])
    assert np.array_equal(np.isinf(lf), np.isinf(lr))


@pytest.mark.parametrize("name", ["gqa4_sink_softmax", "mask2d_empty_rows", "sigmoid_bias",
                                  "global_window_softmax1", "lq_gt_lk_causal_empty_rows",
                                  "softpick_mask2d_empty_rows"])
def test_float64_uses_the_double_reference(name):
    (q, k, v, dout), kw = build(name, dtype=np.float64, seed=2)
    # AttentionParams holds sigmoid_bias as a float: the double reference adds that value.
    tkw = dict(kw, **({"sigmoid_bias": float(np.float32(kw["sigmoid_bias"]))}
                      if "sigmoid_bias" in kw else {}))
    t = truth(q, k, v, dout, **tkw)
    for kernel in ("flash", "reference"):  # float64 always runs the double reference
        out, lse = attnlab.attention(q, k, v, return_lse=True, kernel=kernel, **kw)
        assert out.dtype == np.float64 and lse.dtype == np.float64
        # A float32 computation would miss this bound by ~2^29.
        bound = 64 * U64 * t["kappa"]
        assert_within("out", out, t["out"], t["m_out"], bound)
        assert_lse(lse, t["lse"], t["kappa"], 4 * U64, t.get("lse_extra"))
        grads = attnlab.attention_backward(q, k, v, None, None, dout, kernel=kernel, **kw)
        for gname, got in zip(["dq", "dk", "dv", "dsink"], grads):
            assert got.dtype == np.float64
            assert_within(gname, got, t[gname], t["m_" + gname], 2 * bound)


def test_all_masked_rows_are_zero_with_minus_inf_lse():
    (q, k, v, dout), kw = build("mask2d_empty_rows")
    for kernel in ("flash", "reference"):
        out, lse = attnlab.attention(q, k, v, return_lse=True, kernel=kernel, **kw)
        assert np.all(out[:, :, [2, 5]] == 0)
        assert np.all(np.isneginf(lse[:, :, [2, 5]]))
        assert np.all(np.isfinite(np.delete(lse, [2, 5], axis=2)))
        dq, dk, dv = attnlab.attention_backward(q, k, v, out, lse, dout, kernel=kernel, **kw)
        assert np.all(dq[:, :, [2, 5]] == 0)
        assert all(np.all(np.isfinite(g)) for g in (dq, dk, dv))
    # softmax1: the extra logit 0 makes the row's lse log(1) = 0, its output still 0.
    (q, k, v, _), kw = build("mask_first_key_softmax1")
    out, lse = attnlab.attention(q, k, v, return_lse=True, **kw)
    assert np.all(out[:, :, 0] == 0) and np.all(lse[:, :, 0] == 0)


# ---- torch inputs -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gqa2_window_sinks", "gqa4_sink_softmax", "mask2d_empty_rows"])
def test_torch_inputs_give_torch_outputs_equal_to_numpy(name):
    torch = pytest.importorskip("torch")
    (q, k, v, dout), kw = build(name, seed=3)
    tkw = dict(kw)
    if "mask" in kw:
        tkw["mask"] = torch.from_numpy(np.ascontiguousarray(kw["mask"]))
    if "sink_logits" in kw:
        tkw["sink_logits"] = torch.tensor(kw["sink_logits"], dtype=torch.float32,
                                          requires_grad=True)
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, dout))
    out, lse = attnlab.attention(tq.requires_grad_(), tk, tv, return_lse=True, **tkw)
    assert isinstance(out, torch.Tensor) and isinstance(lse, torch.Tensor)
    assert out.dtype == torch.float32 and not out.requires_grad
    nout, nlse = attnlab.attention(q, k, v, return_lse=True, **kw)
    # Same kernel, same inputs, same thread count: bit-identical (thread_pool.h).
    assert np.array_equal(out.numpy(), nout) and np.array_equal(lse.numpy(), nlse)
    tgrads = attnlab.attention_backward(tq, tk, tv, out, lse, tdo, **tkw)
    ngrads = attnlab.attention_backward(q, k, v, nout, nlse, dout, **kw)
    for tg, ng in zip(tgrads, ngrads):
        assert isinstance(tg, torch.Tensor) and np.array_equal(tg.numpy(), ng)


# ---- Zero copy, the GIL, threads, SIMD --------------------------------------------------------


def test_kernels_read_the_callers_buffer_numpy():
    q, _, _, _ = make(np.random.default_rng(0), 1, 2, 2, 9, 9, 4)
    # _buffer_address runs the same checks and view construction the kernels' inputs go through.
    assert _attnlab._buffer_address(q) == q.ctypes.data
    q64 = q.astype(np.float64)
    assert _attnlab._buffer_address(q64) == q64.ctypes.data
    # A contiguous slice of a larger buffer is read at its own offset, not copied.
    big = np.zeros((3, 2, 9, 4), np.float32)
    assert _attnlab._buffer_address(big[1:2]) == big.ctypes.data + big[0].nbytes


def test_kernels_read_the_callers_buffer_torch():
    torch = pytest.importorskip("torch")
    t = torch.randn(1, 2, 9, 4, requires_grad=True)
    assert _attnlab._buffer_address(_engine._as_array(t, "q")) == t.data_ptr()
    # And the result tensor shares the kernel's output buffer (torch.from_numpy).
    out = attnlab.attention(t, t, t)
    assert out.numpy().ctypes.data == out.data_ptr()


def test_mutating_the_input_buffer_changes_the_result():
    # The forward of an array equals the forward of a fresh copy after an in-place edit: no
    # stale cached copy exists between calls.
    rng = np.random.default_rng(5)
    q, k, v, _ = make(rng, 1, 1, 1, 5, 5, 4)
    before = attnlab.attention(q, k, v)
    k[0, 0, 2] += 3.0
    after = attnlab.attention(q, k, v)
    assert not np.array_equal(before, after)
    assert np.array_equal(after, attnlab.attention(q, k.copy(), v))


def _gil_free_fraction(fn, seconds=0.25):
    """Fraction of its solo speed a Python counting thread keeps while fn() runs."""
    count = [0]
    stop = threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    worker = threading.Thread(target=counter)
    worker.start()
    try:
        time.sleep(0.01)
        c0, t0 = count[0], time.perf_counter()
        time.sleep(seconds)  # sleep releases the GIL: the counter's solo rate
        solo_rate = (count[0] - c0) / (time.perf_counter() - t0)
        c0, t0 = count[0], time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
        during = count[0] - c0
    finally:
        stop.set()
        worker.join()
    return during / (solo_rate * elapsed), elapsed


@pytest.mark.parametrize("which", ["flash_forward", "reference_forward", "flash_backward"])
def test_gil_is_released_while_kernels_run(which):
    # If the GIL were held, the counter could run only in the wrapper's few bytecodes (at most a
    # switch interval, 5 ms, on each side of the call): under 5% of a call of >= 0.2 s (measured
    # with the release removed: 2-3%). Released, it keeps most of a core (the kernel runs on one
    # thread here); 15% leaves room for other processes taking the machine's cores meanwhile.
    old = attnlab.num_threads()
    attnlab.set_num_threads(1)
    try:
        n = 256
        while True:
            q, k, v, dout = make(np.random.default_rng(0), 1, 4, 4, n, n, 64)
            out, lse = attnlab.attention(q, k, v, return_lse=True)
            fns = {
                "flash_forward": lambda: attnlab.attention(q, k, v),
                "reference_forward": lambda: attnlab.attention(q, k, v, kernel="reference"),
                "flash_backward": lambda: attnlab.attention_backward(q, k, v, out, lse, dout),
            }
            t0 = time.perf_counter()
            fns[which]()
            if time.perf_counter() - t0 >= 0.4 or n >= 16384:
                break
            n *= 2
        fraction, elapsed = _gil_free_fraction(fns[which])
    finally:
        attnlab.set_num_threads(old)
    assert elapsed >= 0.2
    assert fraction > 0.15, (
        f"counter kept {fraction:.1%} of its speed during a {elapsed:.2f} s call")


def test_num_threads_round_trip_and_results():
    old = attnlab.num_threads()
    q, k, v, _ = make(np.random.default_rng(1), 2, 4, 2, 97, 97, 32)
    want = truth(q, k, v, causal=True)
    try:
        for n in (1, 3, 2):
            attnlab.set_num_threads(n)
            assert attnlab.num_threads() == n
            out = attnlab.attention(q, k, v, causal=True)
            assert_within("out", out, want["out"], want["m_out"], C * U32 * want["kappa"])
    finally:
        attnlab.set_num_threads(old)
    assert attnlab.num_threads() == old


def test_set_num_threads_while_another_thread_runs_kernels():
    # set_num_threads waits for running kernels (thread_pool.h: replacing the pool under a
    # kernel is unsafe); hammer both from two threads and check every result.
    q, k, v, _ = make(np.random.default_rng(2), 1, 4, 4, 113, 113, 16)
    want = attnlab.attention(q, k, v, kernel="reference")
    t = truth(q, k, v)
    old = attnlab.num_threads()
    errors = []

    def run():
        for _ in range(40):
            out = attnlab.attention(q, k, v)
            if not np.all(np.abs(out - want) <= 2 * C * U32 * t["kappa"] * t["m_out"] + 1e-30):
                errors.append("mismatch")

    worker = threading.Thread(target=run)
    worker.start()
    for i in range(40):
        attnlab.set_num_threads(1 + i % 3)
    worker.join()
    attnlab.set_num_threads(old)
    assert not errors


def test_simd_target_is_the_active_kernel_target():
    assert attnlab.simd_target() in ("baseline", "avx2", "avx512")
    cli = os.environ.get("ATTNLAB_BIN")
    if cli:  # the CLI names the same target ("kernels avx512 (...)")
        version = subprocess.run([cli, "--version"], capture_output=True, text=True,
                                 check=True).stdout
        assert f"kernels {attnlab.simd_target()} " in version
    # ATTNLAB_SIMD forces a target (simd_target.h); baseline exists on every CPU.
    code = "import attnlab; print(attnlab.simd_target())"
    env = dict(os.environ, ATTNLAB_SIMD="baseline")
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert got == "baseline"
