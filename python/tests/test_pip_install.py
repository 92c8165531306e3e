"""`pip install --no-build-isolation .` into a `python3 -m venv --system-site-packages`
environment (Debian's NumPy, PyTorch, setuptools and wheel; no package index is contacted), then
the installed package works from another directory without the source tree: the bundled default
model, the engine and the autograd op.

The CMake build folder is this build's (ATTNLAB_BUILD_DIR), so pip only packages the module that
the build already made; a fresh `pip install` without it configures and builds build-pip/."""
import os
import subprocess
import sys

from conftest import BUILD_DIR, SOURCE_DIR

CHECK = r"""
import os, sys, numpy as np, torch
import attnlab, attnlab.torch
assert "site-packages" in attnlab.__file__, attnlab.__file__
assert os.environ.get("ATTNLAB_HOME", "").startswith(os.path.dirname(attnlab.__file__))
m = attnlab.load()
toks = m.to_tokens("The jury said")
logits, cache = m.run_with_cache(toks, names_filter="blocks.0.attn.hook_pattern")
assert logits.shape == (1, toks.shape[1], m.cfg.d_vocab), logits.shape
q = torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True)
k = torch.randn(1, 1, 5, 8, dtype=torch.float64, requires_grad=True)
v = torch.randn(1, 1, 5, 8, dtype=torch.float64, requires_grad=True)
assert torch.autograd.gradcheck(lambda q, k, v: attnlab.torch.attention(q, k, v, causal=True), (q, k, v))
print("installed attnlab OK", attnlab.simd_target())
"""


def test_pip_install_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNLAB_HOME")}
    env.update(ATTNLAB_BUILD_DIR=BUILD_DIR, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", SOURCE_DIR],
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run([py, "-c", CHECK], env=env, cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "installed attnlab OK" in r.stdout
