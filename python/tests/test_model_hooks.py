"""attnlab.load / run_with_cache / run_with_hooks against an independent PyTorch model.

A small GPT-2 (Hugging Face folder: config.json + model.safetensors, random weights with peaked
attention) is written here; a plain-torch forward in float64 that records every activation under
TransformerLens' names is the truth. Tolerance (FlashAttention's rule, as the repository's other
oracles): attnlab computes in fp32, so for every activation
    max |attnlab - truth| <= 4 * max |torch_fp32 - truth| + 8 u max |truth|,   u = 2^-24,
where torch_fp32 is the same torch forward run in float32 (a correct fp32 implementation with
another operation order). A Llama-layout model (GQA, RoPE) checks the rotary hooks and the GQA
shapes by consistency between hooks, and its logits against tests/hf_decoder_torch_test.py's
independent torch implementation.
"""
import json
import math
import os

import numpy as np
import pytest
import torch

import attnlab
import hf_gpt2_torch_test  # tests/: its safetensors writer

U = 2.0 ** -24
C, H, L, V, NPOS, T = 64, 4, 2, 50257, 64, 40
D = C // H


def write_gpt2(d, seed=3):
    g = torch.Generator().manual_seed(seed)

    def normal(*shape, std, mean=0.0):
        return torch.randn(*shape, generator=g) * std + mean

    w = {"wte.weight": normal(V, C, std=0.3), "wpe.weight": normal(NPOS, C, std=0.3)}
    for l in range(L):
        h = "h.%d." % l
        w[h + "ln_1.weight"] = normal(C, std=0.1, mean=1.0)
        w[h + "ln_1.bias"] = normal(C, std=0.1)
        w[h + "attn.c_attn.weight"] = normal(C, 3 * C, std=0.25)  # peaked attention rows
        w[h + "attn.c_attn.bias"] = normal(3 * C, std=0.05)
        w[h + "attn.c_proj.weight"] = normal(C, C, std=0.1)
        w[h + "attn.c_proj.bias"] = normal(C, std=0.02)
        w[h + "ln_2.weight"] = normal(C, std=0.1, mean=1.0)
        w[h + "ln_2.bias"] = normal(C, std=0.1)
        w[h + "mlp.c_fc.weight"] = normal(C, 4 * C, std=0.15)
        w[h + "mlp.c_fc.bias"] = normal(4 * C, std=0.05)
        w[h + "mlp.c_proj.weight"] = normal(4 * C, C, std=0.05)
        w[h + "mlp.c_proj.bias"] = normal(C, std=0.02)
    w["ln_f.weight"] = normal(C, std=0.1, mean=1.0)
    w["ln_f.bias"] = normal(C, std=0.1)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_embd": C, "n_head": H, "n_layer": L,
                   "n_positions": NPOS, "vocab_size": V, "layer_norm_epsilon": 1e-5,
                   "activation_function": "gelu_new"}, f)
    hf_gpt2_torch_test.write_safetensors(os.path.join(d, "model.safetensors"), w)
    return w


