"""attnlab.show_attention (attnlab/attention_view.py; issue 39): the data it embeds against the
patterns it came from, a page with nothing to fetch and no N x N table, and the page in headless
Chromium (Debian's `chromium`): it loads with no error or console error, and hovering a token
changes what is highlighted (the page's own #selftest, read back from the DOM Chromium dumps).
"""
import base64
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import attnlab
from attnlab.attention_view import attention_view_data


def random_pattern(rng, H, N):
    s = rng.standard_normal((H, N, N))
    s[:, np.triu(np.ones((N, N), bool), 1)] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def test_embedded_data_is_the_top_keys_first_column_and_block_means():
    rng = np.random.default_rng(1)
    H, N, k = 3, 130, 5  # 130 = 3 blocks of 64 would not divide: blocks of 3 tokens, 44 of them
    p = {0: random_pattern(rng, H, N), 2: random_pattern(rng, H, N)}
    d = attention_view_data(p, ["t%d" % i for i in range(N)], top_k=k)
    assert d["n"] == N and d["layers"] == [0, 2] and d["block"] == 3 and d["nblocks"] == 44
    m = [x for x in d["maps"] if x["layer"] == 2 and x["head"] == 1][0]
    assert d["key_bytes"] == 2
    keys = np.frombuffer(base64.b64decode(m["keys"]), "<u2").reshape(N, k)
    w = np.frombuffer(base64.b64decode(m["w"]), np.uint8).reshape(N, k)
    ph = p[2][1]
    for i in range(N):
        want = sorted(range(N), key=lambda j: (-ph[i, j], j))[:k]
        assert list(keys[i]) == want
        np.testing.assert_allclose(w[i] / 255, ph[i, want], atol=0.5 / 255 + 1e-12)
    np.testing.assert_allclose(m["first"], ph[:, 0], atol=1e-4)
    blocks = np.frombuffer(base64.b64decode(m["blocks"]), np.uint8).reshape(44, 44)
    pad = np.zeros((132, 132))
    pad[:N, :N] = ph
    means = pad.reshape(44, 3, 44, 3).mean(axis=(1, 3))
    np.testing.assert_allclose(blocks / 255, means / means.max(), atol=0.5 / 255 + 1e-9)


def test_bad_inputs_raise():
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError, match="no attention patterns"):
        attention_view_data({}, [])
    with pytest.raises(ValueError, match="token texts"):
        attention_view_data({0: random_pattern(rng, 2, 6)}, ["a"] * 5)
    with pytest.raises(ValueError, match="\\[heads, pos, pos\\]"):
        attention_view_data({0: np.zeros((2, 3))}, ["a"] * 3)
    bad = random_pattern(rng, 2, 6)
    bad[0, 3, 1] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        attention_view_data({0: bad}, ["a"] * 6)
    with pytest.raises(ValueError, match="no hook_pattern"):
        attnlab.show_attention({}, ["a"])


def chromium():
    c = os.environ.get("ATTNLAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.isfile(c):  # never a silent pass: setup.sh installs Debian's chromium
        pytest.fail("Chromium not found (scripts/setup.sh installs the Debian package chromium)")
    return c


def run_chromium(args, url, tmp):
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
           "--user-data-dir=" + tempfile.mkdtemp(dir=tmp)] + args + [url]
    r = subprocess.run(cmd, capture_output=True, timeout=180)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    return r.stdout.decode("utf-8", errors="replace")


