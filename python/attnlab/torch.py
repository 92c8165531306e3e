"""attnlab's attention as a differentiable PyTorch op (import attnlab.torch).

float32: attnlab's flash forward and flash backward. float64: the double-precision reference,
forward and backward (for torch.autograd.gradcheck). Gradients flow to q, k, v and, with
softmax="sink", to learned sink_logits [heads_q].
"""
import torch

from . import _attnlab
from ._engine import _kernel_kwargs

__all__ = ["attention"]


def _numpy(t):
    return t.detach().numpy()


class _Attention(torch.autograd.Function):
    """Inputs: contiguous CPU q, k, v, sink_logits (or None), and the kernel kwargs."""

    @staticmethod
    def forward(ctx, q, k, v, sink_logits, kwargs):
        sinks = None if sink_logits is None else _numpy(sink_logits)
        out, lse = _attnlab._attention_forward(_numpy(q), _numpy(k), _numpy(v), return_lse=True,
                                               **dict(kwargs, sink_logits=sinks))
        out, lse = torch.from_numpy(out), torch.from_numpy(lse)
        ctx.save_for_backward(q, k, v, out, lse, sink_logits)
        ctx.kwargs = kwargs
        return out

    # The kernels' gradients are not themselves differentiable: refuse a double backward
    # rather than silently treat them as constants.
    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        q, k, v, out, lse, sink_logits = ctx.saved_tensors
        sinks = None if sink_logits is None else _numpy(sink_logits)
        grads = _attnlab._attention_backward(
            _numpy(q), _numpy(k), _numpy(v), _numpy(out), _numpy(lse),
            _numpy(dout.contiguous().to(q.dtype)), **dict(ctx.kwargs, sink_logits=sinks))
        dq, dk, dv = (torch.from_numpy(g) for g in grads[:3])
        d_sink = None
        if sink_logits is not None and ctx.needs_input_grad[3]:
            d_sink = torch.from_numpy(grads[3]).to(sink_logits.dtype)
        return dq, dk, dv, d_sink, None


def attention(q, k, v, *, causal=False, window=None, sinks=0, n_global=0, mask=None,
              mask_first_key=False, softmax="standard", sink_logits=None, sigmoid_bias=0.0,
              scale=None, kernel="flash"):
    """attnlab.attention on CPU torch tensors, differentiable (see attnlab.attention).

    q, k, v: float32 or float64 tensors of any strides (made contiguous, a no-op when they
    are). sink_logits: a [heads_q] tensor (may require grad) for softmax="sink". Returns out.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if sink_logits is not None and not isinstance(sink_logits, torch.Tensor):
        sink_logits = torch.as_tensor(sink_logits, dtype=q.dtype)
    if sink_logits is not None:
        sink_logits = sink_logits.contiguous()
    kwargs = _kernel_kwargs(causal, window, sinks, n_global, mask, mask_first_key, softmax,
                            None, sigmoid_bias, scale, kernel)
    return _Attention.apply(q.contiguous(), k.contiguous(), v.contiguous(), sink_logits, kwargs)