def ln(x, w, b):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_truth(w, tokens, dtype, edit=None):
    """Every activation of one sequence under TransformerLens' names (batch dim added), in dtype.
    edit(name, tensor) -> tensor applies an intervention where a hook would."""
    edit = edit or (lambda name, t: t)
    p = {k: v.to(dtype) for k, v in w.items()}
    n = len(tokens)
    acts = {}

    def rec(name, t):
        t = edit(name, t)
        acts[name] = t
        return t
    x = rec("hook_embed", p["wte.weight"][torch.tensor(tokens)])
    x = x + rec("hook_pos_embed", p["wpe.weight"][:n])
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    for l in range(L):
        h, b = "h.%d." % l, "blocks.%d." % l
        x = rec(b + "hook_resid_pre", x)
        a = ln(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
        q, k, v = (a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]).split(C, -1)
        q = rec(b + "attn.hook_q", q.reshape(n, H, D))
        k = rec(b + "attn.hook_k", k.reshape(n, H, D))
        v = rec(b + "attn.hook_v", v.reshape(n, H, D))
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
        s = rec(b + "attn.hook_attn_scores", s.masked_fill(~causal, float("-inf")))
        lse = torch.logsumexp(s, -1)
        pat = torch.where(torch.isinf(lse)[..., None], torch.zeros_like(s),
                          torch.exp(s - lse[..., None]))
        acts[b + "attn.hook_lse"] = lse
        acts[b + "attn.hook_first_token_mass"] = pat[:, :, 0]
        logp = torch.where(pat > 0, torch.log(pat), torch.zeros_like(pat))
        acts[b + "attn.hook_entropy"] = -(pat * logp).sum(-1)
        pat = rec(b + "attn.hook_pattern", pat)
        z = rec(b + "attn.hook_z", torch.einsum("hqk,khd->qhd", pat, v))
        o = rec(b + "hook_attn_out", z.reshape(n, C) @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"])
        x = rec(b + "hook_resid_mid", x + o)
        m = gelu(ln(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"]) @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
        m = rec(b + "hook_mlp_out", m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"])
        x = rec(b + "hook_resid_post", x + m)
    xf = rec("ln_final.hook_normalized", ln(x, p["ln_f.weight"], p["ln_f.bias"]))
    acts["logits"] = xf @ p["wte.weight"].T
    return {k: t[None].numpy() for k, t in acts.items()}


def check_close(name, got, truth, ref32):
    assert got.shape == truth.shape, (name, got.shape, truth.shape)
    inf = np.isinf(truth)
    assert np.array_equal(inf, np.isinf(got)), name + ": -inf entries differ"
    g, t, r = (np.where(inf, 0.0, a.astype(np.float64)) for a in (got, truth, ref32))
    err, ref_err = np.abs(g - t).max(), np.abs(r - t).max()
    tol = 4 * ref_err + 8 * U * np.abs(t).max()
    assert err <= tol, "%s: max error %.3g > tolerance %.3g (torch fp32 error %.3g)" % (
        name, err, tol, ref_err)
    return err / tol


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("gpt2"))
    w = write_gpt2(d)
    toks = list(np.random.default_rng(5).integers(0, V, size=T))
    return attnlab.load(d), w, toks


def test_every_hook_matches_torch(gpt2):
    m, w, toks = gpt2
    truth = gpt2_truth(w, toks, torch.float64)
    ref32 = gpt2_truth(w, toks, torch.float32)
    logits, cache = m.run_with_cache(np.array(toks))
    assert set(cache) == set(m.hook_names()) == set(truth) - {"logits"}
    worst = max(check_close(n, cache[n], truth[n], ref32[n]) for n in cache)
    check_close("logits", logits, truth["logits"], ref32["logits"])
    assert 0 < worst <= 1
    # The flash path (no pattern hooks) gives the same logits as the explicit one.
    np.testing.assert_allclose(m(np.array(toks)), logits, rtol=0, atol=1e-4 * np.abs(logits).max())


def test_cache_by_short_names_and_filters(gpt2):
    m, _, toks = gpt2
    _, cache = m.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_pattern"))
    assert sorted(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"]
    assert ("pattern", 0) in cache and ("z", 0) not in cache
    _, one = m.run_with_cache(toks, names_filter="blocks.1.attn.hook_first_token_mass",
                              remove_batch_dim=True)
    assert one["first_token_mass", 1].shape == (H, T)
    np.testing.assert_allclose(one["first_token_mass", 1], cache["pattern", 1][0, :, :, 0], atol=2e-6)
    assert attnlab.get_act_name("resid_pre", 0) == "blocks.0.hook_resid_pre"
    with pytest.raises(ValueError, match="unknown hook name 'blocks.7.attn.hook_pattern'"):
        m.run_with_cache(toks, names_filter=["blocks.7.attn.hook_pattern"])


def test_zero_value_of_first_token(gpt2):
    """The mission's documents' intervention: token 0's value vectors set to zero in every layer."""
    m, w, toks = gpt2

    def zero_v0(v, hook):
        v[:, 0] = 0.0
    got = m.run_with_hooks(toks, fwd_hooks=[(lambda n: n.endswith("hook_v"), zero_v0)])

    def edit(name, t):
        if name.endswith("hook_v"):
            t = t.clone()
            t[0] = 0
        return t
    truth = gpt2_truth(w, toks, torch.float64, edit)["logits"]
    ref32 = gpt2_truth(w, toks, torch.float32, edit)["logits"]
    check_close("logits with v[0] = 0", got, truth, ref32)
    plain = gpt2_truth(w, toks, torch.float64)["logits"]
    assert np.abs(plain - truth).max() > 100 * np.abs(got - truth).max()  # the edit mattered


def test_block_key_zero_by_scores(gpt2):
    """Masking key 0 through hook_attn_scores (a returned replacement), as the documents do by hand;
    query 0 then sees nothing and its output is 0 (not NaN)."""
    m, w, toks = gpt2

    def block_key0(scores, hook):
        out = scores.copy()
        out[:, :, :, 0] = -np.inf
        return out
    logits, cache = None, None
    got = m.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_attn_scores", block_key0),
                                            ("blocks.1.attn.hook_attn_scores", block_key0)])

    def edit(name, t):
        if name.endswith("hook_attn_scores"):
            t = t.clone()
            t[:, :, 0] = float("-inf")
        return t
    truth = gpt2_truth(w, toks, torch.float64, edit)["logits"]
    ref32 = gpt2_truth(w, toks, torch.float32, edit)["logits"]
    assert np.isfinite(got).all()
    check_close("logits with key 0 blocked", got, truth, ref32)


def test_torch_tokens_give_torch_tensors(gpt2):
    m, _, toks = gpt2
    t = torch.tensor([toks])
    logits, cache = m.run_with_cache(t, names_filter=["blocks.0.hook_resid_post"])
    assert isinstance(logits, torch.Tensor) and isinstance(cache["resid_post", 0], torch.Tensor)
    seen = []

    def double_resid(x, hook):  # a torch tensor, edited in place
        seen.append((hook.name, hook.layer(), type(x)))
        x.mul_(2.0)
    a = m.run_with_hooks(t, fwd_hooks=[("blocks.1.hook_resid_pre", double_resid)])
    assert seen == [("blocks.1.hook_resid_pre", 1, torch.Tensor)]
    b = m.run_with_hooks(t, fwd_hooks=[("blocks.1.hook_resid_pre", lambda x, hook: 2.0 * x)])
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), logits.numpy())


