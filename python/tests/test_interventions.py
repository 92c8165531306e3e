"""Interventions (attnlab/interventions.py; issue 39) against a float64 PyTorch forward of the same
model with the same edit (tests/model_torch_oracle_test.py's truth_forward, which computes
attnlab's GPT from its own checkpoint format), on the embedded default model and on a
Llama-family layout (RoPE, RMSNorm, SwiGLU, 4 query heads over 2 KV heads, no biases).

Tolerance: the unedited forward's own error against the truth, e0 = max |logits - truth|, sets
the scale: an edit changes which numbers are added, not the precision, so each edited forward
must match its edited truth within 4 e0 + 1e-5 of the largest logit. Each check also asserts
that the edit moved the logits by much more than that (an edit that did nothing fails).
"""
import json

import numpy as np
import pytest
import torch

import attnlab
import model_torch_oracle_test as mo


def default_model():
    m = attnlab.load()
    W = mo.read_safetensors(attnlab_default_weights())
    return m, dict(m.config), W


def attnlab_default_weights():
    import os
    from conftest import SOURCE_DIR
    return os.path.join(SOURCE_DIR, "data", "default-model", "model.safetensors")


def llama_layout(tmp_path):
    c = mo.full_config({"norm_type": "rmsnorm", "mlp_activation": "swiglu", "n_kv_head": 2,
                        "bias": False, "vocab_size": 50, "context": 24})
    W = mo.make_weights(c, np.random.default_rng(4))
    with open(tmp_path / "config.json", "w") as f:
        json.dump(dict(c, format="attnlab-checkpoint", version=1), f)
    mo.write_safetensors(str(tmp_path / "model.safetensors"), W)
    return attnlab.load(str(tmp_path)), c, W


def truth(c, W, toks, edits=None):
    Wt = {k: torch.tensor(v) for k, v in W.items()}
    t = torch.tensor(toks, dtype=torch.int64)
    with torch.no_grad():
        logits, _ = mo.truth_forward(c, Wt, t, torch.full_like(t, -1), None, edits)
    return logits.numpy()


@pytest.fixture(scope="module", params=["default", "llama"])
def case(request, tmp_path_factory):
    if request.param == "default":
        m, c, W = default_model()
        toks = m.to_tokens("The jury said it did find that many of the state's laws were old")
        toks = np.concatenate([toks, toks[:, 1:6]], axis=1)
    else:
        m, c, W = llama_layout(tmp_path_factory.mktemp("llama"))
        toks = np.random.default_rng(6).integers(0, c["vocab_size"], size=(2, 19))
    base = truth(c, W, toks)
    got = m(toks)
    e0 = float(np.abs(got - base).max())
    tol = 4 * e0 + 1e-5 * float(np.abs(base).max())
    return m, c, W, toks, base, tol


def check(got, want, base, tol, what):
    err = float(np.abs(np.asarray(got) - want).max())
    moved = float(np.abs(want - base).max())
    assert err <= tol, "%s: max |attnlab - torch| = %.3g > %.3g" % (what, err, tol)
    assert moved > 20 * tol, "%s: the edit moved the logits by only %.3g" % (what, moved)


def test_ablate_head_zero_and_mean_on_z(case):
    m, c, W, toks, base, tol = case
    L, h = 1, 2

    def zero(z):
        z = z.clone()
        z[:, h] = 0
        return z

    def mean(z):
        z = z.clone()
        z[:, h] = z[:, h].mean(dim=(0, 1), keepdim=True)
        return z
    check(m.ablate_head(toks, L, h), truth(c, W, toks, {("z", L): zero}), base, tol, "zero z")
    check(m.ablate_head(toks, L, h, method="mean"), truth(c, W, toks, {("z", L): mean}), base,
          tol, "mean z")
    # A zero pattern is a zero output.
    check(m.ablate_head(toks, L, h, on="pattern"), truth(c, W, toks, {("z", L): zero}), base,
          tol, "zero pattern")


