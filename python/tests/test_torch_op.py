"""attnlab.torch.attention, the autograd op: gradcheck in float64 (double reference), float32
flash gradients against float64 ones, and a training loop against plain PyTorch attention."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnlab  # noqa: E402
import attnlab.torch as at  # noqa: E402
from test_engine import C, U32, truth  # noqa: E402  (the NumPy float64 truth and its bound)


def rand(*shape, dtype=torch.float64, scale=1.0, seed=None):
    g = torch.Generator().manual_seed(seed if seed is not None else sum(shape))
    return (scale * torch.randn(*shape, generator=g, dtype=dtype)).requires_grad_()


def mask_with_empty_row(Lq, Lk, row):
    m = torch.rand(Lq, Lk, generator=torch.Generator().manual_seed(7)) < 0.6
    m[row] = False
    return m


# (B, Hq, Hkv, Lq, Lk, D, kwargs); "sink_logits": True makes a learned [Hq] tensor.
GRADCHECK_CASES = {
    "standard_gqa2": (2, 4, 2, 5, 7, 3, {}),
    "causal_window_sinks_mqa": (1, 4, 1, 9, 9, 4, dict(causal=True, window=(2, None), sinks=1)),
    "mask_all_masked_row": (1, 2, 1, 6, 5, 3, dict(mask=mask_with_empty_row(6, 5, 2))),
    "causal_mask_first_key_row0_empty": (1, 2, 2, 6, 6, 2,
                                         dict(causal=True, mask_first_key=True)),
    "softmax1_global_window": (1, 2, 1, 8, 8, 3,
                               dict(softmax="softmax1", n_global=2, window=(1, 1))),
    "sigmoid_bias": (1, 2, 2, 5, 6, 4, dict(softmax="sigmoid", sigmoid_bias=-1.5, causal=True)),
    "softpick_gqa2_causal_empty_row": (1, 4, 2, 6, 5, 3, dict(softmax="softpick",
                                                              mask=mask_with_empty_row(6, 5, 2))),
    "sink_logits_gqa2_causal": (2, 4, 2, 6, 6, 3, dict(softmax="sink", sink_logits=True,
                                                        causal=True)),
    "sink_logits_mask4d_scale": (2, 2, 1, 4, 7, 2, dict(
        softmax="sink", sink_logits=True, scale=0.7,
        mask=torch.rand(2, 1, 4, 7, generator=torch.Generator().manual_seed(3)) < 0.5)),
}


@pytest.mark.parametrize("name", sorted(GRADCHECK_CASES))
def test_gradcheck_float64(name):
    B, Hq, Hkv, Lq, Lk, D, kw = GRADCHECK_CASES[name]
    kw = dict(kw)
    q, k, v = rand(B, Hq, Lq, D, scale=1.5), rand(B, Hkv, Lk, D), rand(B, Hkv, Lk, D, seed=1)
    inputs = [q, k, v]
    if kw.pop("sink_logits", False):
        inputs.append(rand(Hq, seed=2))

    def fn(q, k, v, *sink):
        return at.attention(q, k, v, sink_logits=sink[0] if sink else None, **kw)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_all_masked_rows_have_zero_output_and_gradient():
    mask = mask_with_empty_row(6, 5, 2)
    q, k, v = rand(1, 2, 6, 3), rand(1, 2, 5, 3), rand(1, 2, 5, 3, seed=4)
    for dtype in (torch.float32, torch.float64):
        qq, kk, vv = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
        out = at.attention(qq, kk, vv, mask=mask)
        out.sum().backward()
        assert torch.all(out[:, :, 2] == 0) and torch.all(qq.grad[:, :, 2] == 0)
        assert all(torch.isfinite(x.grad).all() for x in (qq, kk, vv))


@pytest.mark.parametrize("case", [
    dict(causal=True, window=(7, None), sinks=2),
    dict(softmax="sink", causal=True),
    dict(softmax="softmax1", n_global=3, window=(4, 4)),
    dict(softmax="sigmoid", sigmoid_bias=-3.0),
])
def test_float32_flash_gradients_match_float64_reference(case):
    B, Hq, Hkv, L, D = 2, 4, 2, 37, 16
    q64, k64, v64 = rand(B, Hq, L, D, scale=2.0), rand(B, Hkv, L, D), rand(B, Hkv, L, D, seed=5)
    w = torch.randn(B, Hq, L, D, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    s64 = rand(Hq, seed=8) if case.get("softmax") == "sink" else None
    grads = {}
    for dtype in (torch.float64, torch.float32):
        ins = [x.detach().to(dtype).requires_grad_() for x in (q64, k64, v64)]
        sink = None if s64 is None else s64.detach().to(dtype).requires_grad_()
        out = at.attention(*ins, sink_logits=sink, **case)  # float32: flash; float64: reference
        (out * w.to(dtype)).sum().backward()  # dout = w
        grads[dtype] = [x.grad for x in ins] + ([sink.grad] if sink is not None else [])
    # Tolerance from float32 precision: the float32 inputs are exact in float64, so the float64
    # gradients are the truth to ~2^-53, and the flash kernel's error on each element is within
    # 2 * C * u * kappa * M (test_engine.py: Higham's running bound, u = 2^-24).
    q32, k32, v32 = (x.detach().float().numpy() for x in (q64, k64, v64))
    t = truth(q32, k32, v32, w.float().numpy(),
              sink_logits=None if s64 is None else s64.detach().float().numpy(), **case)
    bound = 2 * C * U32 * t["kappa"]
    for name, g32, g64 in zip(["dq", "dk", "dv", "dsink"], grads[torch.float32],
                              grads[torch.float64]):
        assert g32.dtype == torch.float32 and g64.dtype == torch.float64
        err = (g32.double() - g64).abs().numpy()
        assert np.all(err <= bound * t["m_" + name] + 1e-30), name
        # And not vacuously: the float32 result is not the float64 one rounded by chance.
        assert np.any(err > 0) or name == "dsink"


def test_float32_forward_is_attnlab_flash_and_grad_output_may_be_non_contiguous():
    q, k, v = (rand(1, 2, 11, 8, dtype=torch.float32, seed=s) for s in (1, 2, 3))
    out = at.attention(q, k, v, causal=True)
    want = attnlab.attention(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(),
                             causal=True)
    assert np.array_equal(out.detach().numpy(), want)
    # A broadcast weight makes the incoming gradient a stride-0 (non-contiguous) expand.
    w = torch.randn(1, 1, 1, 8, generator=torch.Generator().manual_seed(0))
    (out * w).sum().backward()
    g_expand = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    out = at.attention(q, k, v, causal=True)
    out.backward(w.expand_as(out).contiguous())
    assert all(torch.equal(a, x.grad) for a, x in zip(g_expand, (q, k, v)))


def test_non_contiguous_inputs_are_made_contiguous():
    # [B, T, H, D] projections viewed as [B, H, T, D]: the usual layout in a model.
    bases = [rand(2, 9, 4, 8, dtype=torch.float32, seed=s) for s in (9, 10, 11)]
    views = [b.transpose(1, 2) for b in bases]
    assert not any(x.is_contiguous() for x in views)
    out = at.attention(*views, causal=True)
    out.sum().backward()
    g_views = [b.grad.clone() for b in bases]
    copies = [b.detach().transpose(1, 2).contiguous().requires_grad_() for b in bases]
    out_c = at.attention(*copies, causal=True)
    out_c.sum().backward()
    assert torch.equal(out, out_c)
    assert all(torch.equal(g, c.grad.transpose(1, 2)) for g, c in zip(g_views, copies))


def test_sink_logits_without_grad_and_as_a_list():
    q, k, v = (rand(1, 2, 5, 4, dtype=torch.float32, seed=s) for s in (1, 2, 3))
    a = at.attention(q, k, v, softmax="sink", sink_logits=[0.5, -1.0])
    b = at.attention(q, k, v, softmax="sink", sink_logits=torch.tensor([0.5, -1.0]))
    assert torch.equal(a, b)
    a.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


# ---- A training loop: attnlab's op against plain PyTorch attention ---------------------------


def plain_attention(q, k, v, sink_logits):
    """Causal attention with one learned sink logit per head as an extra softmax column."""
    B, H, T, D = q.shape
    s = (q @ k.transpose(-1, -2)) / D ** 0.5
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    s = s.masked_fill(~causal, float("-inf"))
    sink = sink_logits.view(1, H, 1, 1).expand(B, H, T, 1)
    p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
    return p @ v


class TinyModel(torch.nn.Module):
    def __init__(self, vocab=48, d_model=32, heads=4, use_attnlab=True):
        super().__init__()
        self.heads, self.use_attnlab = heads, use_attnlab
        self.emb = torch.nn.Embedding(vocab, d_model)
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(d_model, d_model, bias=False)
                                              for _ in range(4))
        self.sink_logits = torch.nn.Parameter(torch.zeros(heads))
        self.head = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens):
        x = self.emb(tokens)
        B, T, Dm = x.shape

        def split(t):  # [B, T, Dm] -> [B, H, T, Dm / H] (non-contiguous)
            return t.view(B, T, self.heads, Dm // self.heads).transpose(1, 2)

        q, k, v = split(self.wq(x)), split(self.wk(x)), split(self.wv(x))
        if self.use_attnlab:
            a = at.attention(q, k, v, causal=True, softmax="sink", sink_logits=self.sink_logits)
        else:
            a = plain_attention(q, k, v, self.sink_logits)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, Dm))
        return self.head(x)


def train(use_attnlab, steps=20):
    torch.manual_seed(0)
    model = TinyModel(use_attnlab=use_attnlab)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    # One fixed batch of random tokens: the model memorises it, so the loss falls steadily.
    tokens = torch.randint(0, 48, (4, 17), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 48), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), model


def test_training_loop_matches_plain_pytorch_attention():
    ours, m1 = train(True)
    plain, m2 = train(False)
    # Both runs are float32 with identical initialisation and data; they differ only in the
    # attention's rounding: a few u (u = 2^-24 = 6e-8) relative per forward/backward (the first
    # loss differs by 1-2 ulp). Adam divides each gradient by its own running RMS, so parameter
    # updates differ by a similar relative amount, and those differences compound over the 20
    # steps while the memorised loss falls 30x (4.0 to 0.13), which magnifies its relative error.
    # Measured worst step: 3.7e-6 (avx512 and avx2 kernels), 8.9e-6 (baseline SSE kernels);
    # 5e-5 leaves a margin of 5x over the worst, while a semantic difference (a wrong mask, a
    # missing sink-logit gradient) moves the loss by > 1e-3 within a few steps.
    rel = np.abs(ours - plain) / np.abs(plain)
    assert np.all(rel <= 5e-5), rel
    assert ours[-1] < 0.5 * ours[0]  # it trains
    # The sink logits were learned through attnlab's d_sink_logits.
    assert not torch.allclose(m1.sink_logits, torch.zeros(4))
    assert torch.allclose(m1.sink_logits, m2.sink_logits, rtol=1e-3, atol=1e-5)


def test_double_backward_is_refused_not_silently_wrong():
    q, k, v = rand(1, 1, 3, 2), rand(1, 1, 3, 2, seed=1), rand(1, 1, 3, 2, seed=2)
    out = at.attention(q, k, v)
    # dout = 2 out depends on q: a second derivative would need the backward's own gradient.
    (gq,) = torch.autograd.grad(out.pow(2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gq.sum().backward()
