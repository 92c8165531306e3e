"""TransformerLens' forward calls (issue 39): ``return_type`` "logits" | "loss" | "both" | None and
``loss_per_token`` on ``m(tokens)``, ``run_with_hooks`` and ``run_with_cache``, against a float64
PyTorch forward of the same GPT-2-layout model (test_model_hooks.py's writer and truth).

Tolerance: each token's loss, log-sum-exp of its logits minus the target's logit, moves by at
most 2 max |logit error|, so |loss - truth's loss| <= 2 max |attnlab logits - truth logits| (plus
float64 rounding); this checks the formula exactly, whatever the forward's own fp32 error.
"""
import numpy as np
import pytest
import torch

import attnlab
from test_model_hooks import T, V, gpt2_truth, write_gpt2


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("gpt2calls"))
    w = write_gpt2(d)
    toks = np.random.default_rng(11).integers(0, V, size=(2, T))
    truths = [gpt2_truth(w, list(row), torch.float64)["logits"] for row in toks]
    return attnlab.load(d), toks, [np.asarray(t, dtype=np.float64).reshape(T, V) for t in truths]


def torch_nll(logits, toks):
    lg = torch.tensor(logits[:-1], dtype=torch.float64)
    return torch.nn.functional.cross_entropy(lg, torch.tensor(toks[1:]), reduction="none").numpy()


def test_loss_and_per_token_loss_match_torch(model):
    m, toks, truths = model
    logits = m(toks)
    assert logits.shape == (2, T, V)
    err = max(float(np.abs(logits[b] - truths[b]).max()) for b in range(2))
    tol = 2 * err + 1e-9
    per = m(toks, return_type="loss", loss_per_token=True)
    assert per.shape == (2, T - 1)
    ref = np.stack([torch_nll(truths[b], toks[b]) for b in range(2)])
    assert np.abs(per - ref).max() <= tol
    loss = m(toks, return_type="loss")
    assert isinstance(loss, float)
    assert abs(loss - ref.mean()) <= tol
    assert abs(m.loss(toks) - loss) == 0.0
    both_logits, both_loss = m(toks, return_type="both")
    np.testing.assert_array_equal(both_logits, logits)
    assert both_loss == loss
    assert m(toks, return_type=None) is None


def test_hooked_forwards_return_the_same_and_an_edit_changes_the_loss(model):
    m, toks, _ = model
    loss = m(toks, return_type="loss")
    assert m.run_with_hooks(toks, return_type="loss") == loss
    out, cache = m.run_with_cache(toks, names_filter="blocks.0.attn.hook_pattern",
                                  return_type="loss")
    # Layer 0 asked for its pattern: it runs the explicit kernel instead of the flash one, which
    # rounds differently (fp32, ~1e-6 relative on 40 tokens).
    assert abs(out - loss) <= 1e-5 * loss and "blocks.0.attn.hook_pattern" in cache

    def zero_first_key(pattern, hook):  # the mission's experiment: no attention on token 0
        pattern[:, :, 1:, 0] = 0.0
        pattern /= pattern.sum(-1, keepdims=True)
        return pattern
    edited = m.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_pattern", zero_first_key)],
                              return_type="loss")
    assert np.isfinite(edited) and edited != loss


def test_torch_tokens_give_torch_losses(model):
    m, toks, _ = model
    t = torch.tensor(toks)
    loss = m(t, return_type="loss")
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0
    per = m(t, return_type="loss", loss_per_token=True)
    assert isinstance(per, torch.Tensor) and tuple(per.shape) == (2, T - 1)
    assert abs(float(loss) - m(toks, return_type="loss")) == 0.0


def test_bad_calls_raise(model):
    m, toks, _ = model
    with pytest.raises(ValueError, match="return_type"):
        m(toks, return_type="probs")
    with pytest.raises(ValueError, match="return_type"):
        m.run_with_hooks(toks, return_type="logit")
    with pytest.raises(ValueError, match="at least 2 tokens"):
        m(toks[:, :1], return_type="loss")


# generate -------------------------------------------------------------------------------------

def naive_greedy(m, toks, n):
    """The greedy continuation by full forwards, no cache: argmax of the last row each time."""
    seq = list(toks)
    for _ in range(n):
        seq.append(int(np.argmax(m(np.array(seq))[0, -1])))
    return seq[len(toks):]


def test_generate_greedy_equals_full_forwards(model):
    m, toks, _ = model
    prompt = toks[0, :8]
    out = m.generate(prompt, max_new_tokens=12, do_sample=False, stop_at_eos=False)
    assert out.shape == (1, 20) and out.dtype == np.int64
    np.testing.assert_array_equal(out[0, :8], prompt)
    assert list(out[0, 8:]) == naive_greedy(m, list(prompt), 12)
    t = m.generate(torch.tensor(prompt), max_new_tokens=3, do_sample=False, stop_at_eos=False)
    assert isinstance(t, torch.Tensor) and list(t[0]) == list(out[0, :11])


def test_generate_text_seeds_and_the_sink_cache_past_the_context():
    m = attnlab.load()  # the embedded default model (RoPE, context 256, BOS first)
    a = m.generate("The jury said", max_new_tokens=15, seed=4)
    assert a.startswith("The jury said") and len(a) > len("The jury said")
    assert m.generate("The jury said", max_new_tokens=15, seed=4) == a
    greedy = m.generate("The jury said", max_new_tokens=10, temperature=0.0, return_type="tokens",
                        stop_at_eos=False)
    assert list(greedy[0, -10:]) == naive_greedy(m, list(greedy[0, :-10]), 10)
    long = m.generate("The jury said", max_new_tokens=400, policy="sink", sinks=4, window=64,
                      seed=1, return_type="tokens", stop_at_eos=False)
    assert long.shape[1] == m.to_tokens("The jury said").shape[1] + 400  # past the context
    with pytest.raises(ValueError, match="context of 256"):
        m.generate("The jury said", max_new_tokens=400)  # the dense cache cannot hold it


