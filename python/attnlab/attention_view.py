"""An interactive, self-contained HTML view of a run's attention (docs/PYTHON.md, "Attention
views"): pick a layer and a head, hover a token to see what it attends to (its strongest keys,
shaded by weight) and what attends to it (the queries whose strongest keys include it, outlined
by weight). The first-token column, P[i, 0] for every query i, is drawn for the chosen head
under the tokens, and a block overview shows the whole map at any length.

No N x N table ever goes into the page: per head it carries, for every query, its ``top_k``
strongest keys and their weights (N x top_k), the first-token column (N), and the map averaged
over blocks of ceil(N / 64) x ceil(N / 64) tokens (at most 64 x 64). Tokens are shown in pages
of ``page`` tokens; the block overview picks the page.

The page is one file with its data and script inline and nothing fetched. Opened with the
fragment ``#selftest`` it hovers a token itself, checks that the highlight changed, and writes
the outcome (and any error the page raised or logged) into ``<body data-selftest=...>``: what
the headless-Chromium test reads (python/tests/test_attention_view.py).
"""
import base64
import html
import json
import math

import numpy as np

MAX_BLOCKS = 64


def _to_numpy(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def attention_view_data(patterns, str_tokens, top_k=8):
    """The page's data from patterns {layer: [heads, P, P]} (one sequence) and the P tokens'
    texts: per layer and head the top_k keys per query (ids uint16, or uint32 past 65536 tokens, and weights uint8 as
    base64), the first-token column and the block means. Deterministic (ties: the lower key)."""
    layers = sorted(patterns)
    if not layers:
        raise ValueError("show_attention: no attention patterns (run_with_cache with hook_pattern)")
    first = _to_numpy(patterns[layers[0]])
    if first.ndim != 3 or first.shape[1] != first.shape[2]:
        raise ValueError("show_attention: a pattern must be [heads, pos, pos], got shape %s"
                         % (list(first.shape),))
    H, N = first.shape[0], first.shape[1]
    if len(str_tokens) != N:
        raise ValueError("show_attention: %d token texts for patterns of %d positions"
                         % (len(str_tokens), N))
    k = int(min(max(1, top_k), N))
    b = int(math.ceil(N / MAX_BLOCKS))
    nb = int(math.ceil(N / b))
    key_type = "<u2" if N <= 65536 else "<u4"
    heads = []
    for l in layers:
        p = _to_numpy(patterns[l]).astype(np.float32)
        if p.shape != first.shape:
            raise ValueError("show_attention: layer %d's pattern has shape %s, layer %d's %s"
                             % (l, list(p.shape), layers[0], list(first.shape)))
        if not np.isfinite(p).all():
            raise ValueError("show_attention: layer %d's pattern is not finite" % l)
        for h in range(H):
            ph = p[h]
            # Stable descending sort: ties keep the lower key first.
            idx = np.argsort(-ph, axis=1, kind="stable")[:, :k]
            w = np.take_along_axis(ph, idx, axis=1)
            pad = np.zeros((nb * b, nb * b), np.float32)
            pad[:N, :N] = ph
            blocks = pad.reshape(nb, b, nb, b).mean(axis=(1, 3))
            heads.append({
                "layer": int(l), "head": h,
                "keys": base64.b64encode(idx.astype(key_type).tobytes()).decode(),
                "w": base64.b64encode(np.clip(np.rint(w * 255), 0, 255).astype(np.uint8).tobytes()).decode(),
                "first": [round(float(x), 4) for x in ph[:, 0]],
                "blocks": base64.b64encode(np.clip(np.rint(blocks / max(blocks.max(), 1e-12) * 255),
                                                   0, 255).astype(np.uint8).tobytes()).decode(),
            })
    return {"n": N, "heads_per_layer": H, "layers": [int(l) for l in layers], "top_k": k,
            "key_bytes": 2 if key_type == "<u2" else 4,
            "block": b, "nblocks": nb, "tokens": [str(t) for t in str_tokens], "maps": heads}


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
    data = attention_view_data(pats, texts, top_k)
    data["page"] = int(page)
    page_html = _PAGE.replace("__TITLE__", html.escape(title)).replace(
        "__DATA__", json.dumps(data, separators=(",", ":")).replace("</", "<\\/"))
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page_html)
    return page_html


