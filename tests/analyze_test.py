#!/usr/bin/python3
"""`attnlab analyze` on a model built to have one known attention sink, plus its bad inputs.

The model (written by this test as an attnlab checkpoint: config.json + model.safetensors) has
no norms and no MLP, learned positions, and small random weights everywhere except in one head,
layer 1 head 2: position 0's embedding carries a large value in channel 0 that no other token
has, every token carries a constant 1 in channel 1, and that head's query reads channel 1 while
its key reads channel 0. Its score on token 0 is then ~350 above every other key, so the head
puts all of its attention on token 0; the other heads attend almost uniformly (alpha_1 about
ln(T)/T). The report must name exactly that head as a sink, in report.json and report.html.
Bad inputs (missing model, missing or empty text, a prompt longer than a learned-position
model's context) must fail with one clear error line and a non-zero exit.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

SINK_LAYER, SINK_HEAD = 1, 2
# A second planted sink, on a later token (trained LMs also sink onto the first period or
# newline): layer 0 head 1 attends to position PERIOD_POS, where the text has its first ".".
PERIOD_LAYER, PERIOD_HEAD, PERIOD_POS = 0, 1, 4


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        blobs.append(arr.tobytes())
        offset += arr.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_model(d):
    C, L, H, V, T = 32, 2, 4, 257, 64
    hd = C // H
    cfg = {"format": "attnlab-checkpoint", "version": 1, "meta": {},
           "vocab_size": V, "context": T, "d_model": C, "n_layer": L, "n_head": H,
           "mlp": False, "norm": "none", "position": "learned", "bias": True}
    rng = np.random.default_rng(0)
    t = {}
    wte = rng.normal(0, 0.02, (V, C))
    wte[:, 0] = 0.0   # channel 0: only position 0 sets it
    wte[:, 1] = 1.0   # channel 1: a constant for every token
    wpe = rng.normal(0, 0.02, (T, C))
    wpe[:, 0] = 0.0
    wpe[:, 1] = 0.0
    wpe[0, 0] = 10.0
    wte[:, 2] = 0.0   # channel 2: only position PERIOD_POS sets it
    wpe[:, 2] = 0.0
    wpe[PERIOD_POS, 2] = 10.0
    t["wte"], t["wpe"] = wte, wpe
    for l in range(L):
        qkv = rng.normal(0, 0.02, (C, 3 * C))
        qkv[0, :] = 0.0  # no head but the sink reads channel 0 ...
        qkv[1, :] = 0.0  # ... or channel 1
        qkv[2, :] = 0.0  # ... or channel 2
        if l == PERIOD_LAYER:
            qkv[1, PERIOD_HEAD * hd] = 10.0        # q[0] = 10 for every token
            qkv[2, C + PERIOD_HEAD * hd] = 10.0    # k[0] = 100 for position PERIOD_POS only
        if l == SINK_LAYER:
            qkv[1, SINK_HEAD * hd] = 10.0          # q[0] = 10 for every token
            qkv[0, C + SINK_HEAD * hd] = 10.0      # k[0] = 100 for token 0 only
        t[f"h.{l}.attn.qkv.weight"] = qkv
        t[f"h.{l}.attn.qkv.bias"] = np.zeros(3 * C)
        proj = rng.normal(0, 0.02, (C, C))
        proj[:, 0:3] = 0.0  # keep channels 0, 1 and 2 as they are
        t[f"h.{l}.attn.proj.weight"] = proj
        t[f"h.{l}.attn.proj.bias"] = np.zeros(C)
    ck = os.path.join(d, "sink-model")
    os.makedirs(ck)
    json.dump(cfg, open(os.path.join(ck, "config.json"), "w"))
    write_safetensors(os.path.join(ck, "model.safetensors"), t)
    return ck


def check_in_chromium(out):
    """Renders report.html in headless Chromium: the DOM has every section, and the screenshot is
    not blank (many colours, a large share of non-background pixels, the heatmap's viridis)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report_chromium_test as rc  # the shared Chromium helpers
    chromium = rc.find_chromium()
    url = "file://" + os.path.join(out, "report.html")
    dom = rc.run_chromium(chromium, out, ["--dump-dom"], url).decode("utf-8", "replace")
    for sid in ("summary", "sinks", "classes", "collapse", "heads", "massive", "maps", "run"):
        if f'id="{sid}"' not in dom:
            sys.exit(f"FAIL: Chromium's DOM lacks section {sid!r}")
    shot = os.path.join(out, "shot.png")
    rc.run_chromium(chromium, out, ["--screenshot=" + shot, "--window-size=1200,4000"], url)
    img = rc.decode_png(open(shot, "rb").read())
    colours = len(np.unique(img.reshape(-1, 3), axis=0))
    background = np.bincount(np.ravel_multi_index(img.reshape(-1, 3).T, (256, 256, 256))).max()
    non_bg = 1 - background / (img.shape[0] * img.shape[1])
    viridis_end = rc.count_near(img, (253, 231, 37), tol=24)
    if img.shape[:2] != (4000, 1200) or colours < 300 or non_bg < 0.05 or viridis_end < 20:
        sys.exit(f"FAIL: screenshot looks blank or wrong: shape {img.shape}, {colours} colours, "
                 f"{non_bg:.1%} non-background, {viridis_end} viridis-yellow pixels")
    print(f"ok: Chromium renders the report ({colours} colours, {non_bg:.0%} non-background)")


def view_data(path):
    """The data an attention view page carries (report/attention_view.h): its `const D = ...;`."""
    page = open(path, encoding="utf-8").read()
    a = page.index("const D = ") + len("const D = ")
    return json.loads(page[a:page.index(";\n", a)])


def view_head(d, layer, head):
    """(keys [n, k], weights [n, k], first column [n]) of one head in a view's data."""
    import base64
    m = [x for x in d["maps"] if x["layer"] == layer and x["head"] == head][0]
    n, k = d["n"], d["top_k"]
    keys = np.frombuffer(base64.b64decode(m["keys"]), "<u2").reshape(n, k)
    w = np.frombuffer(base64.b64decode(m["w"]), np.uint8).reshape(n, k) / 255.0
    return keys, w, np.array(m["first"])


def check_attention_view(cli, ck, out, rep):
    """analyze's attention.html: linked from report.html, described in report.json, the planted
    heads where they were planted, and the page working in headless Chromium (#selftest)."""
    v = rep["attention_view"]
    if v != {"file": "attention.html", "tokens": 64, "layers": 2, "top_k": 8}:
        sys.exit(f"FAIL: report.json's attention_view is {v}")
    if '<a href="attention.html">' not in open(os.path.join(out, "report.html"), encoding="utf-8").read():
        sys.exit("FAIL: report.html does not link attention.html")
    d = view_data(os.path.join(out, "attention.html"))
    keys, w, first = view_head(d, SINK_LAYER, SINK_HEAD)
    if not (keys[:, 0] == 0).all() or first.min() < 0.99 or w[:, 0].min() < 0.99:
        sys.exit(f"FAIL: the view's layer {SINK_LAYER} head {SINK_HEAD} should put every query on "
                 f"key 0: top keys {keys[:8, 0]}, first column min {first.min()}")
    keys, w, _ = view_head(d, PERIOD_LAYER, PERIOD_HEAD)
    if not (keys[PERIOD_POS:, 0] == PERIOD_POS).all():
        sys.exit(f"FAIL: the view's layer {PERIOD_LAYER} head {PERIOD_HEAD} should put queries "
                 f">= {PERIOD_POS} on key {PERIOD_POS}: {keys[PERIOD_POS:PERIOD_POS + 8, 0]}")
    if d["tokens"][:6] != list("jury. "):
        sys.exit(f"FAIL: the view's tokens start {d['tokens'][:6]}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report_chromium_test as rc
    url = "file://" + os.path.join(out, "attention.html") + "#selftest"
    dom = rc.run_chromium(rc.find_chromium(), out, ["--dump-dom"], url).decode("utf-8", "replace")
    if 'data-selftest="ok"' not in dom:
        i = dom.find("data-selftest")
        sys.exit(f"FAIL: attention.html's self-test in Chromium: {dom[i:i + 300] if i >= 0 else 'none ran'}")
    print(f"ok: attention.html ({os.path.getsize(os.path.join(out, 'attention.html'))} bytes) holds "
          f"the planted heads and passes its self-test in Chromium")
    none = os.path.join(out, "noview")
    run(cli, ["analyze", "--model", ck, "--tokenizer", "byte",
              "--prompt", "jury. the laws", "--out", none, "--view-tokens", "0"])
    if os.path.exists(os.path.join(none, "attention.html")) or \
            json.load(open(os.path.join(none, "report.json")))["attention_view"] is not None:
        sys.exit("FAIL: --view-tokens 0 still wrote a view")


def check_token_classes(out, rep):
    """Attention by token class on the planted heads: the sink head gives its attention to the
    first position (ratio >> 1), the period head to the text's only delimiter ("." at
    PERIOD_POS), and the near-uniform heads give each class about its uniform share."""
    names = rep["token_classes"]["classes"]
    if not rep["token_classes"]["computed"]:
        sys.exit("FAIL: token classes not computed")
    def ratio(layer, head, cls):
        return rep["layers"][layer]["token_classes"]["ratio"][head][names.index(cls)]
    def mass(layer, head, cls):
        return rep["layers"][layer]["token_classes"]["mass"][head][names.index(cls)]
    # The sink head: everything on position 0 (one of the `first` 4: ratio 1 / their uniform
    # share, > 3 here); the period head: every row from PERIOD_POS on reads the "."
    if mass(SINK_LAYER, SINK_HEAD, "first") < 0.99 or ratio(SINK_LAYER, SINK_HEAD, "first") < 3:
        sys.exit(f"FAIL: the sink head's first-position mass {mass(SINK_LAYER, SINK_HEAD, 'first')}, "
                 f"ratio {ratio(SINK_LAYER, SINK_HEAD, 'first')}")
    if mass(PERIOD_LAYER, PERIOD_HEAD, "delimiter") < 0.8 or ratio(PERIOD_LAYER, PERIOD_HEAD, "delimiter") < 5:
        sys.exit(f"FAIL: the period head's delimiter mass {mass(PERIOD_LAYER, PERIOD_HEAD, 'delimiter')}, "
                 f"ratio {ratio(PERIOD_LAYER, PERIOD_HEAD, 'delimiter')}")
    others = [ratio(0, h, c) for h in range(rep["model"]["n_head"]) if h != PERIOD_HEAD
              for c in ("delimiter", "first", "whitespace")]
    if not all(0.8 < x < 1.25 for x in others):
        sys.exit(f"FAIL: near-uniform heads should give classes their uniform share: {others}")
    rows = open(os.path.join(out, "token_classes.csv")).read().splitlines()
    want = 1 + rep["model"]["n_layer"] * rep["model"]["n_head"] * len(names)
    if rows[0] != "layer,head,class,mass,uniform,ratio" or len(rows) != want:
        sys.exit(f"FAIL: token_classes.csv has {len(rows)} lines, want {want}")
    print(f"ok: token classes: sink head first-position ratio {ratio(SINK_LAYER, SINK_HEAD, 'first'):.1f}, "
          f"period head delimiter ratio {ratio(PERIOD_LAYER, PERIOD_HEAD, 'delimiter'):.1f} "
          f"(mass {mass(PERIOD_LAYER, PERIOD_HEAD, 'delimiter'):.3f}), "
          f"other layer-0 heads {min(others):.2f}-{max(others):.2f}")


def run(cli, args, expect_ok=True, needle=None):
    p = subprocess.run([cli] + args, capture_output=True, text=True, errors="replace")
    if (p.returncode == 0) != expect_ok:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    if not expect_ok:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        if "error" not in last or (needle and needle not in p.stderr):
            sys.exit(f"FAIL: {' '.join(args)}: unclear error {p.stderr!r}")
        print(f"ok (error) {last[:120]}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnlab", required=True)
    cli = ap.parse_args().attnlab
    with tempfile.TemporaryDirectory() as d:
        ck = make_model(d)
        text = os.path.join(d, "text.txt")
        rng = np.random.default_rng(1)
        words = "the jury said it did find that many of the laws are outmoded".split()
        # Windows of T tokens (one byte each) that all start "jury. ": the text's only
        # delimiter, the "." at PERIOD_POS, is then in every window.
        body, T = " ".join(rng.choice(words, 600)), 64  # T: make_model's context
        open(text, "w").write("".join("jury. " + body[i * (T - 6):(i + 1) * (T - 6)]
                                      for i in range(len(body) // (T - 6))))
        out = os.path.join(d, "report")
        run(cli, ["analyze", "--model", ck, "--tokenizer", "byte", "--text", text, "--out", out,
                  "--plot-heads", f"{SINK_LAYER}.{SINK_HEAD},0.0"])
        rep = json.load(open(os.path.join(out, "report.json")))
        sinks = [(s["layer"], s["head"]) for s in rep["sinks"]["sink_heads"]]
        if sinks != [(SINK_LAYER, SINK_HEAD)]:
            sys.exit(f"FAIL: expected exactly one sink head ({SINK_LAYER}, {SINK_HEAD}), got {sinks}")
        head = rep["layers"][SINK_LAYER]["heads"][SINK_HEAD]
        if head["alpha"][0] < 0.9:
            sys.exit(f"FAIL: the planted sink head has alpha_1 = {head['alpha'][0]}")
        others = [h["alpha"][0] for l in rep["layers"] for h in l["heads"]
                  if (l["layer"], h["head"]) != (SINK_LAYER, SINK_HEAD)]
        print(f"ok: sink head alpha_1 = {head['alpha'][0]:.4f}, others <= {max(others):.4f}, "
              f"Sink_1 = {rep['sinks']['sink_rate']['k1']:.4f}")
        html = open(os.path.join(out, "report.html"), encoding="utf-8").read()
        for needle in (f"L{SINK_LAYER}.H{SINK_HEAD}", 'id="summary"', 'id="sinks"', 'id="collapse"',
                       'id="heads"', 'id="massive"', 'id="maps"', 'id="run"'):
            if needle not in html:
                sys.exit(f"FAIL: report.html lacks {needle!r}")
        for f in ("heads.csv", "layers.csv"):
            if not os.path.getsize(os.path.join(out, f)):
                sys.exit(f"FAIL: {f} is empty")
        print("ok: report.json, report.html, heads.csv, layers.csv")
        # Where the sinks sit: key 0 (the first token, no BOS) and key PERIOD_POS (the ".").
        keys = {e["key"]: e for e in rep["sinks"]["sink_keys"]}
        want = {0: ("first_token", "j"), PERIOD_POS: ("period", ".")}
        if set(keys) != set(want) or any(keys[k]["heads"] != 1 or
                                         (keys[k]["kind"], keys[k]["text"]) != want[k] for k in want):
            sys.exit(f"FAIL: sink_keys should be one head on key 0 ('j', first_token) and one on "
                     f"key {PERIOD_POS} ('.', period), got {rep['sinks']['sink_keys']}")
        ph = rep["layers"][PERIOD_LAYER]["heads"][PERIOD_HEAD]
        if ph["sink_key"] != PERIOD_POS or head["sink_key"] != 0:
            sys.exit(f"FAIL: per-head sink_key: {ph['sink_key']} and {head['sink_key']}")
        if "Sink heads sit on key 0" not in html:
            sys.exit("FAIL: report.html's summary does not say where the sinks sit")
        print(f"ok: sinks sit on key 0 ('j') and key {PERIOD_POS} ('.'), "
              f"excess {head['sink_key_excess']:.3f} and {ph['sink_key_excess']:.3f}")
        check_token_classes(out, rep)
        check_in_chromium(out)
        check_attention_view(cli, ck, out, rep)

        # Bad inputs.
        run(cli, ["analyze", "--model", os.path.join(d, "none"), "--tokenizer", "byte",
                  "--text", text], expect_ok=False, needle="none")
        run(cli, ["analyze", "--model", ck, "--tokenizer", "byte", "--text",
                  os.path.join(d, "missing.txt")], expect_ok=False, needle="missing")
        empty = os.path.join(d, "empty.txt")
        open(empty, "w").close()
        run(cli, ["analyze", "--model", ck, "--tokenizer", "byte", "--text", empty],
            expect_ok=False, needle="empty")
        run(cli, ["analyze", "--model", ck, "--tokenizer", "byte", "--prompt", "x" * 100],
            expect_ok=False, needle="learned positions")
        run(cli, ["analyze", "--model", ck, "--tokenizer", "byte", "--text", text,
                  "--window", "100"], expect_ok=False, needle="learned positions")
        run(cli, ["analyze", "--model", ck, "--tokenizer", "byte", "--text", text,
                  "--plot-heads", "7.1"], expect_ok=False, needle="plot-heads")
    print("all analyze checks passed")


if __name__ == "__main__":
    main()
