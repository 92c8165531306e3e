"""Models with TransformerLens-style hooks: ``attnlab.load(path)`` (docs/PYTHON.md).

Hook names and shapes follow TransformerLens' HookedTransformer (``blocks.{i}.attn.hook_pattern``
is [batch, head, query_pos, key_pos], ``blocks.{i}.attn.hook_q`` [batch, pos, head, d_head], ...);
``Model.hook_names()`` lists a model's. attnlab adds per-row statistics that need no N x N map:
``blocks.{i}.attn.hook_lse``, ``hook_first_token_mass`` and ``hook_entropy``, each
[batch, head, query_pos]. Patterns and scores are computed only for the layers asked for; the
other layers run the flash kernel.
"""
import json

import numpy as np

from . import _attnlab

# TransformerLens' short names (utils.get_act_name) -> the name after "blocks.{i}.".
_SHORT = {
    "resid_pre": "hook_resid_pre", "resid_mid": "hook_resid_mid",
    "resid_post": "hook_resid_post", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
    "q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v", "z": "attn.hook_z",
    "rot_q": "attn.hook_rot_q", "rot_k": "attn.hook_rot_k",
    "pattern": "attn.hook_pattern", "attn": "attn.hook_pattern",
    "attn_scores": "attn.hook_attn_scores", "scores": "attn.hook_attn_scores",
    "lse": "attn.hook_lse", "first_token_mass": "attn.hook_first_token_mass",
    "entropy": "attn.hook_entropy",
}
_GLOBAL = {"embed": "hook_embed", "pos_embed": "hook_pos_embed",
           "ln_final": "ln_final.hook_normalized", "normalized": "ln_final.hook_normalized"}


def get_act_name(name, layer=None):
    """TransformerLens' get_act_name: ("pattern", 3) -> "blocks.3.attn.hook_pattern"."""
    if layer is None:
        if name in _GLOBAL:
            return _GLOBAL[name]
        return name
    if name not in _SHORT:
        raise ValueError("unknown activation name %r (known: %s)" % (name, ", ".join(sorted(_SHORT))))
    return "blocks.%d.%s" % (int(layer), _SHORT[name])


class ActivationCache(dict):
    """The activations of one forward by hook name; ``cache["pattern", 3]`` works too."""

    def __getitem__(self, key):
        if isinstance(key, tuple):
            key = get_act_name(*key)
        elif key in _GLOBAL:
            key = _GLOBAL[key]
        return super().__getitem__(key)

    def __contains__(self, key):
        if isinstance(key, tuple):
            key = get_act_name(*key)
        return super().__contains__(key)


class HookPoint:
    """What a hook function receives as ``hook`` (TransformerLens passes its HookPoint)."""

    def __init__(self, name):
        self.name = name

    def layer(self):
        parts = self.name.split(".")
        return int(parts[1]) if parts[0] == "blocks" else None

    def __repr__(self):
        return "HookPoint(%r)" % self.name


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _to_token_array(tokens):
    """tokens (list, NumPy or torch, [pos] or [batch, pos], integers) -> int32 [batch, pos]."""
    if _is_torch(tokens):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.size == 0:
        raise ValueError("tokens: expected at least one token")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError("tokens must be integers, got %s" % arr.dtype)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError("tokens: expected [pos] or [batch, pos], got %d dimensions" % arr.ndim)
    bad = (arr < 0) | (arr > np.iinfo(np.int32).max)
    if bad.any():
        i = int(np.flatnonzero(bad.ravel())[0])
        raise ValueError("token %d at index %d is outside the vocabulary" % (int(arr.ravel()[i]), i))
    return np.ascontiguousarray(arr, dtype=np.int32)


