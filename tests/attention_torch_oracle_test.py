#!/usr/bin/python3
"""PyTorch float64 oracle for `attnlab attention`, forward and backward, flash and reference.

Run by ctest as: /usr/bin/python3 attention_torch_oracle_test.py --attnlab <path to the CLI>
(Debian's python3-torch 1.13 and python3-numpy). Exits non-zero if any case fails.

The truth is written in plain PyTorch, independently of attnlab's code, the way a model would
write each variant:
  * scores = scale * Q @ repeat_interleave(K, group)^T
    (GQA: query head h reads kv head h // group)
  * visibility built from torch.arange: bottom-right aligned causal (query i sits at key position
    i + len_k - len_q), inclusive sliding window [p - left, p + right], the first n_sink keys
    bypassing the window (not causality), mask_first_key, an explicit mask
  * standard:  masked_fill(-inf) + softmax; a row that sees nothing gives zeros (attnlab's rule)
  * softmax1:  a prepended all-zero key column (logit 0, always visible) AND an all-zero value
               row; the output is then that of the real keys only
  * sink:      the learned logit b_h concatenated as an extra score column, dropped after softmax
  * sigmoid:   sigmoid(s + bias) on visible keys, no normalisation
  * softpick:  the paper's formula unshifted (Zuhri et al. 2025): relu(expm1(s)) /
               (sum over visible keys |expm1(s)| + eps), eps = float32(1e-6); lse = log of that
               denominator; a row that sees nothing gives zeros
Gradients come from autograd on loss = sum(O * dO), in float64, from the same float32 inputs
the CLI reads.

Tolerance, derived from fp32 arithmetic. With u = 2^-24 (fp32 unit roundoff) and the case's
condition number
    kappa = scale * max_ij sum_d |q_id k_jd| + log2(len_k + 1) + 1
(a logit computed in fp32 is off by about u times its term-wise magnitude, which moves every
probability by that relative amount; the log2 term is the depth of the sums), every output
tensor X (out, dq, dk, dv, dsink) must satisfy
    max |X_attnlab - X_torch| <= C * u * kappa * max|X_torch|
and the lse, whose error is absolute (logit error plus the rounding of the log),
    max |lse_attnlab - lse_torch| <= C * u * (kappa + max|lse_torch|)
with
  flash kernel (fp32 throughout):   C = C_FLASH = 8: the fp32 roundings on one element's path
                                    after the logit (exp2 polynomial ~2 ulp, the rescaling by
                                    2^(m_old - m_new), the P.V and row-sum accumulations, the
                                    final division by l, the store)
  reference kernel (attention.h:    C = C_REF = 2 and kappa = 1: only the final rounding of a
  double precision inside):         double result to fp32 (u * |x|) remains
The scale is a float32 parameter in attnlab (see fp32_scale), so the truth uses its fp32 value.
The observed worst ratios err/tol are printed per case (1.0 means the bound is just met); over
seeds 1-7 and the default they stay below 0.3 (flash) and 0.5 (double reference). The
bound is kept honest by a sensitivity check: the same comparison against a truth whose window
is off by one key must FAIL, or the script fails.
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

U = 2.0 ** -24
C_FLASH = 8.0
C_REF = 2.0

torch.set_default_dtype(torch.float64)


class Case:
    def __init__(self, name, B, Hq, Hkv, Lq, Lk, D, causal=False, left=-1, right=-1, n_sink=0,
                 mask_first=False, explicit_mask=False, softmax="standard", sink_range=None,
                 sigmoid_bias=None, scale=None, q_scale=1.0):
        self.name, self.B, self.Hq, self.Hkv, self.Lq, self.Lk, self.D = name, B, Hq, Hkv, Lq, Lk, D
        self.causal, self.left, self.right, self.n_sink = causal, left, right, n_sink
        self.mask_first, self.explicit_mask = mask_first, explicit_mask
        self.softmax, self.sink_range, self.sigmoid_bias = softmax, sink_range, sigmoid_bias
        self.scale, self.q_scale = scale, q_scale


CASES = [
    Case("standard", 2, 4, 4, 97, 113, 59),
    Case("causal_lq=lk", 2, 4, 4, 97, 97, 59, causal=True),
    Case("causal_lq<lk", 1, 4, 4, 97, 113, 59, causal=True),
    Case("causal_lq>lk_empty_rows", 1, 2, 2, 113, 97, 32, causal=True),
    Case("window_left", 1, 4, 4, 113, 113, 59, causal=True, left=16),
    Case("window_left_right", 1, 4, 4, 97, 113, 59, left=7, right=5),
    Case("window_right_only", 1, 2, 2, 97, 97, 16, right=3),
    Case("window_sinks", 1, 4, 2, 113, 113, 59, causal=True, left=16, n_sink=4),
    Case("mask_first_key", 1, 4, 4, 97, 97, 59, causal=True, mask_first=True),
    Case("explicit_mask", 2, 4, 2, 97, 113, 59, explicit_mask=True, mask_first=True),
    Case("gqa_4to1", 2, 8, 2, 97, 113, 59, causal=True),
    Case("softmax1", 1, 4, 2, 97, 113, 59, causal=True, softmax="softmax1"),
    Case("softmax1_window", 1, 4, 4, 113, 113, 64, causal=True, left=8, softmax="softmax1"),
    Case("sink_logits", 1, 8, 2, 97, 113, 59, causal=True, softmax="sink", sink_range=4.0),
    Case("sink_logits_extreme", 1, 4, 4, 97, 97, 59, causal=True, left=16, softmax="sink",
         sink_range=10.0),
    Case("sigmoid", 1, 4, 2, 97, 113, 59, causal=True, softmax="sigmoid",
         sigmoid_bias=-math.log(113)),
    Case("large_logits", 1, 4, 4, 97, 113, 59, causal=True, q_scale=8.0, scale=0.2),
    Case("softpick", 1, 8, 2, 97, 113, 59, causal=True, softmax="softpick"),
    Case("softpick_window_sinks", 1, 4, 4, 113, 113, 64, causal=True, left=16, n_sink=4,
         softmax="softpick"),
    Case("softpick_explicit_mask", 2, 4, 2, 97, 113, 59, explicit_mask=True, mask_first=True,
         softmax="softpick"),
    Case("softpick_lq>lk_empty_rows", 1, 2, 2, 113, 97, 7, causal=True, softmax="softpick",
         q_scale=3.0),
]


# ---- The truth, in float64 PyTorch --------------------------------------------------------------

def visibility(c, mask):
    """[B or 1, Hq or 1, Lq, Lk] bool, True = key visible to query."""
    i = torch.arange(c.Lq).view(-1, 1)
    j = torch.arange(c.Lk).view(1, -1)
    p = i + (c.Lk - c.Lq)
    vis = torch.ones(c.Lq, c.Lk, dtype=torch.bool)
    causal_ok = (j <= p) if c.causal else torch.ones_like(vis)
    in_window = torch.ones_like(vis)
    if c.left >= 0:
        in_window &= j >= p - c.left
    if c.right >= 0:
        in_window &= j <= p + c.right
    vis = causal_ok & (in_window | (j < c.n_sink))
    if c.mask_first:
        vis &= j != 0
    vis = vis.view(1, 1, c.Lq, c.Lk)
    if mask is not None:
        vis = vis & torch.from_numpy(mask.astype(bool))
    return vis


def fp32_scale(c):
    """The scale attnlab uses: a float32 parameter (attention.h: std::optional<float>), by default
    1/sqrt(head_dim) evaluated in float32. Like every other input, the truth takes its fp32
    value."""
    if c.scale is not None:
        return float(np.float32(c.scale))
    return float(np.float32(1.0) / np.sqrt(np.float32(c.D)))


def torch_attention(c, q, k, v, sinks, mask):
    group = c.Hq // c.Hkv
    scale = fp32_scale(c)
    k_rep = k.repeat_interleave(group, dim=1)
    v_rep = v.repeat_interleave(group, dim=1)
    s = scale * q @ k_rep.transpose(-1, -2)                      # [B, Hq, Lq, Lk]
    vis = visibility(c, mask).expand_as(s)
    row_any = vis.any(-1, keepdim=True)
    neg_inf = torch.tensor(-math.inf)
    s_m = torch.where(vis, s, neg_inf)
    if c.softmax == "standard":
        # Rows that see nothing: a constant finite row keeps softmax (and its gradient) NaN-free,
        # then the row is zeroed, as attnlab defines it.
        s_safe = torch.where(row_any, s_m, torch.zeros_like(s_m))
        p = torch.where(row_any, torch.softmax(s_safe, -1), torch.zeros_like(s_m))
        out = p @ v_rep
        lse = torch.where(row_any.squeeze(-1), torch.logsumexp(s_safe, -1), neg_inf)
    elif c.softmax == "softmax1":
        zero_logit = torch.zeros(*s.shape[:-1], 1)
        s_ext = torch.cat([zero_logit, s_m], -1)                 # the prepended all-zero key
        v_ext = torch.cat([torch.zeros(c.B, c.Hq, 1, c.D), v_rep], -2)  # and its all-zero value
        p_ext = torch.softmax(s_ext, -1)
        out = p_ext @ v_ext
        lse = torch.logsumexp(s_ext, -1)
    elif c.softmax == "sink":
        col = sinks.view(1, c.Hq, 1, 1).expand(c.B, c.Hq, c.Lq, 1)
        s_ext = torch.cat([s_m, col], -1)                        # the sink's extra logit column
        p = torch.softmax(s_ext, -1)[..., :c.Lk]                 # dropped after the softmax
        out = p @ v_rep
        lse = torch.logsumexp(s_ext, -1)
    elif c.softmax == "sigmoid":
        bias = float(np.float32(c.sigmoid_bias))  # a float32 parameter in attnlab, like the scale
        p = torch.where(vis, torch.sigmoid(s + bias), torch.zeros_like(s))
        out = p @ v_rep
        lse = None
    elif c.softmax == "softpick":
        eps = float(np.float32(1e-6))  # AttentionParams::softpick_eps, a float32
        em1 = torch.where(vis, torch.expm1(torch.where(vis, s, torch.zeros_like(s))),
                          torch.zeros_like(s))
        denom = em1.abs().sum(-1, keepdim=True) + eps
        p = torch.relu(em1) / denom
        out = p @ v_rep
        lse = torch.where(row_any.squeeze(-1), torch.log(denom.squeeze(-1)), neg_inf)
    else:
        raise ValueError(c.softmax)
    return out, lse


def truth(c, arrays, sinks_np, mask):
    q = torch.from_numpy(arrays["q"].astype(np.float64)).requires_grad_()
    k = torch.from_numpy(arrays["k"].astype(np.float64)).requires_grad_()
    v = torch.from_numpy(arrays["v"].astype(np.float64)).requires_grad_()
    sinks = None
    if sinks_np is not None:
        sinks = torch.from_numpy(sinks_np.astype(np.float64)).requires_grad_()
    out, lse = torch_attention(c, q, k, v, sinks, mask)
    dout = torch.from_numpy(arrays["dout"].astype(np.float64))
    (out * dout).sum().backward()
    t = {"out": out.detach().numpy(), "dq": q.grad.numpy(), "dk": k.grad.numpy(),
         "dv": v.grad.numpy()}
    if lse is not None:
        t["lse"] = lse.detach().numpy()
    if sinks is not None:
        t["dsink"] = sinks.grad.numpy()
    # Condition of the logits, from the same float64 inputs.
    with torch.no_grad():
        group = c.Hq // c.Hkv
        scale = fp32_scale(c)
        k_rep = k.abs().repeat_interleave(group, dim=1)
        cond = (scale * q.abs() @ k_rep.transpose(-1, -2)).max().item()
    kappa = cond + math.log2(c.Lk + 1) + 1
    return t, kappa


# ---- Running the CLI ----------------------------------------------------------------------------

def save(path, a):
    np.save(path, a)
    return path


def run_cli(attnlab, c, d, kernel, with_mask, with_sinks):
    f = lambda n: os.path.join(d, n)
    outs = {n: f(f"{kernel}_{n}.npy") for n in ("out", "lse", "dq", "dk", "dv", "dsink")}
    cmd = [attnlab, "attention", "--kernel", kernel, "--q", f("q.npy"), "--k", f("k.npy"),
           "--v", f("v.npy"), "--o", outs["out"], "--lse", outs["lse"], "--dout", f("dout.npy"),
           "--dq", outs["dq"], "--dk", outs["dk"], "--dv", outs["dv"], "--softmax", c.softmax]
    if c.causal:
        cmd.append("--causal")
    if c.left >= 0:
        cmd += ["--window-left", str(c.left)]
    if c.right >= 0:
        cmd += ["--window-right", str(c.right)]
    if c.n_sink:
        cmd += ["--sinks", str(c.n_sink)]
    if c.mask_first:
        cmd.append("--mask-first-key")
    if with_mask:
        cmd += ["--mask", f("mask.npy")]
    if with_sinks:
        cmd += ["--sink-logits", f("sinks.npy"), "--dsink", outs["dsink"]]
    if c.sigmoid_bias is not None:
        cmd += ["--sigmoid-bias", repr(c.sigmoid_bias)]
    if c.scale is not None:
        cmd += ["--scale", repr(c.scale)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"attnlab exited with {r.returncode}: {r.stderr.strip()}")
    got = {}
    for n, path in outs.items():
        if os.path.exists(path):
            a = np.load(path)
            if a.dtype != np.float32:
                raise RuntimeError(f"{n}: expected float32, found {a.dtype}")
            got[n] = a.astype(np.float64)
    return got


def ratio(got, want, tol):
    """(max |got - want| / tol, message); inf on a shape mismatch or NaN. Equal infinities (the
    lse of a row that sees nothing) count as exact."""
    if got.shape != want.shape:
        return math.inf, f"shape {got.shape} != {want.shape}"
    both_inf = np.isinf(want) & (got == want)
    stray_inf = (np.isinf(got) & ~both_inf).any() or (np.isinf(want) & ~both_inf).any()
    if np.isnan(got).any() or stray_inf:
        return math.inf, "non-finite values where the truth differs"
    finite = ~both_inf
    if not finite.any():
        return 0.0, ""
    err = np.abs(got[finite] - want[finite]).max()
    return err / (tol + 1e-300), f"max err {err:.3e}, tol {tol:.3e}"


def max_abs(x):
    finite = x[np.isfinite(x)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def compare(got, t, c, kappa):
    """Worst err/tol per output; tolerances as in the module docstring."""
    worst = {}
    for n, want in t.items():
        if n not in got:
            return {n: (math.inf, "missing output")}
        if n == "lse":
            tol = c * U * (kappa + max_abs(want))
        else:
            tol = c * U * kappa * max_abs(want)
        worst[n] = ratio(got[n], want, tol)
    if "lse" not in t and "lse" in got:  # sigmoid: lse is defined as 0
        worst["lse"] = (0.0, "") if not got["lse"].any() else (math.inf, "sigmoid lse must be 0")
    return worst


def make_inputs(c, rng, d):
    a = {
        "q": (rng.standard_normal((c.B, c.Hq, c.Lq, c.D)) * c.q_scale).astype(np.float32),
        "k": rng.standard_normal((c.B, c.Hkv, c.Lk, c.D)).astype(np.float32),
        "v": rng.standard_normal((c.B, c.Hkv, c.Lk, c.D)).astype(np.float32),
        "dout": rng.standard_normal((c.B, c.Hq, c.Lq, c.D)).astype(np.float32),
    }
    for n, x in a.items():
        save(os.path.join(d, n + ".npy"), x)
    mask = None
    if c.explicit_mask:
        mask = (rng.random((c.B, c.Hq, c.Lq, c.Lk)) < 0.7).astype(np.uint8)
        mask[:, :, 3, :] = 0  # a fully masked row in every head
        save(os.path.join(d, "mask.npy"), mask)
    sinks = None
    if c.softmax == "sink":
        sinks = rng.uniform(-c.sink_range, c.sink_range, c.Hq).astype(np.float32)
        sinks[0] = c.sink_range  # the extreme on purpose
        save(os.path.join(d, "sinks.npy"), sinks)
    return a, mask, sinks


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attnlab", required=True, help="path to the attnlab CLI binary")
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    start = time.time()
    failures = []
    with tempfile.TemporaryDirectory(prefix="attnlab_oracle_") as d:
        for c in CASES:
            arrays, mask, sinks = make_inputs(c, rng, d)
            t, kappa = truth(c, arrays, sinks, mask)
            for kernel, cc, kk in (("flash", C_FLASH, kappa), ("reference", C_REF, 1.0)):
                label = f"{c.name} [{kernel}]"
                try:
                    got = run_cli(args.attnlab, c, d, kernel, mask is not None, sinks is not None)
                except Exception as e:  # noqa: BLE001 - report and go on with the other cases
                    failures.append(f"{label}: {e}")
                    print(f"FAIL {label}: {e}")
                    continue
                worst = compare(got, t, cc, kk)
                bad = {n: w for n, w in worst.items() if not w[0] <= 1.0}
                summary = " ".join(f"{n}={w[0]:.3f}" for n, w in sorted(worst.items()))
                status = "ok  " if not bad else "FAIL"
                print(f"{status} {label:38s} B={c.B} Hq={c.Hq} Hkv={c.Hkv} Lq={c.Lq} Lk={c.Lk} "
                      f"D={c.D} kappa={kappa:.1f} err/tol: {summary}")
                if bad:
                    failures.append(f"{label}: " + "; ".join(
                        f"{n} err/tol = {r:.3g} ({msg})" for n, (r, msg) in sorted(bad.items())))

        # Sensitivity: an off-by-one window must not pass the flash tolerance.
        c = Case("sensitivity", 1, 2, 2, 97, 97, 59, causal=True, left=16)
        arrays, _, _ = make_inputs(c, rng, d)
        _, kappa = truth(c, arrays, None, None)
        got = run_cli(args.attnlab, c, d, "flash", False, False)
        off = Case("sensitivity_off_by_one", 1, 2, 2, 97, 97, 59, causal=True, left=15)
        t_off, _ = truth(off, arrays, None, None)
        r, msg = ratio(got["out"], t_off["out"], C_FLASH * U * kappa * max_abs(t_off["out"]))
        if r <= 1.0:
            failures.append(f"sensitivity: an off-by-one window passes the tolerance ({msg}); "
                            "the bound is too loose")
            print(f"FAIL sensitivity: off-by-one window within tolerance ({msg})")
        else:
            print(f"ok   sensitivity: an off-by-one window is caught (err/tol = {r:.3g})")

    elapsed = time.time() - start
    if failures:
        print(f"\n{len(failures)} failure(s) in {elapsed:.1f} s:", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        if any("[reference]" in f for f in failures) and not any("[flash]" in f for f in failures):
            print("hint: only the reference kernel fails, by a few u * max|x|: attention.h "
                  "documents it as double precision inside; check that it does not run in float "
                  "(e.g. the accumulator type of AttentionForwardReferenceImpl deduced from a float "
                  "scale)",
                  file=sys.stderr)
        return 1
    print(f"\nall {2 * len(CASES)} case runs match PyTorch float64 ({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