def test_ablate_head_mean_pattern_is_uniform_attention(case):
    m, c, W, toks, base, tol = case
    L, heads = 0, [0, 3]

    def uniform(p, vis):
        p = p.clone()
        u = vis.to(p.dtype)
        u = u / u.sum(-1, keepdim=True).clamp(min=1)
        p[:, heads] = u[:, heads]
        return p
    check(m.ablate_head(toks, L, heads, method="mean", on="pattern"),
          truth(c, W, toks, {("pattern", L): uniform}), base, tol, "uniform pattern")


def test_mask_first_key_equals_a_model_configured_to_mask_it(case):
    m, c, W, toks, base, tol = case
    want = truth(dict(c, mask_first_key=True), W, toks)
    check(m.mask_first_key(toks), want, base, tol, "mask first key, every head")
    loss = m(toks, return_type="loss")
    masked = m.mask_first_key(toks, return_type="loss")
    assert np.isfinite(masked) and masked != loss

    def one(p, vis):
        p = p.clone()
        p[:, 1, :, 0] = 0
        tot = p[:, 1].sum(-1, keepdim=True)
        p[:, 1] = torch.where(tot > 0, p[:, 1] / tot.clamp(min=1e-300), torch.zeros_like(p[:, 1]))
        return p
    check(m.mask_first_key(toks, layers=1, heads=1), truth(c, W, toks, {("pattern", 1): one}),
          base, tol, "mask first key, layer 1 head 1")


def test_logit_lens_equals_the_model_cut_after_the_layer(case):
    m, c, W, toks, base, tol = case
    lens = m.logit_lens(toks)
    assert sorted(lens) == list(range(m.cfg.n_layers))
    np.testing.assert_allclose(lens[m.cfg.n_layers - 1], m(toks), rtol=0, atol=tol)
    cut = truth(dict(c, n_layer=1), W, toks)
    check(lens[0], cut, base, tol, "logit lens after layer 0")


def test_patching_the_whole_residual_gives_the_source_run(case):
    m, c, W, toks, base, tol = case
    other = toks[:, ::-1].copy()
    name = "blocks.1.hook_resid_pre"
    src_logits, cache = m.run_with_cache(other, names_filter=name)
    got = m.patch(toks, cache, name)
    assert np.abs(got - src_logits).max() <= tol
    # One position only: the positions before it keep this run's logits exactly.
    pos = toks.shape[1] - 3
    one = m.patch(toks, cache, name, positions=pos)
    np.testing.assert_array_equal(one[:, :pos], m(toks)[:, :pos])
    assert np.abs(one[:, pos:] - m(toks)[:, pos:]).max() > 20 * tol
    # Per head: patching head 2's z of layer 0 equals putting the source's z into that head.
    zname = "blocks.0.attn.hook_z"
    _, zc = m.run_with_cache(other, names_filter=zname)
    src_z = torch.tensor(np.asarray(zc[zname]), dtype=torch.float64)  # [B, P, H, hd]

    def put(z):
        z = z.clone()
        z[:, 2] = src_z[:, :, 2].permute(0, 1, 2)
        return z
    check(m.patch(toks, zc, zname, heads=2), truth(c, W, toks, {("z", 0): put}), base, 4 * tol,
          "patch z of head 2")


def test_bad_interventions_raise(case):
    m, c, W, toks, base, tol = case
    with pytest.raises(ValueError, match="outside the model's"):
        m.ablate_head(toks, 7, 0)
    with pytest.raises(ValueError, match="outside the model's %d heads" % m.cfg.n_heads):
        m.ablate_head(toks, 0, m.cfg.n_heads)
    with pytest.raises(ValueError, match="method"):
        m.ablate_head(toks, 0, 0, method="resample")
    with pytest.raises(ValueError, match="on: expected"):
        m.ablate_head(toks, 0, 0, on="q")
    with pytest.raises(ValueError, match="has no activation"):
        m.patch(toks, {}, "blocks.0.hook_resid_pre")
    with pytest.raises(ValueError, match="has shape"):
        m.patch(toks, {"blocks.0.hook_resid_pre": np.zeros((1, 2, 3))}, "blocks.0.hook_resid_pre")