_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>__TITLE__</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:16px 24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 6px}
.controls{margin:8px 0 12px;display:flex;gap:16px;align-items:center;flex-wrap:wrap}
#tokens{font:13px/2 ui-monospace,monospace;border:1px solid #ccc;padding:8px;white-space:pre-wrap;word-break:break-all}
.tok{padding:1px 1px;border-radius:3px;cursor:default;outline:0 solid transparent}
.tok.first{box-shadow:inset 0 -3px 0 #d55e00}
.tok.hover{background:#222;color:#fff}
#info{min-height:2.6em;margin:6px 0;color:#333}
.row{display:flex;gap:24px;align-items:flex-start;flex-wrap:wrap}
canvas{border:1px solid #ccc;image-rendering:pixelated}
.legend{font-size:12px;color:#555}
</style></head>
<body>
<h1>__TITLE__</h1>
<div class="legend">Hover a token: <span style="background:rgba(0,114,178,.6)">&nbsp;blue&nbsp;</span>
shading = what it attends to (its strongest keys), <span style="outline:2px solid #e69f00">&nbsp;orange&nbsp;</span>
outline = what attends to it. The underlined token is token 0; the plot below the text is every
query's attention on it (the first-token column) for the chosen head.</div>
<div class="controls">
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
<label>page <select id="page"></select></label>
<span id="sum"></span>
</div>
<div id="info">&nbsp;</div>
<div id="tokens"></div>
<div class="row">
<div><div class="legend">first-token column P[i, 0], queries of this page</div><canvas id="firstcol" width="640" height="120"></canvas></div>
<div><div class="legend">block overview (mean over blocks, square-root colour scale; click to open a page)</div><canvas id="blocks" width="256" height="256"></canvas></div>
</div>
<script>
"use strict";
const D = __DATA__;
const errors = [];
window.addEventListener("error", e => errors.push(String(e.message)));
const origError = console.error.bind(console);
console.error = (...a) => { errors.push(a.join(" ")); origError(...a); };
function b64(s) { const r = atob(s), u = new Uint8Array(r.length); for (let i = 0; i < r.length; i++) u[i] = r.charCodeAt(i); return u; }
const maps = new Map();
for (const m of D.maps) maps.set(m.layer + "/" + m.head, m);
const decoded = new Map();
function headData(l, h) {
  const key = l + "/" + h;
  if (!decoded.has(key)) {
    const m = maps.get(key);
    const kb = b64(m.keys);
    const keys = D.key_bytes === 2 ? new Uint16Array(kb.buffer, kb.byteOffset, kb.length / 2)
                                   : new Uint32Array(kb.buffer, kb.byteOffset, kb.length / 4);
    decoded.set(key, {keys: keys, w: b64(m.w),
                      first: m.first, blocks: b64(m.blocks)});
  }
  return decoded.get(key);
}
const N = D.n, K = D.top_k, PAGE = D.page, pages = Math.ceil(N / PAGE);
const selL = document.getElementById("layer"), selH = document.getElementById("head"), selP = document.getElementById("page");
for (const l of D.layers) selL.add(new Option(String(l), String(l)));
for (let h = 0; h < D.heads_per_layer; h++) selH.add(new Option(String(h), String(h)));
for (let p = 0; p < pages; p++) selP.add(new Option((p * PAGE) + "-" + (Math.min(N, (p + 1) * PAGE) - 1), String(p)));
const box = document.getElementById("tokens"), info = document.getElementById("info");
let spans = [], pageStart = 0;
function cur() { return headData(+selL.value, +selH.value); }
function render() {
  pageStart = +selP.value * PAGE;
  const end = Math.min(N, pageStart + PAGE);
  box.textContent = "";
  spans = [];
  for (let i = pageStart; i < end; i++) {
    const s = document.createElement("span");
    s.className = "tok" + (i === 0 ? " first" : "");
    s.textContent = D.tokens[i];
    s.dataset.i = String(i);
    s.title = "position " + i;
    s.addEventListener("mouseover", () => highlight(i));
    s.addEventListener("mouseout", clear);
    box.appendChild(s);
    spans.push(s);
  }
  drawFirst(); drawBlocks(); summary();
}
function spanOf(i) { return (i >= pageStart && i < pageStart + spans.length) ? spans[i - pageStart] : null; }
function clear() {
  for (const s of spans) { s.style.background = ""; s.style.outline = ""; s.classList.remove("hover"); }
  info.innerHTML = "&nbsp;";
}
function highlight(i) {
  clear();
  const d = cur();
  const me = spanOf(i); if (me) me.classList.add("hover");
  const parts = [];
  for (let r = 0; r < K; r++) {
    const j = d.keys[i * K + r], w = d.w[i * K + r] / 255;
    if (w <= 0) continue;
    const s = spanOf(j); if (s && j !== i) s.style.background = "rgba(0,114,178," + (0.15 + 0.75 * w).toFixed(3) + ")";
    parts.push(j + " (" + w.toFixed(2) + ")");
  }
  let from = 0;
  for (let q = i; q < N; q++) {
    for (let r = 0; r < K; r++) {
      if (d.keys[q * K + r] === i) {
        const w = d.w[q * K + r] / 255; from++;
        const s = spanOf(q); if (s && q !== i && w > 0) s.style.outline = (1 + Math.round(3 * w)) + "px solid #e69f00";
      }
    }
  }
  info.textContent = "query " + i + " " + JSON.stringify(D.tokens[i]) + " attends to keys " + parts.join(", ") +
    "; P[" + i + ", 0] = " + d.first[i].toFixed(3) + "; " + from + " queries have it among their " + K + " strongest keys";
}
function drawFirst() {
  const c = document.getElementById("firstcol"), g = c.getContext("2d"), d = cur();
  g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
  const end = Math.min(N, pageStart + PAGE), n = end - pageStart, bw = c.width / Math.max(1, n);
  g.fillStyle = "#d55e00";
  for (let i = 0; i < n; i++) { const v = d.first[pageStart + i]; g.fillRect(i * bw, c.height * (1 - v), Math.max(1, bw - 0.5), c.height * v); }
}
function viridis(t) {
  const stops = [[68,1,84],[59,82,139],[33,145,140],[94,201,98],[253,231,37]];
  const x = Math.min(0.9999, Math.max(0, t)) * (stops.length - 1), i = Math.floor(x), f = x - i;
  return stops[i].map((a, k) => Math.round(a + f * (stops[i + 1][k] - a)));
}
function drawBlocks() {
  const c = document.getElementById("blocks"), g = c.getContext("2d"), d = cur(), nb = D.nblocks;
  const img = g.createImageData(nb, nb);
  for (let i = 0; i < nb * nb; i++) { const [r, gg, b] = viridis(Math.sqrt(d.blocks[i] / 255)); img.data.set([r, gg, b, 255], 4 * i); }
  const tmp = document.createElement("canvas"); tmp.width = nb; tmp.height = nb; tmp.getContext("2d").putImageData(img, 0, 0);
  g.imageSmoothingEnabled = false; g.clearRect(0, 0, c.width, c.height); g.drawImage(tmp, 0, 0, c.width, c.height);
}
document.getElementById("blocks").addEventListener("click", e => {
  const c = e.target, q = Math.floor(e.offsetY / c.height * D.nblocks) * D.block;
  selP.value = String(Math.min(pages - 1, Math.floor(q / PAGE))); render();
});
function summary() {
  const d = cur(); let s = 0; for (let i = 1; i < N; i++) s += d.first[i];
  document.getElementById("sum").textContent = "alpha_1 (mean P[i, 0] over queries 1.." + (N - 1) + "): " + (N > 1 ? (s / (N - 1)).toFixed(3) : "n/a");
}
for (const el of [selL, selH, selP]) el.addEventListener("change", render);
render();
if (location.hash === "#selftest") {
  let result = "fail";
  try {
    const i = Math.min(N - 1, pageStart + Math.max(1, Math.floor(spans.length / 2)));
    const before = spans.map(s => s.style.background + "|" + s.style.outline).join(";");
    spanOf(i).dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
    const after = spans.map(s => s.style.background + "|" + s.style.outline).join(";");
    const marked = spans.filter(s => s.style.background || s.style.outline || s.classList.contains("hover")).length;
    if (after !== before && marked >= 2 && info.textContent.startsWith("query " + i)) result = "ok";
    else result = "fail: hover of token " + i + " changed nothing";
  } catch (e) { errors.push(String(e)); }
  document.body.dataset.selftest = errors.length ? "fail: " + errors.join(" | ") : result;
}
</script>
</body></html>
"""