def test_hook_errors_are_raised(gpt2):
    m, _, toks = gpt2

    class Boom(Exception):
        pass

    def boom(x, hook):
        raise Boom("from the hook")
    with pytest.raises(Boom, match="from the hook"):
        m.run_with_hooks(toks, fwd_hooks=[("blocks.0.hook_resid_pre", boom)])
    with pytest.raises(ValueError, match=r"returned an array of shape \(1, 40, 63\)"):
        m.run_with_hooks(toks, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x[..., 1:])])
    with pytest.raises(TypeError, match="pairs"):
        m.run_with_hooks(toks, fwd_hooks=["blocks.0.hook_resid_pre"])
    # The model still works after a failed forward.
    assert np.isfinite(m(toks)).all()


def test_llama_gqa_rotary_hooks(tmp_path):
    import hf_decoder_torch_test as hf
    cfg = hf.base_cfg("llama")  # 4 query heads, 2 kv heads, RoPE
    gen = torch.Generator().manual_seed(11)
    w = hf.make_weights(cfg, gen)
    hf.write_model(str(tmp_path), cfg, w, "F32", 1)
    m = attnlab.load(str(tmp_path))
    toks = [int(x) for x in np.random.default_rng(2).integers(0, cfg["vocab_size"], 29)]
    logits, cache = m.run_with_cache(toks)
    Cm, Hq, Hkv, hd = hf.dims(cfg)
    truth = hf.truth_logits(cfg, {k: v.double() for k, v in w.items()}, toks).numpy()
    assert np.abs(logits[0] - truth).max() <= 1e-4 * np.abs(truth).max()
    for l in range(cfg["num_hidden_layers"]):
        q, k = cache["rot_q", l][0], cache["rot_k", l][0]  # [T, Hq, hd], [T, Hkv, hd]
        assert q.shape == (29, Hq, hd) and k.shape == (29, Hkv, hd) and cache["v", l].shape == (1, 29, Hkv, hd)
        assert not np.allclose(q, cache["q", l][0])  # RoPE moved them
        # Position 0 is not rotated.
        np.testing.assert_allclose(q[0], cache["q", l][0, 0], atol=1e-5)
        kk = np.repeat(k, Hq // Hkv, axis=1).astype(np.float64)
        s = np.einsum("qhd,khd->hqk", q.astype(np.float64), kk) / math.sqrt(hd)
        s[:, np.triu(np.ones((29, 29), bool), 1)] = -np.inf
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(cache["pattern", l][0], p, atol=2e-5)
        vv = np.repeat(cache["v", l][0], Hq // Hkv, axis=1)
        np.testing.assert_allclose(cache["z", l][0], np.einsum("hqk,khd->qhd", p, vv), atol=5e-5)


def test_default_model_tokens_roundtrip():
    m = attnlab.load()
    toks = m.to_tokens("The jury said it did find that")
    assert toks.shape[0] == 1 and toks.dtype == np.int64
    assert toks[0, 0] == m._m.bos_id  # the default model was trained with a BOS token
    assert m.to_string(toks[0, 1:]) == "The jury said it did find that"
    assert "".join(m.to_str_tokens(toks[0, 1:])) == "The jury said it did find that"
    logits = m(toks)
    assert logits.shape == (1, toks.shape[1], m.cfg.d_vocab)


def test_hooks_that_call_attnlab(gpt2):
    """Inside a hook: the engine works, the same model and a thread-count change are refused
    (ValueError, not a deadlock), and the model stays usable."""
    m, _, toks = gpt2
    outs = []

    def use_engine(z, hook):  # [batch, pos, head, d_head] -> attention over it
        q = np.ascontiguousarray(z.transpose(0, 2, 1, 3))
        outs.append(attnlab.attention(q, q, q, causal=True))
    m.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_z", use_engine)])
    assert outs and outs[0].shape == (1, H, T, D)
    with pytest.raises(ValueError, match="running a forward already"):
        m.run_with_hooks(toks, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: m(toks))])
    with pytest.raises(ValueError, match="cannot run inside a hook"):
        m.run_with_hooks(toks, fwd_hooks=[("blocks.0.hook_resid_pre",
                                           lambda x, hook: attnlab.set_num_threads(1))])
    n = attnlab.num_threads()
    attnlab.set_num_threads(n)
    assert np.isfinite(m(toks)).all()
