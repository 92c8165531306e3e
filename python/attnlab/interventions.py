"""The common edits of interpretability work as one call each, built on ``run_with_hooks``
(docs/PYTHON.md, "Interventions"): ablate a head, mask the first key, patch activations from
another run, and the logit lens. Each returns what the forward returns (``return_type``).

The mission's first-token experiment is ``mask_first_key``: every query's attention on key 0 is
removed and the rest renormalised, which is exactly a softmax over the remaining visible keys
(a model configured with ``mask_first_key`` computes the same); a row that sees only key 0
(position 0 of a causal model) then attends to nothing and its head output is 0.
"""
import numpy as np


def _np(x):
    """A NumPy view of a hook's activation (a torch tensor with torch tokens shares its memory),
    so the edits below work in place for both."""
    return x if isinstance(x, np.ndarray) else x.numpy()


def _indices(values, n, what):
    """values (None: all of range(n), an int, or a list) as a list of ints in [0, n)."""
    out = list(range(n)) if values is None else ([values] if np.isscalar(values) else list(values))
    for v in out:
        if not (isinstance(v, (int, np.integer)) and 0 <= v < n):
            raise ValueError("%s %r is outside the model's %d %ss" % (what, v, n, what))
    return [int(v) for v in out]


def _layers(m, layers):
    return _indices(layers, m.cfg.n_layers, "layer")


def _heads(m, heads):
    return _indices(heads, m.cfg.n_heads, "head")


def ablate_head(m, tokens, layer, head, method="zero", on="z", **kw):
    """Ablates ``head`` (an int or a list) of ``layer``: on "z" (the head's output, before an
    output gate) by 0 ("zero") or by its mean over the batch and positions of this run ("mean");
    on "pattern" by a zero pattern ("zero": the same as z = 0) or by uniform attention over each
    query's visible keys ("mean"). kw: return_type, loss_per_token, attention_mask."""
    (layer,) = _layers(m, layer)
    heads = _heads(m, head)
    if method not in ("zero", "mean"):
        raise ValueError("method: expected 'zero' or 'mean', got %r" % (method,))
    if on == "z":
        def edit_z(z, hook):
            z = _np(z)
            for h in heads:
                z[:, :, h, :] = 0.0 if method == "zero" else z[:, :, h, :].mean(axis=(0, 1))
        hooks = [("blocks.%d.attn.hook_z" % layer, edit_z)]
    elif on == "pattern":
        seen = {}

        def keep_scores(s, hook):  # -inf where a key is invisible: the uniform pattern's support
            seen["visible"] = np.isfinite(_np(s))

        def edit_pattern(p, hook):
            p = _np(p)
            for h in heads:
                if method == "zero":
                    p[:, h] = 0.0
                else:
                    vis = seen["visible"][:, h].astype(p.dtype)
                    n = vis.sum(axis=-1, keepdims=True)
                    p[:, h] = np.where(n > 0, vis / np.maximum(n, 1), 0.0)
        hooks = [("blocks.%d.attn.hook_attn_scores" % layer, keep_scores),
                 ("blocks.%d.attn.hook_pattern" % layer, edit_pattern)]
    else:
        raise ValueError("on: expected 'z' or 'pattern', got %r" % (on,))
    return m.run_with_hooks(tokens, fwd_hooks=hooks, **kw)


def mask_first_key(m, tokens, layers=None, heads=None, **kw):
    """The forward with key 0 removed from the attention of ``heads`` (None: all) in ``layers``
    (None: all): P[i, 0] = 0 and each row renormalised over its other keys (rows with nothing
    left attend to nothing). A dedicated sink token, if the model has one, is key 0."""
    heads = _heads(m, heads)

    def edit(p, hook):
        p = _np(p)
        sub = p[:, heads]
        sub[..., 0] = 0.0
        total = sub.sum(axis=-1, keepdims=True)
        p[:, heads] = np.where(total > 0, sub / np.where(total > 0, total, 1.0), 0.0)
    hooks = [("blocks.%d.attn.hook_pattern" % l, edit) for l in _layers(m, layers)]
    return m.run_with_hooks(tokens, fwd_hooks=hooks, **kw)


def patch(m, tokens, source, names, positions=None, heads=None, **kw):
    """Activation patching: the forward of ``tokens`` with each activation in ``names`` (a hook
    name or a list) replaced by the same activation of another run, ``source`` (an
    ActivationCache from run_with_cache, or a dict name -> array of the same shape). Only
    ``positions`` (None: all; on the position axis) and, for per-head activations
    (hook_q/k/v/z [B, P, H, d] and hook_pattern/scores [B, H, P, P]), only ``heads`` (None: all)
    are patched."""
    names = [names] if isinstance(names, str) else list(names)
    known = set(m.hook_names())
    for n in names:
        if n not in known:
            raise ValueError("unknown hook name '%s' for this model" % n)
        if n not in source:
            raise ValueError("patch: the source has no activation '%s' (run_with_cache with it)" % n)

    def edit(act, hook):
        act = _np(act)
        src = np.asarray(source[hook.name].detach().cpu().numpy()
                         if hasattr(source[hook.name], "detach") else source[hook.name])
        if src.shape != act.shape:
            raise ValueError("patch: source activation %s has shape %s, this run's is %s"
                             % (hook.name, src.shape, tuple(act.shape)))
        index = [slice(None)] * act.ndim
        per_head_first = hook.name.endswith(("hook_pattern", "hook_attn_scores", "hook_lse",
                                             "hook_first_token_mass", "hook_entropy"))
        per_head_third = hook.name.endswith(("hook_q", "hook_k", "hook_v", "hook_z",
                                             "hook_rot_q", "hook_rot_k"))
        pos_axis = 2 if per_head_first else 1
        if positions is not None:
            index[pos_axis] = np.asarray(positions if not np.isscalar(positions) else [positions])
        if heads is not None and (per_head_first or per_head_third):
            index[1 if per_head_first else 2] = np.asarray(heads if not np.isscalar(heads) else [heads])
        if positions is not None and heads is not None and (per_head_first or per_head_third):
            index = tuple(np.ix_(*[np.arange(s) if isinstance(i, slice) else i
                                   for s, i in zip(act.shape, index)]))
        else:
            index = tuple(index)
        act[index] = src[index]
    return m.run_with_hooks(tokens, fwd_hooks=[(n, edit) for n in names], **kw)


def logit_lens(m, tokens, layers=None, **kw):
    """The logit lens (nostalgebraist 2020): each layer's residual stream after the layer
    (resid_post) read out through the model's final norm and unembedding, as if the later layers
    were skipped. Returns {layer: logits [batch, pos, vocab]} (or what return_type asks for):
    the last layer's output is replaced by layer l's in a second forward, so the final norm and
    head are the model's own."""
    layers = _layers(m, layers)
    names = ["blocks.%d.hook_resid_post" % l for l in layers]
    _, cache = m.run_with_cache(tokens, names_filter=names, return_type=None,
                                attention_mask=kw.get("attention_mask"))
    last = "blocks.%d.hook_resid_post" % (m.cfg.n_layers - 1)
    out = {}
    for l, n in zip(layers, names):
        src = cache[n]

        def replace(x, hook, src=src):
            return src
        out[l] = m.run_with_hooks(tokens, fwd_hooks=[(last, replace)], **kw)
    return out
