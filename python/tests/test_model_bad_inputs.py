"""Bad input to attnlab.load and the model's methods raises ValueError / TypeError with the CLI's
message, never crashes the interpreter (docs/BAD_INPUTS.md, "Python")."""
import numpy as np
import pytest

import attnlab


@pytest.fixture(scope="module")
def model():
    return attnlab.load()


def test_load_missing_path(tmp_path):
    with pytest.raises(ValueError, match="no-such"):
        attnlab.load(str(tmp_path / "no-such"))


def test_load_not_a_model(tmp_path):
    p = tmp_path / "junk.safetensors"
    p.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(ValueError, match="junk.safetensors"):
        attnlab.load(str(p))


def test_token_out_of_vocabulary(model):
    with pytest.raises(ValueError, match=r"token 4353 at index 2 is outside the vocabulary \[0, 4353\)"):
        model([1, 2, 4353])
    with pytest.raises(ValueError, match="token -1 at index 0 is outside the vocabulary"):
        model(np.array([-1, 2]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(np.array([2 ** 40]))


def test_tokens_wrong_type_or_rank(model):
    with pytest.raises(TypeError, match="tokens must be integers, got float"):
        model(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="expected \\[pos\\] or \\[batch, pos\\], got 3 dimensions"):
        model(np.zeros((1, 1, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="at least one token"):
        model([])


def test_sequence_longer_than_the_context(model):
    n, ctx = model.cfg.n_ctx + 44, model.cfg.n_ctx
    with pytest.raises(ValueError, match=f"sequence of {n} tokens exceeds the model's context of {ctx}"):
        model(np.ones(n, dtype=np.int64))


def test_unknown_hook_names(model):
    with pytest.raises(ValueError, match="unknown hook name 'blocks.4.hook_resid_pre'"):
        model.run_with_cache([1, 2], names_filter="blocks.4.hook_resid_pre")
    with pytest.raises(ValueError, match="unknown hook name 'hook_pos_embed'"):  # RoPE model
        model.run_with_hooks([1, 2], fwd_hooks=[("hook_pos_embed", lambda x, hook: x)])
    with pytest.raises(ValueError, match="unknown activation name 'patern'"):
        attnlab.get_act_name("patern", 0)
    with pytest.raises(TypeError, match="names_filter"):
        model.run_with_cache([1, 2], names_filter=[3])


def test_hook_returning_garbage(model):
    with pytest.raises(ValueError, match="returned an array of shape"):
        model.run_with_hooks([1, 2, 3], fwd_hooks=[("blocks.0.attn.hook_pattern",
                                                    lambda x, hook: x[:, :, :2])])
    with pytest.raises(ValueError, match="not an array of numbers"):
        model.run_with_hooks([1, 2, 3], fwd_hooks=[("blocks.0.hook_resid_pre",
                                                    lambda x, hook: "a string")])


def test_text_inputs(model):
    with pytest.raises(TypeError, match="text must be str or bytes"):
        model.to_tokens(42)
    assert model.to_tokens(b"\xff\xfe bytes", prepend_bos=False).shape[1] > 0  # any bytes encode
    assert np.isfinite(model([1, 2, 3])).all()  # still usable after every error above