def test_generate_with_the_attention_scored_caches_past_the_context():
    """h2o, tova and snapkv (issue 38; docs/KV_POLICIES.md) bound the cache like sink does: generation
    runs past the context, seeded runs repeat, and a budget with nothing to choose from raises."""
    m = attnlab.load()  # the embedded default model (RoPE, context 256)
    for policy in ("h2o", "tova", "snapkv"):
        a = m.generate("The jury said", max_new_tokens=300, policy=policy, window=32, sinks=0,
                       seed=3, return_type="tokens", stop_at_eos=False)
        b = m.generate("The jury said", max_new_tokens=300, policy=policy, window=32, sinks=0,
                       seed=3, return_type="tokens", stop_at_eos=False)
        assert a.shape[1] == m.to_tokens("The jury said").shape[1] + 300
        assert (a == b).all()
        with pytest.raises(ValueError, match="something must be left to choose from"):
            m.generate("The jury said", max_new_tokens=5, policy=policy, window=4, sinks=4)


def test_generate_bad_requests_raise(model):
    m, toks, _ = model
    with pytest.raises(ValueError, match="evaluation baseline"):
        m.generate(toks[0, :4], policy="recompute")
    with pytest.raises(ValueError, match="unknown"):
        m.generate(toks[0, :4], policy="lru")
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        m.generate(toks[0, :4], max_new_tokens=0)
    with pytest.raises(ValueError, match="one prompt"):
        m.generate(toks[:, :4])
    with pytest.raises(ValueError, match="return_type"):
        m.generate(toks[0, :4], return_type="logits")
    with pytest.raises(ValueError, match="top-p"):
        m.generate(toks[0, :4], top_p=0.0)


# batches of prompts of different lengths -----------------------------------------------------

def check_batch_equals_one_at_a_time(m, prompts):
    """Right-padded batch vs each prompt alone: the same logits on every real position (up to the
    fp32 rounding of products tiled differently for another row count: 1e-5 of the largest
    logit), and the batch's loss is the token-weighted mean of the prompts' own losses."""
    tokens, mask = m.batch_tokens(prompts)
    logits = m(tokens, attention_mask=mask)
    lengths = mask.sum(1)
    total, count = 0.0, 0
    for i, p in enumerate(prompts):
        alone_tokens = tokens[i:i + 1, :lengths[i]]
        alone = m(alone_tokens)
        shift = alone.shape[1] - lengths[i]  # a dedicated sink token adds one position
        got = logits[i, :lengths[i] + shift]
        scale = np.abs(alone[0]).max()
        assert np.abs(got - alone[0]).max() <= 1e-5 * scale, i
        if lengths[i] >= 2:
            total += m(alone_tokens, return_type="loss") * (lengths[i] - 1)
            count += lengths[i] - 1
    per = m(tokens, attention_mask=mask, return_type="loss", loss_per_token=True)
    assert (per[mask[:, 1:] == 0] == 0).all()
    loss = m(tokens, attention_mask=mask, return_type="loss")
    assert abs(loss - total / count) <= 1e-5 * abs(loss)
    return tokens, mask


def test_a_batch_of_strings_equals_each_string_alone():
    m = attnlab.load()
    prompts = ["The jury said", "It was a bright cold day in April, and the clocks",
               "Hello", "A much longer prompt than the others, so that the shorter ones are "
               "padded by many tokens on the right."]
    tokens, mask = check_batch_equals_one_at_a_time(m, prompts)
    assert tokens.shape[0] == 4 and (tokens[mask == 0] == m.pad_token_id).all()
    # Strings straight into the forward: padded the same way.
    np.testing.assert_array_equal(m(prompts), m(tokens, attention_mask=mask))
    assert m(prompts, return_type="loss") == m(tokens, attention_mask=mask, return_type="loss")


def test_ragged_token_lists_on_gpt2_and_a_llama_layout(model, tmp_path):
    m, toks, _ = model
    check_batch_equals_one_at_a_time(m, [list(toks[0, :7]), list(toks[1, :T]), list(toks[0, :1])])
    import hf_decoder_torch_test as hf
    cfg = hf.base_cfg("llama")  # 4 query heads, 2 kv heads, RoPE
    hf.write_model(str(tmp_path), cfg, hf.make_weights(cfg, torch.Generator().manual_seed(3)),
                   "F32", 1)
    ll = attnlab.load(str(tmp_path))
    rng = np.random.default_rng(8)
    check_batch_equals_one_at_a_time(
        ll, [list(rng.integers(0, cfg["vocab_size"], n)) for n in (5, 23, 2, 17)])


def test_bad_batches_raise(model):
    m, toks, _ = model
    with pytest.raises(ValueError, match="right padding"):
        m(toks, attention_mask=np.array([[0] * T, [1] * T]))
    with pytest.raises(ValueError, match="right padding"):
        m(toks, attention_mask=np.array([[1, 0] + [1] * (T - 2), [1] * T]))
    with pytest.raises(ValueError, match="tokens' shape"):
        m(toks, attention_mask=np.ones((2, T - 1)))
    with pytest.raises(ValueError, match="0 \\(pad\\) and 1"):
        m(toks, attention_mask=np.full((2, T), 2))
    with pytest.raises(ValueError, match="padding_side"):
        m.batch_tokens([[1, 2], [3]], padding_side="left")
    with pytest.raises(ValueError, match="not with strings or ragged"):
        m([[1, 2], [3]], attention_mask=np.ones((2, 2)))
    with pytest.raises(ValueError, match="non-empty list"):
        m.batch_tokens([])
