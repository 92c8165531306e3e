"""An interactive, self-contained HTML view of a run's attention (docs/PYTHON.md, "Attention
views"): pick a layer and a head, hover a token to see what it attends to (its strongest keys,
shaded by weight) and what attends to it (the queries whose strongest keys include it, outlined
by weight). The first-token column, P[i, 0] for every query i, is drawn for the chosen head
under the tokens, and a block overview shows the whole map at any length.

The page and its data come from the C++ builder that ``attnlab analyze`` uses for its
attention.html (src/report/attention_view.h; the template is src/report/attention_view.html), so
the two are the same page. No N x N table ever goes into it: per head it carries, for every
query, its ``top_k`` strongest keys and their weights (N x top_k), the first-token column (N),
and the map averaged over blocks of ceil(N / 64) x ceil(N / 64) tokens (at most 64 x 64). Tokens
are shown in pages of ``page`` tokens; the block overview picks the page.

Opened with the fragment ``#selftest`` the page hovers a token itself, checks that the highlight
changed, and writes the outcome (and any error the page raised or logged) into
``<body data-selftest=...>``: what the headless-Chromium test reads
(python/tests/test_attention_view.py).
"""
import json

import numpy as np

from . import _attnlab


def _to_numpy(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _builder(patterns, str_tokens, top_k):
    """The C++ builder with every layer of patterns {layer: [heads, P, P]} added."""
    layers = sorted(patterns)
    if not layers:
        raise ValueError("show_attention: no attention patterns (run_with_cache with hook_pattern)")
    first = _to_numpy(patterns[layers[0]])
    if first.ndim != 3 or first.shape[1] != first.shape[2]:
        raise ValueError("show_attention: a pattern must be [heads, pos, pos], got shape %s"
                         % (list(first.shape),))
    if len(str_tokens) != first.shape[1]:
        raise ValueError("show_attention: %d token texts for patterns of %d positions"
                         % (len(str_tokens), first.shape[1]))
    view = _attnlab.AttentionView([str(t) for t in str_tokens], int(first.shape[0]), int(top_k))
    for l in layers:
        p = _to_numpy(patterns[l])
        if p.shape != first.shape:
            raise ValueError("show_attention: layer %d's pattern has shape %s, layer %d's %s"
                             % (l, list(p.shape), layers[0], list(first.shape)))
        view.add_layer(int(l), p)  # raises ValueError for a pattern that is not finite
    return view


def attention_view_data(patterns, str_tokens, top_k=8):
    """The page's data from patterns {layer: [heads, P, P]} (one sequence) and the P tokens'
    texts, as a dict: per layer and head the top_k keys per query (ids uint16, or uint32 past
    65536 tokens, and weights uint8 / 255, base64), the first-token column and the block means.
    Deterministic (ties: the lower key)."""
    return json.loads(_builder(patterns, str_tokens, top_k).data_json())


def show_attention(cache, tokens, model=None, layers=None, batch=0, top_k=8, page=256,
                   title="attnlab attention view", path=None):
    """The view of ``cache``'s attention patterns (run_with_cache with the layers'
    ``hook_pattern``) for sequence ``batch``: returns the page as a string, and writes it to
    ``path`` if given. tokens: the token texts (``m.to_str_tokens``), or ids with ``model`` to
    decode them. layers: those to include (None: every layer the cache has a pattern for)."""
    pats = {}
    for name in list(cache.keys()):
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blocks" and parts[3] == "hook_pattern":
            l = int(parts[1])
            if layers is None or l in (layers if not np.isscalar(layers) else [layers]):
                a = _to_numpy(cache[name])
                if a.ndim != 4:
                    raise ValueError("show_attention: %s must be [batch, heads, pos, pos], got %s"
                                     % (name, list(a.shape)))
                if not 0 <= batch < a.shape[0]:
                    raise ValueError("show_attention: batch %d of %d" % (batch, a.shape[0]))
                pats[l] = a[batch]
    if not pats:
        raise ValueError("show_attention: the cache has no hook_pattern for the layers asked "
                         "(run_with_cache(tokens, names_filter=lambda n: n.endswith('hook_pattern')))")
    if isinstance(tokens, (list, tuple)) and tokens and isinstance(tokens[0], str):
        texts = list(tokens)
    else:
        if model is None:
            raise ValueError("show_attention: pass the token texts (m.to_str_tokens(...)) or "
                             "model= to decode ids")
        arr = _to_numpy(tokens)
        arr = arr[batch] if arr.ndim == 2 else arr
        texts = model.to_str_tokens(arr[None, :])
        n = next(iter(pats.values())).shape[-1]
        if len(texts) == n - 1:  # a dedicated sink token is position 0
            texts = ["<sink>"] + texts
    if int(page) < 16:
        raise ValueError("show_attention: page must be >= 16 tokens, got %r" % (page,))
    page_html = _builder(pats, texts, top_k).render(title, int(page))
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page_html)
    return page_html
