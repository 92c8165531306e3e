"""attnlab: a laboratory for transformer attention, from Python (docs/PYTHON.md).

    import attnlab
    out = attnlab.attention(q, k, v, causal=True)          # NumPy or torch, zero-copy float32
    import attnlab.torch                                    # autograd op: attnlab.torch.attention
    m = attnlab.load()                                      # any model the CLI opens
    logits, cache = m.run_with_cache(m.to_tokens("The jury said"))
    report = attnlab.analyze(max_tokens=512)                # the lab's commands, as dicts
    attnlab.show_attention(cache, m.to_str_tokens(...), path="view.html")  # interactive page
"""
import os as _os

try:  # where the bundled files (default model, sample text) are: see _paths.py
    from ._paths import RESOURCE_ROOT as _ROOT
    if "ATTNLAB_HOME" not in _os.environ and _os.path.isdir(_os.path.join(_ROOT, "data")):
        _os.environ["ATTNLAB_HOME"] = _ROOT
except ImportError:
    pass

from . import _attnlab  # noqa: E402
from ._engine import attention, attention_backward, set_num_threads, num_threads, simd_target  # noqa: E402,F401
from .model import Model, ActivationCache, HookPoint, get_act_name, load  # noqa: E402,F401
from .lab import analyze, stream, generate, experiment, run  # noqa: E402,F401
from .attention_view import show_attention  # noqa: E402,F401

__version__ = _attnlab.__version__ if hasattr(_attnlab, "__version__") else "0.1.0"