class Model:
    """A model attnlab opened (checkpoint, Hugging Face folder, GGUF, GPT-2 safetensors, llm.c)."""

    def __init__(self, impl):
        self._m = impl
        c = json.loads(impl.config_json)
        self.config = c
        n_head = int(c["n_head"])
        d_head = int(c.get("head_size") or 0) or int(c["d_model"]) // n_head
        # TransformerLens' cfg names, for code written against it.
        self.cfg = type("Config", (), dict(
            n_layers=int(c["n_layer"]), n_heads=n_head, d_model=int(c["d_model"]), d_head=d_head,
            d_vocab=int(c["vocab_size"]), n_ctx=int(c["context"]),
            n_key_value_heads=int(c.get("n_kv_head") or 0) or n_head))()
        self.path = impl.path
        self.format = impl.format

    def __repr__(self):
        return "attnlab.Model(%r, %s, %d layers, %d heads, d_model %d)" % (
            self.path, self.format, self.cfg.n_layers, self.cfg.n_heads, self.cfg.d_model)

    # Tokens --------------------------------------------------------------------------------
    def to_tokens(self, text, prepend_bos=None, padding_side="right"):
        """[1, pos] int64 token ids of ``text``; BOS first when the model was trained with it
        (``prepend_bos=None``) or when asked. A list of strings gives [batch, longest], each row
        padded on the right with ``pad_token_id`` (``attention_mask(tokens)``... see
        ``batch_tokens`` for the mask)."""
        if isinstance(text, (list, tuple)):
            return self.batch_tokens(text, prepend_bos, padding_side)[0]
        if isinstance(text, str):
            text = text.encode("utf-8")
        if not isinstance(text, (bytes, bytearray)):
            raise TypeError("to_tokens: text must be str or bytes, got %s" % type(text).__name__)
        ids = self._m.encode(bytes(text)).astype(np.int64)
        if prepend_bos is None:
            prepend_bos = self._m.trained_with_bos
        if prepend_bos:
            bos = self._m.bos_id
            if bos is None:
                raise ValueError("prepend_bos: this model's tokenizer has no BOS token")
            ids = np.concatenate([[bos], ids]).astype(np.int64)
        return ids[None, :]

    @property
    def pad_token_id(self):
        """The id right padding uses: the end-of-text token, else BOS, else 0 (its logits and
        the positions it fills are masked out; its value never reaches a real position)."""
        for t in (self._m.eos_id, self._m.bos_id):
            if t is not None:
                return int(t)
        return 0

    def batch_tokens(self, texts, prepend_bos=None, padding_side="right"):
        """(tokens [batch, longest] int64, attention_mask [batch, longest] int64, 1 = a real
        token) for a list of strings or of token sequences of different lengths, right-padded.

        Right padding is exact for a causal model: a pad token comes after every real token of
        its row, so no real position attends to it, and each prompt's logits equal those of a
        forward of that prompt alone (tested). Left padding would shift the positions and needs
        a mask on the keys: refused."""
        if padding_side != "right":
            raise ValueError("padding_side: only 'right' is supported (exact for causal models: "
                             "pads come after every real token), got %r" % (padding_side,))
        if not isinstance(texts, (list, tuple)) or len(texts) == 0:
            raise ValueError("batch_tokens: expected a non-empty list of strings or token lists")
        rows = []
        for t in texts:
            if isinstance(t, (str, bytes)):
                rows.append(self.to_tokens(t, prepend_bos=prepend_bos)[0])
            else:
                rows.append(_to_token_array(t)[0] if np.ndim(t) <= 1 else _bad_row(t))
        longest = max(len(r) for r in rows)
        tokens = np.full((len(rows), longest), self.pad_token_id, dtype=np.int64)
        mask = np.zeros((len(rows), longest), dtype=np.int64)
        for i, r in enumerate(rows):
            if len(r) == 0:
                raise ValueError("batch_tokens: prompt %d has no tokens" % i)
            tokens[i, :len(r)] = r
            mask[i, :len(r)] = 1
        return tokens, mask

    def to_string(self, tokens):
        """The text of ``tokens`` ([pos] -> a string; [batch, pos] -> a list of strings)."""
        one = (tokens.dim() if _is_torch(tokens) else np.ndim(tokens)) == 1
        texts = [self._m.decode(row).decode("utf-8", errors="replace")
                 for row in _to_token_array(tokens)]
        return texts[0] if one else texts

    def to_str_tokens(self, text_or_tokens):
        """Each token's text, as a list of strings."""
        toks = self.to_tokens(text_or_tokens) if isinstance(text_or_tokens, (str, bytes)) \
            else _to_token_array(text_or_tokens)
        return [self._m.decode(np.array([t], dtype=np.int32)).decode("utf-8", errors="replace")
                for t in toks[0]]

    def hook_names(self):
        """Every hook name of this model, in forward order."""
        return list(self._m.hook_names())

    # Forwards ------------------------------------------------------------------------------
    def __call__(self, tokens, return_type="logits", loss_per_token=False, attention_mask=None):
        """TransformerLens' forward: ``return_type`` "logits" (default; [batch, pos, vocab], pos
        including a dedicated sink token if the model has one), "loss" (mean next-token cross
        entropy in nats; with ``loss_per_token=True`` [batch, pos - 1]), "both" ((logits, loss))
        or None (nothing).

        tokens: ids ([pos] or [batch, pos]), a string, or a list of strings or token lists of
        different lengths (one batch, right-padded: see batch_tokens). ``attention_mask``
        [batch, pos] (1 = real) marks right padding of a token array. Padded positions'
        logits are computed but mean nothing; the loss leaves out every prediction of or from a
        pad (per token: 0 there)."""
        _check_return_type(return_type)
        arr, mask = self._prepare(tokens, attention_mask)
        logits = self._m.forward(arr)
        return self._returned(logits, arr, tokens, return_type, loss_per_token, mask)

    def loss(self, tokens, per_token=False, attention_mask=None):
        """The next-token cross entropy of ``tokens`` (nats): the mean, or [batch, pos - 1]."""
        return self(tokens, return_type="loss", loss_per_token=per_token,
                    attention_mask=attention_mask)

    def run_with_cache(self, tokens, names_filter=None, remove_batch_dim=False,
                       return_type="logits", loss_per_token=False, attention_mask=None):
        """(output, cache): the activations named by ``names_filter`` (None: all; a name, a list
        of names, or a predicate on names); output as ``return_type`` says (see __call__)."""
        _check_return_type(return_type)
        names = self._select(names_filter)
        cache = ActivationCache()
        torch_out = _is_torch(tokens)

        def record(name, arr):
            val = arr[0] if remove_batch_dim else arr
            cache[name] = self._convert(val, torch_out)
            return None
        arr, mask = self._prepare(tokens, attention_mask)
        logits = self._m.forward_hooked(arr, names, record)
        return self._returned(logits, arr, tokens, return_type, loss_per_token, mask), cache

    def run_with_hooks(self, tokens, fwd_hooks=(), return_type="logits", loss_per_token=False,
                       attention_mask=None):
        """The output (``return_type``, see __call__) of a forward in which each
        ``(name or predicate, fn)`` of ``fwd_hooks`` sees its activations as
        ``fn(activation, hook=HookPoint)``; fn may change the activation in place or return a
        replacement of the same shape."""
        _check_return_type(return_type)
        by_name = {}
        all_names = self.hook_names()
        for entry in fwd_hooks:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2 and callable(entry[1])):
                raise TypeError("fwd_hooks: expected (name or predicate, function) pairs")
            sel, fn = entry
            for n in self._select(sel, all_names):
                by_name.setdefault(n, []).append(fn)
        torch_out = _is_torch(tokens)

        def dispatch(name, arr):
            val = self._convert(arr, torch_out)
            hook = HookPoint(name)
            for fn in by_name.get(name, ()):
                ret = fn(val, hook=hook)
                if ret is not None:
                    val = ret
            if val is arr or (torch_out and val.data_ptr() == arr.ctypes.data):
                return None  # edited in place (or not at all): the C++ side copies arr back
            try:
                if _is_torch(val):
                    val = val.detach().cpu().numpy()
                return np.ascontiguousarray(val, dtype=np.float32)
            except (TypeError, ValueError) as e:
                raise ValueError("hook %s returned something that is not an array of numbers "
                                 "(%s)" % (name, e)) from None
        arr, mask = self._prepare(tokens, attention_mask)
        logits = self._m.forward_hooked(arr, list(by_name), dispatch)
        return self._returned(logits, arr, tokens, return_type, loss_per_token, mask)

    # Interventions (attnlab/interventions.py) -----------------------------------------------
    def ablate_head(self, tokens, layer, head, method="zero", on="z", **kw):
        """See interventions.ablate_head."""
        from . import interventions
        return interventions.ablate_head(self, tokens, layer, head, method, on, **kw)

    def mask_first_key(self, tokens, layers=None, heads=None, **kw):
        """See interventions.mask_first_key."""
        from . import interventions
        return interventions.mask_first_key(self, tokens, layers, heads, **kw)

    def patch(self, tokens, source, names, positions=None, heads=None, **kw):
        """See interventions.patch."""
        from . import interventions
        return interventions.patch(self, tokens, source, names, positions, heads, **kw)

    def logit_lens(self, tokens, layers=None, **kw):
        """See interventions.logit_lens."""
        from . import interventions
        return interventions.logit_lens(self, tokens, layers, **kw)

    # Generation ----------------------------------------------------------------------------
    def generate(self, input="", max_new_tokens=10, temperature=1.0, top_k=None, top_p=None,
                 seed=None, do_sample=True, stop_at_eos=True, eos_token_id=None, policy="dense",
                 sinks=None, window=None, prepend_bos=None, return_type="input"):
        """Samples a continuation of one prompt (TransformerLens' generate, on attnlab's caches).

        input: a string (tokenized with BOS as the model was trained, or per ``prepend_bos``) or
        tokens ([pos] or [1, pos]). ``do_sample=False`` or ``temperature=0`` is greedy; else
        temperature, ``top_k`` (None: all) and ``top_p`` (None: 1) sample with ``seed`` (None: a
        fresh random seed; an int makes it reproducible). Stops after ``max_new_tokens`` or at
        the end-of-text token (``stop_at_eos``; ``eos_token_id`` overrides the tokenizer's).
        ``policy``: "dense" (every token; prompt + new tokens must fit the context), "window" or
        "sink" (StreamingLLM: ``sinks`` pinned first tokens, default 4, plus the most recent,
        ``window`` tokens in all, default the context; no length limit), "h2o", "tova" or "snapkv"
        (keep the tokens that receive the most attention, at most ``window`` keys per query, ``sinks``
        of them pinned, default 0; docs/KV_POLICIES.md). return_type: "input" (a string for
        a string, else tokens), "str" (prompt text + continuation) or "tokens" ([1, pos + new],
        torch for torch input).
        """
        if return_type not in ("input", "str", "tokens"):
            raise ValueError("return_type: expected 'input', 'str' or 'tokens', got %r" % (return_type,))
        if isinstance(input, (str, bytes)):
            text = input.decode("utf-8") if isinstance(input, bytes) else input
            toks = self.to_tokens(text, prepend_bos=prepend_bos)
            if toks.shape[1] == 0:
                raise ValueError("generate: the prompt is empty and this tokenizer has no BOS token")
        else:
            text = None
            toks = _to_token_array(input)
        if toks.shape[0] != 1:
            raise ValueError("generate: expected one prompt, got a batch of %d" % toks.shape[0])
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % (2 ** 63))
        eos = None
        if stop_at_eos:
            eos = eos_token_id if eos_token_id is not None else self._m.eos_id
        new = self._m.generate(
            np.ascontiguousarray(toks[0], dtype=np.int32), int(max_new_tokens),
            float(temperature) if do_sample else 0.0, int(top_k or 0),
            1.0 if top_p is None else float(top_p), int(seed), str(policy),
            int(sinks) if sinks is not None else (0 if policy in ("h2o", "tova", "snapkv") else 4),
            int(window or 0), None if eos is None else int(eos))
        if return_type == "str" or (return_type == "input" and text is not None):
            prompt_text = text if text is not None else self.to_string(toks[0])
            return prompt_text + self.to_string(new)
        out = np.concatenate([toks[0].astype(np.int64), new.astype(np.int64)])[None, :]
        if _is_torch(input):
            import torch
            return torch.from_numpy(out)
        return out

    # Helpers -------------------------------------------------------------------------------
    def _select(self, names_filter, all_names=None):
        all_names = all_names if all_names is not None else self.hook_names()
        if names_filter is None:
            return list(all_names)
        if callable(names_filter):
            return [n for n in all_names if names_filter(n)]
        if isinstance(names_filter, str):
            names_filter = [names_filter]
        known = set(all_names)
        out = []
        for n in names_filter:
            if not isinstance(n, str):
                raise TypeError("names_filter: expected hook names (str), got %s" % type(n).__name__)
            if n not in known:
                raise ValueError("unknown hook name '%s' for this model (%d layers; "
                                 "Model.hook_names() lists them)" % (n, self.cfg.n_layers))
            out.append(n)
        return out

    @staticmethod
    def _convert(arr, torch_out):
        if torch_out:
            import torch
            return torch.from_numpy(arr)
        return arr

    def _out(self, logits, tokens):
        return self._convert(logits, _is_torch(tokens))

    def _prepare(self, tokens, attention_mask):
        """(int32 [batch, pos] ids, int64 mask or None) for a forward. Strings and ragged lists
        are tokenized and right-padded; an attention_mask must be right padding of `tokens`."""
        if isinstance(tokens, (str, bytes)):
            tokens = [tokens]
        if isinstance(tokens, (list, tuple)) and len(tokens) > 0 and (
                isinstance(tokens[0], (str, bytes)) or
                len({np.size(t) if np.ndim(t) == 1 else -1 for t in tokens}) > 1):
            if attention_mask is not None:
                raise ValueError("attention_mask: give it with a padded token array, not with "
                                 "strings or ragged lists (those are padded for you)")
            arr, mask = self.batch_tokens(list(tokens))
        else:
            arr = _to_token_array(tokens)
            mask = None
            if attention_mask is not None:
                mask = _check_mask(attention_mask, arr.shape)
        if mask is not None and not mask.all() and not bool(self.config.get("causal", True)):
            raise ValueError("padding needs a causal model (this one attends both ways, so its "
                             "real tokens would see the pads): run the prompts one at a time")
        return np.ascontiguousarray(arr, dtype=np.int32), mask

    def _returned(self, logits, arr, tokens, return_type, loss_per_token, mask=None):
        """What a forward returns for ``return_type`` (checked by _check_return_type)."""
        if return_type is None:
            return None
        torch_out = _is_torch(tokens)
        out_logits = self._convert(logits, torch_out) if return_type in ("logits", "both") else None
        if return_type == "logits":
            return out_logits
        loss = _next_token_loss(logits, arr, loss_per_token, mask)
        if torch_out:
            import torch
            loss = torch.tensor(loss, dtype=torch.float64)
        return loss if return_type == "loss" else (out_logits, loss)