def test_the_page_in_headless_chromium(tmp_path):
    m = attnlab.load()
    from conftest import SOURCE_DIR
    text = open(os.path.join(SOURCE_DIR, "data", "sample.txt"), encoding="utf-8").read()[:1600]
    tokens = m.to_tokens(text)[:, :256]  # the model's context; two pages of 128
    _, cache = m.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    page = attnlab.show_attention(cache, m.to_str_tokens(tokens), page=128,
                                  path=str(tmp_path / "v.html"))
    assert page == open(tmp_path / "v.html", encoding="utf-8").read()
    # Self-contained: nothing to fetch, and smaller than one byte per N x N cell of every head
    # (it carries N x top_k keys and at most 64 x 64 block means per head).
    assert not re.search(r"(src|href)\s*=\s*[\"'](?!#|data:)", page)
    assert "http://" not in page and "https://" not in page
    n_heads = m.cfg.n_layers * m.cfg.n_heads
    assert len(page) < n_heads * 256 * 256, len(page)
    dom = run_chromium(["--dump-dom"], "file://%s#selftest" % (tmp_path / "v.html"), tmp_path)
    got = re.search(r'data-selftest="([^"]*)"', dom)
    assert got and got.group(1) == "ok", got.group(1) if got else dom[-2000:]
    # Ids as ids decode the same texts.
    ids_page = attnlab.show_attention(cache, tokens, model=m, page=128)
    assert ids_page == page


def test_screenshot_for_the_docs(tmp_path):
    """The picture in docs/PYTHON.md, rendered here (with a hovered token) so it stays true:
    ATTNLAB_UPDATE_DOCS_IMAGES=1 copies it into docs/img/attention-view.png."""
    m = attnlab.load()
    tokens = m.to_tokens("The jury said it did find that many of the city's voters were not "
                         "told about the election, and it recommended that the law be changed. "
                         "The jury said the election was conducted well.")
    _, cache = m.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    attnlab.show_attention(cache, m.to_str_tokens(tokens), path=str(tmp_path / "v.html"))
    png = tmp_path / "view.png"
    run_chromium(["--screenshot=%s" % png, "--window-size=1100,620"],
                 "file://%s#selftest" % (tmp_path / "v.html"), tmp_path)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000
    if os.environ.get("ATTNLAB_UPDATE_DOCS_IMAGES") == "1":
        from conftest import SOURCE_DIR
        shutil.copy(png, os.path.join(SOURCE_DIR, "docs", "img", "attention-view.png"))


def test_analyze_writes_the_page_show_attention_writes(tmp_path, attnlab_bin):
    """`attnlab analyze`'s attention.html (linked from its report) and show_attention on the same
    tokens come from the same builder and template: the same tokens, layers and page script, and,
    up to the two forwards' float rounding (analyze's reference attention over its cache vs the
    model's kernel), the same first-token column and top keys."""
    text = ("The jury said it did find that many of the city's voters were not told about the "
            "election, and it recommended that the law be changed.")
    out = tmp_path / "a"
    subprocess.run([attnlab_bin, "--threads", "1", "analyze", "--prompt", text, "--out", str(out)],
                   check=True, capture_output=True)
    page = open(out / "attention.html", encoding="utf-8").read()
    a = page.index("const D = ") + len("const D = ")
    d = json.loads(page[a:page.index(";\n", a)])
    m = attnlab.load()
    tokens = m.to_tokens(text)
    _, cache = m.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    mine = attnlab.show_attention(cache, m.to_str_tokens(tokens))
    b = mine.index("const D = ") + len("const D = ")
    p = json.loads(mine[b:mine.index(";\n", b)])
    assert d["tokens"] == p["tokens"] and d["layers"] == p["layers"] and d["n"] == p["n"]
    assert page[page.index("<script>"):a] == mine[mine.index("<script>"):b]  # one template
    assert page[page.index(";\n", a):] == mine[mine.index(";\n", b):]
    n, k, agree = d["n"], d["top_k"], 0
    for x, y in zip(d["maps"], p["maps"]):
        assert (x["layer"], x["head"]) == (y["layer"], y["head"])
        np.testing.assert_allclose(x["first"], y["first"], atol=2e-4)
        kx = np.frombuffer(base64.b64decode(x["keys"]), "<u2").reshape(n, k)
        ky = np.frombuffer(base64.b64decode(y["keys"]), "<u2").reshape(n, k)
        agree += int((kx[:, 0] == ky[:, 0]).sum())
    # The strongest key may differ only where two keys are within rounding of each other.
    assert agree >= 0.98 * n * len(d["maps"]), (agree, n * len(d["maps"]))
