"""The engine from Python: exact attention (every mask and softmax variant of
include/attnlab/attention.h) on NumPy arrays and CPU torch tensors, read in place."""
import operator
import sys

from . import _attnlab

__all__ = ["attention", "attention_backward", "set_num_threads", "num_threads", "simd_target"]

set_num_threads = _attnlab.set_num_threads
num_threads = _attnlab.num_threads
simd_target = _attnlab.simd_target


def _is_tensor(x):
    # torch is never imported here: if it is not loaded, x cannot be a tensor.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _as_array(x, name):
    """x itself, or a CPU torch tensor as the NumPy array sharing its memory."""
    if not _is_tensor(x):
        return x
    try:
        return (x.detach() if x.requires_grad else x).numpy()
    except (TypeError, RuntimeError):  # another device, or a dtype NumPy lacks (bfloat16)
        if x.device.type != "cpu":
            raise TypeError(f"{name} must be a CPU tensor, got device {x.device}") from None
        want = "bool or uint8" if name == "mask" else "float32 or float64"
        raise TypeError(f"{name} must be {want}, got {x.dtype}") from None


def _window(window):
    """(left, right) with -1 for an unbounded side, from None or a (left, right) pair."""
    if window is None:
        return -1, -1
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise ValueError(f"window must be None or a (left, right) pair, got {window!r}")
    sides = []
    for side, w in zip(("left", "right"), window):
        if w is None:
            sides.append(-1)
            continue
        w = operator.index(w)
        if w < 0:
            raise ValueError(f"window {side} must be >= 0 (None for an unbounded side), got {w}")
        sides.append(w)
    return sides[0], sides[1]


def _kernel_kwargs(causal, window, sinks, n_global, mask, mask_first_key, softmax, sink_logits,
                   sigmoid_bias, scale, kernel):
    """The keyword arguments of _attnlab._attention_forward / _attention_backward."""
    left, right = _window(window)
    return dict(causal=causal, window_left=left, window_right=right, sinks=sinks,
                n_global=n_global, mask=None if mask is None else _as_array(mask, "mask"),
                mask_first_key=mask_first_key, softmax=softmax,
                sink_logits=None if sink_logits is None else _as_array(sink_logits, "sink_logits"),
                sigmoid_bias=sigmoid_bias, scale=scale, kernel=kernel)


def _like(result, torch_out):
    if not torch_out:
        return result
    from_numpy = sys.modules["torch"].from_numpy
    if isinstance(result, tuple):
        return tuple(from_numpy(r) for r in result)
    return from_numpy(result)


def attention(q, k, v, *, causal=False, window=None, sinks=0, n_global=0, mask=None,
              mask_first_key=False, softmax="standard", sink_logits=None, sigmoid_bias=0.0,
              scale=None, return_lse=False, kernel="flash"):
    """Exact attention, semantics of include/attnlab/attention.h.

    q [batch, heads_q, len_q, head_dim], k and v [batch, heads_kv, len_k, head_dim]: C-contiguous
    float32 (read in place, no copy), or float64 (the double-precision reference, whatever
    `kernel`). NumPy arrays or CPU torch tensors; the result has q's kind.
    window: None or (left, right), None for an unbounded side. sinks, n_global: leading keys /
    positions. mask: bool or uint8, [len_q, len_k] or [batch|1, heads_q|1, len_q, len_k].
    softmax: "standard", "softmax1", "sink" (needs sink_logits [heads_q]), "sigmoid" (with
    sigmoid_bias) or "softpick" (relu(e^s - 1) / (sum |e^s - 1| + 1e-6), Zuhri et al. 2025).
    scale: default 1/sqrt(head_dim). kernel: "flash" or "reference".
    Returns out, or (out, lse [batch, heads_q, len_q]) with return_lse.
    """
    result = _attnlab._attention_forward(
        _as_array(q, "q"), _as_array(k, "k"), _as_array(v, "v"), return_lse=return_lse,
        **_kernel_kwargs(causal, window, sinks, n_global, mask, mask_first_key, softmax,
                         sink_logits, sigmoid_bias, scale, kernel))
    return _like(result, _is_tensor(q))


def attention_backward(q, k, v, out, lse, dout, *, causal=False, window=None, sinks=0,
                       n_global=0, mask=None, mask_first_key=False, softmax="standard",
                       sink_logits=None, sigmoid_bias=0.0, scale=None, kernel="flash"):
    """Gradients of attention(q, k, v, ...) for the upstream gradient dout (shaped like q).

    out and lse are the forward's (attention(..., return_lse=True)); the flash kernel needs
    them, the reference kernel and float64 inputs ignore them (None is fine there).
    Returns (dq, dk, dv), plus d_sink_logits [heads_q] for softmax="sink".
    """
    result = _attnlab._attention_backward(
        _as_array(q, "q"), _as_array(k, "k"), _as_array(v, "v"),
        None if out is None else _as_array(out, "out"),
        None if lse is None else _as_array(lse, "lse"), _as_array(dout, "dout"),
        **_kernel_kwargs(causal, window, sinks, n_global, mask, mask_first_key, softmax,
                         sink_logits, sigmoid_bias, scale, kernel))
    return _like(result, _is_tensor(q))