_RETURN_TYPES = ("logits", "loss", "both", None)


def _check_return_type(return_type):
    if return_type not in _RETURN_TYPES:
        raise ValueError("return_type: expected 'logits', 'loss', 'both' or None, got %r"
                         % (return_type,))


def _bad_row(t):
    raise ValueError("batch_tokens: each prompt must be a string or a 1-D token list, got %d "
                     "dimensions" % np.ndim(t))


def _check_mask(attention_mask, shape):
    """attention_mask -> int64 [batch, pos]: 0/1, the same shape as the tokens, each row ones
    then zeros (right padding) with at least one real token."""
    if _is_torch(attention_mask):
        attention_mask = attention_mask.detach().cpu().numpy()
    m = np.asarray(attention_mask)
    if m.ndim == 1:
        m = m[None, :]
    if tuple(m.shape) != tuple(shape):
        raise ValueError("attention_mask: expected the tokens' shape %s, got %s"
                         % (list(shape), list(m.shape)))
    if not np.isin(m, (0, 1)).all():
        raise ValueError("attention_mask: expected 0 (pad) and 1 (real token) only")
    m = m.astype(np.int64)
    lengths = m.sum(axis=1)
    for i, n in enumerate(lengths):
        if n == 0 or not (m[i, :n] == 1).all():
            raise ValueError("attention_mask: row %d is not right padding (ones, then zeros, at "
                             "least one one); only right padding is supported" % i)
    return m


def _next_token_loss(logits, tokens, per_token, mask=None):
    """TransformerLens' lm_cross_entropy_loss: position t's logits predict token t + 1, in
    float64 (log-sum-exp with the row maximum subtracted). logits [batch, pos(+1), vocab]: a
    model with a dedicated sink token has one more position, its first, which predicts nothing.
    mask: right padding (1 = real): predictions of a pad are left out (0 per token).
    Returns the mean over the valid [batch, pos - 1] or, per_token, that array."""
    batch, pos = tokens.shape
    if logits.shape[1] == pos + 1:
        logits = logits[:, 1:]
    if pos < 2:
        raise ValueError("loss: needs at least 2 tokens per sequence (position t predicts t + 1), "
                         "got %d" % pos)
    lg = logits[:, :-1].astype(np.float64)
    m = lg.max(axis=-1, keepdims=True)
    lse = m[..., 0] + np.log(np.exp(lg - m).sum(axis=-1))
    target = np.take_along_axis(lg, tokens[:, 1:, None].astype(np.int64), axis=-1)[..., 0]
    nll = lse - target
    if mask is None:
        return nll if per_token else float(nll.mean())
    valid = (mask[:, 1:] == 1)  # right padding: a real target implies a real input
    nll = np.where(valid, nll, 0.0)
    return nll if per_token else float(nll.sum() / valid.sum())


def load(path=None, tokenizer=None):
    """Opens a model: an attnlab checkpoint directory, a Hugging Face folder (llama, mistral,
    qwen2, qwen3, gpt_neox, gpt2), a GPT-2 .safetensors file, a llama.cpp .gguf file or llm.c's
    .bin; no path: the embedded default model."""
    return Model(_attnlab.Model.load(path or "", tokenizer or ""))
